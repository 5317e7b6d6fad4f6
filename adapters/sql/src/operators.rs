//! The operators (schema: `20261201000003_console.sql`: `operators` and `operator_teams`,
//! `sign_in_codes` and `operator_sessions`), once for both stores ([`impl_operators!`](crate::impl_operators)), over
//! [`SqlOperators`]: an [`LedgerHooks`] with what only the adapter knows of operators.
//!
//! - A token hash is an agent's or an operator's, never both: the creations check the other
//!   table after [`SqlOperators::lock_token_hash`] (Postgres: a transaction-scoped advisory lock
//!   on the hash, so two concurrent creations with one hash serialise; SQLite: nothing, the one
//!   write transaction at a time already serialises them). Each table's unique index catches
//!   its own duplicates.
//! - A sign-in code is redeemed by one `UPDATE … WHERE used_at IS NULL AND expires_at > $at
//!   RETURNING` ([`SqlOperators::REDEEM_CODE`]): of two concurrent redeems, the second waits
//!   for the first's row lock (Postgres) or for the write connection (SQLite) and finds the code
//!   used. The session is inserted in the same transaction, so a refused session hash leaves the
//!   code unused.
//! - Where writers lock rows ([`Dialect::ROW_LOCKS`]), the checks lock what they decide on:
//!   the scope's teams and an operator about to get a code or session `FOR SHARE` (a concurrent
//!   revoke waits), a session being touched `FOR NO KEY UPDATE`.
//! - Every read of operators is scoped to the ledger's tenant through `operators.tenant`; a
//!   session's writes follow a check of its operator's tenant in the same transaction. The
//!   token-hash checks ([`operator_holds`], the agents' hashes) are store-wide on purpose: a
//!   hash is unique across tenants.
//! - Tokens, codes and session secrets are only ever bound as their hashes, never logged.

use std::future::Future;
use std::ops::DerefMut;
use std::time::Duration;

use chrono::{DateTime, Utc};
use crewbus_domain::{
    BusError, BusResult, Operator, OperatorScope, OperatorSession, TokenHash, before,
    new_operator_teams,
};
use sqlx::{Database, FromRow};
use uuid::Uuid;

use crate::dialect::{Conn, Dialect};
use crate::driver::{Stmt, stmt};
use crate::ledger::LedgerHooks;

/// The columns of `operators o` an operator row starts with (`crewbus_sql::rows::OperatorRow`:
/// without the teams of its scope).
pub const OPERATOR_COLUMNS: &str =
    "o.id, o.name, o.token_hash, o.all_teams, o.created_at, o.revoked_at";

/// The statement inserting an operator row alone (the arguments of
/// [`SqlOperators::INSERT_OPERATOR`]), for a store that records its teams by more statements.
pub const INSERT_OPERATOR_ROW: &str =
    "INSERT INTO operators (id, tenant, name, token_hash, all_teams, created_at)
     VALUES ($1, $2, $3, $4, $5, $6)";

/// An [`LedgerHooks`] that holds operators: the statements and reads that differ by store.
pub trait SqlOperators: LedgerHooks {
    /// An operator as [`SqlOperators::OPERATOR_COLUMNS`] reads it (completed into an
    /// [`Operator`] by [`SqlOperators::operators_of`]).
    type OperatorRow: for<'r> FromRow<'r, <<Self::D as Dialect>::Db as Database>::Row>
        + Send
        + Unpin
        + 'static;

    /// A connection to read operators on ([`SqlOperators::operator_reader`]).
    type OperatorReader: DerefMut<Target = Conn<Self::D>> + Send;

    /// The columns of an [`SqlOperators::OperatorRow`], read from `operators o` (Postgres: with
    /// the teams of its scope aggregated; SQLite: [`OPERATOR_COLUMNS`]).
    const OPERATOR_COLUMNS: &'static str;

    /// What an `ORDER BY` of a text column ends with to order it bytewise (` COLLATE "C"` on
    /// Postgres; nothing on SQLite, whose default collation is bytewise).
    const BYTEWISE: &'static str;

    /// The scalar "larger of two values" (`GREATEST` on Postgres, `max` on SQLite).
    const GREATEST: &'static str;

