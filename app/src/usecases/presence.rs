//! Presence: an agent's status line, and the team's agents with their status, current run and
//! last activity (crewbus issue 21 item 2).

use crewbus_domain::{
    Agent, AgentActivity, BusError, BusResult, FeedEvent, FeedKind, validate_status,
};

use crate::usecases::bus::Bus;

impl Bus {
    /// Sets `agent`'s status line (the empty line clears it) and tells the console feed.
    /// Returns the agent as the team listing now shows it.
    ///
    /// Errors: the line over `MAX_STATUS_CHARS` (200) characters or with a control character →
    /// `Invalid`; the agent revoked meanwhile → `Forbidden`; as the ledger otherwise.
    pub async fn set_status(&self, agent: &Agent, status: &str) -> BusResult<AgentActivity> {
        validate_status(status)?;
        self.ports
            .oversight
            .set_status(agent, status, self.now())
            .await?;
        self.emit(vec![
            FeedEvent::new(agent.team, FeedKind::StatusChanged).agent(agent.id),
        ]);
        self.team_presence(agent)
            .await?
            .into_iter()
            .find(|a| a.agent.id == agent.id)
            .ok_or_else(|| BusError::not_found(format!("agent {}", agent.id)))
    }

    /// The agents of `agent`'s team (revoked ones and human members included), by name, each
    /// with its status line, current run, last activity and pending deliveries.
    pub async fn team_presence(&self, agent: &Agent) -> BusResult<Vec<AgentActivity>> {
        self.ports.oversight.agent_activity(agent.team).await
    }
}
