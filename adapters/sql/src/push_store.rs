//! The push store (schema: each adapter's `…_push.sql`: `push_registrations`, `push_attempts`),
//! once for both stores: `impl<D: Dialect> PushStore for SqlPushStore<D>`, the SQL words that
//! differ [`PerDialect`] pairs beside the statements, the claim of due rows and the attempts
//! log's insert-and-trim the dialect's.
//!
//! - Every statement that reads or changes rows is scoped by `tenant = $1`: one tenant never
//!   reads, claims or changes another's rows (SQLite's park order is the largest in use across
//!   tenants plus one: an order, not a row of another tenant).
//! - A write outside `due` and `record_attempt` is one statement (`SqlPushStore::write`:
//!   Postgres on the pool, SQLite in a write transaction of its own).
//! - `advance` keeps the larger cursor ([`GREATEST`]): a cursor never moves back,
//!   whatever the order of concurrent workers.
//! - Cursors above `i64::MAX` are refused with `Invalid`; the schemas' CHECKs keep every stored
//!   counter non-negative, and a value that still does not fit is a `Backend` error, never a
//!   wrapped-around cursor.
//! - Time comes from the caller (never a clock in SQL).
//! - Push credentials are stored sealed (`PushConfig::authentication_columns`) and the rows here
//!   have no `Debug`: nothing of a credential is logged.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use crewbus_domain::{
    PushAttempt, PushConfig, PushRegistration, RunId, Seq, StoreError, TenantId,
    validate_journal_limit,
};
use crewbus_ports::PushStore;
use uuid::Uuid;

use crate::counter::db_i64;
use crate::dialect::{BYTEWISE, Dialect, GREATEST, LEAST, PerDialect};
use crate::driver::{Stmt, stmt};

/// The columns of a [`PushRow`], read from `push_registrations`.
pub const PUSH_COLUMNS: &str = "run_id, id, url, auth_scheme, auth_credentials, next_seq, \
                                attempts, next_attempt_at, last_error, parked";

/// A row of `push_registrations` ([`PUSH_COLUMNS`]). No `Debug`: it holds the sealed
/// credentials.
#[derive(sqlx::FromRow)]
pub struct PushRow<T = DateTime<Utc>> {
    run_id: Uuid,
    id: String,
    url: String,
    auth_scheme: Option<String>,
    auth_credentials: Option<String>,
    next_seq: i64,
    attempts: i64,
    next_attempt_at: T,
    last_error: Option<String>,
    parked: bool,
}

impl<T: Into<DateTime<Utc>>> PushRow<T> {
    /// The registration's configuration (its credentials as stored: sealed).
    pub fn config(self) -> PushConfig {
        PushConfig::from_stored(
            self.id,
            RunId(self.run_id),
            self.url,
            self.auth_scheme,
            self.auth_credentials,
        )
    }

    /// The registration with its cursor and retry state; `store` names the store in the error.
    /// Errors: a stored counter out of range → `Backend`.
    pub fn registration(self, store: &str) -> Result<PushRegistration, StoreError> {
        let (next_seq, attempts) =
            PushRegistration::stored_counters(store, self.next_seq, self.attempts)?;
        let PushRow {
            run_id,
            id,
            url,
            auth_scheme,
            auth_credentials,
            next_attempt_at,
            last_error,
            parked,
            ..
        } = self;
        Ok(PushRegistration {
            config: PushConfig::from_stored(id, RunId(run_id), url, auth_scheme, auth_credentials),
            next_seq,
            attempts,
            next_attempt_at: next_attempt_at.into(),
            last_error,
            parked,
        })
    }
}

impl<T> PushRow<T> {
    /// The row with `next_attempt_at` set to `at` (a claimed row's due time before the claim).
    pub fn due_at(self, at: T) -> Self {
        PushRow {
            next_attempt_at: at,
            ..self
        }
    }
}

/// A row of `push_attempts` as `attempts` reads it.
#[derive(sqlx::FromRow)]
pub struct AttemptRow<T = DateTime<Utc>> {
    at: T,
    seq: i64,
    status: Option<i64>,
    error: Option<String>,
    duration_ms: i64,
}

