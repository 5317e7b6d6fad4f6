//! `Operators` on every SQL store (schema: `20261201000003_console.sql`: `operators` and
//! `operator_teams`, `sign_in_codes` and `operator_sessions`): `impl<D: Dialect> Operators for
//! SqlLedger<D>`, with what differs by store beside the shared statements ([`PerDialect`]
//! pairs) and how an operator's teams are read and written its dialect's
//! ([`Dialect::OperatorRow`], [`Dialect::operators_of`], [`Dialect::insert_operator`]).
//!
//! - A token hash is an agent's or an operator's, never both: the creations check the other
//!   table after [`SqlLedger::lock_token_hash`] (Postgres: a transaction-scoped advisory lock
//!   on the hash, so two concurrent creations with one hash serialise; SQLite: nothing, the one
//!   write transaction at a time already serialises them). Each table's unique index catches
//!   its own duplicates.
//! - A sign-in code is redeemed by one `UPDATE … WHERE used_at IS NULL AND expires_at > $at
//!   RETURNING` ([`REDEEM_CODE`]): of two concurrent redeems, the second waits
//!   for the first's row lock (Postgres) or for the write connection (SQLite) and finds the code
//!   used. The session is inserted in the same transaction, so a refused session hash leaves the
//!   code unused.
//! - Where writers lock rows ([`Dialect::ROW_LOCKS`]), the checks lock what they decide on:
//!   the scope's teams and an operator about to get a code or session `FOR SHARE` (a concurrent
//!   revoke waits), a session being touched `FOR NO KEY UPDATE`.
//! - Every read of operators is scoped to the ledger's tenant through `operators.tenant`; a
//!   session's writes follow a check of its operator's tenant in the same transaction. The
//!   token-hash checks ([`SqlLedger::operator_holds`], the agents' hashes) are store-wide on
//!   purpose: a hash is unique across tenants.
//! - Tokens, codes and session secrets are only ever bound as their hashes, never logged.

use std::collections::HashMap;
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use crewbus_domain::{
    BusError, BusResult, Operator, OperatorScope, OperatorSession, TenantId, TokenHash, before,
    new_operator_teams,
};
use crewbus_ports::Operators;
use uuid::Uuid;

use crate::dialect::{BYTEWISE, Conn, Dialect, GREATEST, PerDialect};
use crate::driver::{Stmt, stmt};
use crate::ledger::SqlLedger;
use crate::rows::OperatorRow;

/// The columns of `operators o` an operator row starts with (`crewbus_sql::rows::OperatorRow`:
/// without the teams of its scope).
pub const OPERATOR_COLUMNS: &str =
    "o.id, o.name, o.token_hash, o.all_teams, o.created_at, o.revoked_at";

/// The redeem of a sign-in code of this tenant's operator not revoked: `$1` the time, `$2` the
/// code's hash, `$3` the tenant; sets `used_at` where it is unused and not expired
/// (`expires_at > $1`), returning the code's `operator_id` (no row: nothing redeemed).
const REDEEM_CODE: &str = "UPDATE sign_in_codes SET used_at = $1
     WHERE code_hash = $2 AND used_at IS NULL AND expires_at > $1
       AND operator_id IN (SELECT id FROM operators WHERE tenant = $3 AND revoked_at IS NULL)
     RETURNING operator_id";

/// The statement inserting an operator: `$1` id, `$2` tenant, `$3` name, `$4` token hash, `$5`
/// whether it sees every team, `$6` created at; Postgres also its teams, in the same statement
/// (`$7`, bound by [`Dialect::insert_operator`]); SQLite the operator row alone.
const INSERT_OPERATOR: PerDialect<&str> = PerDialect {
    postgres: "WITH o AS (
             INSERT INTO operators (id, tenant, name, token_hash, all_teams, created_at)
             VALUES ($1, $2, $3, $4, $5, $6) RETURNING id)
         INSERT INTO operator_teams (operator_id, team_id)
         SELECT o.id, t FROM o, unnest($7::uuid[]) AS t",
    sqlite: "INSERT INTO operators (id, tenant, name, token_hash, all_teams, created_at)
     VALUES ($1, $2, $3, $4, $5, $6)",
};

