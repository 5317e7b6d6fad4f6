//! What the push store (`crewbus_sql::push_store::SqlPushStore<Pg>`, [`crate::PostgresPushStore`],
//! schema `20261130000002_push.sql`) does its own way on Postgres: the claim of due rows and the
//! attempts log's insert-and-trim, each one statement.
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

use chrono::{DateTime, Utc};
use crewbus_domain::StoreError;
use crewbus_sql::driver::Stmt;
use crewbus_sql::push_store::{PushRow, SqlPushStore, limit};
use sqlx::Postgres;

use crate::dialect::Pg;

/// `Dialect::push_claim_due`: one statement, `FOR UPDATE SKIP LOCKED` in a CTE, then the update.
pub(crate) async fn claim_due(
    store: &SqlPushStore<Pg>,
    at: DateTime<Utc>,
    limit_rows: usize,
    lease_until: DateTime<Utc>,
) -> Result<Vec<PushRow>, StoreError> {
    sqlx::query_as(
        "WITH claimed AS (
             SELECT run_id, id, next_attempt_at AS due_at
             FROM push_registrations
             WHERE tenant = $1 AND NOT parked AND next_attempt_at <= $2
             ORDER BY next_attempt_at, run_id, id COLLATE \"C\"
             LIMIT $3
             FOR UPDATE SKIP LOCKED
         )
         UPDATE push_registrations p SET next_attempt_at = $4
         FROM claimed c
         WHERE p.tenant = $1 AND p.run_id = c.run_id AND p.id = c.id
         RETURNING p.run_id, p.id, p.url, p.auth_scheme, p.auth_credentials, p.next_seq,
                   p.attempts, c.due_at AS next_attempt_at, p.last_error, p.parked",
    )
    .bind(store.tenant().as_str())
    .bind(at)
    .bind(limit(limit_rows))
    .bind(lease_until)
    .fetch_all(store.store())
    .await
    .map_err(store.st("push store due"))
}

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