/// The deletion of the attempts logs of registrations that are gone (`$1` the tenant) and whose
/// newest attempt is older than `$2`.
const PRUNE_ATTEMPTS: &str = "DELETE FROM push_attempts
     WHERE tenant = $1
       AND (run_id, id) IN (
           SELECT a.run_id, a.id FROM push_attempts a
           WHERE a.tenant = $1
             AND NOT EXISTS (
                 SELECT 1 FROM push_registrations p
                 WHERE p.tenant = $1 AND p.run_id = a.run_id AND p.id = a.id)
           GROUP BY a.run_id, a.id
           HAVING max(a.at) < $2)";

/// A row count or limit as stored (`bigint`/`INTEGER`), saturated at `i64::MAX`.
pub fn limit(limit: usize) -> i64 {
    i64::try_from(limit).unwrap_or(i64::MAX)
}

/// The condition "the row is parked", as the partial index of parked rows states it.
const IS_PARKED: PerDialect<&str> = PerDialect {
    postgres: "parked",
    sqlite: "parked = 1",
};

/// The next park order, as an SQL expression (a sequence on Postgres; one more than the largest
/// in use on SQLite, inside the parking statement's write transaction).
const PARK_ORDER: PerDialect<&str> = PerDialect {
    postgres: "nextval('push_park_order')",
    sqlite: "(SELECT coalesce(max(park_order), 0) + 1 FROM push_registrations)",
};

/// The insert of an attempt: `$1` tenant, `$2` run, `$3` id, `$4` at, `$5` seq, `$6` status,
/// `$7` error, `$8` duration in ms. Postgres also trims the log in the same statement, to `$9`
/// older entries (see [`Dialect::push_write_attempt`]).
const INSERT_ATTEMPT: PerDialect<&str> = PerDialect {
    // One statement: the insert, then the trim (which sees the log as it was before the insert,
    // so it keeps `keep - 1` of the older entries: `$9`).
    postgres: "WITH added AS (
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
    sqlite: "INSERT INTO push_attempts (tenant, run_id, id, at, seq, status, error, duration_ms)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
};

/// One tenant's push registrations and their cursors on an SQL store of dialect `D`
/// (`crewbus_postgres::PostgresPushStore`, `crewbus_sqlite::SqlitePushStore`). The claim of due
/// rows and the attempts log's insert-and-trim are the dialect's ([`Dialect::push_claim_due`],
/// [`Dialect::push_write_attempt`]): Postgres claims in one statement (`FOR UPDATE SKIP
/// LOCKED` in a CTE, then the update, rows returned with their `next_attempt_at` as it was),
/// SQLite reads the claim order and moves the same rows in one write transaction.
///
/// Errors: mapped by the store's one mapping ([`Dialect::store_error`]) — connection trouble →
/// `Unavailable` (retryable), refused data (e.g. U+0000 in a Postgres text) → `Invalid`, the
/// rest → `Backend`.
pub struct SqlPushStore<D: Dialect> {
    store: D::Store,
    tenant: TenantId,
}

impl<D: Dialect> Clone for SqlPushStore<D> {
    fn clone(&self) -> Self {
        SqlPushStore {
            store: self.store.clone(),
            tenant: self.tenant.clone(),
        }
    }
}

impl<D: Dialect> std::fmt::Debug for SqlPushStore<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqlPushStore")
            .field("store", &D::NAME)
            .field("tenant", &self.tenant)
            .finish_non_exhaustive()
    }
}

impl<D: Dialect> SqlPushStore<D> {
    /// The push store of `tenant` over `store` (migrated by the driver crate's `migrate`).
    pub fn new(store: D::Store, tenant: TenantId) -> Self {
        SqlPushStore { store, tenant }
    }

    /// The store this push store runs on.
    pub fn store(&self) -> &D::Store {
        &self.store
    }

    /// The tenant whose registrations this store holds.
    pub fn tenant(&self) -> &TenantId {
        &self.tenant
    }

