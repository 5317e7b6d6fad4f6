//! The push store (schema: each adapter's `…_push.sql`: `push_registrations`, `push_attempts`),
//! once for both stores ([`impl_push_store!`](crate::impl_push_store)), over [`SqlPushStore`]: what only the adapter
//! knows (its connections, how it runs a write on its own, its error mapping, the claim of due
//! rows and the attempts log's insert-and-trim, and the SQL words that differ).
//!
//! - Every statement that reads or changes rows is scoped by `tenant = $1`: one tenant never
//!   reads, claims or changes another's rows (SQLite's park order is the largest in use across
//!   tenants plus one: an order, not a row of another tenant).
//! - A write outside `due` and `record_attempt` is one statement ([`SqlPushStore::write`]:
//!   Postgres on the pool, SQLite in a write transaction of its own).
//! - `advance` keeps the larger cursor ([`SqlPushStore::GREATEST`]): a cursor never moves back,
//!   whatever the order of concurrent workers.
//! - Cursors above `i64::MAX` are refused with `Invalid`; the schemas' CHECKs keep every stored
//!   counter non-negative, and a value that still does not fit is a `Backend` error, never a
//!   wrapped-around cursor.
//! - Time comes from the caller (never a clock in SQL).
//! - Push credentials are stored sealed (`PushConfig::authentication_columns`) and the rows here
//!   have no `Debug`: nothing of a credential is logged.

use std::future::Future;
use std::ops::DerefMut;

use chrono::{DateTime, Utc};
use crewbus_domain::{
    PushAttempt, PushConfig, PushRegistration, RunId, Seq, StoreError, TenantId,
    validate_journal_limit,
};
use uuid::Uuid;

use crate::counter::db_i64;
use crate::dialect::{Conn, Dialect};
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

/// One tenant's push store on an SQL store: its connections, how it runs a write, its error
/// mapping, and the statements that differ. Implemented by `PostgresPushStore` and
/// `SqlitePushStore`.
pub trait SqlPushStore: Send + Sync {
    /// The store's dialect.
    type D: Dialect;
    /// A connection for reads.
    type Reader: DerefMut<Target = Conn<Self::D>> + Send;

    /// The store's name in errors about stored values (`"postgres"`, `"sqlite"`).
    const STORE: &'static str;
    /// What an `ORDER BY` of a text column ends with to order it bytewise (` COLLATE "C"` on
    /// Postgres; nothing on SQLite).
    const BYTEWISE: &'static str;
    /// The scalar "larger of two values" (`GREATEST`, `max`).
    const GREATEST: &'static str;
    /// The scalar "smaller of two values" (`LEAST`, `min`).
    const LEAST: &'static str;
    /// The condition "the row is parked", as the partial index of parked rows states it.
    const IS_PARKED: &'static str;
    /// The next park order, as an SQL expression (a sequence on Postgres; one more than the
    /// largest in use on SQLite, inside the parking statement's write transaction).
    const PARK_ORDER: &'static str;
    /// The insert of an attempt: `$1` tenant, `$2` run, `$3` id, `$4` at, `$5` seq, `$6` status,
    /// `$7` error, `$8` duration in ms (Postgres also trims the log in the same statement, to
    /// `$9` older entries: see [`SqlPushStore::write_attempt`]).
    const INSERT_ATTEMPT: &'static str;

    /// The tenant whose registrations this store holds.
    fn tenant(&self) -> &TenantId;

    /// A driver error of the operation `what` as a store error (connection trouble →
    /// `Unavailable`, refused data → `Invalid`, the rest → `Backend`).
    fn store_error(&self, err: sqlx::Error, what: &str) -> StoreError;

    /// A connection for reads.
    fn reader(&self, what: &str) -> impl Future<Output = Result<Self::Reader, StoreError>> + Send;

