//! `PostgresPushStore`: push registrations and their cursors in `push_registrations`.

use chrono::{DateTime, Utc};
use crewbus_domain::{RunId, StoreError, TenantId};
use crewbus_sql::driver::Stmt;
use crewbus_sql::push_store::{PushRow, SqlPushStore, limit};
use sqlx::pool::PoolConnection;
use sqlx::{PgPool, Postgres};

use crate::dialect::Pg;
use crate::error::store_error;

/// One tenant's push registrations in Postgres (schema: `20261130000002_push.sql`). The port is
/// [`crewbus_sql::impl_push_store!`] (see `crewbus_sql::push_store`); here is what only Postgres
/// has:
///
/// - Every statement is scoped by `tenant = $1`: one tenant never reads, claims or changes
///   another's rows.
/// - `due` claims in one statement (`FOR UPDATE SKIP LOCKED` in a CTE, then `UPDATE …
///   next_attempt_at = lease_until`), so concurrent workers never get the same row before the
///   lease runs out; it uses the partial index on rows not parked, ordered `next_attempt_at, run,
///   id` (byte order, `COLLATE "C"`), and returns the rows longest-due first with their
///   `next_attempt_at` as it was before the claim.
/// - `advance` takes `GREATEST(stored, new)`: a cursor never moves back, whatever the order of
///   concurrent workers.
/// - Cursors above `i64::MAX` are refused with `Invalid` (bigint column); CHECKs keep every
///   stored counter non-negative, and a value that still does not fit is a `Backend` error,
///   never a wrapped-around cursor.
/// - Time comes from the caller; the park order comes from a sequence (no clock in SQL).
/// - Each registration's attempts log is `push_attempts` (no foreign key: it outlives its
///   registration until `prune_attempts`), ordered by its identity `ord`: `record_attempt`
///   inserts and trims to the newest `keep` in one statement.
///
/// Errors: mapped by SQLSTATE in `error::store_error` — connection trouble → `Unavailable`
/// (retryable), refused data (e.g. U+0000 in a text) → `Invalid`, the rest → `Backend`.
#[derive(Clone)]
pub struct PostgresPushStore {
    pool: PgPool,
    tenant: TenantId,
}

impl std::fmt::Debug for PostgresPushStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresPushStore")
            .field("tenant", &self.tenant)
            .finish_non_exhaustive()
    }
}

impl PostgresPushStore {
    /// The push store of `tenant` over `pool` (migrated: [`crate::migrate`]).
    pub fn new(pool: PgPool, tenant: TenantId) -> Self {
        PostgresPushStore { pool, tenant }
    }
}

impl SqlPushStore for PostgresPushStore {
    type D = Pg;
    type Reader = PoolConnection<Postgres>;
    const STORE: &'static str = "postgres";
    const BYTEWISE: &'static str = " COLLATE \"C\"";
    const GREATEST: &'static str = "GREATEST";
    const LEAST: &'static str = "LEAST";
    const IS_PARKED: &'static str = "parked";
    const PARK_ORDER: &'static str = "nextval('push_park_order')";
    // One statement: the insert, then the trim (which sees the log as it was before the insert,
    // so it keeps `keep - 1` of the older entries: `$9`).
    const INSERT_ATTEMPT: &'static str = "WITH added AS (
             INSERT INTO push_attempts
                 (tenant, run_id, id, at, seq, status, error, duration_ms)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
         )
         DELETE FROM push_attempts
         WHERE tenant = $1 AND run_id = $2 AND id = $3
           AND ord NOT IN (
               SELECT ord FROM push_attempts
               WHERE tenant = $1 AND run_id = $2 AND id = $3
               ORDER BY ord DESC LIMIT $9)";

    fn tenant(&self) -> &TenantId {
        &self.tenant
    }

    fn store_error(&self, err: sqlx::Error, what: &str) -> StoreError {
        store_error(err, what)
    }

    async fn reader(&self, what: &str) -> Result<PoolConnection<Postgres>, StoreError> {
        self.pool.acquire().await.map_err(|e| store_error(e, what))
    }

    /// On the pool (its own implicit transaction).
    async fn write<'q>(&self, what: &str, q: Stmt<'q, Postgres>) -> Result<u64, StoreError> {
        let mut conn = self.reader(what).await?;
        q.execute(&mut conn)
            .await
            .map(|r| r.rows_affected())
            .map_err(|e| store_error(e, what))
    }

    /// One statement: `FOR UPDATE SKIP LOCKED` in a CTE, then the update.
    async fn claim_due(
        &self,
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
        .bind(self.tenant.as_str())
        .bind(at)
        .bind(limit(limit_rows))
        .bind(lease_until)
        .fetch_all(&self.pool)
        .await
        .map_err(|e| store_error(e, "push store due"))
    }

    /// The insert and the trim are one statement (`$9`: the older entries kept).
    async fn write_attempt<'q>(
        &self,
        insert: Stmt<'q, Postgres>,
        _run: RunId,
        _id: &str,
        keep: usize,
    ) -> Result<(), StoreError> {
        self.write("push store record attempt", insert.arg(limit(keep - 1)))
            .await
            .map(drop)
    }
}

crewbus_sql::impl_push_store!(PostgresPushStore);
