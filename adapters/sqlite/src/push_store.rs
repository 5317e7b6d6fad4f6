//! `SqlitePushStore`: push registrations and their cursors in `push_registrations`.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use crewbus_domain::{
    PushAttempt, PushConfig, PushRegistration, RunId, Seq, StoreError, TenantId,
    validate_journal_limit,
};
use crewbus_ports::PushStore;
use sqlx::sqlite::{SqliteArguments, SqliteRow};
use sqlx::{Row, Sqlite};

use crate::codec::{Ts, db_i64};
use crate::connect::SqlitePools;

/// One tenant's push registrations in SQLite (schema: `20261201000002_push.sql`).
///
/// - Every statement is scoped by `tenant = ?1`: one tenant never reads, claims or changes
///   another's rows.
/// - `due` claims in one statement (`UPDATE … WHERE (run, id) IN (SELECT … LIMIT ?) RETURNING`,
///   in a write transaction: write transactions are serialised, so concurrent workers never get
///   the same row before the lease runs out), reading through the partial index of rows not
///   parked, ordered `next_attempt_at, run, id` (bytewise), and returns the rows longest-due
///   first with their `next_attempt_at` as it was before the claim.
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

const COLUMNS: &str = "run_id, id, url, auth_scheme, auth_credentials, next_seq, attempts, \
                       next_attempt_at, last_error, parked";

fn limit(limit: usize) -> i64 {
    i64::try_from(limit).unwrap_or(i64::MAX)
}

type Query<'q> = sqlx::query::Query<'q, Sqlite, SqliteArguments<'q>>;

impl SqlitePushStore {
    /// The push store of `tenant` over `pools` (migrated: [`crate::migrate`]).
    pub fn new(pools: SqlitePools, tenant: TenantId) -> Self {
        SqlitePushStore { pools, tenant }
    }

    fn config_of(&self, row: &SqliteRow) -> Result<PushConfig, StoreError> {
        let get = self.pools.st("push store read");
        let scheme: Option<String> = row.try_get("auth_scheme").map_err(&get)?;
        let credentials: Option<String> = row.try_get("auth_credentials").map_err(&get)?;
        Ok(PushConfig::from_stored(
            row.try_get("id").map_err(&get)?,
            RunId(row.try_get("run_id").map_err(&get)?),
            row.try_get("url").map_err(&get)?,
            scheme,
            credentials,
        ))
    }

    fn registration_of(&self, row: &SqliteRow) -> Result<PushRegistration, StoreError> {
        let get = self.pools.st("push store read");
        let next_seq: i64 = row.try_get("next_seq").map_err(&get)?;
        let attempts: i64 = row.try_get("attempts").map_err(&get)?;
        let at: Ts = row.try_get("next_attempt_at").map_err(&get)?;
        let (next_seq, attempts) = PushRegistration::stored_counters("sqlite", next_seq, attempts)?;
        Ok(PushRegistration {
            config: self.config_of(row)?,
            next_seq,
            attempts,
            next_attempt_at: at.0,
            last_error: row.try_get("last_error").map_err(&get)?,
            parked: row.try_get("parked").map_err(&get)?,
        })
    }

    /// Every registration row of `run` (this tenant's), by id (bytewise).
    async fn run_rows(&self, run: RunId, what: &str) -> Result<Vec<SqliteRow>, StoreError> {
        sqlx::query(&format!(
            "SELECT {COLUMNS} FROM push_registrations
             WHERE tenant = ? AND run_id = ? ORDER BY id"
        ))
        .bind(self.tenant.as_str())
        .bind(run.0)
        .fetch_all(self.pools.reader())
        .await
        .map_err(self.pools.st(what))
    }

    /// Runs one writing statement in its own write transaction; returns the rows it changed.
    async fn execute(&self, what: &str, query: Query<'_>) -> Result<u64, StoreError> {
        let mut tx = self.pools.begin_store(what).await?;
        let done = query.execute(&mut *tx).await.map_err(self.pools.st(what))?;
        tx.commit().await.map_err(self.pools.st(what))?;
        Ok(done.rows_affected())
    }
}

#[async_trait]
impl PushStore for SqlitePushStore {
    fn tenant(&self) -> &TenantId {
        &self.tenant
    }

