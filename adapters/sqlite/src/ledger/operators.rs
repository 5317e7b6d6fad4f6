//! The SQLite ledger's operators: `operators` and `operator_teams`, `sign_in_codes` and
//! `operator_sessions` (schema: `20261201000003_console.sql`). The port is
//! [`crewbus_sql::impl_operators!`] (see `crewbus_sql::operators` for the rules); here is what
//! only SQLite has.
//!
//! Every write is one `BEGIN IMMEDIATE` write transaction: write transactions are serialised, so
//! what a method checks (a token hash no agent holds, an unused code) holds until it commits,
//! and no lock is taken on a token hash. An operator's teams are read by a second statement on
//! the same read snapshot, and recorded one row per statement.

use std::collections::HashMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use crewbus_domain::{BusResult, Operator, TokenHash, before};
use crewbus_sql::driver::Stmt;
use crewbus_sql::operators::{INSERT_OPERATOR_ROW, OPERATOR_COLUMNS, SqlOperators};
use sqlx::{Sqlite, SqliteConnection, Transaction};
use uuid::Uuid;

use super::SqliteLedger;
use super::rows::OperatorRow;
use crate::codec::{Ts, marks};

impl SqlOperators for SqliteLedger {
    type OperatorRow = OperatorRow;
    type OperatorReader = Transaction<'static, Sqlite>;
    const OPERATOR_COLUMNS: &'static str = OPERATOR_COLUMNS;
    const BYTEWISE: &'static str = "";
    const GREATEST: &'static str = "max";
    const REDEEM_CODE: &'static str = "UPDATE sign_in_codes SET used_at = $1
         WHERE code_hash = $2 AND used_at IS NULL AND expires_at > $1
           AND operator_id IN (SELECT id FROM operators WHERE tenant = $3 AND revoked_at IS NULL)
         RETURNING operator_id";
    const INSERT_OPERATOR: &'static str = INSERT_OPERATOR_ROW;

    /// A read transaction: the operators and their teams from one snapshot.
    async fn operator_reader(&self, what: &'static str) -> BusResult<Transaction<'static, Sqlite>> {
        self.read(what).await
    }

    /// Reads the teams of the rows' scopes from `operator_teams` (one statement).
    async fn operators_of(
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

    /// Nothing to lock: the write transactions are serialised whole.
    async fn lock_token_hash(
        &self,
        _conn: &mut SqliteConnection,
        _hash: &TokenHash,
    ) -> BusResult<()> {
        Ok(())
    }

    /// The operator row, then one row of `operator_teams` per team.
    async fn insert_operator<'q>(
        &self,
        conn: &mut SqliteConnection,
        insert: Stmt<'q, Sqlite>,
        id: Uuid,
        teams: &[Uuid],
    ) -> Result<(), sqlx::Error> {
        insert.run(&mut *conn).await?;
        for team in teams {
            sqlx::query("INSERT INTO operator_teams (operator_id, team_id) VALUES (?, ?)")
                .bind(id)
                .bind(*team)
                .execute(&mut *conn)
                .await?;
        }
        Ok(())
    }

    async fn write_end_session(
        &self,
        session_hash: &TokenHash,
        at: DateTime<Utc>,
    ) -> BusResult<()> {
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

    /// Two deletes in one write transaction.
    async fn write_prune_sign_ins(&self, idle: Duration, at: DateTime<Utc>) -> BusResult<u64> {
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

crewbus_sql::impl_operators!(SqliteLedger);
