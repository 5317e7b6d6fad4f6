//! What the push store (`crewbus_sql::push_store::SqlPushStore<Lite>`, [`crate::SqlitePushStore`])
//! does its own way on SQLite: the attempts log's insert-and-trim in one write transaction (the
//! claim of due rows is the shared `claim_due`'s) (write transactions are serialised whole, so nothing changes
//! between their statements).
//!
//! - Every statement is scoped by `tenant = ?1`: one tenant never reads, claims or changes
//!   another's rows.
//! - `due` claims in one write transaction: a select of the due rows, then one
//!   `UPDATE … RETURNING` per row (write transactions are serialised, so concurrent workers
//!   never get the same row before the lease runs out). The select reads through the partial
//!   index of rows not parked, ordered `next_attempt_at, run, id` (bytewise); the rows are
//!   returned longest-due first with their `next_attempt_at` as it was before the claim.
//! - `advance` takes `max(stored, new)`: a cursor never moves back.
//! - Cursors above `i64::MAX` are refused with `Invalid` (INTEGER column); CHECKs keep every
//!   stored counter non-negative, and a value that still does not fit is a `Backend` error.
//! - Time comes from the caller; the park order is one more than the largest in use, taken in
//!   the parking statement.
//!
//! Errors: mapped by SQLite result code in `error::store_error` — busy past the busy timeout or
//! I/O trouble → `Unavailable` (retryable), refused data → `Invalid`, the rest → `Backend`.

use crewbus_domain::{RunId, StoreError};
use crewbus_sql::dialect::Dialect;
use crewbus_sql::driver::Stmt;
use crewbus_sql::push_store::{SqlPushStore, limit};
use sqlx::Sqlite;

use crate::dialect::Lite;

/// `Dialect::push_write_attempt`: the insert, then the trim to the newest `keep`, in one write
/// transaction.
pub(crate) async fn write_attempt<'q>(
    store: &SqlPushStore<Lite>,
    insert: Stmt<'q, Sqlite>,
    run: RunId,
    id: &str,
    keep: usize,
) -> Result<(), StoreError> {
    let what = "push store record attempt";
    let mut tx = Lite::begin(store.store()).await.map_err(store.st(what))?;
    insert.run(&mut tx).await.map_err(store.st(what))?;
    sqlx::query(
        "DELETE FROM push_attempts
         WHERE tenant = ?1 AND run_id = ?2 AND id = ?3
           AND ord NOT IN (
               SELECT ord FROM push_attempts
               WHERE tenant = ?1 AND run_id = ?2 AND id = ?3
               ORDER BY ord DESC LIMIT ?4)",
    )
    .bind(store.tenant().as_str())
    .bind(run.0)
    .bind(id)
    .bind(limit(keep))
    .execute(&mut *tx)
    .await
    .map_err(store.st(what))?;
    tx.commit().await.map_err(store.st(what))
}
