//! The Postgres ledger's directory: teams, agents and conversations, the shared functions
//! (`crewbus_sql::directory`) with Postgres's hooks. Reads of several statements run on a pool
//! connection (`agents`, `conversation`) or in a read-committed transaction (`conversations`,
//! `conversations_for`); the one-statement writes run on a pool connection; the members of a
//! new conversation are one `unnest` insert.

use chrono::{DateTime, Utc};
use crewbus_domain::BusResult;
use crewbus_sql::directory::{SqlDirectory, Via};
use sqlx::PgConnection;
use uuid::Uuid;

use super::{PostgresLedger, db};

pub(super) use crewbus_sql::directory::{
    agent, agent_by_token, agents, conversation, conversations, conversations_for, create_agent,
    create_conversation, create_team, revoke_agent, set_team_backends, team, teams,
};

impl SqlDirectory for PostgresLedger {
    const ONE_WRITE: Via = Via::Connection;
    const LOOKUPS: Via = Via::Connection;
    const LISTS: Via = Via::Transaction;
    const BYTE_ORDER: &'static str = " COLLATE \"C\"";
    const QUALIFIED_RETURNING: bool = true;

    /// One statement for every member (`unnest`).
    async fn insert_members(
        &self,
        conn: &mut PgConnection,
        conversation: Uuid,
        members: &[(Uuid, String)],
        at: DateTime<Utc>,
    ) -> BusResult<()> {
        let (agents, keys): (Vec<Uuid>, Vec<String>) = members.iter().cloned().unzip();
        sqlx::query(
            "INSERT INTO members (conversation_id, agent_id, recipient_key, joined_at)
             SELECT $1, agent, key, $4 FROM unnest($2::uuid[], $3::text[]) AS u(agent, key)",
        )
        .bind(conversation)
        .bind(&agents)
        .bind(&keys)
        .bind(at)
        .execute(&mut *conn)
        .await
        .map_err(db("create conversation"))?;
        Ok(())
    }
}
