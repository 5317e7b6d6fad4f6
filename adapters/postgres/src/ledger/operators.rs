//! The Postgres ledger's operators: `operators` and `operator_teams`, `sign_in_codes` and
//! `operator_sessions` (schema: `20261201000003_console.sql`).
//!
//! - A token hash is an agent's or an operator's, never both: `create_operator` and
//!   `create_agent` each take a transaction-scoped advisory lock on the hash before checking the
//!   other table, so two concurrent creations with one hash serialise (and each table's unique
//!   index catches its own duplicates).
//! - A sign-in code is redeemed by one `UPDATE … WHERE used_at IS NULL AND expires_at > $at
//!   RETURNING`: of two concurrent redeems, the second waits for the first's row lock, re-checks
//!   the row as committed and finds it used. The session is inserted in the same transaction, so
//!   a refused session hash leaves the code unused.
//! - Every statement is scoped to the ledger's tenant through `operators.tenant`.

use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use crewbus_domain::{
    BusError, BusResult, Operator, OperatorScope, OperatorSession, TenantId, TokenHash, before,
    validate_operator_name,
};
use crewbus_ports::Operators;
use sqlx::PgConnection;
use uuid::Uuid;

use super::rows::{OPERATOR_COLUMNS, OperatorRow};
use super::{PostgresLedger, db};
use crate::error::bus_error;

impl PostgresLedger {
    /// Whether an operator (of any tenant: token hashes are unique database-wide) holds `hash`,
    /// after locking the hash for the rest of the transaction (see the module docs).
    pub(super) async fn operator_holds(
        &self,
        conn: &mut PgConnection,
        hash: &TokenHash,
    ) -> BusResult<bool> {
        lock_token_hash(conn, hash).await?;
        sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM operators WHERE token_hash = $1)")
            .bind(&hash.0[..])
            .fetch_one(&mut *conn)
            .await
            .map_err(db("token hash check"))
    }

    /// The operator `id` of this tenant, if any, with its scope.
    pub(super) async fn operator_row(
        &self,
        conn: &mut PgConnection,
        id: Uuid,
    ) -> BusResult<Option<Operator>> {
        let row: Option<OperatorRow> = sqlx::query_as(&format!(
            "SELECT {OPERATOR_COLUMNS} FROM operators o WHERE o.id = $1 AND o.tenant = $2"
        ))
        .bind(id)
        .bind(self.tenant.as_str())
        .fetch_optional(&mut *conn)
        .await
        .map_err(db("operator lookup"))?;
        row.map(Operator::try_from).transpose()
    }

    /// Locks the operator `id`'s row (`FOR SHARE`: a concurrent revoke waits for this
    /// transaction) and checks it is known and not revoked: unknown → `NotFound`, revoked →
    /// `Unauthenticated`.
    async fn active_operator(&self, conn: &mut PgConnection, id: Uuid) -> BusResult<()> {
        let revoked: Option<bool> = sqlx::query_scalar(
            "SELECT revoked_at IS NOT NULL FROM operators WHERE id = $1 AND tenant = $2 FOR SHARE",
        )
        .bind(id)
        .bind(self.tenant.as_str())
        .fetch_optional(&mut *conn)
        .await
        .map_err(db("operator lookup"))?;
        match revoked {
            None => Err(BusError::not_found(format!("operator {id}"))),
            Some(true) => Err(BusError::Unauthenticated),
            Some(false) => Ok(()),
        }
    }

    /// Opens a session for `operator` at `at`. Errors: the hash already used → `Conflict`.
    async fn insert_session(
        conn: &mut PgConnection,
        operator: Uuid,
        session_hash: &TokenHash,
        at: DateTime<Utc>,
    ) -> BusResult<()> {
        sqlx::query(
            "INSERT INTO operator_sessions (session_hash, operator_id, opened_at, last_seen_at)
             VALUES ($1, $2, $3, $3)",
        )
        .bind(&session_hash.0[..])
        .bind(operator)
        .bind(at)
        .execute(&mut *conn)
        .await
        .map_err(|e| match bus_error(e, "open session") {
            BusError::Conflict { .. } => BusError::conflict("session secret is already in use"),
            other => other,
        })?;
        Ok(())
    }
}

