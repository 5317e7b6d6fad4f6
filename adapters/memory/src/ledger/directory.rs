//! The memory ledger's directory: teams, agents and conversations.

use std::collections::{BTreeMap, HashMap, HashSet};

use chrono::{DateTime, Utc};
use crewbus_domain::{
    Agent, AgentKind, BusError, BusResult, Conversation, LeaseEnd, Member, Team, TokenHash,
    recipient_key_for,
};
use uuid::Uuid;

use super::MemoryLedger;
use super::state::ConversationRow;

pub(super) fn create_team(
    ledger: &MemoryLedger,
    name: &str,
    body_backend: &str,
    inbox: &str,
    at: DateTime<Utc>,
) -> BusResult<Team> {
    let mut st = ledger.state()?;
    if st.teams.values().any(|t| t.name == name) {
        return Err(BusError::conflict(format!("team name {name:?} is taken")));
    }
    let team = Team {
        id: Uuid::new_v4(),
        name: name.to_owned(),
        body_backend: body_backend.to_owned(),
        inbox: inbox.to_owned(),
        created_at: at,
    };
    st.teams.insert(team.id, team.clone());
    Ok(team)
}

pub(super) fn team(ledger: &MemoryLedger, team: Uuid) -> BusResult<Team> {
    ledger.state()?.team_of(team).cloned()
}

pub(super) fn teams(ledger: &MemoryLedger) -> BusResult<Vec<Team>> {
    let st = ledger.state()?;
    let mut teams: Vec<Team> = st.teams.values().cloned().collect();
    teams.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(teams)
}

pub(super) fn set_team_backends(
    ledger: &MemoryLedger,
    team: Uuid,
    body_backend: &str,
    inbox: &str,
) -> BusResult<Team> {
    let mut st = ledger.state()?;
    st.team_of(team)?;
    let t = st.teams.get_mut(&team).expect("checked above");
    t.body_backend = body_backend.to_owned();
    t.inbox = inbox.to_owned();
    Ok(t.clone())
}

pub(super) fn create_agent(
    ledger: &MemoryLedger,
    team: Uuid,
    name: &str,
    token_hash: TokenHash,
    at: DateTime<Utc>,
) -> BusResult<Agent> {
    let mut st = ledger.state()?;
    st.team_of(team)?;
    if st.agents.values().any(|a| a.team == team && a.name == name) {
        return Err(BusError::conflict(format!("agent name {name:?} is taken")));
    }
    if st.token_in_use(&token_hash) {
        return Err(BusError::conflict("token hash is already in use"));
    }
    let id = Uuid::new_v4();
    let agent = Agent {
        id,
        team,
        name: name.to_owned(),
        recipient_key: recipient_key_for(id),
        token_hash,
        created_at: at,
        revoked_at: None,
        kind: AgentKind::Agent,
    };
    st.tokens.insert(token_hash, id);
    st.agents.insert(id, agent.clone());
    Ok(agent)
}

pub(super) fn agent(ledger: &MemoryLedger, team: Uuid, agent: Uuid) -> BusResult<Agent> {
    ledger.state()?.agent_of(team, agent).cloned()
}

pub(super) fn agent_by_token(ledger: &MemoryLedger, token_hash: &TokenHash) -> BusResult<Agent> {
    let st = ledger.state()?;
    st.tokens
        .get(token_hash)
        .and_then(|id| st.agents.get(id))
        .filter(|a| !a.revoked() && !a.is_human())
        .cloned()
        .ok_or(BusError::Unauthenticated)
}

pub(super) fn agents(ledger: &MemoryLedger, team: Uuid) -> BusResult<Vec<Agent>> {
    let st = ledger.state()?;
    st.team_of(team)?;
    let mut agents: Vec<Agent> = st
        .agents
        .values()
        .filter(|a| a.team == team)
        .cloned()
        .collect();
    agents.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(agents)
}

pub(super) fn revoke_agent(
    ledger: &MemoryLedger,
    team: Uuid,
    agent: Uuid,
    at: DateTime<Utc>,
) -> BusResult<Agent> {
    let mut st = ledger.state()?;
    st.agent_of(team, agent)?;
    // Its leases end with the revocation, in the same critical section.
    st.end_leases(|l| l.agent == agent, LeaseEnd::Revoked, at);
    let a = st.agents.get_mut(&agent).expect("checked above");
    a.revoked_at.get_or_insert(at);
    Ok(a.clone())
}

pub(super) fn create_conversation(
    ledger: &MemoryLedger,
    team: Uuid,
    creator: Uuid,
    title: &str,
    members: &[Uuid],
    at: DateTime<Utc>,
) -> BusResult<Conversation> {
    let mut st = ledger.state()?;
    let backend = st.team_of(team)?.body_backend.clone();
    let mut seen = HashSet::new();
    let mut list = Vec::new();
    for id in std::iter::once(&creator).chain(members) {
        if !seen.insert(*id) {
            continue;
        }
        let agent = st
            .agents
            .get(id)
            .filter(|a| a.team == team && !a.revoked())
            .ok_or_else(|| {
                BusError::invalid(format!("agent {id} is not an active agent of the team"))
            })?;
        list.push(Member {
            agent: agent.id,
            recipient_key: agent.recipient_key.clone(),
            joined_at: at,
        });
    }
    list.sort_by_key(|a| (a.joined_at, a.agent));
    let conversation = Conversation {
        id: Uuid::new_v4(),
        team,
        title: title.to_owned(),
        backend,
        created_at: at,
        members: list,
    };
    let order = st.next_order();
    st.conversations.insert(
        conversation.id,
        ConversationRow {
            conversation: conversation.clone(),
            order,
            messages: BTreeMap::new(),
            requests: HashMap::new(),
        },
    );
    Ok(conversation)
}

pub(super) fn conversation(
    ledger: &MemoryLedger,
    team: Uuid,
    conversation: Uuid,
) -> BusResult<Conversation> {
    Ok(ledger
        .state()?
        .conversation_of(team, conversation)?
        .conversation
        .clone())
}

pub(super) fn conversations(ledger: &MemoryLedger, team: Uuid) -> BusResult<Vec<Conversation>> {
    let st = ledger.state()?;
    st.team_of(team)?;
    let mut rows: Vec<&ConversationRow> = st
        .conversations
        .values()
        .filter(|c| c.conversation.team == team)
        .collect();
    rows.sort_by_key(|c| c.order);
    Ok(rows.into_iter().map(|c| c.conversation.clone()).collect())
}

pub(super) fn conversations_for(
    ledger: &MemoryLedger,
    team: Uuid,
    agent: Uuid,
) -> BusResult<Vec<Conversation>> {
    let st = ledger.state()?;
    st.agent_of(team, agent)?;
    let mut rows: Vec<&ConversationRow> = st
        .conversations
        .values()
        .filter(|c| c.conversation.team == team && c.conversation.has_member(agent))
        .collect();
    rows.sort_by_key(|c| c.order);
    Ok(rows.into_iter().map(|c| c.conversation.clone()).collect())
}