    async fn put(
        &self,
        config: &PushConfig,
        next_seq: Seq,
        at: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        let next_seq = PushRegistration::storable_cursor(next_seq)?;
        let (scheme, credentials) = config.authentication_columns();
        let query = sqlx::query(
            "INSERT INTO push_registrations
                 (tenant, run_id, id, url, auth_scheme, auth_credentials, next_seq, attempts,
                  next_attempt_at, last_error, parked, park_order)
             VALUES (?, ?, ?, ?, ?, ?, ?, 0, ?, NULL, 0, NULL)
             ON CONFLICT (tenant, run_id, id) DO UPDATE SET
                 url = excluded.url,
                 auth_scheme = excluded.auth_scheme,
                 auth_credentials = excluded.auth_credentials,
                 attempts = 0,
                 last_error = NULL,
                 parked = 0,
                 park_order = NULL,
                 next_attempt_at = excluded.next_attempt_at",
        )
        .bind(self.tenant.as_str())
        .bind(config.run.0)
        .bind(&config.id)
        .bind(&config.url)
        .bind(scheme)
        .bind(credentials)
        .bind(next_seq)
        .bind(Ts(at));
        self.execute("push store put", query).await.map(drop)
    }

    async fn get(&self, run: RunId, id: &str) -> Result<Option<PushConfig>, StoreError> {
        let row = sqlx::query(&format!(
            "SELECT {COLUMNS} FROM push_registrations WHERE tenant = ? AND run_id = ? AND id = ?"
        ))
        .bind(self.tenant.as_str())
        .bind(run.0)
        .bind(id)
        .fetch_optional(self.pools.reader())
        .await
        .map_err(self.pools.st("push store get"))?;
        row.as_ref().map(|r| self.config_of(r)).transpose()
    }

    async fn list(&self, run: RunId) -> Result<Vec<PushConfig>, StoreError> {
        let rows = self.run_rows(run, "push store list").await?;
        rows.iter().map(|r| self.config_of(r)).collect()
    }