    /// A driver error of the operation `what` as a store error ([`Dialect::store_error`]).
    pub fn store_error(&self, err: sqlx::Error, what: &str) -> StoreError {
        D::store_error(&self.store, err, what)
    }

    /// `|e| self.store_error(e, what)`.
    pub fn st<'a>(&'a self, what: &'a str) -> impl Fn(sqlx::Error) -> StoreError + 'a {
        move |e| self.store_error(e, what)
    }

    /// A connection for reads.
    async fn reader(&self, what: &str) -> Result<D::Reader, StoreError> {
        D::reader(&self.store).await.map_err(self.st(what))
    }

    /// Runs one writing statement on its own ([`Dialect::write`]: Postgres on a pool
    /// connection, SQLite in a write transaction of its own); returns the rows it changed.
    pub async fn write<'q>(&self, what: &str, q: Stmt<'q, D::Db>) -> Result<u64, StoreError> {
        let mut write = D::write(&self.store).await.map_err(self.st(what))?;
        let done = q.execute(&mut write).await.map_err(self.st(what))?;
        D::end_write(write).await.map_err(self.st(what))?;
        Ok(D::rows_affected(&done))
    }
}

/// `stmt` with `$1` the tenant, `$2` the run and `$3` the registration id bound.
fn keyed<'q, D: Dialect>(
    store: &SqlPushStore<D>,
    sql: &'q str,
    run: RunId,
    id: &str,
) -> Stmt<'q, D::Db> {
    stmt::<D>(sql)
        .arg(store.tenant().as_str().to_owned())
        .arg(run.0)
        .arg(id.to_owned())
}

/// Every registration row of `run` (this tenant's), by id (bytewise).
async fn run_rows<D: Dialect>(
    store: &SqlPushStore<D>,
    run: RunId,
    what: &str,
) -> Result<Vec<PushRow<D::Time>>, StoreError> {
    let sql = format!(
        "SELECT {PUSH_COLUMNS} FROM push_registrations
         WHERE tenant = $1 AND run_id = $2 ORDER BY id{}",
        BYTEWISE.of::<D>()
    );
    let mut conn = store.reader(what).await?;
    stmt::<D>(&sql)
        .arg(store.tenant().as_str().to_owned())
        .arg(run.0)
        .all(&mut conn)
        .await
        .map_err(|e| store.store_error(e, what))
}

/// `PushStore::put`: creates or replaces the registration (a replaced one keeps its cursor and
/// is due at `at`, unparked, its retries reset). Errors: `next_seq` above `i64::MAX` →
/// `Invalid`.
async fn put<D: Dialect>(
    store: &SqlPushStore<D>,
    config: &PushConfig,
    next_seq: Seq,
    at: DateTime<Utc>,
) -> Result<(), StoreError> {
    let next_seq = PushRegistration::storable_cursor(next_seq)?;
    let (scheme, credentials) = config.authentication_columns();
    let q = keyed(
        store,
        "INSERT INTO push_registrations
             (tenant, run_id, id, url, auth_scheme, auth_credentials, next_seq, attempts,
              next_attempt_at, last_error, parked, park_order)
         VALUES ($1, $2, $3, $4, $5, $6, $7, 0, $8, NULL, false, NULL)
         ON CONFLICT (tenant, run_id, id) DO UPDATE SET
             url = excluded.url,
             auth_scheme = excluded.auth_scheme,
             auth_credentials = excluded.auth_credentials,
             attempts = 0,
             last_error = NULL,
             parked = false,
             park_order = NULL,
             next_attempt_at = excluded.next_attempt_at",
        config.run,
        &config.id,
    )
    .arg(config.url.clone())
    .arg(scheme.map(str::to_owned))
    .arg(credentials.map(str::to_owned))
    .arg(next_seq)
    .arg(D::time(at));
    store.write("push store put", q).await.map(drop)
}

