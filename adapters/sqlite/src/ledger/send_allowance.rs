//! The SQLite ledger's send allowances (schema: `20261203000012_send_allowances.sql`).
//!
//! One write transaction per take: the store's one writer serialises it with every other
//! write, so the read, the bucket arithmetic (`crewbus_domain::take_chunk`) and the write back
//! need no lock of their own.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use crewbus_domain::{BusError, BusResult, RateLimit, take_chunk};
use crewbus_ports::SendAllowance;
use crewbus_sql::db_i64;
use crewbus_sql::ledger::SqlLedger;
use uuid::Uuid;

use super::SqliteLedger;
use crate::codec::Ts;

#[async_trait]
impl SendAllowance for SqliteLedger {
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
        self.agent_row(&mut tx, team, agent).await?;
        let row: Option<(i64, Ts)> = sqlx::query_as(
            "SELECT milli_tokens, refilled_at FROM send_allowances WHERE agent_id = ?",
        )
        .bind(agent)
        .fetch_optional(&mut *tx)
        .await
        .map_err(self.db(what))?;
        let stored =
            row.map(|(milli, at)| (u64::try_from(milli).unwrap_or(0), at.0.timestamp_millis()));
        let (taken, (milli, refilled_ms)) = take_chunk(limit, stored, want, at.timestamp_millis());
        let refilled_at = DateTime::from_timestamp_millis(refilled_ms)
            .ok_or_else(|| BusError::invalid("the clock is out of range"))?;
        if taken.is_ok() {
            sqlx::query(
                "INSERT INTO send_allowances (agent_id, milli_tokens, refilled_at)
                 VALUES (?1, ?2, ?3)
                 ON CONFLICT (agent_id) DO UPDATE
                 SET milli_tokens = excluded.milli_tokens, refilled_at = excluded.refilled_at",
            )
            .bind(agent)
            .bind(db_i64(milli))
            .bind(Ts(refilled_at))
            .execute(&mut *tx)
            .await
            .map_err(self.db(what))?;
        }
        self.commit(tx, what).await?;
        taken
    }
}