/// What serialises, until the transaction ends, the creations that check a token hash against
/// the other table: a transaction-scoped advisory lock on the hash's first 8 bytes (`$1`) on
/// Postgres; nothing on SQLite (its write transactions are serialised whole).
const LOCK_TOKEN_HASH: PerDialect<Option<&str>> = PerDialect {
    postgres: Some("SELECT pg_advisory_xact_lock($1)"),
    sqlite: None,
};

/// The hash's bytes as bound (`token_hash`, `code_hash`, `session_hash` columns).
fn hash_arg(hash: &TokenHash) -> Vec<u8> {
    hash.0.to_vec()
}

impl<D: Dialect> SqlLedger<D> {
    /// The operators of this tenant matching `cond` (on `operators o`, arguments from `$2`;
    /// `$1` is the tenant), with `tail` after the condition, completed on `conn`.
    async fn select_operators(
        &self,
        conn: &mut Conn<D>,
        cond: &str,
        tail: &str,
        bind: impl for<'q> FnOnce(Stmt<'q, D::Db>) -> Stmt<'q, D::Db>,
        what: &str,
    ) -> BusResult<Vec<Operator>> {
        let sql = format!(
            "SELECT {} FROM operators o WHERE o.tenant = $1{cond}{tail}",
            D::OPERATOR_COLUMNS
        );
        let rows: Vec<D::OperatorRow> =
            bind(stmt::<D>(&sql).arg(self.tenant().as_str().to_owned()))
                .all(conn)
                .await
                .map_err(self.db(what))?;
        D::operators_of(self, conn, rows).await
    }

    /// Serialises, until the transaction ends, the creations that check `hash` against the
    /// other table ([`LOCK_TOKEN_HASH`]).
    pub async fn lock_token_hash(&self, conn: &mut Conn<D>, hash: &TokenHash) -> BusResult<()> {
        if let Some(lock) = LOCK_TOKEN_HASH.of::<D>() {
            let key = i64::from_be_bytes(hash.0[..8].try_into().expect("8 bytes"));
            stmt::<D>(lock)
                .arg(key)
                .run(conn)
                .await
                .map_err(self.db("token hash lock"))?;
        }
        Ok(())
    }

    /// Whether an operator (of any tenant: token hashes are unique store-wide) holds `hash`,
    /// after [`SqlLedger::lock_token_hash`] (so an agent's creation can check it).
    pub async fn operator_holds(&self, conn: &mut Conn<D>, hash: &TokenHash) -> BusResult<bool> {
        self.lock_token_hash(conn, hash).await?;
        let (held,): (bool,) =
            stmt::<D>("SELECT EXISTS (SELECT 1 FROM operators WHERE token_hash = $1)")
                .arg(hash_arg(hash))
                .one(conn)
                .await
                .map_err(self.db("token hash check"))?;
        Ok(held)
    }

    /// The operator `id` of this tenant, if any, with its scope (on `conn`).
    pub(crate) async fn operator_row(
        &self,
        conn: &mut Conn<D>,
        id: Uuid,
    ) -> BusResult<Option<Operator>> {
        let found = self
            .select_operators(conn, " AND o.id = $2", "", |q| q.arg(id), "operator lookup")
            .await?;
        Ok(found.into_iter().next())
    }

    /// Checks the operator `id` is known and not revoked, locking its row `FOR SHARE` where
    /// writers lock rows (a concurrent revoke waits for this transaction). Errors: unknown →
    /// `NotFound`, revoked → `Unauthenticated`.
    async fn active_operator(&self, conn: &mut Conn<D>, id: Uuid) -> BusResult<()> {
        let lock = if D::ROW_LOCKS { " FOR SHARE" } else { "" };
        let sql = format!(
            "SELECT revoked_at IS NOT NULL FROM operators WHERE id = $1 AND tenant = $2{lock}"
        );
        let revoked: Option<(bool,)> = stmt::<D>(&sql)
            .arg(id)
            .arg(self.tenant().as_str().to_owned())
            .optional(conn)
            .await
            .map_err(self.db("operator lookup"))?;
        match revoked {
            None => Err(BusError::not_found(format!("operator {id}"))),
            Some((true,)) => Err(BusError::Unauthenticated),
            Some((false,)) => Ok(()),
        }
    }

    /// Opens a session for `operator` at `at`. Errors: the hash already used → `Conflict`.
    async fn insert_session(
        &self,
        conn: &mut Conn<D>,
        operator: Uuid,
        session_hash: &TokenHash,
        at: DateTime<Utc>,
    ) -> BusResult<()> {
        stmt::<D>(
            "INSERT INTO operator_sessions (session_hash, operator_id, opened_at, last_seen_at)
             VALUES ($1, $2, $3, $3)",
        )
        .arg(hash_arg(session_hash))
        .arg(operator)
        .arg(D::time(at))
        .run(conn)
        .await
        .map_err(|e| match self.bus_error(e, "open session") {
            BusError::Conflict { .. } => BusError::conflict("session secret is already in use"),
            other => other,
        })
    }
}