    /// Runs one writing statement on its own (Postgres: on the pool; SQLite: in a write
    /// transaction of its own); returns the rows it changed.
    fn write<'q>(
        &self,
        what: &str,
        q: Stmt<'q, <Self::D as Dialect>::Db>,
    ) -> impl Future<Output = Result<u64, StoreError>> + Send;

    /// Claims up to `limit` rows not parked and due at `at` (the first in the order
    /// `next_attempt_at, run, id` bytewise), moving them to `lease_until` so no other worker
    /// gets them before the lease runs out; returns them in any order, each with its
    /// `next_attempt_at` as it was before the claim ([`PushRow::due_at`]).
    fn claim_due(
        &self,
        at: DateTime<Utc>,
        limit: usize,
        lease_until: DateTime<Utc>,
    ) -> impl Future<Output = Result<Vec<PushRow<<Self::D as Dialect>::Time>>, StoreError>> + Send;

    /// Runs `insert` ([`SqlPushStore::INSERT_ATTEMPT`] with its eight arguments bound) and trims
    /// the log of (`run`, `id`) to the newest `keep` (`keep ≥ 1`), atomically.
    fn write_attempt<'q>(
        &self,
        insert: Stmt<'q, <Self::D as Dialect>::Db>,
        run: RunId,
        id: &str,
        keep: usize,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
}

/// `stmt` with `$1` the tenant, `$2` the run and `$3` the registration id bound.
fn keyed<'q, S: SqlPushStore>(
    store: &S,
    sql: &'q str,
    run: RunId,
    id: &str,
) -> Stmt<'q, <S::D as Dialect>::Db> {
    stmt::<S::D>(sql)
        .arg(store.tenant().as_str().to_owned())
        .arg(run.0)
        .arg(id.to_owned())
}

/// Every registration row of `run` (this tenant's), by id (bytewise).
async fn run_rows<S: SqlPushStore>(
    store: &S,
    run: RunId,
    what: &str,
) -> Result<Vec<PushRow<<S::D as Dialect>::Time>>, StoreError> {
    let sql = format!(
        "SELECT {PUSH_COLUMNS} FROM push_registrations
         WHERE tenant = $1 AND run_id = $2 ORDER BY id{}",
        S::BYTEWISE
    );
    let mut conn = store.reader(what).await?;
    stmt::<S::D>(&sql)
        .arg(store.tenant().as_str().to_owned())
        .arg(run.0)
        .all(&mut conn)
        .await
        .map_err(|e| store.store_error(e, what))
}

/// `PushStore::put`: creates or replaces the registration (a replaced one keeps its cursor and
/// is due at `at`, unparked, its retries reset). Errors: `next_seq` above `i64::MAX` →
/// `Invalid`.
pub async fn put<S: SqlPushStore>(
    store: &S,
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
    .arg(S::D::time(at));
    store.write("push store put", q).await.map(drop)
}

/// `PushStore::get`: the configuration of (`run`, `id`), if registered.
pub async fn get<S: SqlPushStore>(
    store: &S,
    run: RunId,
    id: &str,
) -> Result<Option<PushConfig>, StoreError> {
    let what = "push store get";
    let sql = format!(
        "SELECT {PUSH_COLUMNS} FROM push_registrations
         WHERE tenant = $1 AND run_id = $2 AND id = $3"
    );
    let mut conn = store.reader(what).await?;
    let row: Option<PushRow<<S::D as Dialect>::Time>> = keyed(store, &sql, run, id)
        .optional(&mut conn)
        .await
        .map_err(|e| store.store_error(e, what))?;
    Ok(row.map(PushRow::config))
}

/// `PushStore::list`: the configurations of `run`, by id (bytewise).
pub async fn list<S: SqlPushStore>(store: &S, run: RunId) -> Result<Vec<PushConfig>, StoreError> {
    let rows = run_rows(store, run, "push store list").await?;
    Ok(rows.into_iter().map(PushRow::config).collect())
}

/// `PushStore::registrations`: the registrations of `run`, by id (bytewise).
pub async fn registrations<S: SqlPushStore>(
    store: &S,
    run: RunId,
) -> Result<Vec<PushRegistration>, StoreError> {
    let rows = run_rows(store, run, "push store registrations").await?;
    rows.into_iter().map(|r| r.registration(S::STORE)).collect()
}

/// `PushStore::due`: claims up to `limit` rows not parked and due at `at`
/// ([`SqlPushStore::claim_due`]: leased until `lease_until`); returns them longest-due first
/// (`next_attempt_at, run, id` bytewise), with their `next_attempt_at` as it was before the
/// claim.
pub async fn due<S: SqlPushStore>(
    store: &S,
    at: DateTime<Utc>,
    limit: usize,
    lease_until: DateTime<Utc>,
) -> Result<Vec<PushRegistration>, StoreError> {
    let rows = store.claim_due(at, limit, lease_until).await?;
    let mut out = rows
        .into_iter()
        .map(|row| row.registration(S::STORE))
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
pub async fn advance<S: SqlPushStore>(
    store: &S,
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
        S::GREATEST
    );
    let q = keyed(store, &sql, run, id)
        .arg(next_seq)
        .arg(S::D::time(at));
    store.write("push store advance", q).await.map(drop)
}

