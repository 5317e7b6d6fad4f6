//! How the fields of request bodies are read where serde's derive would read them otherwise
//! than the API promises: whole numbers written as JSON numbers of any form ([`whole`]), and
//! enums read from their names ([`by_name`]), so that a value of another type is a data error
//! naming its field.

use serde::Deserialize;

/// An enum of a request body read from its name, one of `names` (what its `Serialize` writes):
/// `of` gives the variant. A derived `Deserialize` would read the enum from a JSON string or
/// object only, and serde_json calls any other value there (`null`, a number) a *syntax* error,
/// which the API answered "request body is not valid JSON"; read as a string first, such a
/// value is a data error like any other field's ("request body does not fit: mode: invalid
/// type: null, expected a string"), and an unknown name is an unknown variant.
pub(crate) fn by_name<'de, D, T>(
    d: D,
    names: &'static [&'static str],
    of: impl Fn(&str) -> Option<T>,
) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
{
    let name = std::borrow::Cow::<'de, str>::deserialize(d)?;
    of(&name).ok_or_else(|| serde::de::Error::unknown_variant(&name, names))
}

/// Integer fields of request bodies. JSON Schema counts `2.0` as the integer 2 (what the
/// document's `type: integer` promises), where serde's integer types refuse any JSON number
/// written with a fraction or an exponent: these take a non-negative number with no fractional
/// part. Anything else is the usual `400 invalid` ("request body does not fit").
pub(crate) mod whole {
    use std::fmt;

    use serde::de::{self, Deserializer, Visitor};

    struct Whole;

    /// 2^64, the first `f64` above `u64::MAX`.
    const TWO_POW_64: f64 = 18_446_744_073_709_551_616.0;

    impl Visitor<'_> for Whole {
        type Value = u64;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a non-negative whole number")
        }

        fn visit_u64<E: de::Error>(self, v: u64) -> Result<u64, E> {
            Ok(v)
        }

        fn visit_i64<E: de::Error>(self, v: i64) -> Result<u64, E> {
            u64::try_from(v).map_err(|_| E::invalid_value(de::Unexpected::Signed(v), &self))
        }

        fn visit_f64<E: de::Error>(self, v: f64) -> Result<u64, E> {
            if v.fract() == 0.0 && (0.0..TWO_POW_64).contains(&v) {
                Ok(v as u64)
            } else {
                Err(E::invalid_value(de::Unexpected::Float(v), &self))
            }
        }
    }

    /// A `u64` from a whole JSON number.
    pub fn u64<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
        d.deserialize_u64(Whole)
    }

    /// A `usize` from a whole JSON number.
    pub fn usize<'de, D: Deserializer<'de>>(d: D) -> Result<usize, D::Error> {
        let v = u64(d)?;
        usize::try_from(v).map_err(|_| {
            <D::Error as de::Error>::invalid_value(de::Unexpected::Unsigned(v), &"a usize")
        })
    }

    /// A present `u64` (an absent field is `None` by `#[serde(default)]`; `null` is refused).
    pub fn some_u64<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
        u64(d).map(Some)
    }

    /// A present `usize` (an absent field is `None` by `#[serde(default)]`; `null` is refused).
    pub fn some_usize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<usize>, D::Error> {
        usize(d).map(Some)
    }
}