#[async_trait]
impl<D: Dialect> Operators for SqlLedger<D> {
    fn tenant(&self) -> &TenantId {
        SqlLedger::tenant(self)
    }

    /// Errors: the input refused (`new_operator_teams`) → `Invalid`; a team of the scope not
    /// this tenant's → `NotFound`; the name or hash in use (the hash also by an agent) →
    /// `Conflict`.
    async fn create_operator(
        &self,
        name: &str,
        scope: &OperatorScope,
        token_hash: TokenHash,
        at: DateTime<Utc>,
    ) -> BusResult<Operator> {
        let teams = new_operator_teams(name, scope)?;
        let what = "create operator";
        let mut tx = self.begin(what).await?;
        if !teams.is_empty() {
            let lock = if D::ROW_LOCKS { " FOR SHARE" } else { "" };
            let sql = format!(
                "SELECT id FROM teams WHERE tenant = $1 AND {}{lock}",
                D::any_id("id", 2, teams.len())
            );
            let q = stmt::<D>(&sql).arg(self.tenant().as_str().to_owned());
            let known: Vec<(Uuid,)> = D::bind_ids(q, &teams)
                .all(&mut tx)
                .await
                .map_err(self.db(what))?;
            if let Some(missing) = teams.iter().find(|t| !known.contains(&(**t,))) {
                return Err(BusError::not_found(format!("team {missing}")));
            }
        }
        self.lock_token_hash(&mut tx, &token_hash).await?;
        let (agent_holds,): (bool,) =
            stmt::<D>("SELECT EXISTS (SELECT 1 FROM agents WHERE token_hash = $1)")
                .arg(hash_arg(&token_hash))
                .one(&mut tx)
                .await
                .map_err(self.db(what))?;
        let taken = || BusError::conflict("the operator name or token hash is already in use");
        if agent_holds {
            return Err(taken());
        }
        let id = Uuid::new_v4();
        let insert = stmt::<D>(INSERT_OPERATOR.of::<D>())
            .arg(id)
            .arg(self.tenant().as_str().to_owned())
            .arg(name.to_owned())
            .arg(hash_arg(&token_hash))
            .arg(matches!(scope, OperatorScope::Everything))
            .arg(D::time(at));
        D::insert_operator(&mut tx, insert, id, &teams)
            .await
            .map_err(|e| match self.bus_error(e, what) {
                BusError::Conflict { .. } => taken(),
                other => other,
            })?;
        let operator = self
            .operator_row(&mut tx, id)
            .await?
            .ok_or_else(|| BusError::unavailable("create operator: the row vanished"))?;
        self.commit(tx, what).await?;
        Ok(operator)
    }

    /// This tenant's operators by name (bytewise), their teams from the same hold.
    async fn operators(&self) -> BusResult<Vec<Operator>> {
        let what = "operators";
        let mut held = self.hold(D::READS, what).await?;
        let tail = format!(" ORDER BY o.name{}", BYTEWISE.of::<D>());
        let found = self
            .select_operators(&mut held, "", &tail, |q| q, what)
            .await?;
        self.release(held, what).await?;
        Ok(found)
    }

    async fn operator(&self, id: Uuid) -> BusResult<Operator> {
        let what = "operator lookup";
        let mut held = self.hold(D::READS, what).await?;
        let found = self.operator_row(&mut held, id).await?;
        self.release(held, what).await?;
        found.ok_or_else(|| BusError::not_found(format!("operator {id}")))
    }

