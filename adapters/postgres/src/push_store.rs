//! `PostgresPushStore`: push registrations and their cursors in `push_registrations`.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use crewbus_domain::{
    PushAttempt, PushConfig, PushRegistration, RunId, Seq, StoreError, TenantId,
    validate_journal_limit,
};
use crewbus_ports::PushStore;
use sqlx::postgres::PgRow;
use sqlx::{PgPool, Row};

use crate::error::store_error;

/// One tenant's push registrations in Postgres (schema: `20261130000002_push.sql`).
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

const COLUMNS: &str = "run_id, id, url, auth_scheme, auth_credentials, next_seq, attempts, \
                       next_attempt_at, last_error, parked";

fn limit(limit: usize) -> i64 {
    i64::try_from(limit).unwrap_or(i64::MAX)
}

fn config_of(row: &PgRow) -> Result<PushConfig, StoreError> {
    let get = |e: sqlx::Error| store_error(e, "push store read");
    let scheme: Option<String> = row.try_get("auth_scheme").map_err(get)?;
    let credentials: Option<String> = row.try_get("auth_credentials").map_err(get)?;
    Ok(PushConfig::from_stored(
        row.try_get("id").map_err(get)?,
        RunId(row.try_get("run_id").map_err(get)?),
        row.try_get("url").map_err(get)?,
        scheme,
        credentials,
    ))
}

fn registration_of(row: &PgRow, at_column: &str) -> Result<PushRegistration, StoreError> {
    let get = |e: sqlx::Error| store_error(e, "push store read");
    let next_seq: i64 = row.try_get("next_seq").map_err(get)?;
    let attempts: i64 = row.try_get("attempts").map_err(get)?;
    let (next_seq, attempts) = PushRegistration::stored_counters("postgres", next_seq, attempts)?;
    Ok(PushRegistration {
        config: config_of(row)?,
        next_seq,
        attempts,
        next_attempt_at: row.try_get(at_column).map_err(get)?,
        last_error: row.try_get("last_error").map_err(get)?,
        parked: row.try_get("parked").map_err(get)?,
    })
}

impl PostgresPushStore {
    /// The push store of `tenant` over `pool` (migrated: [`crate::migrate`]).
    pub fn new(pool: PgPool, tenant: TenantId) -> Self {
        PostgresPushStore { pool, tenant }
    }

    /// Every registration row of `run` (this tenant's), by id (bytewise).
    async fn run_rows(&self, run: RunId, what: &str) -> Result<Vec<PgRow>, StoreError> {
        sqlx::query(&format!(
            "SELECT {COLUMNS} FROM push_registrations
             WHERE tenant = $1 AND run_id = $2 ORDER BY id COLLATE \"C\""
        ))
        .bind(self.tenant.as_str())
        .bind(run.0)
        .fetch_all(&self.pool)
        .await
        .map_err(|e| store_error(e, what))
    }

    async fn execute(
        &self,
        what: &str,
        query: sqlx::query::Query<'_, sqlx::Postgres, sqlx::postgres::PgArguments>,
    ) -> Result<u64, StoreError> {
        query
            .execute(&self.pool)
            .await
            .map(|r| r.rows_affected())
            .map_err(|e| store_error(e, what))
    }
}