    async fn due(
        &self,
        at: DateTime<Utc>,
        limit_rows: usize,
        lease_until: DateTime<Utc>,
    ) -> Result<Vec<PushRegistration>, StoreError> {
        let what = "push store due";
        let mut tx = self.pools.begin_store(what).await?;
        // The claim order is read first (with the due time as it was), then the same rows are
        // moved to `lease_until`; both in one write transaction, so nothing changes between.
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
            let row = sqlx::query(&format!(
                "UPDATE push_registrations SET next_attempt_at = ?4
                 WHERE tenant = ?1 AND run_id = ?2 AND id = ?3
                 RETURNING {COLUMNS}"
            ))
            .bind(self.tenant.as_str())
            .bind(run)
            .bind(&id)
            .bind(Ts(lease_until))
            .fetch_one(&mut *tx)
            .await
            .map_err(self.pools.st(what))?;
            let mut registration = self.registration_of(&row)?;
            registration.next_attempt_at = due_at.0;
            out.push(registration);
        }
        tx.commit().await.map_err(self.pools.st(what))?;
        Ok(out)
    }

    async fn advance(
        &self,
        run: RunId,
        id: &str,
        next_seq: Seq,
        at: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        let next_seq = PushRegistration::storable_cursor(next_seq)?;
        let query = sqlx::query(
            "UPDATE push_registrations
             SET next_seq = max(next_seq, ?4), attempts = 0, last_error = NULL,
                 next_attempt_at = ?5
             WHERE tenant = ?1 AND run_id = ?2 AND id = ?3",
        )
        .bind(self.tenant.as_str())
        .bind(run.0)
        .bind(id)
        .bind(next_seq)
        .bind(Ts(at));
        self.execute("push store advance", query).await.map(drop)
    }

    async fn defer(&self, run: RunId, id: &str, until: DateTime<Utc>) -> Result<(), StoreError> {
        let query = sqlx::query(
            "UPDATE push_registrations SET next_attempt_at = ?4
             WHERE tenant = ?1 AND run_id = ?2 AND id = ?3",
        )
        .bind(self.tenant.as_str())
        .bind(run.0)
        .bind(id)
        .bind(Ts(until));
        self.execute("push store defer", query).await.map(drop)
    }

    async fn retry(
        &self,
        run: RunId,
        id: &str,
        next_attempt_at: DateTime<Utc>,
        error: &str,
    ) -> Result<(), StoreError> {
        let query = sqlx::query(
            "UPDATE push_registrations
             SET attempts = min(attempts + 1, 4294967295), next_attempt_at = ?4,
                 last_error = ?5
             WHERE tenant = ?1 AND run_id = ?2 AND id = ?3",
        )
        .bind(self.tenant.as_str())
        .bind(run.0)
        .bind(id)
        .bind(Ts(next_attempt_at))
        .bind(error);
        self.execute("push store retry", query).await.map(drop)
    }

    async fn park(&self, run: RunId, id: &str, error: &str) -> Result<(), StoreError> {
        let query = sqlx::query(
            "UPDATE push_registrations
             SET parked = 1,
                 park_order = (SELECT coalesce(max(park_order), 0) + 1 FROM push_registrations),
                 last_error = ?4
             WHERE tenant = ?1 AND run_id = ?2 AND id = ?3",
        )
        .bind(self.tenant.as_str())
        .bind(run.0)
        .bind(id)
        .bind(error);
        self.execute("push store park", query).await.map(drop)
    }

    async fn parked(&self, limit_rows: usize) -> Result<Vec<PushRegistration>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT {COLUMNS} FROM push_registrations
             WHERE tenant = ? AND parked = 1 ORDER BY park_order LIMIT ?"
        ))
        .bind(self.tenant.as_str())
        .bind(limit(limit_rows))
        .fetch_all(self.pools.reader())
        .await
        .map_err(self.pools.st("push store parked"))?;
        rows.iter().map(|row| self.registration_of(row)).collect()
    }

    async fn unpark(&self, run: RunId, id: &str, at: DateTime<Utc>) -> Result<bool, StoreError> {
        let query = sqlx::query(
            "UPDATE push_registrations
             SET parked = 0, park_order = NULL, attempts = 0, next_attempt_at = ?4
             WHERE tenant = ?1 AND run_id = ?2 AND id = ?3 AND parked = 1",
        )
        .bind(self.tenant.as_str())
        .bind(run.0)
        .bind(id)
        .bind(Ts(at));
        Ok(self.execute("push store unpark", query).await? == 1)
    }

    async fn delete(&self, run: RunId, id: &str) -> Result<(), StoreError> {
        let query = sqlx::query(
            "DELETE FROM push_registrations WHERE tenant = ? AND run_id = ? AND id = ?",
        )
        .bind(self.tenant.as_str())
        .bind(run.0)
        .bind(id);
        self.execute("push store delete", query).await.map(drop)
    }

    async fn registrations(&self, run: RunId) -> Result<Vec<PushRegistration>, StoreError> {
        let rows = self.run_rows(run, "push store registrations").await?;
        rows.iter().map(|row| self.registration_of(row)).collect()
    }

    async fn record_attempt(
        &self,
        run: RunId,
        id: &str,
        attempt: &PushAttempt,
        keep: usize,
    ) -> Result<(), StoreError> {
        PushAttempt::check_keep(keep)?;
        let seq = PushRegistration::storable_cursor(attempt.seq)?;
        let (status, error) = attempt.outcome_columns();
        let what = "push store record attempt";
        let mut tx = self.pools.begin_store(what).await?;
        sqlx::query(
            "INSERT INTO push_attempts (tenant, run_id, id, at, seq, status, error, duration_ms)
             VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        )
        .bind(self.tenant.as_str())
        .bind(run.0)
        .bind(id)
        .bind(Ts(attempt.at))
        .bind(seq)
        .bind(status)
        .bind(error)
        .bind(db_i64(attempt.duration_ms))
        .execute(&mut *tx)
        .await
        .map_err(self.pools.st(what))?;
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

    async fn attempts(
        &self,
        run: RunId,
        id: &str,
        limit_rows: usize,
    ) -> Result<Vec<PushAttempt>, StoreError> {
        validate_journal_limit(limit_rows)?;
        let rows: Vec<(Ts, i64, Option<i64>, Option<String>, i64)> = sqlx::query_as(
            "SELECT at, seq, status, error, duration_ms FROM push_attempts
             WHERE tenant = ? AND run_id = ? AND id = ?
             ORDER BY ord DESC LIMIT ?",
        )
        .bind(self.tenant.as_str())
        .bind(run.0)
        .bind(id)
        .bind(limit(limit_rows))
        .fetch_all(self.pools.reader())
        .await
        .map_err(self.pools.st("push store attempts"))?;
        rows.into_iter()
            .map(|(at, seq, status, error, duration_ms)| {
                PushAttempt::from_stored("sqlite", at.0, seq, status, error, duration_ms)
            })
            .collect()
    }

    async fn prune_attempts(&self, before: DateTime<Utc>) -> Result<u64, StoreError> {
        let query = sqlx::query(
            "DELETE FROM push_attempts
             WHERE tenant = ?1
               AND (run_id, id) IN (
                   SELECT a.run_id, a.id FROM push_attempts a
                   WHERE a.tenant = ?1
                     AND NOT EXISTS (
                         SELECT 1 FROM push_registrations p
                         WHERE p.tenant = ?1 AND p.run_id = a.run_id AND p.id = a.id)
                   GROUP BY a.run_id, a.id
                   HAVING max(a.at) < ?2)",
        )
        .bind(self.tenant.as_str())
        .bind(Ts(before));
        self.execute("push store prune attempts", query).await
    }
}
