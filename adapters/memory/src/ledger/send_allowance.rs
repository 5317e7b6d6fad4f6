//! The memory ledger's send allowances: each agent's shared bucket, under the state's one lock.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use crewbus_domain::{BusResult, RateLimit, take_chunk};
use crewbus_ports::SendAllowance;
use uuid::Uuid;

use super::MemoryLedger;

#[async_trait]
impl SendAllowance for MemoryLedger {
    async fn take_tokens(
        &self,
        team: Uuid,
        agent: Uuid,
        limit: RateLimit,
        want: u32,
        at: DateTime<Utc>,
    ) -> BusResult<u32> {
        let mut st = self.state()?;
        st.agent_of(team, agent)?;
        let stored = st.allowances.get(&agent).copied();
        let (taken, next) = take_chunk(limit, stored, want, at.timestamp_millis());
        st.allowances.insert(agent, next);
        taken
    }
}