/// `PushStore::get`: the configuration of (`run`, `id`), if registered.
async fn get<D: Dialect>(
    store: &SqlPushStore<D>,
    run: RunId,
    id: &str,
) -> Result<Option<PushConfig>, StoreError> {
    let what = "push store get";
    let sql = format!(
        "SELECT {PUSH_COLUMNS} FROM push_registrations
         WHERE tenant = $1 AND run_id = $2 AND id = $3"
    );
    let mut conn = store.reader(what).await?;
    let row: Option<PushRow<D::Time>> = keyed(store, &sql, run, id)
        .optional(&mut conn)
        .await
        .map_err(|e| store.store_error(e, what))?;
    Ok(row.map(PushRow::config))
}

/// `PushStore::list`: the configurations of `run`, by id (bytewise).
async fn list<D: Dialect>(
    store: &SqlPushStore<D>,
    run: RunId,
) -> Result<Vec<PushConfig>, StoreError> {
    let rows = run_rows(store, run, "push store list").await?;
    Ok(rows.into_iter().map(PushRow::config).collect())
}

/// `PushStore::registrations`: the registrations of `run`, by id (bytewise).
async fn registrations<D: Dialect>(
    store: &SqlPushStore<D>,
    run: RunId,
) -> Result<Vec<PushRegistration>, StoreError> {
    let rows = run_rows(store, run, "push store registrations").await?;
    rows.into_iter().map(|r| r.registration(D::NAME)).collect()
}

/// Where writers lock rows (Postgres), the claim in one statement: `FOR UPDATE SKIP LOCKED` in a
/// CTE, then the update — `$1` the tenant, `$2` the time, `$3` at most that many, `$4` the
/// lease's end — through the partial index on rows not parked, ordered `next_attempt_at, run,
/// id` (byte order, `COLLATE "C"`).
const CLAIM_LOCKING: &str = "WITH claimed AS (
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
               p.attempts, c.due_at AS next_attempt_at, p.last_error, p.parked";

/// `PushStore::due`'s claim: up to `limit_rows` rows of `store`'s tenant not parked and due at
/// `at` (the first in the order `next_attempt_at, run, id` bytewise), moved to `lease_until` so
/// no other worker gets them before the lease runs out; returned in any order, each with its
/// `next_attempt_at` as it was before the claim ([`PushRow::due_at`]). Where writers lock rows,
/// one statement ([`CLAIM_LOCKING`]) on [`Dialect::write`]; on SQLite the order read, then the
/// rows moved one `UPDATE … RETURNING` each, in one write transaction (write transactions are
/// serialised whole, so concurrent workers never get the same row).
async fn claim_due<D: Dialect>(
    store: &SqlPushStore<D>,
    at: DateTime<Utc>,
    limit_rows: usize,
    lease_until: DateTime<Utc>,
) -> Result<Vec<PushRow<D::Time>>, StoreError> {
    let what = "push store due";
    let tenant = store.tenant().as_str().to_owned();
    if D::ROW_LOCKS {
        let mut write = D::write(store.store()).await.map_err(store.st(what))?;
        let rows = stmt::<D>(CLAIM_LOCKING)
            .arg(tenant)
            .arg(D::time(at))
            .arg(limit(limit_rows))
            .arg(D::time(lease_until))
            .all(&mut write)
            .await
            .map_err(store.st(what))?;
        D::end_write(write).await.map_err(store.st(what))?;
        return Ok(rows);
    }
    let mut tx = D::begin(store.store()).await.map_err(store.st(what))?;
    // `parked = 0`: SQLite's form, the condition of its partial index of rows not parked.
    let claimed: Vec<(Uuid, String, D::Time)> = stmt::<D>(
        "SELECT run_id, id, next_attempt_at FROM push_registrations
         WHERE tenant = $1 AND parked = 0 AND next_attempt_at <= $2
         ORDER BY next_attempt_at, run_id, id
         LIMIT $3",
    )
    .arg(tenant.clone())
    .arg(D::time(at))
    .arg(limit(limit_rows))
    .all(&mut tx)
    .await
    .map_err(store.st(what))?;
    let sql = format!(
        "UPDATE push_registrations SET next_attempt_at = $4
         WHERE tenant = $1 AND run_id = $2 AND id = $3
         RETURNING {PUSH_COLUMNS}"
    );
    let mut out = Vec::with_capacity(claimed.len());
    for (run, id, due_at) in claimed {
        let row: PushRow<D::Time> = stmt::<D>(&sql)
            .arg(tenant.clone())
            .arg(run)
            .arg(id)
            .arg(D::time(lease_until))
            .one(&mut tx)
            .await
            .map_err(store.st(what))?;
        out.push(row.due_at(due_at));
    }
    D::commit(tx).await.map_err(store.st(what))?;
    Ok(out)
}

