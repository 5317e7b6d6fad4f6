//! The Postgres ledger's operators: `operators` and `operator_teams`, `sign_in_codes` and
//! `operator_sessions` (schema: `20261201000003_console.sql`). The port is
//! [`crewbus_sql::impl_operators!`] (see `crewbus_sql::operators` for the rules); here is what
//! only Postgres has:
//!
//! - A token hash is an agent's or an operator's, never both: `create_operator` and
//!   `create_agent` each take a transaction-scoped advisory lock on the hash before checking the
//!   other table, so two concurrent creations with one hash serialise.
//! - An operator's teams are aggregated into its row by the query (`array_agg`), and recorded
//!   with it by one statement (`unnest`).
//! - `end_session` and `prune_sign_ins` are one statement each, outside a transaction.

use std::time::Duration;

use chrono::{DateTime, Utc};
use crewbus_domain::{BusResult, Operator, TokenHash, before};
use crewbus_sql::driver::Stmt;
use crewbus_sql::operators::SqlOperators;
use sqlx::pool::PoolConnection;
use sqlx::{PgConnection, Postgres};
use uuid::Uuid;

use super::rows::{OPERATOR_COLUMNS, OperatorRow};
use super::{PostgresLedger, db};

impl SqlOperators for PostgresLedger {
    type OperatorRow = OperatorRow;
    type OperatorReader = PoolConnection<Postgres>;
    const OPERATOR_COLUMNS: &'static str = OPERATOR_COLUMNS;
    const BYTEWISE: &'static str = " COLLATE \"C\"";
    const GREATEST: &'static str = "GREATEST";
    const REDEEM_CODE: &'static str = "UPDATE sign_in_codes c SET used_at = $1
         FROM operators o
         WHERE c.code_hash = $2 AND c.used_at IS NULL AND c.expires_at > $1
           AND o.id = c.operator_id AND o.tenant = $3 AND o.revoked_at IS NULL
         RETURNING c.operator_id";
    const INSERT_OPERATOR: &'static str = "WITH o AS (
             INSERT INTO operators (id, tenant, name, token_hash, all_teams, created_at)
             VALUES ($1, $2, $3, $4, $5, $6) RETURNING id)
         INSERT INTO operator_teams (operator_id, team_id)
         SELECT o.id, t FROM o, unnest($7::uuid[]) AS t";

    async fn operator_reader(&self, what: &'static str) -> BusResult<PoolConnection<Postgres>> {
        self.pool().acquire().await.map_err(db(what))
    }

    /// The rows hold their teams: no query.
    async fn operators_of(
        &self,
        _conn: &mut PgConnection,
        rows: Vec<OperatorRow>,
    ) -> BusResult<Vec<Operator>> {
        rows.into_iter().map(Operator::try_from).collect()
    }

    /// A transaction-scoped advisory lock on the hash (its first 8 bytes as the key).
    async fn lock_token_hash(&self, conn: &mut PgConnection, hash: &TokenHash) -> BusResult<()> {
        let key = i64::from_be_bytes(hash.0[..8].try_into().expect("8 bytes"));
        sqlx::query("SELECT pg_advisory_xact_lock($1)")
            .bind(key)
            .execute(&mut *conn)
            .await
            .map_err(db("token hash lock"))?;
        Ok(())
    }

    /// The teams go in the same statement, as one `uuid[]` (`$7`).
    async fn insert_operator<'q>(
        &self,
        conn: &mut PgConnection,
        insert: Stmt<'q, Postgres>,
        _id: Uuid,
        teams: &[Uuid],
    ) -> Result<(), sqlx::Error> {
        insert.arg(teams.to_vec()).run(conn).await
    }

    async fn write_end_session(
        &self,
        session_hash: &TokenHash,
        at: DateTime<Utc>,
    ) -> BusResult<()> {
        sqlx::query(
            "UPDATE operator_sessions s SET ended_at = COALESCE(s.ended_at, $1)
             FROM operators o
             WHERE s.session_hash = $2 AND o.id = s.operator_id AND o.tenant = $3",
        )
        .bind(at)
        .bind(&session_hash.0[..])
        .bind(self.tenant().as_str())
        .execute(self.pool())
        .await
        .map_err(db("end session"))?;
        Ok(())
    }

    /// One statement: both deletes as CTEs, counted.
    async fn write_prune_sign_ins(&self, idle: Duration, at: DateTime<Utc>) -> BusResult<u64> {
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
        .bind(self.tenant().as_str())
        .fetch_one(self.pool())
        .await
        .map_err(db("prune sign-ins"))?;
        Ok(u64::try_from(pruned).unwrap_or(0))
    }
}

crewbus_sql::impl_operators!(PostgresLedger);