    /// The redeem of a sign-in code of this tenant's operator not revoked: `$1` the time, `$2`
    /// the code's hash, `$3` the tenant; sets `used_at` where it is unused and not expired
    /// (`expires_at > $1`), returning the code's `operator_id` (no row: nothing redeemed).
    const REDEEM_CODE: &'static str;

    /// The statement inserting an operator: `$1` id, `$2` tenant, `$3` name, `$4` token hash,
    /// `$5` whether it sees every team, `$6` created at; where the store can, also its teams in
    /// the same statement (Postgres: from `$7`, bound by [`SqlOperators::insert_operator`]);
    /// otherwise [`INSERT_OPERATOR_ROW`].
    const INSERT_OPERATOR: &'static str;

    /// A connection for reads of operators: where their teams are read by a second statement
    /// (SQLite), one snapshot for both; otherwise a plain connection.
    fn operator_reader(
        &self,
        what: &'static str,
    ) -> impl Future<Output = BusResult<Self::OperatorReader>> + Send;

    /// The operators of `rows`, in their order, with the teams of their scopes (read on `conn`
    /// where the row does not hold them). Errors: a stored token hash the domain refuses.
    fn operators_of(
        &self,
        conn: &mut Conn<Self::D>,
        rows: Vec<Self::OperatorRow>,
    ) -> impl Future<Output = BusResult<Vec<Operator>>> + Send;

    /// Serialises, until the transaction ends, the creations that check `hash` against the other
    /// table (Postgres: an advisory lock; SQLite: nothing to do).
    fn lock_token_hash(
        &self,
        conn: &mut Conn<Self::D>,
        hash: &TokenHash,
    ) -> impl Future<Output = BusResult<()>> + Send;

    /// Runs `insert` ([`SqlOperators::INSERT_OPERATOR`] with its six arguments bound) and
    /// records `teams` as the scope of the operator `id` (`operator_teams`; Postgres in the same
    /// statement). Errors are the driver's (the caller maps them: a unique violation is the name
    /// or hash in use).
    fn insert_operator<'q>(
        &self,
        conn: &mut Conn<Self::D>,
        insert: Stmt<'q, <Self::D as Dialect>::Db>,
        id: Uuid,
        teams: &[Uuid],
    ) -> impl Future<Output = Result<(), sqlx::Error>> + Send;

    /// `Operators::end_session`: ends the session of this tenant's operator with the hash at
    /// `at` (kept if it had ended); nothing without one.
    fn write_end_session(
        &self,
        session_hash: &TokenHash,
        at: DateTime<Utc>,
    ) -> impl Future<Output = BusResult<()>> + Send;

    /// `Operators::prune_sign_ins`: deletes this tenant's sign-in codes expired or used at or
    /// before `at` and its sessions ended or idle since `before(at, idle)`; returns how many rows
    /// went.
    fn write_prune_sign_ins(
        &self,
        idle: Duration,
        at: DateTime<Utc>,
    ) -> impl Future<Output = BusResult<u64>> + Send;
}

/// The hash's bytes as bound (`token_hash`, `code_hash`, `session_hash` columns).
fn hash_arg(hash: &TokenHash) -> Vec<u8> {
    hash.0.to_vec()
}

/// The operators of this tenant matching `cond` (on `operators o`, arguments from `$2`; `$1` is
/// the tenant), with `tail` after the condition, completed on `conn`.
async fn select_operators<L: SqlOperators>(
    ledger: &L,
    conn: &mut Conn<L::D>,
    cond: &str,
    tail: &str,
    bind: impl for<'q> FnOnce(Stmt<'q, <L::D as Dialect>::Db>) -> Stmt<'q, <L::D as Dialect>::Db>,
    what: &str,
) -> BusResult<Vec<Operator>> {
    let sql = format!(
        "SELECT {} FROM operators o WHERE o.tenant = $1{cond}{tail}",
        L::OPERATOR_COLUMNS
    );
    let rows: Vec<L::OperatorRow> =
        bind(stmt::<L::D>(&sql).arg(ledger.tenant().as_str().to_owned()))
            .all(conn)
            .await
            .map_err(ledger.db(what))?;
    ledger.operators_of(conn, rows).await
}