/// `PushStore::defer`: due at `until`, nothing else changed.
pub async fn defer<S: SqlPushStore>(
    store: &S,
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
    .arg(S::D::time(until));
    store.write("push store defer", q).await.map(drop)
}

/// `PushStore::retry`: one more attempt counted (saturating at `u32::MAX`), due at
/// `next_attempt_at`, `error` kept as the last.
pub async fn retry<S: SqlPushStore>(
    store: &S,
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
        S::LEAST
    );
    let q = keyed(store, &sql, run, id)
        .arg(S::D::time(next_attempt_at))
        .arg(error.to_owned());
    store.write("push store retry", q).await.map(drop)
}

/// `PushStore::park`: parked last in the park order ([`SqlPushStore::PARK_ORDER`]), `error` kept.
pub async fn park<S: SqlPushStore>(
    store: &S,
    run: RunId,
    id: &str,
    error: &str,
) -> Result<(), StoreError> {
    let sql = format!(
        "UPDATE push_registrations
         SET parked = true, park_order = {}, last_error = $4
         WHERE tenant = $1 AND run_id = $2 AND id = $3",
        S::PARK_ORDER
    );
    let q = keyed(store, &sql, run, id).arg(error.to_owned());
    store.write("push store park", q).await.map(drop)
}

/// `PushStore::parked`: up to `limit` parked registrations, parked first first.
pub async fn parked<S: SqlPushStore>(
    store: &S,
    limit_rows: usize,
) -> Result<Vec<PushRegistration>, StoreError> {
    let what = "push store parked";
    let sql = format!(
        "SELECT {PUSH_COLUMNS} FROM push_registrations
         WHERE tenant = $1 AND {} ORDER BY park_order LIMIT $2",
        S::IS_PARKED
    );
    let mut conn = store.reader(what).await?;
    let rows: Vec<PushRow<<S::D as Dialect>::Time>> = stmt::<S::D>(&sql)
        .arg(store.tenant().as_str().to_owned())
        .arg(limit(limit_rows))
        .all(&mut conn)
        .await
        .map_err(|e| store.store_error(e, what))?;
    rows.into_iter().map(|r| r.registration(S::STORE)).collect()
}

/// `PushStore::unpark`: a parked registration unparked, its retries reset, due at `at`; whether
/// there was one.
pub async fn unpark<S: SqlPushStore>(
    store: &S,
    run: RunId,
    id: &str,
    at: DateTime<Utc>,
) -> Result<bool, StoreError> {
    let sql = format!(
        "UPDATE push_registrations
         SET parked = false, park_order = NULL, attempts = 0, next_attempt_at = $4
         WHERE tenant = $1 AND run_id = $2 AND id = $3 AND {}",
        S::IS_PARKED
    );
    let q = keyed(store, &sql, run, id).arg(S::D::time(at));
    Ok(store.write("push store unpark", q).await? == 1)
}