#[async_trait]
impl PushStore for PostgresPushStore {
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
             VALUES ($1, $2, $3, $4, $5, $6, $7, 0, $8, NULL, false, NULL)
             ON CONFLICT (tenant, run_id, id) DO UPDATE SET
                 url = EXCLUDED.url,
                 auth_scheme = EXCLUDED.auth_scheme,
                 auth_credentials = EXCLUDED.auth_credentials,
                 attempts = 0,
                 last_error = NULL,
                 parked = false,
                 park_order = NULL,
                 next_attempt_at = EXCLUDED.next_attempt_at",
        )
        .bind(self.tenant.as_str())
        .bind(config.run.0)
        .bind(&config.id)
        .bind(&config.url)
        .bind(scheme)
        .bind(credentials)
        .bind(next_seq)
        .bind(at);
        self.execute("push store put", query).await.map(drop)
    }

    async fn get(&self, run: RunId, id: &str) -> Result<Option<PushConfig>, StoreError> {
        let row = sqlx::query(&format!(
            "SELECT {COLUMNS} FROM push_registrations
             WHERE tenant = $1 AND run_id = $2 AND id = $3"
        ))
        .bind(self.tenant.as_str())
        .bind(run.0)
        .bind(id)
        .fetch_optional(&self.pool)
        .await
        .map_err(|e| store_error(e, "push store get"))?;
        row.as_ref().map(config_of).transpose()
    }

    async fn list(&self, run: RunId) -> Result<Vec<PushConfig>, StoreError> {
        let rows = self.run_rows(run, "push store list").await?;
        rows.iter().map(config_of).collect()
    }

    async fn due(
        &self,
        at: DateTime<Utc>,
        limit_rows: usize,
        lease_until: DateTime<Utc>,
    ) -> Result<Vec<PushRegistration>, StoreError> {
        let rows = sqlx::query(
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
                       p.attempts, c.due_at, p.last_error, p.parked",
        )
        .bind(self.tenant.as_str())
        .bind(at)
        .bind(limit(limit_rows))
        .bind(lease_until)
        .fetch_all(&self.pool)
        .await
        .map_err(|e| store_error(e, "push store due"))?;
        let mut out = rows
            .iter()
            .map(|row| registration_of(row, "due_at"))
            .collect::<Result<Vec<_>, _>>()?;
        // UPDATE … RETURNING has no order: restore the claim order.
        out.sort_by(|a, b| {
            (a.next_attempt_at, a.config.run, a.config.id.as_bytes()).cmp(&(
                b.next_attempt_at,
                b.config.run,
                b.config.id.as_bytes(),
            ))
        });
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
             SET next_seq = GREATEST(next_seq, $4), attempts = 0, last_error = NULL,
                 next_attempt_at = $5
             WHERE tenant = $1 AND run_id = $2 AND id = $3",
        )
        .bind(self.tenant.as_str())
        .bind(run.0)
        .bind(id)
        .bind(next_seq)
        .bind(at);
        self.execute("push store advance", query).await.map(drop)
    }

    async fn defer(&self, run: RunId, id: &str, until: DateTime<Utc>) -> Result<(), StoreError> {
        let query = sqlx::query(
            "UPDATE push_registrations SET next_attempt_at = $4
             WHERE tenant = $1 AND run_id = $2 AND id = $3",
        )
        .bind(self.tenant.as_str())
        .bind(run.0)
        .bind(id)
        .bind(until);
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
             SET attempts = LEAST(attempts + 1, 4294967295), next_attempt_at = $4,
                 last_error = $5
             WHERE tenant = $1 AND run_id = $2 AND id = $3",
        )
        .bind(self.tenant.as_str())
        .bind(run.0)
        .bind(id)
        .bind(next_attempt_at)
        .bind(error);
        self.execute("push store retry", query).await.map(drop)
    }

    async fn park(&self, run: RunId, id: &str, error: &str) -> Result<(), StoreError> {
        let query = sqlx::query(
            "UPDATE push_registrations
             SET parked = true, park_order = nextval('push_park_order'), last_error = $4
             WHERE tenant = $1 AND run_id = $2 AND id = $3",
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
             WHERE tenant = $1 AND parked ORDER BY park_order LIMIT $2"
        ))
        .bind(self.tenant.as_str())
        .bind(limit(limit_rows))
        .fetch_all(&self.pool)
        .await
        .map_err(|e| store_error(e, "push store parked"))?;
        rows.iter()
            .map(|row| registration_of(row, "next_attempt_at"))
            .collect()
    }

    async fn unpark(&self, run: RunId, id: &str, at: DateTime<Utc>) -> Result<bool, StoreError> {
        let query = sqlx::query(
            "UPDATE push_registrations
             SET parked = false, park_order = NULL, attempts = 0, next_attempt_at = $4
             WHERE tenant = $1 AND run_id = $2 AND id = $3 AND parked",
        )
        .bind(self.tenant.as_str())
        .bind(run.0)
        .bind(id)
        .bind(at);
        Ok(self.execute("push store unpark", query).await? == 1)
    }

    async fn delete(&self, run: RunId, id: &str) -> Result<(), StoreError> {
        let query = sqlx::query(
            "DELETE FROM push_registrations WHERE tenant = $1 AND run_id = $2 AND id = $3",
        )
        .bind(self.tenant.as_str())
        .bind(run.0)
        .bind(id);
        self.execute("push store delete", query).await.map(drop)
    }

    async fn registrations(&self, run: RunId) -> Result<Vec<PushRegistration>, StoreError> {
        let rows = self.run_rows(run, "push store registrations").await?;
        rows.iter()
            .map(|row| registration_of(row, "next_attempt_at"))
            .collect()
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
        // One statement: the insert, then the trim (which sees the log as it was before the
        // insert, so it keeps `keep - 1` of the older entries).
        let query = sqlx::query(
            "WITH added AS (
                 INSERT INTO push_attempts
                     (tenant, run_id, id, at, seq, status, error, duration_ms)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
             )
             DELETE FROM push_attempts
             WHERE tenant = $1 AND run_id = $2 AND id = $3
               AND ord NOT IN (
                   SELECT ord FROM push_attempts
                   WHERE tenant = $1 AND run_id = $2 AND id = $3
                   ORDER BY ord DESC LIMIT $9)",
        )
        .bind(self.tenant.as_str())
        .bind(run.0)
        .bind(id)
        .bind(attempt.at)
        .bind(seq)
        .bind(status)
        .bind(error)
        .bind(i64::try_from(attempt.duration_ms).unwrap_or(i64::MAX))
        .bind(limit(keep - 1));
        self.execute("push store record attempt", query)
            .await
            .map(drop)
    }

    async fn attempts(
        &self,
        run: RunId,
        id: &str,
        limit_rows: usize,
    ) -> Result<Vec<PushAttempt>, StoreError> {
        validate_journal_limit(limit_rows)?;
        type Row = (DateTime<Utc>, i64, Option<i64>, Option<String>, i64);
        let rows: Vec<Row> = sqlx::query_as(
            "SELECT at, seq, status, error, duration_ms FROM push_attempts
             WHERE tenant = $1 AND run_id = $2 AND id = $3
             ORDER BY ord DESC LIMIT $4",
        )
        .bind(self.tenant.as_str())
        .bind(run.0)
        .bind(id)
        .bind(limit(limit_rows))
        .fetch_all(&self.pool)
        .await
        .map_err(|e| store_error(e, "push store attempts"))?;
        rows.into_iter()
            .map(|(at, seq, status, error, duration_ms)| {
                PushAttempt::from_stored("postgres", at, seq, status, error, duration_ms)
            })
            .collect()
    }

    async fn prune_attempts(&self, before: DateTime<Utc>) -> Result<u64, StoreError> {
        let query = sqlx::query(
            "DELETE FROM push_attempts
             WHERE tenant = $1
               AND (run_id, id) IN (
                   SELECT a.run_id, a.id FROM push_attempts a
                   WHERE a.tenant = $1
                     AND NOT EXISTS (
                         SELECT 1 FROM push_registrations p
                         WHERE p.tenant = $1 AND p.run_id = a.run_id AND p.id = a.id)
                   GROUP BY a.run_id, a.id
                   HAVING max(a.at) < $2)",
        )
        .bind(self.tenant.as_str())
        .bind(before);
        self.execute("push store prune attempts", query).await
    }
}
