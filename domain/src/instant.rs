//! Instant arithmetic: an instant moved by a `std::time::Duration`, saturating at the ends of
//! `DateTime<Utc>`'s range instead of panicking. The bus and the push worker both use it.

use std::time::Duration;

use chrono::{DateTime, Utc};

/// `at + d`, saturating at the far future (`DateTime::<Utc>::MAX_UTC`) instead of panicking.
pub fn after(at: DateTime<Utc>, d: Duration) -> DateTime<Utc> {
    chrono::Duration::from_std(d)
        .ok()
        .and_then(|d| at.checked_add_signed(d))
        .unwrap_or(DateTime::<Utc>::MAX_UTC)
}

/// `at − d`, saturating at the distant past (`DateTime::<Utc>::MIN_UTC`).
pub fn before(at: DateTime<Utc>, d: Duration) -> DateTime<Utc> {
    chrono::Duration::from_std(d)
        .ok()
        .and_then(|d| at.checked_sub_signed(d))
        .unwrap_or(DateTime::<Utc>::MIN_UTC)
}