/// Whether an operator (of any tenant: token hashes are unique store-wide) holds `hash`, after
/// [`SqlOperators::lock_token_hash`] (so an agent's creation can check it).
pub async fn operator_holds<L: SqlOperators>(
    ledger: &L,
    conn: &mut Conn<L::D>,
    hash: &TokenHash,
) -> BusResult<bool> {
    ledger.lock_token_hash(conn, hash).await?;
    let (held,): (bool,) =
        stmt::<L::D>("SELECT EXISTS (SELECT 1 FROM operators WHERE token_hash = $1)")
            .arg(hash_arg(hash))
            .one(conn)
            .await
            .map_err(ledger.db("token hash check"))?;
    Ok(held)
}

/// The operator `id` of this tenant, if any, with its scope (on `conn`).
pub async fn operator_row<L: SqlOperators>(
    ledger: &L,
    conn: &mut Conn<L::D>,
    id: Uuid,
) -> BusResult<Option<Operator>> {
    let found = select_operators(
        ledger,
        conn,
        " AND o.id = $2",
        "",
        |q| q.arg(id),
        "operator lookup",
    )
    .await?;
    Ok(found.into_iter().next())
}

/// Checks the operator `id` is known and not revoked, locking its row `FOR SHARE` where writers
/// lock rows (a concurrent revoke waits for this transaction). Errors: unknown → `NotFound`,
/// revoked → `Unauthenticated`.
async fn active_operator<L: SqlOperators>(
    ledger: &L,
    conn: &mut Conn<L::D>,
    id: Uuid,
) -> BusResult<()> {
    let lock = if L::D::ROW_LOCKS { " FOR SHARE" } else { "" };
    let sql =
        format!("SELECT revoked_at IS NOT NULL FROM operators WHERE id = $1 AND tenant = $2{lock}");
    let revoked: Option<(bool,)> = stmt::<L::D>(&sql)
        .arg(id)
        .arg(ledger.tenant().as_str().to_owned())
        .optional(conn)
        .await
        .map_err(ledger.db("operator lookup"))?;
    match revoked {
        None => Err(BusError::not_found(format!("operator {id}"))),
        Some((true,)) => Err(BusError::Unauthenticated),
        Some((false,)) => Ok(()),
    }
}

/// Opens a session for `operator` at `at`. Errors: the hash already used → `Conflict`.
async fn insert_session<L: SqlOperators>(
    ledger: &L,
    conn: &mut Conn<L::D>,
    operator: Uuid,
    session_hash: &TokenHash,
    at: DateTime<Utc>,
) -> BusResult<()> {
    stmt::<L::D>(
        "INSERT INTO operator_sessions (session_hash, operator_id, opened_at, last_seen_at)
         VALUES ($1, $2, $3, $3)",
    )
    .arg(hash_arg(session_hash))
    .arg(operator)
    .arg(L::D::time(at))
    .run(conn)
    .await
    .map_err(|e| match ledger.bus_error(e, "open session") {
        BusError::Conflict { .. } => BusError::conflict("session secret is already in use"),
        other => other,
    })
}

