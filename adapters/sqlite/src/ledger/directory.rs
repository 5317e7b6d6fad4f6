//! The SQLite ledger's directory: teams, agents and conversations, the shared functions
//! (`crewbus_sql::directory`). Reads of several statements run in one read transaction of the
//! read pool (one snapshot); writes in a write transaction, which also keeps a conversation's
//! members from being revoked before they are inserted (one statement each).

pub(super) use crewbus_sql::directory::{
    agent, agent_by_token, agents, conversation, conversations, conversations_for, create_agent,
    create_conversation, create_team, revoke_agent, set_team_backends, team, teams,
};
