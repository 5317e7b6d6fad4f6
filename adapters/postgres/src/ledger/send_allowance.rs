//! The Postgres ledger's send allowances (schema: `20261203000012_send_allowances.sql`).
//!
//! One transaction per take: the agent's row of `send_allowances` locked (`FOR UPDATE`; the
//! first take inserts it full), the bucket arithmetic in Rust (`crewbus_domain::take_chunk`),
//! the row written back. Takes of one agent are serialised across servers by that row lock.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use crewbus_domain::{BusError, BusResult, RateLimit, take_chunk};
use crewbus_ports::SendAllowance;
use crewbus_sql::db_i64;
use crewbus_sql::ledger::SqlLedger;
use uuid::Uuid;

use super::{PostgresLedger, Tx, db};

impl PostgresLedger {
    /// The agent's bucket as stored, locked; `None` when it has none yet.
    async fn locked_allowance(
        &self,
        tx: &mut Tx,
        team: Uuid,
        agent: Uuid,
    ) -> BusResult<Option<(u64, i64)>> {
        let row: Option<(i64, DateTime<Utc>)> = sqlx::query_as(
            "SELECT s.milli_tokens, s.refilled_at
             FROM send_allowances s JOIN agents a ON a.id = s.agent_id
                  JOIN teams t ON t.id = a.team_id
             WHERE s.agent_id = $1 AND a.team_id = $2 AND t.tenant = $3
             FOR UPDATE OF s",
        )
        .bind(agent)
        .bind(team)
        .bind(self.tenant.as_str())
        .fetch_optional(&mut **tx)
        .await
        .map_err(db("send allowance"))?;
        Ok(row.map(|(milli, at)| (u64::try_from(milli).unwrap_or(0), at.timestamp_millis())))
    }
}

#[async_trait]
impl SendAllowance for PostgresLedger {
    async fn take_tokens(
        &self,
        team: Uuid,
        agent: Uuid,
        limit: RateLimit,
        want: u32,
        at: DateTime<Utc>,
    ) -> BusResult<u32> {
        let what = "send allowance";
        let mut tx = self.begin(what).await?;
        let mut stored = self.locked_allowance(&mut tx, team, agent).await?;
        if stored.is_none() {
            // The first take: the bucket is created full (two servers racing here insert once;
            // the loser reads the winner's row, locked).
            self.agent_row(&mut tx, team, agent).await?;
            sqlx::query(
                "INSERT INTO send_allowances (agent_id, milli_tokens, refilled_at)
                 VALUES ($1, $2, $3) ON CONFLICT (agent_id) DO NOTHING",
            )
            .bind(agent)
            .bind(db_i64(u64::from(limit.burst) * 1000))
            .bind(at)
            .execute(&mut *tx)
            .await
            .map_err(db(what))?;
            stored = self.locked_allowance(&mut tx, team, agent).await?;
        }
        let (taken, (milli, refilled_ms)) = take_chunk(limit, stored, want, at.timestamp_millis());
        // Nothing taken (`RateLimited`): the row stays as it was (the next take refills from it
        // the same) and the transaction rolls back.
        let taken = taken?;
        let refilled_at = DateTime::from_timestamp_millis(refilled_ms)
            .ok_or_else(|| BusError::invalid("the clock is out of range"))?;
        sqlx::query(
            "UPDATE send_allowances SET milli_tokens = $2, refilled_at = $3 WHERE agent_id = $1",
        )
        .bind(agent)
        .bind(db_i64(milli))
        .bind(refilled_at)
        .execute(&mut *tx)
        .await
        .map_err(db(what))?;
        Self::commit(tx, what).await?;
        Ok(taken)
    }
}