/// `Operators::create_operator`. Errors: the input refused (`new_operator_teams`) → `Invalid`;
/// a team of the scope not this tenant's → `NotFound`; the name or hash in use (the hash also
/// by an agent) → `Conflict`.
pub async fn create_operator<L: SqlOperators>(
    ledger: &L,
    name: &str,
    scope: &OperatorScope,
    token_hash: TokenHash,
    at: DateTime<Utc>,
) -> BusResult<Operator> {
    let teams = new_operator_teams(name, scope)?;
    let what = "create operator";
    let mut tx = ledger.begin(what).await?;
    if !teams.is_empty() {
        let lock = if L::D::ROW_LOCKS { " FOR SHARE" } else { "" };
        let sql = format!(
            "SELECT id FROM teams WHERE tenant = $1 AND {}{lock}",
            L::D::any_id("id", 2, teams.len())
        );
        let q = stmt::<L::D>(&sql).arg(ledger.tenant().as_str().to_owned());
        let known: Vec<(Uuid,)> = L::D::bind_ids(q, &teams)
            .all(&mut tx)
            .await
            .map_err(ledger.db(what))?;
        if let Some(missing) = teams.iter().find(|t| !known.contains(&(**t,))) {
            return Err(BusError::not_found(format!("team {missing}")));
        }
    }
    ledger.lock_token_hash(&mut tx, &token_hash).await?;
    let (agent_holds,): (bool,) =
        stmt::<L::D>("SELECT EXISTS (SELECT 1 FROM agents WHERE token_hash = $1)")
            .arg(hash_arg(&token_hash))
            .one(&mut tx)
            .await
            .map_err(ledger.db(what))?;
    let taken = || BusError::conflict("the operator name or token hash is already in use");
    if agent_holds {
        return Err(taken());
    }
    let id = Uuid::new_v4();
    let insert = stmt::<L::D>(L::INSERT_OPERATOR)
        .arg(id)
        .arg(ledger.tenant().as_str().to_owned())
        .arg(name.to_owned())
        .arg(hash_arg(&token_hash))
        .arg(matches!(scope, OperatorScope::Everything))
        .arg(L::D::time(at));
    ledger
        .insert_operator(&mut tx, insert, id, &teams)
        .await
        .map_err(|e| match ledger.bus_error(e, what) {
            BusError::Conflict { .. } => taken(),
            other => other,
        })?;
    let operator = operator_row(ledger, &mut tx, id)
        .await?
        .ok_or_else(|| BusError::unavailable("create operator: the row vanished"))?;
    ledger.commit(tx, what).await?;
    Ok(operator)
}

/// `Operators::operators`: this tenant's operators by name (bytewise).
pub async fn operators<L: SqlOperators>(ledger: &L) -> BusResult<Vec<Operator>> {
    let what = "operators";
    let mut conn = ledger.operator_reader(what).await?;
    let tail = format!(" ORDER BY o.name{}", L::BYTEWISE);
    select_operators(ledger, &mut conn, "", &tail, |q| q, what).await
}

/// `Operators::operator`. Errors: unknown → `NotFound`.
pub async fn operator<L: SqlOperators>(ledger: &L, id: Uuid) -> BusResult<Operator> {
    let mut conn = ledger.operator_reader("operator lookup").await?;
    operator_row(ledger, &mut conn, id)
        .await?
        .ok_or_else(|| BusError::not_found(format!("operator {id}")))
}

/// `Operators::operator_by_token`. Errors: no operator of this tenant holds the hash, or it is
/// revoked → `Unauthenticated`.
pub async fn operator_by_token<L: SqlOperators>(
    ledger: &L,
    token_hash: &TokenHash,
) -> BusResult<Operator> {
    let what = "authenticate operator";
    let mut conn = ledger.operator_reader(what).await?;
    let hash = hash_arg(token_hash);
    select_operators(
        ledger,
        &mut conn,
        " AND o.token_hash = $2 AND o.revoked_at IS NULL",
        "",
        |q| q.arg(hash),
        what,
    )
    .await?
    .pop()
    .ok_or(BusError::Unauthenticated)
}

/// `Operators::revoke_operator`: revokes the operator at `at` (kept if it was) and ends its
/// sessions. Errors: unknown → `NotFound`.
pub async fn revoke_operator<L: SqlOperators>(
    ledger: &L,
    id: Uuid,
    at: DateTime<Utc>,
) -> BusResult<Operator> {
    let what = "revoke operator";
    let mut tx = ledger.begin(what).await?;
    let revoked: Option<(Uuid,)> = stmt::<L::D>(
        "UPDATE operators SET revoked_at = COALESCE(revoked_at, $1)
         WHERE id = $2 AND tenant = $3 RETURNING id",
    )
    .arg(L::D::time(at))
    .arg(id)
    .arg(ledger.tenant().as_str().to_owned())
    .optional(&mut tx)
    .await
    .map_err(ledger.db(what))?;
    if revoked.is_none() {
        return Err(BusError::not_found(format!("operator {id}")));
    }
    stmt::<L::D>(
        "UPDATE operator_sessions SET ended_at = COALESCE(ended_at, $1) WHERE operator_id = $2",
    )
    .arg(L::D::time(at))
    .arg(id)
    .run(&mut tx)
    .await
    .map_err(ledger.db(what))?;
    let operator = operator_row(ledger, &mut tx, id)
        .await?
        .ok_or_else(|| BusError::not_found(format!("operator {id}")))?;
    ledger.commit(tx, what).await?;
    Ok(operator)
}