/// `PushStore::due`: claims up to `limit` rows not parked and due at `at`
/// ([`SqlPushStore::claim_due`]: leased until `lease_until`); returns them longest-due first
/// (`next_attempt_at, run, id` bytewise), with their `next_attempt_at` as it was before the
/// claim.
async fn due<D: Dialect>(
    store: &SqlPushStore<D>,
    at: DateTime<Utc>,
    limit: usize,
    lease_until: DateTime<Utc>,
) -> Result<Vec<PushRegistration>, StoreError> {
    let rows = claim_due(store, at, limit, lease_until).await?;
    let mut out = rows
        .into_iter()
        .map(|row| row.registration(D::NAME))
        .collect::<Result<Vec<_>, _>>()?;
    // The claim's order (an `UPDATE … RETURNING` has none).
    out.sort_by(|a, b| {
        (a.next_attempt_at, a.config.run, a.config.id.as_bytes()).cmp(&(
            b.next_attempt_at,
            b.config.run,
            b.config.id.as_bytes(),
        ))
    });
    Ok(out)
}

/// `PushStore::advance`: the cursor to `next_seq` unless it is past it already, the retries
/// reset, due at `at`. Errors: `next_seq` above `i64::MAX` → `Invalid`.
async fn advance<D: Dialect>(
    store: &SqlPushStore<D>,
    run: RunId,
    id: &str,
    next_seq: Seq,
    at: DateTime<Utc>,
) -> Result<(), StoreError> {
    let next_seq = PushRegistration::storable_cursor(next_seq)?;
    let sql = format!(
        "UPDATE push_registrations
         SET next_seq = {}(next_seq, $4), attempts = 0, last_error = NULL,
             next_attempt_at = $5
         WHERE tenant = $1 AND run_id = $2 AND id = $3",
        GREATEST.of::<D>()
    );
    let q = keyed(store, &sql, run, id).arg(next_seq).arg(D::time(at));
    store.write("push store advance", q).await.map(drop)
}

/// `PushStore::defer`: due at `until`, nothing else changed.
async fn defer<D: Dialect>(
    store: &SqlPushStore<D>,
    run: RunId,
    id: &str,
    until: DateTime<Utc>,
) -> Result<(), StoreError> {
    let q = keyed(
        store,
        "UPDATE push_registrations SET next_attempt_at = $4
         WHERE tenant = $1 AND run_id = $2 AND id = $3",
        run,
        id,
    )
    .arg(D::time(until));
    store.write("push store defer", q).await.map(drop)
}

/// `PushStore::retry`: one more attempt counted (saturating at `u32::MAX`), due at
/// `next_attempt_at`, `error` kept as the last.
async fn retry<D: Dialect>(
    store: &SqlPushStore<D>,
    run: RunId,
    id: &str,
    next_attempt_at: DateTime<Utc>,
    error: &str,
) -> Result<(), StoreError> {
    let sql = format!(
        "UPDATE push_registrations
         SET attempts = {}(attempts + 1, 4294967295), next_attempt_at = $4,
             last_error = $5
         WHERE tenant = $1 AND run_id = $2 AND id = $3",
        LEAST.of::<D>()
    );
    let q = keyed(store, &sql, run, id)
        .arg(D::time(next_attempt_at))
        .arg(error.to_owned());
    store.write("push store retry", q).await.map(drop)
}