/// Takes a transaction-scoped advisory lock on a token hash (its first 8 bytes as the key): the
/// agent and operator creations that check one hash against the other table serialise.
async fn lock_token_hash(conn: &mut PgConnection, hash: &TokenHash) -> BusResult<()> {
    let key = i64::from_be_bytes(hash.0[..8].try_into().expect("8 bytes"));
    sqlx::query("SELECT pg_advisory_xact_lock($1)")
        .bind(key)
        .execute(&mut *conn)
        .await
        .map_err(db("token hash lock"))?;
    Ok(())
}

#[async_trait]
impl Operators for PostgresLedger {
    fn tenant(&self) -> &TenantId {
        &self.tenant
    }

    async fn create_operator(
        &self,
        name: &str,
        scope: &OperatorScope,
        token_hash: TokenHash,
        at: DateTime<Utc>,
    ) -> BusResult<Operator> {
        validate_operator_name(name)?;
        let teams: Vec<Uuid> = match scope {
            OperatorScope::Everything => Vec::new(),
            OperatorScope::Teams(teams) if teams.is_empty() => {
                return Err(BusError::invalid(
                    "an operator scoped to teams needs at least one team",
                ));
            }
            OperatorScope::Teams(teams) => teams.iter().copied().collect(),
        };
        let what = "create operator";
        let mut tx = self.begin(what).await?;
        let known: Vec<Uuid> =
            sqlx::query_scalar("SELECT id FROM teams WHERE id = ANY($1) AND tenant = $2 FOR SHARE")
                .bind(&teams)
                .bind(self.tenant.as_str())
                .fetch_all(&mut *tx)
                .await
                .map_err(db(what))?;
        if let Some(missing) = teams.iter().find(|t| !known.contains(t)) {
            return Err(BusError::not_found(format!("team {missing}")));
        }
        lock_token_hash(&mut tx, &token_hash).await?;
        let agent_holds: bool =
            sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM agents WHERE token_hash = $1)")
                .bind(&token_hash.0[..])
                .fetch_one(&mut *tx)
                .await
                .map_err(db(what))?;
        let taken = || BusError::conflict("the operator name or token hash is already in use");
        if agent_holds {
            return Err(taken());
        }
        let id = Uuid::new_v4();
        sqlx::query(
            "WITH o AS (
                 INSERT INTO operators (id, tenant, name, token_hash, all_teams, created_at)
                 VALUES ($1, $2, $3, $4, $5, $6) RETURNING id)
             INSERT INTO operator_teams (operator_id, team_id)
             SELECT o.id, t FROM o, unnest($7::uuid[]) AS t",
        )
        .bind(id)
        .bind(self.tenant.as_str())
        .bind(name)
        .bind(&token_hash.0[..])
        .bind(matches!(scope, OperatorScope::Everything))
        .bind(at)
        .bind(&teams)
        .execute(&mut *tx)
        .await
        .map_err(|e| match bus_error(e, what) {
            BusError::Conflict { .. } => taken(),
            other => other,
        })?;
        let operator = self
            .operator_row(&mut tx, id)
            .await?
            .ok_or_else(|| BusError::unavailable("create operator: the row vanished"))?;
        PostgresLedger::commit(tx, what).await?;
        Ok(operator)
    }

    async fn operators(&self) -> BusResult<Vec<Operator>> {
        let rows: Vec<OperatorRow> = sqlx::query_as(&format!(
            "SELECT {OPERATOR_COLUMNS} FROM operators o WHERE o.tenant = $1
             ORDER BY o.name COLLATE \"C\""
        ))
        .bind(self.tenant.as_str())
        .fetch_all(&self.pool)
        .await
        .map_err(db("operators"))?;
        rows.into_iter().map(Operator::try_from).collect()
    }

    async fn operator(&self, id: Uuid) -> BusResult<Operator> {
        let mut conn = self.pool.acquire().await.map_err(db("operator lookup"))?;
        self.operator_row(&mut conn, id)
            .await?
            .ok_or_else(|| BusError::not_found(format!("operator {id}")))
    }

    async fn operator_by_token(&self, token_hash: &TokenHash) -> BusResult<Operator> {
        let row: Option<OperatorRow> = sqlx::query_as(&format!(
            "SELECT {OPERATOR_COLUMNS} FROM operators o
             WHERE o.token_hash = $1 AND o.tenant = $2 AND o.revoked_at IS NULL"
        ))
        .bind(&token_hash.0[..])
        .bind(self.tenant.as_str())
        .fetch_optional(&self.pool)
        .await
        .map_err(db("authenticate operator"))?;
        row.ok_or(BusError::Unauthenticated)?.try_into()
    }

    async fn revoke_operator(&self, id: Uuid, at: DateTime<Utc>) -> BusResult<Operator> {
        let what = "revoke operator";
        let mut tx = self.begin(what).await?;
        let done = sqlx::query(
            "UPDATE operators SET revoked_at = COALESCE(revoked_at, $1)
             WHERE id = $2 AND tenant = $3",
        )
        .bind(at)
        .bind(id)
        .bind(self.tenant.as_str())
        .execute(&mut *tx)
        .await
        .map_err(db(what))?;
        if done.rows_affected() == 0 {
            return Err(BusError::not_found(format!("operator {id}")));
        }
        sqlx::query(
            "UPDATE operator_sessions SET ended_at = COALESCE(ended_at, $1)
             WHERE operator_id = $2",
        )
        .bind(at)
        .bind(id)
        .execute(&mut *tx)
        .await
        .map_err(db(what))?;
        let operator = self
            .operator_row(&mut tx, id)
            .await?
            .ok_or_else(|| BusError::not_found(format!("operator {id}")))?;
        PostgresLedger::commit(tx, what).await?;
        Ok(operator)
    }

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
        sqlx::query(
            "INSERT INTO sign_in_codes (code_hash, operator_id, expires_at) VALUES ($1, $2, $3)",
        )
        .bind(&code_hash.0[..])
        .bind(operator)
        .bind(expires_at)
        .execute(&mut *tx)
        .await
        .map_err(|e| match bus_error(e, what) {
            BusError::Conflict { .. } => BusError::conflict("sign-in code is already recorded"),
            other => other,
        })?;
        PostgresLedger::commit(tx, what).await
    }

    async fn redeem_sign_in_code(
        &self,
        code_hash: &TokenHash,
        session_hash: TokenHash,
        at: DateTime<Utc>,
    ) -> BusResult<Operator> {
        let what = "redeem sign-in code";
        let mut tx = self.begin(what).await?;
        let redeemed: Option<Uuid> = sqlx::query_scalar(
            "UPDATE sign_in_codes c SET used_at = $1
             FROM operators o
             WHERE c.code_hash = $2 AND c.used_at IS NULL AND c.expires_at > $1
               AND o.id = c.operator_id AND o.tenant = $3 AND o.revoked_at IS NULL
             RETURNING c.operator_id",
        )
        .bind(at)
        .bind(&code_hash.0[..])
        .bind(self.tenant.as_str())
        .fetch_optional(&mut *tx)
        .await
        .map_err(db(what))?;
        let operator = redeemed.ok_or(BusError::Unauthenticated)?;
        // A refusal from here on rolls the redeem back with the transaction.
        Self::insert_session(&mut tx, operator, &session_hash, at).await?;
        let operator = self
            .operator_row(&mut tx, operator)
            .await?
            .ok_or(BusError::Unauthenticated)?;
        PostgresLedger::commit(tx, what).await?;
        Ok(operator)
    }

    async fn open_session(
        &self,
        operator: Uuid,
        session_hash: TokenHash,
        at: DateTime<Utc>,
    ) -> BusResult<()> {
        let what = "open session";
        let mut tx = self.begin(what).await?;
        self.active_operator(&mut tx, operator).await?;
        Self::insert_session(&mut tx, operator, &session_hash, at).await?;
        PostgresLedger::commit(tx, what).await
    }

    async fn session(
        &self,
        session_hash: &TokenHash,
        idle: Duration,
        at: DateTime<Utc>,
    ) -> BusResult<OperatorSession> {
        let what = "session";
        let mut tx = self.begin(what).await?;
        let live: Option<(Uuid, DateTime<Utc>, DateTime<Utc>)> = sqlx::query_as(
            "SELECT s.operator_id, s.opened_at, s.last_seen_at
             FROM operator_sessions s JOIN operators o ON o.id = s.operator_id
             WHERE s.session_hash = $1 AND s.ended_at IS NULL
               AND o.tenant = $2 AND o.revoked_at IS NULL
             FOR NO KEY UPDATE OF s",
        )
        .bind(&session_hash.0[..])
        .bind(self.tenant.as_str())
        .fetch_optional(&mut *tx)
        .await
        .map_err(db(what))?;
        let (operator, opened_at, last_seen_at) = live.ok_or(BusError::Unauthenticated)?;
        if last_seen_at <= before(at, idle) {
            sqlx::query("UPDATE operator_sessions SET ended_at = $1 WHERE session_hash = $2")
                .bind(at)
                .bind(&session_hash.0[..])
                .execute(&mut *tx)
                .await
                .map_err(db(what))?;
            PostgresLedger::commit(tx, what).await?;
            return Err(BusError::Unauthenticated);
        }
        sqlx::query(
            "UPDATE operator_sessions SET last_seen_at = GREATEST(last_seen_at, $1)
             WHERE session_hash = $2",
        )
        .bind(at)
        .bind(&session_hash.0[..])
        .execute(&mut *tx)
        .await
        .map_err(db(what))?;
        let operator = self
            .operator_row(&mut tx, operator)
            .await?
            .ok_or(BusError::Unauthenticated)?;
        PostgresLedger::commit(tx, what).await?;
        Ok(OperatorSession {
            operator,
            opened_at,
            last_seen_at,
        })
    }

    async fn session_is_live(
        &self,
        session_hash: &TokenHash,
        idle: Duration,
        at: DateTime<Utc>,
    ) -> BusResult<bool> {
        sqlx::query_scalar(
            "SELECT EXISTS (
                 SELECT 1 FROM operator_sessions s JOIN operators o ON o.id = s.operator_id
                 WHERE s.session_hash = $1 AND s.ended_at IS NULL AND s.last_seen_at > $3
                   AND o.tenant = $2 AND o.revoked_at IS NULL)",
        )
        .bind(&session_hash.0[..])
        .bind(self.tenant.as_str())
        .bind(before(at, idle))
        .fetch_one(&self.pool)
        .await
        .map_err(db("session"))
    }

    async fn end_session(&self, session_hash: &TokenHash, at: DateTime<Utc>) -> BusResult<()> {
        sqlx::query(
            "UPDATE operator_sessions s SET ended_at = COALESCE(s.ended_at, $1)
             FROM operators o
             WHERE s.session_hash = $2 AND o.id = s.operator_id AND o.tenant = $3",
        )
        .bind(at)
        .bind(&session_hash.0[..])
        .bind(self.tenant.as_str())
        .execute(&self.pool)
        .await
        .map_err(db("end session"))?;
        Ok(())
    }

    async fn prune_sign_ins(&self, idle: Duration, at: DateTime<Utc>) -> BusResult<u64> {
        let pruned: i64 = sqlx::query_scalar(
            "WITH codes AS (
                 DELETE FROM sign_in_codes c USING operators o
                 WHERE o.id = c.operator_id AND o.tenant = $3
                   AND (c.expires_at <= $1 OR c.used_at <= $1)
                 RETURNING 1
             ), sessions AS (
                 DELETE FROM operator_sessions s USING operators o
                 WHERE o.id = s.operator_id AND o.tenant = $3
                   AND (s.ended_at IS NOT NULL OR s.last_seen_at <= $2)
                 RETURNING 1
             )
             SELECT (SELECT count(*) FROM codes) + (SELECT count(*) FROM sessions)",
        )
        .bind(at)
        .bind(before(at, idle))
        .bind(self.tenant.as_str())
        .fetch_one(&self.pool)
        .await
        .map_err(db("prune sign-ins"))?;
        Ok(u64::try_from(pruned).unwrap_or(0))
    }
}