/// `Operators::issue_sign_in_code`. Errors: `expires_at` not after `at` → `Invalid`; the
/// operator unknown → `NotFound`, revoked → `Unauthenticated`; the code's hash recorded already
/// → `Conflict`.
pub async fn issue_sign_in_code<L: SqlOperators>(
    ledger: &L,
    operator: Uuid,
    code_hash: TokenHash,
    expires_at: DateTime<Utc>,
    at: DateTime<Utc>,
) -> BusResult<()> {
    if expires_at <= at {
        return Err(BusError::invalid(
            "a sign-in code must expire after it is issued",
        ));
    }
    let what = "issue sign-in code";
    let mut tx = ledger.begin(what).await?;
    active_operator(ledger, &mut tx, operator).await?;
    stmt::<L::D>(
        "INSERT INTO sign_in_codes (code_hash, operator_id, expires_at) VALUES ($1, $2, $3)",
    )
    .arg(hash_arg(&code_hash))
    .arg(operator)
    .arg(L::D::time(expires_at))
    .run(&mut tx)
    .await
    .map_err(|e| match ledger.bus_error(e, what) {
        BusError::Conflict { .. } => BusError::conflict("sign-in code is already recorded"),
        other => other,
    })?;
    ledger.commit(tx, what).await
}

/// `Operators::withdraw_sign_in_codes`: deletes the operator's unused codes, in one
/// transaction with the check that the operator is this tenant's; returns how many went.
/// Errors: no such operator of this tenant → `NotFound`.
pub async fn withdraw_sign_in_codes<L: SqlOperators>(ledger: &L, operator: Uuid) -> BusResult<u64> {
    let what = "withdraw sign-in codes";
    let mut tx = ledger.begin(what).await?;
    let known: Option<(bool,)> =
        stmt::<L::D>("SELECT TRUE FROM operators WHERE id = $1 AND tenant = $2")
            .arg(operator)
            .arg(ledger.tenant().as_str().to_owned())
            .optional(&mut tx)
            .await
            .map_err(ledger.db(what))?;
    if known.is_none() {
        return Err(BusError::not_found(format!("operator {operator}")));
    }
    let done = stmt::<L::D>("DELETE FROM sign_in_codes WHERE operator_id = $1 AND used_at IS NULL")
        .arg(operator)
        .execute(&mut tx)
        .await
        .map_err(ledger.db(what))?;
    ledger.commit(tx, what).await?;
    Ok(L::D::rows_affected(&done))
}

/// `Operators::redeem_sign_in_code`: uses the code ([`SqlOperators::REDEEM_CODE`]) and opens a
/// session with `session_hash`, in one transaction. Errors: the code unknown, used, expired or
/// of a revoked operator → `Unauthenticated`; the session hash in use → `Conflict` (the code
/// stays unused).
pub async fn redeem_sign_in_code<L: SqlOperators>(
    ledger: &L,
    code_hash: &TokenHash,
    session_hash: TokenHash,
    at: DateTime<Utc>,
) -> BusResult<Operator> {
    let what = "redeem sign-in code";
    let mut tx = ledger.begin(what).await?;
    let redeemed: Option<(Uuid,)> = stmt::<L::D>(L::REDEEM_CODE)
        .arg(L::D::time(at))
        .arg(hash_arg(code_hash))
        .arg(ledger.tenant().as_str().to_owned())
        .optional(&mut tx)
        .await
        .map_err(ledger.db(what))?;
    let (operator,) = redeemed.ok_or(BusError::Unauthenticated)?;
    // A refusal from here on rolls the redeem back with the transaction.
    insert_session(ledger, &mut tx, operator, &session_hash, at).await?;
    let operator = operator_row(ledger, &mut tx, operator)
        .await?
        .ok_or(BusError::Unauthenticated)?;
    ledger.commit(tx, what).await?;
    Ok(operator)
}

