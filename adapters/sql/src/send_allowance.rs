//! `SendAllowance` on every SQL store (schema: `20261203000012_send_allowances.sql`).
//!
//! One transaction per take: the agent's row of `send_allowances` read (where writers lock rows,
//! locked `FOR UPDATE`, so takes of one agent are serialised across servers; on SQLite the one
//! writer serialises the take with every other write), the first take inserting it full, the
//! bucket arithmetic in Rust (`crewbus_domain::take_chunk`), the row written back. Nothing taken
//! (`RateLimited`): the transaction is rolled back, the row stays as it was (the next take
//! refills from it the same).

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use crewbus_domain::{BusError, BusResult, RateLimit, take_chunk};
use crewbus_ports::SendAllowance;
use uuid::Uuid;

use crate::counter::db_i64;
use crate::dialect::{Conn, Dialect};
use crate::driver::stmt;
use crate::ledger::SqlLedger;

impl<D: Dialect> SqlLedger<D> {
    /// The agent's bucket as stored, `(milli-tokens, refilled at in ms since the epoch)`,
    /// locked where writers lock rows; `None` when it has none yet (or is no agent of `team`).
    async fn stored_allowance(
        &self,
        conn: &mut Conn<D>,
        team: Uuid,
        agent: Uuid,
    ) -> BusResult<Option<(u64, i64)>> {
        let lock = if D::ROW_LOCKS { " FOR UPDATE OF s" } else { "" };
        let sql = format!(
            "SELECT s.milli_tokens, s.refilled_at
             FROM send_allowances s JOIN agents a ON a.id = s.agent_id
                  JOIN teams t ON t.id = a.team_id
             WHERE s.agent_id = $1 AND a.team_id = $2 AND t.tenant = $3{lock}"
        );
        let row: Option<(i64, D::Time)> = stmt::<D>(&sql)
            .arg(agent)
            .arg(team)
            .arg(self.tenant().as_str().to_owned())
            .optional(conn)
            .await
            .map_err(self.db("send allowance"))?;
        Ok(row.map(|(milli, at)| {
            let at: DateTime<Utc> = at.into();
            (u64::try_from(milli).unwrap_or(0), at.timestamp_millis())
        }))
    }
}

#[async_trait]
impl<D: Dialect> SendAllowance for SqlLedger<D> {
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
        let mut found = self.stored_allowance(&mut tx, team, agent).await?;
        if found.is_none() {
            self.agent_row(&mut tx, team, agent).await?;
            if D::ROW_LOCKS {
                // The first take: the bucket is created full (two servers racing here insert
                // once; the loser reads the winner's row, locked).
                stmt::<D>(
                    "INSERT INTO send_allowances (agent_id, milli_tokens, refilled_at)
                     VALUES ($1, $2, $3) ON CONFLICT (agent_id) DO NOTHING",
                )
                .arg(agent)
                .arg(db_i64(u64::from(limit.burst) * 1000))
                .arg(D::time(at))
                .run(&mut tx)
                .await
                .map_err(self.db(what))?;
                found = self.stored_allowance(&mut tx, team, agent).await?;
            }
        }
        let (taken, (milli, refilled_ms)) = take_chunk(limit, found, want, at.timestamp_millis());
        let taken = taken?;
        let refilled_at = DateTime::from_timestamp_millis(refilled_ms)
            .ok_or_else(|| BusError::invalid("the clock is out of range"))?;
        stmt::<D>(
            "INSERT INTO send_allowances (agent_id, milli_tokens, refilled_at)
             VALUES ($1, $2, $3)
             ON CONFLICT (agent_id) DO UPDATE
             SET milli_tokens = excluded.milli_tokens, refilled_at = excluded.refilled_at",
        )
        .arg(agent)
        .arg(db_i64(milli))
        .arg(D::time(refilled_at))
        .run(&mut tx)
        .await
        .map_err(self.db(what))?;
        self.commit(tx, what).await?;
        Ok(taken)
    }
}
