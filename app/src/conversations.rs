//! Conversations: create with members, list an agent's, read one (members only).

use crewbus_domain::{Agent, BusError, BusResult, Conversation, Uuid};

use crate::bus::Bus;

impl Bus {
    /// Creates a conversation of the creator's team with `members` (the creator is always a
    /// member). Each member is an agent id (a string that parses as a UUID) or the name of an
    /// active agent of the creator's team (anything else). Its body backend is the team's
    /// default now, for life.
    ///
    /// Errors: a name that names no active agent of the team → `Invalid` (naming it); otherwise
    /// as `Ledger::create_conversation` (`Invalid` title or member id).
    pub async fn create_conversation(
        &self,
        creator: &Agent,
        title: &str,
        members: &[String],
    ) -> BusResult<Conversation> {
        let members = self.member_ids(creator, members).await?;
        self.ports
            .ledger
            .create_conversation(creator.team, creator.id, title, &members, self.now())
            .await
    }

    /// Resolves member strings to agent ids: a UUID is taken as an id (the ledger checks it);
    /// a name is looked up among the creator's team's active agents (read once, only when a
    /// name is given).
    async fn member_ids(&self, creator: &Agent, members: &[String]) -> BusResult<Vec<Uuid>> {
        let mut team: Option<Vec<Agent>> = None;
        let mut ids = Vec::with_capacity(members.len());
        for member in members {
            if let Ok(id) = Uuid::parse_str(member) {
                ids.push(id);
                continue;
            }
            if team.is_none() {
                team = Some(self.ports.ledger.agents(creator.team).await?);
            }
            let found = team
                .iter()
                .flatten()
                .find(|a| a.name == *member && a.revoked_at.is_none());
            match found {
                Some(a) => ids.push(a.id),
                None => {
                    return Err(BusError::invalid(format!(
                        "member {member:?} is neither an agent id nor the name of an active agent of the team"
                    )));
                }
            }
        }
        Ok(ids)
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