/// `Operators::open_session`. Errors: the operator unknown → `NotFound`, revoked →
/// `Unauthenticated`; the session hash in use → `Conflict`.
pub async fn open_session<L: SqlOperators>(
    ledger: &L,
    operator: Uuid,
    session_hash: TokenHash,
    at: DateTime<Utc>,
) -> BusResult<()> {
    let what = "open session";
    let mut tx = ledger.begin(what).await?;
    active_operator(ledger, &mut tx, operator).await?;
    insert_session(ledger, &mut tx, operator, &session_hash, at).await?;
    ledger.commit(tx, what).await
}

/// `Operators::session`: the live session with the hash, touched at `at` (its last use moves
/// forward only); one idle for `idle` or longer is ended at `at` instead. Errors: no live session
/// of an active operator of this tenant (or it went idle) → `Unauthenticated`.
pub async fn session<L: SqlOperators>(
    ledger: &L,
    session_hash: &TokenHash,
    idle: Duration,
    at: DateTime<Utc>,
) -> BusResult<OperatorSession> {
    let what = "session";
    let mut tx = ledger.begin(what).await?;
    let lock = if L::D::ROW_LOCKS {
        " FOR NO KEY UPDATE OF s"
    } else {
        ""
    };
    let sql = format!(
        "SELECT s.operator_id, s.opened_at, s.last_seen_at
         FROM operator_sessions s JOIN operators o ON o.id = s.operator_id
         WHERE s.session_hash = $1 AND s.ended_at IS NULL
           AND o.tenant = $2 AND o.revoked_at IS NULL{lock}"
    );
    type Time<L> = <<L as LedgerHooks>::D as Dialect>::Time;
    let live: Option<(Uuid, Time<L>, Time<L>)> = stmt::<L::D>(&sql)
        .arg(hash_arg(session_hash))
        .arg(ledger.tenant().as_str().to_owned())
        .optional(&mut tx)
        .await
        .map_err(ledger.db(what))?;
    let (operator, opened_at, last_seen_at) = live.ok_or(BusError::Unauthenticated)?;
    let (opened_at, last_seen_at): (DateTime<Utc>, DateTime<Utc>) =
        (opened_at.into(), last_seen_at.into());
    if last_seen_at <= before(at, idle) {
        stmt::<L::D>("UPDATE operator_sessions SET ended_at = $1 WHERE session_hash = $2")
            .arg(L::D::time(at))
            .arg(hash_arg(session_hash))
            .run(&mut tx)
            .await
            .map_err(ledger.db(what))?;
        ledger.commit(tx, what).await?;
        return Err(BusError::Unauthenticated);
    }
    let touch = format!(
        "UPDATE operator_sessions SET last_seen_at = {}(last_seen_at, $1)
         WHERE session_hash = $2",
        L::GREATEST
    );
    stmt::<L::D>(&touch)
        .arg(L::D::time(at))
        .arg(hash_arg(session_hash))
        .run(&mut tx)
        .await
        .map_err(ledger.db(what))?;
    let operator = operator_row(ledger, &mut tx, operator)
        .await?
        .ok_or(BusError::Unauthenticated)?;
    ledger.commit(tx, what).await?;
    Ok(OperatorSession {
        operator,
        opened_at,
        last_seen_at,
    })
}

/// `Operators::session_is_live`: whether the session with the hash is live (not ended, used
/// after `before(at, idle)`, of an active operator of this tenant); touches nothing.
pub async fn session_is_live<L: SqlOperators>(
    ledger: &L,
    session_hash: &TokenHash,
    idle: Duration,
    at: DateTime<Utc>,
) -> BusResult<bool> {
    let what = "session";
    let mut conn = ledger.reader(what).await?;
    let (live,): (bool,) = stmt::<L::D>(
        "SELECT EXISTS (
             SELECT 1 FROM operator_sessions s JOIN operators o ON o.id = s.operator_id
             WHERE s.session_hash = $1 AND s.ended_at IS NULL AND s.last_seen_at > $3
               AND o.tenant = $2 AND o.revoked_at IS NULL)",
    )
    .arg(hash_arg(session_hash))
    .arg(ledger.tenant().as_str().to_owned())
    .arg(L::D::time(before(at, idle)))
    .one(&mut conn)
    .await
    .map_err(ledger.db(what))?;
    Ok(live)
}

