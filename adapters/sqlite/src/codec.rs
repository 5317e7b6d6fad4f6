//! How times are stored: integer microseconds since the Unix epoch ([`Ts`]).

use chrono::{DateTime, Utc};
use sqlx::Sqlite;
use sqlx::encode::IsNull;
use sqlx::error::BoxDynError;
use sqlx::sqlite::SqliteTypeInfo;

/// A time stored as an `INTEGER` of microseconds since the Unix epoch (UTC): sortable, exact to
/// the microsecond (as Postgres keeps it), and never parsed from text. Binds and decodes as
/// `i64`; a stored value outside chrono's range fails to decode (never clamped silently).
/// Times read back are the caller's truncated to the microsecond.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Ts(pub(crate) DateTime<Utc>);

impl Ts {
    /// The stored form: microseconds since the epoch.
    pub(crate) fn micros(self) -> i64 {
        self.0.timestamp_micros()
    }
}

impl From<DateTime<Utc>> for Ts {
    fn from(t: DateTime<Utc>) -> Self {
        Ts(t)
    }
}

impl From<Ts> for DateTime<Utc> {
    fn from(t: Ts) -> Self {
        t.0
    }
}

impl sqlx::Type<Sqlite> for Ts {
    fn type_info() -> SqliteTypeInfo {
        <i64 as sqlx::Type<Sqlite>>::type_info()
    }
    fn compatible(ty: &SqliteTypeInfo) -> bool {
        <i64 as sqlx::Type<Sqlite>>::compatible(ty)
    }
}

impl<'q> sqlx::Encode<'q, Sqlite> for Ts {
    fn encode_by_ref(
        &self,
        buf: &mut <Sqlite as sqlx::Database>::ArgumentBuffer<'q>,
    ) -> Result<IsNull, BoxDynError> {
        <i64 as sqlx::Encode<'q, Sqlite>>::encode(self.micros(), buf)
    }
}

impl<'r> sqlx::Decode<'r, Sqlite> for Ts {
    fn decode(value: <Sqlite as sqlx::Database>::ValueRef<'r>) -> Result<Self, BoxDynError> {
        let micros = <i64 as sqlx::Decode<'r, Sqlite>>::decode(value)?;
        DateTime::from_timestamp_micros(micros)
            .map(Ts)
            .ok_or_else(|| "a stored time is out of range".into())
    }
}
