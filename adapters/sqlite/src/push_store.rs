//! `SqlitePushStore`: push registrations and their cursors in `push_registrations`.

use chrono::{DateTime, Utc};
use crewbus_domain::{RunId, StoreError, TenantId};
use crewbus_sql::driver::Stmt;
use crewbus_sql::push_store::{PUSH_COLUMNS, PushRow, SqlPushStore, limit};
use sqlx::Sqlite;
use sqlx::pool::PoolConnection;

use crate::codec::Ts;
use crate::connect::SqlitePools;
use crate::dialect::Lite;

/// One tenant's push registrations in SQLite (schema: `20261201000002_push.sql`). The port is
/// [`crewbus_sql::impl_push_store!`] (see `crewbus_sql::push_store`); here is what only SQLite
/// has:
///
/// - Every statement is scoped by `tenant = ?1`: one tenant never reads, claims or changes
///   another's rows.
/// - `due` claims in one write transaction: a select of the due rows, then one
///   `UPDATE … RETURNING` per row (write transactions are serialised, so concurrent workers
///   never get the same row before the lease runs out). The select reads through the partial
///   index of rows not parked, ordered `next_attempt_at, run, id` (bytewise); the rows are
///   returned longest-due first with their `next_attempt_at` as it was before the claim.
/// - `advance` takes `max(stored, new)`: a cursor never moves back.
/// - Cursors above `i64::MAX` are refused with `Invalid` (INTEGER column); CHECKs keep every
///   stored counter non-negative, and a value that still does not fit is a `Backend` error.
/// - Time comes from the caller; the park order is one more than the largest in use, taken in
///   the parking statement.
///
/// Errors: mapped by SQLite result code in `error::store_error` — busy past the busy timeout or
/// I/O trouble → `Unavailable` (retryable), refused data → `Invalid`, the rest → `Backend`.
#[derive(Clone)]
pub struct SqlitePushStore {
    pools: SqlitePools,
    tenant: TenantId,
}

impl std::fmt::Debug for SqlitePushStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqlitePushStore")
            .field("tenant", &self.tenant)
            .finish_non_exhaustive()
    }
}

impl SqlitePushStore {
    /// The push store of `tenant` over `pools` (migrated: [`crate::migrate`]).
    pub fn new(pools: SqlitePools, tenant: TenantId) -> Self {
        SqlitePushStore { pools, tenant }
    }
}

impl SqlPushStore for SqlitePushStore {
    type D = Lite;
    type Reader = PoolConnection<Sqlite>;
    const STORE: &'static str = "sqlite";
    const BYTEWISE: &'static str = "";
    const GREATEST: &'static str = "max";
    const LEAST: &'static str = "min";
    const IS_PARKED: &'static str = "parked = 1";
    const PARK_ORDER: &'static str =
        "(SELECT coalesce(max(park_order), 0) + 1 FROM push_registrations)";
    const INSERT_ATTEMPT: &'static str =
        "INSERT INTO push_attempts (tenant, run_id, id, at, seq, status, error, duration_ms)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8)";

    fn tenant(&self) -> &TenantId {
        &self.tenant
    }

    fn store_error(&self, err: sqlx::Error, what: &str) -> StoreError {
        self.pools.store_error(err, what)
    }

    async fn reader(&self, what: &str) -> Result<PoolConnection<Sqlite>, StoreError> {
        self.pools
            .reader()
            .acquire()
            .await
            .map_err(self.pools.st(what))
    }

    /// In a write transaction of its own.
    async fn write<'q>(&self, what: &str, q: Stmt<'q, Sqlite>) -> Result<u64, StoreError> {
        let mut tx = self.pools.begin_store(what).await?;
        let done = q.execute(&mut tx).await.map_err(self.pools.st(what))?;
        tx.commit().await.map_err(self.pools.st(what))?;
        Ok(done.rows_affected())
    }

    /// The claim order is read first (with the due time as it was), then the same rows are
    /// moved to `lease_until`; both in one write transaction, so nothing changes between.
    async fn claim_due(
        &self,
        at: DateTime<Utc>,
        limit_rows: usize,
        lease_until: DateTime<Utc>,
    ) -> Result<Vec<PushRow<Ts>>, StoreError> {
        let what = "push store due";
        let mut tx = self.pools.begin_store(what).await?;
        let claimed: Vec<(uuid::Uuid, String, Ts)> = sqlx::query_as(
            "SELECT run_id, id, next_attempt_at FROM push_registrations
             WHERE tenant = ?1 AND parked = 0 AND next_attempt_at <= ?2
             ORDER BY next_attempt_at, run_id, id
             LIMIT ?3",
        )
        .bind(self.tenant.as_str())
        .bind(Ts(at))
        .bind(limit(limit_rows))
        .fetch_all(&mut *tx)
        .await
        .map_err(self.pools.st(what))?;
        let mut out = Vec::with_capacity(claimed.len());
        for (run, id, due_at) in claimed {
            let row: PushRow<Ts> = sqlx::query_as(&format!(
                "UPDATE push_registrations SET next_attempt_at = ?4
                 WHERE tenant = ?1 AND run_id = ?2 AND id = ?3
                 RETURNING {PUSH_COLUMNS}"
            ))
            .bind(self.tenant.as_str())
            .bind(run)
            .bind(&id)
            .bind(Ts(lease_until))
            .fetch_one(&mut *tx)
            .await
            .map_err(self.pools.st(what))?;
            out.push(row.due_at(due_at));
        }
        tx.commit().await.map_err(self.pools.st(what))?;
        Ok(out)
    }

    /// The insert, then the trim to the newest `keep`, in one write transaction.
    async fn write_attempt<'q>(
        &self,
        insert: Stmt<'q, Sqlite>,
        run: RunId,
        id: &str,
        keep: usize,
    ) -> Result<(), StoreError> {
        let what = "push store record attempt";
        let mut tx = self.pools.begin_store(what).await?;
        insert.run(&mut tx).await.map_err(self.pools.st(what))?;
        sqlx::query(
            "DELETE FROM push_attempts
             WHERE tenant = ?1 AND run_id = ?2 AND id = ?3
               AND ord NOT IN (
                   SELECT ord FROM push_attempts
                   WHERE tenant = ?1 AND run_id = ?2 AND id = ?3
                   ORDER BY ord DESC LIMIT ?4)",
        )
        .bind(self.tenant.as_str())
        .bind(run.0)
        .bind(id)
        .bind(limit(keep))
        .execute(&mut *tx)
        .await
        .map_err(self.pools.st(what))?;
        tx.commit().await.map_err(self.pools.st(what))
    }
}

crewbus_sql::impl_push_store!(SqlitePushStore);