/// Implements `crewbus_ports::Operators` for an [`SqlOperators`] type with the functions of this
/// module (`end_session` and `prune_sign_ins` are the adapter's own statements).
///
/// ```ignore
/// crewbus_sql::impl_operators!(MyLedger);
/// ```
#[macro_export]
macro_rules! impl_operators {
    ($ty:ty) => {
        const _: () = {
            use $crate::__private::{
                BusResult, DateTime, Duration, Operator, OperatorScope, OperatorSession, Operators,
                TenantId, TokenHash, Utc, Uuid, async_trait,
            };
            use $crate::ledger::LedgerHooks;
            use $crate::operators::{self as sql, SqlOperators};

            #[async_trait]
            impl Operators for $ty {
                fn tenant(&self) -> &TenantId {
                    <$ty as LedgerHooks>::tenant(self)
                }

                async fn create_operator(
                    &self,
                    name: &str,
                    scope: &OperatorScope,
                    token_hash: TokenHash,
                    at: DateTime<Utc>,
                ) -> BusResult<Operator> {
                    sql::create_operator(self, name, scope, token_hash, at).await
                }

                async fn operators(&self) -> BusResult<Vec<Operator>> {
                    sql::operators(self).await
                }

                async fn operator(&self, id: Uuid) -> BusResult<Operator> {
                    sql::operator(self, id).await
                }

                async fn operator_by_token(&self, token_hash: &TokenHash) -> BusResult<Operator> {
                    sql::operator_by_token(self, token_hash).await
                }

                async fn revoke_operator(
                    &self,
                    id: Uuid,
                    at: DateTime<Utc>,
                ) -> BusResult<Operator> {
                    sql::revoke_operator(self, id, at).await
                }

                async fn issue_sign_in_code(
                    &self,
                    operator: Uuid,
                    code_hash: TokenHash,
                    expires_at: DateTime<Utc>,
                    at: DateTime<Utc>,
                ) -> BusResult<()> {
                    sql::issue_sign_in_code(self, operator, code_hash, expires_at, at).await
                }

                async fn withdraw_sign_in_codes(&self, operator: Uuid) -> BusResult<u64> {
                    sql::withdraw_sign_in_codes(self, operator).await
                }

                async fn redeem_sign_in_code(
                    &self,
                    code_hash: &TokenHash,
                    session_hash: TokenHash,
                    at: DateTime<Utc>,
                ) -> BusResult<Operator> {
                    sql::redeem_sign_in_code(self, code_hash, session_hash, at).await
                }

                async fn open_session(
                    &self,
                    operator: Uuid,
                    session_hash: TokenHash,
                    at: DateTime<Utc>,
                ) -> BusResult<()> {
                    sql::open_session(self, operator, session_hash, at).await
                }

                async fn session(
                    &self,
                    session_hash: &TokenHash,
                    idle: Duration,
                    at: DateTime<Utc>,
                ) -> BusResult<OperatorSession> {
                    sql::session(self, session_hash, idle, at).await
                }

                async fn session_is_live(
                    &self,
                    session_hash: &TokenHash,
                    idle: Duration,
                    at: DateTime<Utc>,
                ) -> BusResult<bool> {
                    sql::session_is_live(self, session_hash, idle, at).await
                }

                async fn end_session(
                    &self,
                    session_hash: &TokenHash,
                    at: DateTime<Utc>,
                ) -> BusResult<()> {
                    <$ty as SqlOperators>::write_end_session(self, session_hash, at).await
                }

                async fn prune_sign_ins(
                    &self,
                    idle: Duration,
                    at: DateTime<Utc>,
                ) -> BusResult<u64> {
                    <$ty as SqlOperators>::write_prune_sign_ins(self, idle, at).await
                }
            }
        };
    };
}