    /// Errors: no operator of this tenant holds the hash, or it is revoked → `Unauthenticated`.
    async fn operator_by_token(&self, token_hash: &TokenHash) -> BusResult<Operator> {
        let what = "authenticate operator";
        let mut held = self.hold(D::READS, what).await?;
        let hash = hash_arg(token_hash);
        let found = self
            .select_operators(
                &mut held,
                " AND o.token_hash = $2 AND o.revoked_at IS NULL",
                "",
                |q| q.arg(hash),
                what,
            )
            .await?;
        self.release(held, what).await?;
        found
            .into_iter()
            .next_back()
            .ok_or(BusError::Unauthenticated)
    }

    /// Revokes the operator at `at` (kept if it was) and ends its sessions. Errors: unknown →
    /// `NotFound`.
    async fn revoke_operator(&self, id: Uuid, at: DateTime<Utc>) -> BusResult<Operator> {
        let what = "revoke operator";
        let mut tx = self.begin(what).await?;
        let revoked: Option<(Uuid,)> = stmt::<D>(
            "UPDATE operators SET revoked_at = COALESCE(revoked_at, $1)
             WHERE id = $2 AND tenant = $3 RETURNING id",
        )
        .arg(D::time(at))
        .arg(id)
        .arg(self.tenant().as_str().to_owned())
        .optional(&mut tx)
        .await
        .map_err(self.db(what))?;
        if revoked.is_none() {
            return Err(BusError::not_found(format!("operator {id}")));
        }
        stmt::<D>(
            "UPDATE operator_sessions SET ended_at = COALESCE(ended_at, $1) WHERE operator_id = $2",
        )
        .arg(D::time(at))
        .arg(id)
        .run(&mut tx)
        .await
        .map_err(self.db(what))?;
        let operator = self
            .operator_row(&mut tx, id)
            .await?
            .ok_or_else(|| BusError::not_found(format!("operator {id}")))?;
        self.commit(tx, what).await?;
        Ok(operator)
    }

    /// Errors: `expires_at` not after `at` → `Invalid`; the operator unknown → `NotFound`,
    /// revoked → `Unauthenticated`; the code's hash recorded already → `Conflict`.
    async fn issue_sign_in_code(
        &self,
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
        let mut tx = self.begin(what).await?;
        self.active_operator(&mut tx, operator).await?;
        stmt::<D>(
            "INSERT INTO sign_in_codes (code_hash, operator_id, expires_at) VALUES ($1, $2, $3)",
        )
        .arg(hash_arg(&code_hash))
        .arg(operator)
        .arg(D::time(expires_at))
        .run(&mut tx)
        .await
        .map_err(|e| match self.bus_error(e, what) {
            BusError::Conflict { .. } => BusError::conflict("sign-in code is already recorded"),
            other => other,
        })?;
        self.commit(tx, what).await
    }

    /// Deletes the operator's unused codes, in one transaction with the check that the operator
    /// is this tenant's; returns how many went. Errors: no such operator of this tenant →
    /// `NotFound`.
    async fn withdraw_sign_in_codes(&self, operator: Uuid) -> BusResult<u64> {
        let what = "withdraw sign-in codes";
        let mut tx = self.begin(what).await?;
        let known: Option<(bool,)> =
            stmt::<D>("SELECT TRUE FROM operators WHERE id = $1 AND tenant = $2")
                .arg(operator)
                .arg(self.tenant().as_str().to_owned())
                .optional(&mut tx)
                .await
                .map_err(self.db(what))?;
        if known.is_none() {
            return Err(BusError::not_found(format!("operator {operator}")));
        }
        let done =
            stmt::<D>("DELETE FROM sign_in_codes WHERE operator_id = $1 AND used_at IS NULL")
                .arg(operator)
                .execute(&mut tx)
                .await
                .map_err(self.db(what))?;
        self.commit(tx, what).await?;
        Ok(D::rows_affected(&done))
    }

