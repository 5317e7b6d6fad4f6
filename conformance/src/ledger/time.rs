//! Instants for the ledger behaviours: a fixed origin plus offsets, so every run is the same.

use chrono::{DateTime, TimeZone, Utc};

/// The behaviours' origin: 2030-01-01T00:00:00Z.
pub fn origin() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2030, 1, 1, 0, 0, 0)
        .single()
        .expect("a valid instant")
}

/// `origin() + secs` seconds.
pub fn t(secs: i64) -> DateTime<Utc> {
    origin() + chrono::Duration::seconds(secs)
}