/// `PushStore::park`: parked last in the park order ([`SqlPushStore::PARK_ORDER`]), `error` kept.
async fn park<D: Dialect>(
    store: &SqlPushStore<D>,
    run: RunId,
    id: &str,
    error: &str,
) -> Result<(), StoreError> {
    let sql = format!(
        "UPDATE push_registrations
         SET parked = true, park_order = {}, last_error = $4
         WHERE tenant = $1 AND run_id = $2 AND id = $3",
        PARK_ORDER.of::<D>()
    );
    let q = keyed(store, &sql, run, id).arg(error.to_owned());
    store.write("push store park", q).await.map(drop)
}

/// `PushStore::parked`: up to `limit` parked registrations, parked first first.
async fn parked<D: Dialect>(
    store: &SqlPushStore<D>,
    limit_rows: usize,
) -> Result<Vec<PushRegistration>, StoreError> {
    let what = "push store parked";
    let sql = format!(
        "SELECT {PUSH_COLUMNS} FROM push_registrations
         WHERE tenant = $1 AND {} ORDER BY park_order LIMIT $2",
        IS_PARKED.of::<D>()
    );
    let mut conn = store.reader(what).await?;
    let rows: Vec<PushRow<D::Time>> = stmt::<D>(&sql)
        .arg(store.tenant().as_str().to_owned())
        .arg(limit(limit_rows))
        .all(&mut conn)
        .await
        .map_err(|e| store.store_error(e, what))?;
    rows.into_iter().map(|r| r.registration(D::NAME)).collect()
}

/// `PushStore::unpark`: a parked registration unparked, its retries reset, due at `at`; whether
/// there was one.
async fn unpark<D: Dialect>(
    store: &SqlPushStore<D>,
    run: RunId,
    id: &str,
    at: DateTime<Utc>,
) -> Result<bool, StoreError> {
    let sql = format!(
        "UPDATE push_registrations
         SET parked = false, park_order = NULL, attempts = 0, next_attempt_at = $4
         WHERE tenant = $1 AND run_id = $2 AND id = $3 AND {}",
        IS_PARKED.of::<D>()
    );
    let q = keyed(store, &sql, run, id).arg(D::time(at));
    Ok(store.write("push store unpark", q).await? == 1)
}

/// `PushStore::delete`: the registration gone (its attempts stay until `prune_attempts`).
async fn delete<D: Dialect>(
    store: &SqlPushStore<D>,
    run: RunId,
    id: &str,
) -> Result<(), StoreError> {
    let q = keyed(
        store,
        "DELETE FROM push_registrations WHERE tenant = $1 AND run_id = $2 AND id = $3",
        run,
        id,
    );
    store.write("push store delete", q).await.map(drop)
}

/// `PushStore::record_attempt`: the attempt appended to the log of (`run`, `id`), which keeps
/// the newest `keep`. Errors: `keep` out of range or the attempt's seq above `i64::MAX` →
/// `Invalid`.
async fn record_attempt<D: Dialect>(
    store: &SqlPushStore<D>,
    run: RunId,
    id: &str,
    attempt: &PushAttempt,
    keep: usize,
) -> Result<(), StoreError> {
    PushAttempt::check_keep(keep)?;
    let seq = PushRegistration::storable_cursor(attempt.seq)?;
    let (status, error) = attempt.outcome_columns();
    let insert = keyed(store, INSERT_ATTEMPT.of::<D>(), run, id)
        .arg(D::time(attempt.at))
        .arg(seq)
        .arg(status)
        .arg(error.map(str::to_owned))
        .arg(db_i64(attempt.duration_ms));
    D::push_write_attempt(store, insert, run, id, keep).await
}