    /// Uses the code ([`REDEEM_CODE`]) and opens a session with `session_hash`, in one
    /// transaction. Errors: the code unknown, used, expired or of a revoked operator →
    /// `Unauthenticated`; the session hash in use → `Conflict` (the code stays unused).
    async fn redeem_sign_in_code(
        &self,
        code_hash: &TokenHash,
        session_hash: TokenHash,
        at: DateTime<Utc>,
    ) -> BusResult<Operator> {
        let what = "redeem sign-in code";
        let mut tx = self.begin(what).await?;
        let redeemed: Option<(Uuid,)> = stmt::<D>(REDEEM_CODE)
            .arg(D::time(at))
            .arg(hash_arg(code_hash))
            .arg(self.tenant().as_str().to_owned())
            .optional(&mut tx)
            .await
            .map_err(self.db(what))?;
        let (operator,) = redeemed.ok_or(BusError::Unauthenticated)?;
        // A refusal from here on rolls the redeem back with the transaction.
        self.insert_session(&mut tx, operator, &session_hash, at)
            .await?;
        let operator = self
            .operator_row(&mut tx, operator)
            .await?
            .ok_or(BusError::Unauthenticated)?;
        self.commit(tx, what).await?;
        Ok(operator)
    }

    /// Errors: the operator unknown → `NotFound`, revoked → `Unauthenticated`; the session hash
    /// in use → `Conflict`.
    async fn open_session(
        &self,
        operator: Uuid,
        session_hash: TokenHash,
        at: DateTime<Utc>,
    ) -> BusResult<()> {
        let what = "open session";
        let mut tx = self.begin(what).await?;
        self.active_operator(&mut tx, operator).await?;
        self.insert_session(&mut tx, operator, &session_hash, at)
            .await?;
        self.commit(tx, what).await
    }

    /// The live session with the hash, touched at `at` (its last use moves forward only); one
    /// idle for `idle` or longer is ended at `at` instead. Errors: no live session of an active
    /// operator of this tenant (or it went idle) → `Unauthenticated`.
    async fn session(
        &self,
        session_hash: &TokenHash,
        idle: Duration,
        at: DateTime<Utc>,
    ) -> BusResult<OperatorSession> {
        let what = "session";
        let mut tx = self.begin(what).await?;
        let lock = if D::ROW_LOCKS {
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
        let live: Option<(Uuid, D::Time, D::Time)> = stmt::<D>(&sql)
            .arg(hash_arg(session_hash))
            .arg(self.tenant().as_str().to_owned())
            .optional(&mut tx)
            .await
            .map_err(self.db(what))?;
        let (operator, opened_at, last_seen_at) = live.ok_or(BusError::Unauthenticated)?;
        let (opened_at, last_seen_at): (DateTime<Utc>, DateTime<Utc>) =
            (opened_at.into(), last_seen_at.into());
        if last_seen_at <= before(at, idle) {
            stmt::<D>("UPDATE operator_sessions SET ended_at = $1 WHERE session_hash = $2")
                .arg(D::time(at))
                .arg(hash_arg(session_hash))
                .run(&mut tx)
                .await
                .map_err(self.db(what))?;
            self.commit(tx, what).await?;
            return Err(BusError::Unauthenticated);
        }
        let touch = format!(
            "UPDATE operator_sessions SET last_seen_at = {}(last_seen_at, $1)
             WHERE session_hash = $2",
            GREATEST.of::<D>()
        );
        stmt::<D>(&touch)
            .arg(D::time(at))
            .arg(hash_arg(session_hash))
            .run(&mut tx)
            .await
            .map_err(self.db(what))?;
        let operator = self
            .operator_row(&mut tx, operator)
            .await?
            .ok_or(BusError::Unauthenticated)?;
        self.commit(tx, what).await?;
        Ok(OperatorSession {
            operator,
            opened_at,
            last_seen_at,
        })
    }

    /// Whether the session with the hash is live (not ended, used after `before(at, idle)`, of
    /// an active operator of this tenant); touches nothing.
    async fn session_is_live(
        &self,
        session_hash: &TokenHash,
        idle: Duration,
        at: DateTime<Utc>,
    ) -> BusResult<bool> {
        let what = "session";
        let mut conn = self.reader(what).await?;
        let (live,): (bool,) = stmt::<D>(
            "SELECT EXISTS (
                 SELECT 1 FROM operator_sessions s JOIN operators o ON o.id = s.operator_id
                 WHERE s.session_hash = $1 AND s.ended_at IS NULL AND s.last_seen_at > $3
                   AND o.tenant = $2 AND o.revoked_at IS NULL)",
        )
        .arg(hash_arg(session_hash))
        .arg(self.tenant().as_str().to_owned())
        .arg(D::time(before(at, idle)))
        .one(&mut conn)
        .await
        .map_err(self.db(what))?;
        Ok(live)
    }

