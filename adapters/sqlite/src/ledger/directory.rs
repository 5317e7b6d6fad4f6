//! The SQLite ledger's directory: teams, agents and conversations, the shared functions
//! (`crewbus_sql::directory`) with SQLite's hooks. Reads of several statements run in one read
//! transaction of the read pool (one snapshot); writes in a write transaction, which also keeps
//! a conversation's members from being revoked before they are inserted (one statement each).

use crewbus_sql::directory::{SqlDirectory, Via};

use super::SqliteLedger;

pub(super) use crewbus_sql::directory::{
    agent, agent_by_token, agents, conversation, conversations, conversations_for, create_agent,
    create_conversation, create_team, revoke_agent, set_team_backends, team, teams,
};

impl SqlDirectory for SqliteLedger {
    const ONE_WRITE: Via = Via::Transaction;
    const LOOKUPS: Via = Via::Snapshot;
    const LISTS: Via = Via::Snapshot;
    const BYTE_ORDER: &'static str = "";
    const QUALIFIED_RETURNING: bool = false;
}
