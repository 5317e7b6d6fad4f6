//! What the push store (`crewbus_sql::push_store::SqlPushStore<Pg>`, [`crate::PostgresPushStore`],
//! schema `20261130000002_push.sql`) does its own way on Postgres: the attempts log's
//! insert-and-trim in one statement (the claim of due rows is the shared `claim_due`'s, its
//! `FOR UPDATE SKIP LOCKED` statement written there).
//!
//! - `due` claims in one statement (`FOR UPDATE SKIP LOCKED` in a CTE, then `UPDATE …
//!   next_attempt_at = lease_until`), so concurrent workers never get the same row before the
//!   lease runs out; it uses the partial index on rows not parked, ordered `next_attempt_at, run,
//!   id` (byte order, `COLLATE "C"`), and returns the rows longest-due first with their
//!   `next_attempt_at` as it was before the claim.
//! - `advance` takes `GREATEST(stored, new)`: a cursor never moves back, whatever the order of
//!   concurrent workers.
//! - Cursors above `i64::MAX` are refused with `Invalid` (bigint column); CHECKs keep every
//!   stored counter non-negative, and a value that still does not fit is a `Backend` error,
//!   never a wrapped-around cursor.
//! - Time comes from the caller; the park order comes from a sequence (no clock in SQL).
//! - Each registration's attempts log is `push_attempts` (no foreign key: it outlives its
//!   registration until `prune_attempts`), ordered by its identity `ord`: `record_attempt`
//!   inserts and trims to the newest `keep` in one statement.

use crewbus_domain::StoreError;
use crewbus_sql::driver::Stmt;
use crewbus_sql::push_store::{SqlPushStore, limit};
use sqlx::Postgres;

use crate::dialect::Pg;

/// `Dialect::push_write_attempt`: the insert and the trim are one statement (`$9`: the older
/// entries kept).
pub(crate) async fn write_attempt<'q>(
    store: &SqlPushStore<Pg>,
    insert: Stmt<'q, Postgres>,
    keep: usize,
) -> Result<(), StoreError> {
    store
        .write("push store record attempt", insert.arg(limit(keep - 1)))
        .await
        .map(drop)
}
