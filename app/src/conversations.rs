//! Conversations: create with members, list an agent's, read one (members only).

use crewbus_domain::{Agent, BusError, BusResult, Conversation, Uuid};

use crate::bus::Bus;

impl Bus {
    /// Creates a conversation of the creator's team with `members` (the creator is always a
    /// member). Its body backend is the team's default now, for life. Errors: as
    /// `Ledger::create_conversation` (`Invalid` title or member).
    pub async fn create_conversation(
        &self,
        creator: &Agent,
        title: &str,
        members: &[Uuid],
    ) -> BusResult<Conversation> {
        self.ports
            .ledger
            .create_conversation(creator.team, creator.id, title, members, self.now())
            .await
    }

    /// The conversations `agent` belongs to, oldest first.
    pub async fn conversations_for(&self, agent: &Agent) -> BusResult<Vec<Conversation>> {
        self.ports
            .ledger
            .conversations_for(agent.team, agent.id)
            .await
    }

    /// One conversation, if `agent` is a member. Errors: unknown, another team's, or not a
    /// member → `NotFound` (existence is not revealed to outsiders).
    pub async fn conversation_for(
        &self,
        agent: &Agent,
        conversation: Uuid,
    ) -> BusResult<Conversation> {
        let c = self
            .ports
            .ledger
            .conversation(agent.team, conversation)
            .await?;
        if !c.has_member(agent.id) {
            return Err(BusError::not_found(format!("conversation {conversation}")));
        }
        Ok(c)
    }
}
