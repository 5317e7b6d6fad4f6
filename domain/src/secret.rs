//! A credential that never prints and is wiped from memory when dropped.

use std::fmt;

use serde::{Deserialize, Deserializer};
use zeroize::Zeroizing;

/// A secret string (a bearer credential, a signing key, a password).
///
/// `Debug` and `Display` print `[redacted]`; the bytes are zeroized on drop. It deliberately does
/// not implement `Serialize`, so it cannot leak into a response or a log by accident; the only
/// way to the value is [`Secret::expose`], which callers use at the point of use (building a
/// header, computing an HMAC, sealing).
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(Zeroizing<String>);

impl Secret {
    /// Wraps a value.
    pub fn new(value: impl Into<String>) -> Self {
        Secret(Zeroizing::new(value.into()))
    }

    /// The value. Call only where it is used; never log or format it.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Whether the value is empty.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl From<String> for Secret {
    fn from(value: String) -> Self {
        Secret::new(value)
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret([redacted])")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[redacted]")
    }
}

impl<'de> Deserialize<'de> for Secret {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        String::deserialize(deserializer).map(Secret::new)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn never_prints() {
        let s = Secret::new("hunter2");
        assert!(!format!("{s:?}").contains("hunter2"));
        assert!(!format!("{s}").contains("hunter2"));
        assert!(!format!("{:?}", Some(s.clone())).contains("hunter2"));
        assert_eq!(s.expose(), "hunter2");
    }
}