/// `PushStore::attempts`: up to `limit` attempts of (`run`, `id`), newest first. Errors: `limit`
/// out of range → `Invalid`; a stored attempt the domain refuses → its error.
async fn attempts<D: Dialect>(
    store: &SqlPushStore<D>,
    run: RunId,
    id: &str,
    limit_rows: usize,
) -> Result<Vec<PushAttempt>, StoreError> {
    validate_journal_limit(limit_rows)?;
    let what = "push store attempts";
    let mut conn = store.reader(what).await?;
    let rows: Vec<AttemptRow<D::Time>> = keyed(
        store,
        "SELECT at, seq, status, error, duration_ms FROM push_attempts
         WHERE tenant = $1 AND run_id = $2 AND id = $3
         ORDER BY ord DESC LIMIT $4",
        run,
        id,
    )
    .arg(limit(limit_rows))
    .all(&mut conn)
    .await
    .map_err(|e| store.store_error(e, what))?;
    rows.into_iter()
        .map(|r| {
            PushAttempt::from_stored(
                D::NAME,
                r.at.into(),
                r.seq,
                r.status,
                r.error,
                r.duration_ms,
            )
        })
        .collect()
}

/// `PushStore::prune_attempts`: deletes the attempts logs of registrations that are gone and
/// whose newest attempt is older than `before`; returns how many attempts went.
async fn prune_attempts<D: Dialect>(
    store: &SqlPushStore<D>,
    before: DateTime<Utc>,
) -> Result<u64, StoreError> {
    let q = stmt::<D>(PRUNE_ATTEMPTS)
        .arg(store.tenant().as_str().to_owned())
        .arg(D::time(before));
    store.write("push store prune attempts", q).await
}

#[async_trait]
impl<D: Dialect> PushStore for SqlPushStore<D> {
    fn tenant(&self) -> &TenantId {
        &self.tenant
    }

    async fn put(
        &self,
        config: &PushConfig,
        next_seq: Seq,
        at: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        put(self, config, next_seq, at).await
    }

    async fn get(&self, run: RunId, id: &str) -> Result<Option<PushConfig>, StoreError> {
        get(self, run, id).await
    }

    async fn list(&self, run: RunId) -> Result<Vec<PushConfig>, StoreError> {
        list(self, run).await
    }

    async fn due(
        &self,
        at: DateTime<Utc>,
        limit: usize,
        lease_until: DateTime<Utc>,
    ) -> Result<Vec<PushRegistration>, StoreError> {
        due(self, at, limit, lease_until).await
    }

    async fn advance(
        &self,
        run: RunId,
        id: &str,
        next_seq: Seq,
        at: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        advance(self, run, id, next_seq, at).await
    }

    async fn defer(&self, run: RunId, id: &str, until: DateTime<Utc>) -> Result<(), StoreError> {
        defer(self, run, id, until).await
    }

    async fn retry(
        &self,
        run: RunId,
        id: &str,
        next_attempt_at: DateTime<Utc>,
        error: &str,
    ) -> Result<(), StoreError> {
        retry(self, run, id, next_attempt_at, error).await
    }

    async fn park(&self, run: RunId, id: &str, error: &str) -> Result<(), StoreError> {
        park(self, run, id, error).await
    }

    async fn parked(&self, limit: usize) -> Result<Vec<PushRegistration>, StoreError> {
        parked(self, limit).await
    }

    async fn unpark(&self, run: RunId, id: &str, at: DateTime<Utc>) -> Result<bool, StoreError> {
        unpark(self, run, id, at).await
    }

    async fn delete(&self, run: RunId, id: &str) -> Result<(), StoreError> {
        delete(self, run, id).await
    }

    async fn registrations(&self, run: RunId) -> Result<Vec<PushRegistration>, StoreError> {
        registrations(self, run).await
    }

    async fn record_attempt(
        &self,
        run: RunId,
        id: &str,
        attempt: &PushAttempt,
        keep: usize,
    ) -> Result<(), StoreError> {
        record_attempt(self, run, id, attempt, keep).await
    }

    async fn attempts(
        &self,
        run: RunId,
        id: &str,
        limit: usize,
    ) -> Result<Vec<PushAttempt>, StoreError> {
        attempts(self, run, id, limit).await
    }

    async fn prune_attempts(&self, before: DateTime<Utc>) -> Result<u64, StoreError> {
        prune_attempts(self, before).await
    }
}
