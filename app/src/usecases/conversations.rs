//! Conversations: create with members, list an agent's, read one (members only).

use crewbus_domain::{Agent, BusError, BusResult, Conversation, MAX_PAGE, Uuid};

use crate::usecases::bus::Bus;

impl Bus {
    /// Creates a conversation of the creator's team with `members` (the creator is always a
    /// member). Each member is an agent id (a string that parses as a UUID) or the name of an
    /// active agent of the creator's team (anything else). Its body backend is the team's
    /// default now, for life.
    ///
    /// Errors: more than [`MAX_PAGE`] members → `Invalid`; a member that is no active agent of
    /// the team (an unknown name or id, another team's agent, a revoked one, a human member —
    /// which receives nothing: operators join conversations by posting) → `NotFound`
    /// (naming it, as for every other unknown id); otherwise as `Ledger::create_conversation`
    /// (`Invalid` title).
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

    /// Resolves member strings to the ids of active agents of the creator's team (read once,
    /// when there is a member): a string that parses as a UUID is matched by id, anything else
    /// by name. The ledger checks the ids again in its transaction (an agent revoked in between
    /// is `Invalid` there).
    async fn member_ids(&self, creator: &Agent, members: &[String]) -> BusResult<Vec<Uuid>> {
        if members.len() > MAX_PAGE {
            return Err(BusError::invalid(format!(
                "a conversation takes at most {MAX_PAGE} members"
            )));
        }
        if members.is_empty() {
            return Ok(Vec::new());
        }
        let team = self.ports.ledger.agents(creator.team).await?;
        let mut ids = Vec::with_capacity(members.len());
        for member in members {
            let id = Uuid::parse_str(member).ok();
            // A human member (an operator's) receives nothing: it is no agent to talk to.
            let found = team.iter().find(|a| {
                a.revoked_at.is_none()
                    && !a.is_human()
                    && id.map_or(a.name == *member, |id| a.id == id)
            });
            match found {
                Some(a) => ids.push(a.id),
                None => {
                    return Err(BusError::not_found(format!(
                        "member {member:?}: neither the id nor the name of an active agent of \
                         the team"
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
