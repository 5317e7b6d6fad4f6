//! The SQLite ledger's operators: `operators` and `operator_teams`, `sign_in_codes` and
//! `operator_sessions` (schema: `20261201000003_console.sql`).
//!
//! Every write is one `BEGIN IMMEDIATE` write transaction: write transactions are serialised, so
//! what a method checks (a token hash no agent holds, an unused code) holds until it commits; in
//! particular a sign-in code is redeemed by one `UPDATE … WHERE used_at IS NULL … RETURNING`, and
//! a second redeem waiting for the write connection finds it used. Every statement is scoped to
//! the ledger's tenant through `operators.tenant`.

use std::collections::HashMap;
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use crewbus_domain::{
    BusError, BusResult, Operator, OperatorScope, OperatorSession, TenantId, TokenHash, before,
    validate_operator_name,
};
use crewbus_ports::Operators;
use crewbus_sql::ledger::SqlLedger;
use sqlx::SqliteConnection;
use uuid::Uuid;

use super::SqliteLedger;
use super::rows::{OPERATOR_COLUMNS, OperatorRow};
use crate::codec::{Ts, marks};

impl SqliteLedger {
    /// Whether an operator (of any tenant: token hashes are unique store-wide) holds `hash`.
    pub(super) async fn operator_holds(
        &self,
        conn: &mut SqliteConnection,
        hash: &TokenHash,
    ) -> BusResult<bool> {
        sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM operators WHERE token_hash = ?)")
            .bind(&hash.0[..])
            .fetch_one(&mut *conn)
            .await
            .map_err(self.db("token hash check"))
    }

    /// Completes operator rows with the teams of their scopes (on the same connection).
    async fn with_teams(
        &self,
        conn: &mut SqliteConnection,
        rows: Vec<OperatorRow>,
    ) -> BusResult<Vec<Operator>> {
        let mut teams: HashMap<Uuid, Vec<Uuid>> = HashMap::new();
        if !rows.is_empty() {
            let sql = format!(
                "SELECT operator_id, team_id FROM operator_teams WHERE operator_id IN ({})",
                marks(rows.len())
            );
            let mut query = sqlx::query_as::<_, (Uuid, Uuid)>(&sql);
            for row in &rows {
                query = query.bind(row.id);
            }
            for (operator, team) in query
                .fetch_all(&mut *conn)
                .await
                .map_err(self.db("operator teams"))?
            {
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

    /// The operator `id` of this tenant, if any (on `conn`).
    pub(super) async fn operator_row(
        &self,
        conn: &mut SqliteConnection,
        id: Uuid,
    ) -> BusResult<Option<Operator>> {
        let row: Option<OperatorRow> = sqlx::query_as(&format!(
            "SELECT {OPERATOR_COLUMNS} FROM operators o WHERE o.id = ? AND o.tenant = ?"
        ))
        .bind(id)
        .bind(self.tenant.as_str())
        .fetch_optional(&mut *conn)
        .await
        .map_err(self.db("operator lookup"))?;
        Ok(self
            .with_teams(conn, row.into_iter().collect())
            .await?
            .pop())
    }

    /// The operator `id`, known and not revoked: unknown → `NotFound`, revoked →
    /// `Unauthenticated`.
    async fn active_operator(&self, conn: &mut SqliteConnection, id: Uuid) -> BusResult<()> {
        let operator = self
            .operator_row(conn, id)
            .await?
            .ok_or_else(|| BusError::not_found(format!("operator {id}")))?;
        if operator.revoked() {
            return Err(BusError::Unauthenticated);
        }
        Ok(())
    }

    /// Opens a session for `operator` at `at`. Errors: the hash already used → `Conflict`.
    async fn insert_session(
        &self,
        conn: &mut SqliteConnection,
        operator: Uuid,
        session_hash: &TokenHash,
        at: DateTime<Utc>,
    ) -> BusResult<()> {
        sqlx::query(
            "INSERT INTO operator_sessions (session_hash, operator_id, opened_at, last_seen_at)
             VALUES (?1, ?2, ?3, ?3)",
        )
        .bind(&session_hash.0[..])
        .bind(operator)
        .bind(Ts(at))
        .execute(&mut *conn)
        .await
        .map_err(|e| match self.pools.bus_error(e, "open session") {
            BusError::Conflict { .. } => BusError::conflict("session secret is already in use"),
            other => other,
        })?;
        Ok(())
    }
}

#[async_trait]
impl Operators for SqliteLedger {
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
        for team in &teams {
            self.require_team(&mut tx, *team).await?;
        }
        let agent_holds: bool =
            sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM agents WHERE token_hash = ?)")
                .bind(&token_hash.0[..])
                .fetch_one(&mut *tx)
                .await
                .map_err(self.db(what))?;
        let taken = || BusError::conflict("the operator name or token hash is already in use");
        if agent_holds {
            return Err(taken());
        }
        let id = Uuid::new_v4();
        sqlx::query(
            "INSERT INTO operators (id, tenant, name, token_hash, all_teams, created_at)
             VALUES (?, ?, ?, ?, ?, ?)",
        )
        .bind(id)
        .bind(self.tenant.as_str())
        .bind(name)
        .bind(&token_hash.0[..])
        .bind(matches!(scope, OperatorScope::Everything))
        .bind(Ts(at))
        .execute(&mut *tx)
        .await
        .map_err(|e| match self.pools.bus_error(e, what) {
            BusError::Conflict { .. } => taken(),
            other => other,
        })?;
        for team in &teams {
            sqlx::query("INSERT INTO operator_teams (operator_id, team_id) VALUES (?, ?)")
                .bind(id)
                .bind(*team)
                .execute(&mut *tx)
                .await
                .map_err(self.db(what))?;
        }
        let operator = self
            .operator_row(&mut tx, id)
            .await?
            .ok_or_else(|| BusError::unavailable("create operator: the row vanished"))?;
        self.commit(tx, what).await?;
        Ok(operator)
    }

    async fn operators(&self) -> BusResult<Vec<Operator>> {
        let what = "operators";
        let mut tx = self.read(what).await?;
        let rows: Vec<OperatorRow> = sqlx::query_as(&format!(
            "SELECT {OPERATOR_COLUMNS} FROM operators o WHERE o.tenant = ? ORDER BY o.name"
        ))
        .bind(self.tenant.as_str())
        .fetch_all(&mut *tx)
        .await
        .map_err(self.db(what))?;
        self.with_teams(&mut tx, rows).await
    }

    async fn operator(&self, id: Uuid) -> BusResult<Operator> {
        let mut tx = self.read("operator lookup").await?;
        self.operator_row(&mut tx, id)
            .await?
            .ok_or_else(|| BusError::not_found(format!("operator {id}")))
    }

    async fn operator_by_token(&self, token_hash: &TokenHash) -> BusResult<Operator> {
        let what = "authenticate operator";
        let mut tx = self.read(what).await?;
        let row: Option<OperatorRow> = sqlx::query_as(&format!(
            "SELECT {OPERATOR_COLUMNS} FROM operators o
             WHERE o.token_hash = ? AND o.tenant = ? AND o.revoked_at IS NULL"
        ))
        .bind(&token_hash.0[..])
        .bind(self.tenant.as_str())
        .fetch_optional(&mut *tx)
        .await
        .map_err(self.db(what))?;
        self.with_teams(&mut tx, row.into_iter().collect())
            .await?
            .pop()
            .ok_or(BusError::Unauthenticated)
    }

    async fn revoke_operator(&self, id: Uuid, at: DateTime<Utc>) -> BusResult<Operator> {
        let what = "revoke operator";
        let mut tx = self.begin(what).await?;
        let done = sqlx::query(
            "UPDATE operators SET revoked_at = COALESCE(revoked_at, ?) WHERE id = ? AND tenant = ?",
        )
        .bind(Ts(at))
        .bind(id)
        .bind(self.tenant.as_str())
        .execute(&mut *tx)
        .await
        .map_err(self.db(what))?;
        if done.rows_affected() == 0 {
            return Err(BusError::not_found(format!("operator {id}")));
        }
        sqlx::query(
            "UPDATE operator_sessions SET ended_at = COALESCE(ended_at, ?) WHERE operator_id = ?",
        )
        .bind(Ts(at))
        .bind(id)
        .execute(&mut *tx)
        .await
        .map_err(self.db(what))?;
        let operator = self
            .operator_row(&mut tx, id)
            .await?
            .ok_or_else(|| BusError::not_found(format!("operator {id}")))?;
        self.commit(tx, what).await?;
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
            "INSERT INTO sign_in_codes (code_hash, operator_id, expires_at) VALUES (?, ?, ?)",
        )
        .bind(&code_hash.0[..])
        .bind(operator)
        .bind(Ts(expires_at))
        .execute(&mut *tx)
        .await
        .map_err(|e| match self.pools.bus_error(e, what) {
            BusError::Conflict { .. } => BusError::conflict("sign-in code is already recorded"),
            other => other,
        })?;
        self.commit(tx, what).await
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
            "UPDATE sign_in_codes SET used_at = ?1
             WHERE code_hash = ?2 AND used_at IS NULL AND expires_at > ?1
               AND operator_id IN (
                   SELECT id FROM operators WHERE tenant = ?3 AND revoked_at IS NULL)
             RETURNING operator_id",
        )
        .bind(Ts(at))
        .bind(&code_hash.0[..])
        .bind(self.tenant.as_str())
        .fetch_optional(&mut *tx)
        .await
        .map_err(self.db(what))?;
        let operator = redeemed.ok_or(BusError::Unauthenticated)?;
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

    async fn session(
        &self,
        session_hash: &TokenHash,
        idle: Duration,
        at: DateTime<Utc>,
    ) -> BusResult<OperatorSession> {
        let what = "session";
        let mut tx = self.begin(what).await?;
        let live: Option<(Uuid, Ts, Ts)> = sqlx::query_as(
            "SELECT s.operator_id, s.opened_at, s.last_seen_at
             FROM operator_sessions s JOIN operators o ON o.id = s.operator_id
             WHERE s.session_hash = ? AND s.ended_at IS NULL
               AND o.tenant = ? AND o.revoked_at IS NULL",
        )
        .bind(&session_hash.0[..])
        .bind(self.tenant.as_str())
        .fetch_optional(&mut *tx)
        .await
        .map_err(self.db(what))?;
        let (operator, opened_at, last_seen_at) = live.ok_or(BusError::Unauthenticated)?;
        if last_seen_at.0 <= before(at, idle) {
            sqlx::query("UPDATE operator_sessions SET ended_at = ? WHERE session_hash = ?")
                .bind(Ts(at))
                .bind(&session_hash.0[..])
                .execute(&mut *tx)
                .await
                .map_err(self.db(what))?;
            self.commit(tx, what).await?;
            return Err(BusError::Unauthenticated);
        }
        sqlx::query(
            "UPDATE operator_sessions SET last_seen_at = max(last_seen_at, ?)
             WHERE session_hash = ?",
        )
        .bind(Ts(at))
        .bind(&session_hash.0[..])
        .execute(&mut *tx)
        .await
        .map_err(self.db(what))?;
        let operator = self
            .operator_row(&mut tx, operator)
            .await?
            .ok_or(BusError::Unauthenticated)?;
        self.commit(tx, what).await?;
        Ok(OperatorSession {
            operator,
            opened_at: opened_at.0,
            last_seen_at: last_seen_at.0,
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
                 WHERE s.session_hash = ? AND s.ended_at IS NULL AND s.last_seen_at > ?
                   AND o.tenant = ? AND o.revoked_at IS NULL)",
        )
        .bind(&session_hash.0[..])
        .bind(Ts(before(at, idle)))
        .bind(self.tenant.as_str())
        .fetch_one(self.pools.reader())
        .await
        .map_err(self.db("session"))
    }

    async fn end_session(&self, session_hash: &TokenHash, at: DateTime<Utc>) -> BusResult<()> {
        let what = "end session";
        let mut tx = self.begin(what).await?;
        sqlx::query(
            "UPDATE operator_sessions SET ended_at = COALESCE(ended_at, ?1)
             WHERE session_hash = ?2
               AND operator_id IN (SELECT id FROM operators WHERE tenant = ?3)",
        )
        .bind(Ts(at))
        .bind(&session_hash.0[..])
        .bind(self.tenant.as_str())
        .execute(&mut *tx)
        .await
        .map_err(self.db(what))?;
        self.commit(tx, what).await
    }

    async fn prune_sign_ins(&self, idle: Duration, at: DateTime<Utc>) -> BusResult<u64> {
        let what = "prune sign-ins";
        let mut tx = self.begin(what).await?;
        let codes = sqlx::query(
            "DELETE FROM sign_in_codes
             WHERE (expires_at <= ?1 OR used_at <= ?1)
               AND operator_id IN (SELECT id FROM operators WHERE tenant = ?2)",
        )
        .bind(Ts(at))
        .bind(self.tenant.as_str())
        .execute(&mut *tx)
        .await
        .map_err(self.db(what))?;
        let sessions = sqlx::query(
            "DELETE FROM operator_sessions
             WHERE (ended_at IS NOT NULL OR last_seen_at <= ?1)
               AND operator_id IN (SELECT id FROM operators WHERE tenant = ?2)",
        )
        .bind(Ts(before(at, idle)))
        .bind(self.tenant.as_str())
        .execute(&mut *tx)
        .await
        .map_err(self.db(what))?;
        self.commit(tx, what).await?;
        Ok(codes.rows_affected() + sessions.rows_affected())
    }
}
