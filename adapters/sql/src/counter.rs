//! How counters are stored: a domain `u64` (seqs, counts, lengths, generations) in a signed
//! 64-bit integer column (`bigint`, SQLite `INTEGER`).

/// Saturating `u64` → stored `i64` (values above `i64::MAX` become `i64::MAX`).
pub fn db_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// Stored `i64` (CHECKed non-negative) → `u64`; a negative value reads as 0.
pub fn from_db(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}