    /// Ends the session of this tenant's operator with the hash at `at` (kept if it had ended);
    /// nothing without one. One write ([`Dialect::write`]): Postgres autocommits the statement.
    async fn end_session(&self, session_hash: &TokenHash, at: DateTime<Utc>) -> BusResult<()> {
        let what = "end session";
        let mut write = self.write(what).await?;
        stmt::<D>(
            "UPDATE operator_sessions SET ended_at = COALESCE(ended_at, $1)
             WHERE session_hash = $2
               AND operator_id IN (SELECT id FROM operators WHERE tenant = $3)",
        )
        .arg(D::time(at))
        .arg(hash_arg(session_hash))
        .arg(self.tenant().as_str().to_owned())
        .run(&mut write)
        .await
        .map_err(self.db(what))?;
        self.end_write(write, what).await
    }

    /// Deletes this tenant's sign-in codes expired or used at or before `at` and its sessions
    /// ended or idle since `before(at, idle)`, in one transaction; returns how many rows went.
    async fn prune_sign_ins(&self, idle: Duration, at: DateTime<Utc>) -> BusResult<u64> {
        let what = "prune sign-ins";
        let mut tx = self.begin(what).await?;
        let codes = stmt::<D>(
            "DELETE FROM sign_in_codes
             WHERE (expires_at <= $1 OR used_at <= $1)
               AND operator_id IN (SELECT id FROM operators WHERE tenant = $2)",
        )
        .arg(D::time(at))
        .arg(self.tenant().as_str().to_owned())
        .execute(&mut tx)
        .await
        .map_err(self.db(what))?;
        let sessions = stmt::<D>(
            "DELETE FROM operator_sessions
             WHERE (ended_at IS NOT NULL OR last_seen_at <= $1)
               AND operator_id IN (SELECT id FROM operators WHERE tenant = $2)",
        )
        .arg(D::time(before(at, idle)))
        .arg(self.tenant().as_str().to_owned())
        .execute(&mut tx)
        .await
        .map_err(self.db(what))?;
        self.commit(tx, what).await?;
        Ok(D::rows_affected(&codes) + D::rows_affected(&sessions))
    }
}

/// The operators of `rows` (read without their teams), in their order, with the teams of their
/// scopes read from `operator_teams` on `conn` (one statement): SQLite's
/// [`Dialect::operators_of`]. Errors: a stored token hash the domain refuses.
pub async fn with_teams<D: Dialect>(
    ledger: &SqlLedger<D>,
    conn: &mut Conn<D>,
    rows: Vec<OperatorRow<D::Time>>,
) -> BusResult<Vec<Operator>> {
    let mut teams: HashMap<Uuid, Vec<Uuid>> = HashMap::new();
    if !rows.is_empty() {
        let sql = format!(
            "SELECT operator_id, team_id FROM operator_teams WHERE {}",
            D::any_id("operator_id", 1, rows.len())
        );
        let ids: Vec<Uuid> = rows.iter().map(|r| r.id).collect();
        let found: Vec<(Uuid, Uuid)> = D::bind_ids(stmt::<D>(&sql), &ids)
            .all(conn)
            .await
            .map_err(ledger.db("operator teams"))?;
        for (operator, team) in found {
            teams.entry(operator).or_default().push(team);
        }
    }
    rows.into_iter()
        .map(|row| {
            let of = teams.remove(&row.id).unwrap_or_default();
            row.into_operator(of)
        })
        .collect()
}

/// [`Dialect::insert_operator`]' default (what SQLite runs): the operator row, then one row of
/// `operator_teams` per team.
pub async fn insert_each<D: Dialect>(
    conn: &mut Conn<D>,
    insert: Stmt<'_, D::Db>,
    id: Uuid,
    teams: &[Uuid],
) -> Result<(), sqlx::Error> {
    insert.run(conn).await?;
    for team in teams {
        stmt::<D>("INSERT INTO operator_teams (operator_id, team_id) VALUES ($1, $2)")
            .arg(id)
            .arg(*team)
            .run(conn)
            .await?;
    }
    Ok(())
}