/// `PushStore::delete`: the registration gone (its attempts stay until `prune_attempts`).
pub async fn delete<S: SqlPushStore>(store: &S, run: RunId, id: &str) -> Result<(), StoreError> {
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
pub async fn record_attempt<S: SqlPushStore>(
    store: &S,
    run: RunId,
    id: &str,
    attempt: &PushAttempt,
    keep: usize,
) -> Result<(), StoreError> {
    PushAttempt::check_keep(keep)?;
    let seq = PushRegistration::storable_cursor(attempt.seq)?;
    let (status, error) = attempt.outcome_columns();
    let insert = keyed(store, S::INSERT_ATTEMPT, run, id)
        .arg(S::D::time(attempt.at))
        .arg(seq)
        .arg(status)
        .arg(error.map(str::to_owned))
        .arg(db_i64(attempt.duration_ms));
    store.write_attempt(insert, run, id, keep).await
}

/// `PushStore::attempts`: up to `limit` attempts of (`run`, `id`), newest first. Errors: `limit`
/// out of range → `Invalid`; a stored attempt the domain refuses → its error.
pub async fn attempts<S: SqlPushStore>(
    store: &S,
    run: RunId,
    id: &str,
    limit_rows: usize,
) -> Result<Vec<PushAttempt>, StoreError> {
    validate_journal_limit(limit_rows)?;
    let what = "push store attempts";
    let mut conn = store.reader(what).await?;
    let rows: Vec<AttemptRow<<S::D as Dialect>::Time>> = keyed(
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
                S::STORE,
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
pub async fn prune_attempts<S: SqlPushStore>(
    store: &S,
    before: DateTime<Utc>,
) -> Result<u64, StoreError> {
    let q = stmt::<S::D>(PRUNE_ATTEMPTS)
        .arg(store.tenant().as_str().to_owned())
        .arg(S::D::time(before));
    store.write("push store prune attempts", q).await
}

/// Implements `crewbus_ports::PushStore` for an [`SqlPushStore`] type with the functions of this
/// module.
///
/// ```ignore
/// crewbus_sql::impl_push_store!(MyPushStore);
/// ```
#[macro_export]
macro_rules! impl_push_store {
    ($ty:ty) => {
        const _: () = {
            use $crate::__private::{
                DateTime, PushAttempt, PushConfig, PushRegistration, PushStore, RunId, Seq,
                StoreError, TenantId, Utc, async_trait,
            };
            use $crate::push_store::{self as sql, SqlPushStore};

            #[async_trait]
            impl PushStore for $ty {
                fn tenant(&self) -> &TenantId {
                    <$ty as SqlPushStore>::tenant(self)
                }

                async fn put(
                    &self,
                    config: &PushConfig,
                    next_seq: Seq,
                    at: DateTime<Utc>,
                ) -> Result<(), StoreError> {
                    sql::put(self, config, next_seq, at).await
                }

                async fn get(
                    &self,
                    run: RunId,
                    id: &str,
                ) -> Result<Option<PushConfig>, StoreError> {
                    sql::get(self, run, id).await
                }

                async fn list(&self, run: RunId) -> Result<Vec<PushConfig>, StoreError> {
                    sql::list(self, run).await
                }

                async fn due(
                    &self,
                    at: DateTime<Utc>,
                    limit: usize,
                    lease_until: DateTime<Utc>,
                ) -> Result<Vec<PushRegistration>, StoreError> {
                    sql::due(self, at, limit, lease_until).await
                }

                async fn advance(
                    &self,
                    run: RunId,
                    id: &str,
                    next_seq: Seq,
                    at: DateTime<Utc>,
                ) -> Result<(), StoreError> {
                    sql::advance(self, run, id, next_seq, at).await
                }

                async fn defer(
                    &self,
                    run: RunId,
                    id: &str,
                    until: DateTime<Utc>,
                ) -> Result<(), StoreError> {
                    sql::defer(self, run, id, until).await
                }

                async fn retry(
                    &self,
                    run: RunId,
                    id: &str,
                    next_attempt_at: DateTime<Utc>,
                    error: &str,
                ) -> Result<(), StoreError> {
                    sql::retry(self, run, id, next_attempt_at, error).await
                }

                async fn park(&self, run: RunId, id: &str, error: &str) -> Result<(), StoreError> {
                    sql::park(self, run, id, error).await
                }

                async fn parked(&self, limit: usize) -> Result<Vec<PushRegistration>, StoreError> {
                    sql::parked(self, limit).await
                }

                async fn unpark(
                    &self,
                    run: RunId,
                    id: &str,
                    at: DateTime<Utc>,
                ) -> Result<bool, StoreError> {
                    sql::unpark(self, run, id, at).await
                }

                async fn delete(&self, run: RunId, id: &str) -> Result<(), StoreError> {
                    sql::delete(self, run, id).await
                }

                async fn registrations(
                    &self,
                    run: RunId,
                ) -> Result<Vec<PushRegistration>, StoreError> {
                    sql::registrations(self, run).await
                }

                async fn record_attempt(
                    &self,
                    run: RunId,
                    id: &str,
                    attempt: &PushAttempt,
                    keep: usize,
                ) -> Result<(), StoreError> {
                    sql::record_attempt(self, run, id, attempt, keep).await
                }

                async fn attempts(
                    &self,
                    run: RunId,
                    id: &str,
                    limit: usize,
                ) -> Result<Vec<PushAttempt>, StoreError> {
                    sql::attempts(self, run, id, limit).await
                }

                async fn prune_attempts(&self, before: DateTime<Utc>) -> Result<u64, StoreError> {
                    sql::prune_attempts(self, before).await
                }
            }
        };
    };
}
