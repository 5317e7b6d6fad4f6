//! The Postgres ledger's directory: teams, agents and conversations, the shared functions
//! (`crewbus_sql::directory`). Reads of several statements run on a pool connection (`agents`,
//! `conversation`) or in a read-committed transaction (`conversations`, `conversations_for`);
//! the one-statement writes run on a pool connection; the members of a new conversation are one
//! `unnest` insert ([`insert_members`]).

use chrono::{DateTime, Utc};
use crewbus_domain::BusResult;
use sqlx::PgConnection;
use uuid::Uuid;

use super::db;

/// `Dialect::insert_members` on Postgres: one statement for every member (`unnest`).
pub(crate) async fn insert_members(
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
