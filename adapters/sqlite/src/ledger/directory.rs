//! The SQLite ledger's directory: teams, agents and conversations.

use std::collections::{HashMap, HashSet};

use chrono::{DateTime, Utc};
use crewbus_domain::{
    Agent, BusError, BusResult, Conversation, LeaseEnd, Member, Team, TokenHash, recipient_key_for,
};
use crewbus_sql::ledger::SqlLedger;
use sqlx::SqliteConnection;
use uuid::Uuid;

use super::SqliteLedger;
use super::rows::{AGENT_COLUMNS, AgentRow, MemberRow, TEAM_COLUMNS, TeamRow};
use crate::codec::{Ts, marks};
use crate::dialect::Lite;
use crewbus_sql::leases::{Ending, end_leases};

/// A conversation row without its members: id, title, backend, created at.
type ConversationRow = (Uuid, String, String, Ts);

impl SqliteLedger {
    async fn members_of(
        &self,
        conn: &mut SqliteConnection,
        conversations: &[Uuid],
    ) -> BusResult<HashMap<Uuid, Vec<Member>>> {
        let mut by_conversation: HashMap<Uuid, Vec<Member>> = HashMap::new();
        if conversations.is_empty() {
            return Ok(by_conversation);
        }
        let sql = format!(
            "SELECT conversation_id, agent_id, recipient_key, joined_at FROM members
             WHERE conversation_id IN ({}) ORDER BY joined_at, agent_id",
            marks(conversations.len())
        );
        let mut query = sqlx::query_as::<_, MemberRow>(&sql);
        for id in conversations {
            query = query.bind(*id);
        }
        let rows = query
            .fetch_all(&mut *conn)
            .await
            .map_err(self.db("members"))?;
        for row in rows {
            by_conversation
                .entry(row.conversation_id)
                .or_default()
                .push(row.into());
        }
        Ok(by_conversation)
    }

    /// Completes conversation rows with their members (on the same connection).
    pub(super) async fn with_members(
        &self,
        conn: &mut SqliteConnection,
        team: Uuid,
        rows: Vec<ConversationRow>,
    ) -> BusResult<Vec<Conversation>> {
        let ids: Vec<Uuid> = rows.iter().map(|r| r.0).collect();
        let mut members = self.members_of(conn, &ids).await?;
        Ok(rows
            .into_iter()
            .map(|(id, title, backend, created_at)| Conversation {
                id,
                team,
                title,
                backend,
                created_at: created_at.0,
                members: members.remove(&id).unwrap_or_default(),
            })
            .collect())
    }
}

pub(super) async fn create_team(
    ledger: &SqliteLedger,
    name: &str,
    body_backend: &str,
    inbox: &str,
    at: DateTime<Utc>,
) -> BusResult<Team> {
    let what = "create team";
    let mut tx = ledger.begin(what).await?;
    let row: TeamRow = sqlx::query_as(&format!(
        "INSERT INTO teams (id, tenant, name, body_backend, inbox, created_at)
         VALUES (?, ?, ?, ?, ?, ?) RETURNING {TEAM_COLUMNS}"
    ))
    .bind(Uuid::new_v4())
    .bind(ledger.tenant.as_str())
    .bind(name)
    .bind(body_backend)
    .bind(inbox)
    .bind(Ts(at))
    .fetch_one(&mut *tx)
    .await
    .map_err(|e| match ledger.pools.bus_error(e, what) {
        BusError::Conflict { .. } => BusError::conflict(format!("team name {name:?} is taken")),
        other => other,
    })?;
    ledger.commit(tx, what).await?;
    Ok(row.into())
}

pub(super) async fn team(ledger: &SqliteLedger, team: Uuid) -> BusResult<Team> {
    let what = "team lookup";
    let mut conn = ledger.read_connection(what).await?;
    ledger.team_row(&mut conn, team).await
}

pub(super) async fn teams(ledger: &SqliteLedger) -> BusResult<Vec<Team>> {
    let rows: Vec<TeamRow> = sqlx::query_as(&format!(
        "SELECT {TEAM_COLUMNS} FROM teams WHERE tenant = ? ORDER BY name"
    ))
    .bind(ledger.tenant.as_str())
    .fetch_all(ledger.pools.reader())
    .await
    .map_err(ledger.db("teams"))?;
    Ok(rows.into_iter().map(Team::from).collect())
}

pub(super) async fn set_team_backends(
    ledger: &SqliteLedger,
    team: Uuid,
    body_backend: &str,
    inbox: &str,
) -> BusResult<Team> {
    let what = "set team backends";
    let mut tx = ledger.begin(what).await?;
    let row: Option<TeamRow> = sqlx::query_as(&format!(
        "UPDATE teams SET body_backend = ?3, inbox = ?4 WHERE id = ?1 AND tenant = ?2
         RETURNING {TEAM_COLUMNS}"
    ))
    .bind(team)
    .bind(ledger.tenant.as_str())
    .bind(body_backend)
    .bind(inbox)
    .fetch_optional(&mut *tx)
    .await
    .map_err(ledger.db(what))?;
    ledger.commit(tx, what).await?;
    row.map(Team::from)
        .ok_or_else(|| BusError::not_found(format!("team {team}")))
}

pub(super) async fn create_agent(
    ledger: &SqliteLedger,
    team: Uuid,
    name: &str,
    token_hash: TokenHash,
    at: DateTime<Utc>,
) -> BusResult<Agent> {
    let what = "create agent";
    let mut tx = ledger.begin(what).await?;
    ledger.require_team(&mut tx, team).await?;
    if crewbus_sql::operators::operator_holds(ledger, &mut tx, &token_hash).await? {
        return Err(BusError::conflict(
            "the agent name or token hash is already in use",
        ));
    }
    let id = Uuid::new_v4();
    let recipient_key = recipient_key_for(id);
    sqlx::query(
        "INSERT INTO agents (id, team_id, name, recipient_key, token_hash, created_at)
         VALUES (?, ?, ?, ?, ?, ?)",
    )
    .bind(id)
    .bind(team)
    .bind(name)
    .bind(&recipient_key)
    .bind(&token_hash.0[..])
    .bind(Ts(at))
    .execute(&mut *tx)
    .await
    .map_err(|e| match ledger.pools.bus_error(e, what) {
        BusError::Conflict { .. } => {
            BusError::conflict("the agent name or token hash is already in use")
        }
        other => other,
    })?;
    let agent = ledger.agent_row(&mut tx, team, id).await?;
    ledger.commit(tx, what).await?;
    debug_assert_eq!(agent.recipient_key, recipient_key);
    Ok(agent)
}

pub(super) async fn agent(ledger: &SqliteLedger, team: Uuid, agent: Uuid) -> BusResult<Agent> {
    let what = "agent lookup";
    let mut conn = ledger.read_connection(what).await?;
    ledger.agent_row(&mut conn, team, agent).await
}

pub(super) async fn agent_by_token(
    ledger: &SqliteLedger,
    token_hash: &TokenHash,
) -> BusResult<Agent> {
    let row: Option<AgentRow> = sqlx::query_as(&format!(
        "SELECT {AGENT_COLUMNS} FROM agents a JOIN teams t ON t.id = a.team_id
         WHERE a.token_hash = ? AND t.tenant = ? AND a.revoked_at IS NULL AND a.kind = 'agent'"
    ))
    .bind(&token_hash.0[..])
    .bind(ledger.tenant.as_str())
    .fetch_optional(ledger.pools.reader())
    .await
    .map_err(ledger.db("authenticate"))?;
    row.ok_or(BusError::Unauthenticated)?.try_into()
}

pub(super) async fn agents(ledger: &SqliteLedger, team: Uuid) -> BusResult<Vec<Agent>> {
    let what = "agents";
    let mut tx = ledger.read(what).await?;
    ledger.require_team(&mut tx, team).await?;
    let rows: Vec<AgentRow> = sqlx::query_as(&format!(
        "SELECT {AGENT_COLUMNS} FROM agents a WHERE a.team_id = ? ORDER BY a.name"
    ))
    .bind(team)
    .fetch_all(&mut *tx)
    .await
    .map_err(ledger.db(what))?;
    rows.into_iter().map(Agent::try_from).collect()
}

pub(super) async fn revoke_agent(
    ledger: &SqliteLedger,
    team: Uuid,
    agent: Uuid,
    at: DateTime<Utc>,
) -> BusResult<Agent> {
    let what = "revoke agent";
    let mut tx = ledger.begin(what).await?;
    // The lookup checks team and tenant; the update keeps the first revocation time.
    ledger.agent_row(&mut tx, team, agent).await?;
    // Its leases end in the revocation's transaction.
    end_leases::<Lite>(
        &mut tx,
        &ledger.tenant,
        Ending::Agent(agent),
        LeaseEnd::Revoked,
        at,
    )
    .await
    .map_err(ledger.db(what))?;
    sqlx::query("UPDATE agents SET revoked_at = COALESCE(revoked_at, ?) WHERE id = ?")
        .bind(Ts(at))
        .bind(agent)
        .execute(&mut *tx)
        .await
        .map_err(ledger.db(what))?;
    let revoked = ledger.agent_row(&mut tx, team, agent).await?;
    ledger.commit(tx, what).await?;
    Ok(revoked)
}

pub(super) async fn create_conversation(
    ledger: &SqliteLedger,
    team: Uuid,
    creator: Uuid,
    title: &str,
    members: &[Uuid],
    at: DateTime<Utc>,
) -> BusResult<Conversation> {
    let what = "create conversation";
    let mut tx = ledger.begin(what).await?;
    let backend = ledger.team_row(&mut tx, team).await?.body_backend;
    let mut seen = HashSet::new();
    let ids: Vec<Uuid> = std::iter::once(creator)
        .chain(members.iter().copied())
        .filter(|id| seen.insert(*id))
        .collect();
    // Inside the write transaction no agent can be revoked between the check and the insert.
    let sql = format!(
        "SELECT id, recipient_key FROM agents
         WHERE team_id = ? AND revoked_at IS NULL AND id IN ({})",
        marks(ids.len())
    );
    let mut query = sqlx::query_as::<_, (Uuid, String)>(&sql).bind(team);
    for id in &ids {
        query = query.bind(*id);
    }
    let active = query.fetch_all(&mut *tx).await.map_err(ledger.db(what))?;
    let keys: HashMap<Uuid, String> = active.into_iter().collect();
    if let Some(missing) = ids.iter().find(|id| !keys.contains_key(id)) {
        return Err(BusError::invalid(format!(
            "agent {missing} is not an active agent of the team"
        )));
    }
    let id = Uuid::new_v4();
    sqlx::query(
        "INSERT INTO conversations (id, team_id, title, backend, created_at)
         VALUES (?, ?, ?, ?, ?)",
    )
    .bind(id)
    .bind(team)
    .bind(title)
    .bind(&backend)
    .bind(Ts(at))
    .execute(&mut *tx)
    .await
    .map_err(ledger.db(what))?;
    for agent in &ids {
        sqlx::query(
            "INSERT INTO members (conversation_id, agent_id, recipient_key, joined_at)
             VALUES (?, ?, ?, ?)",
        )
        .bind(id)
        .bind(*agent)
        .bind(&keys[agent])
        .bind(Ts(at))
        .execute(&mut *tx)
        .await
        .map_err(ledger.db(what))?;
    }
    ledger.commit(tx, what).await?;
    let mut list: Vec<Member> = ids
        .iter()
        .map(|a| Member {
            agent: *a,
            recipient_key: keys[a].clone(),
            joined_at: at,
        })
        .collect();
    list.sort_by_key(|m| (m.joined_at, m.agent));
    Ok(Conversation {
        id,
        team,
        title: title.to_owned(),
        backend,
        created_at: at,
        members: list,
    })
}

pub(super) async fn conversation(
    ledger: &SqliteLedger,
    team: Uuid,
    conversation: Uuid,
) -> BusResult<Conversation> {
    let what = "conversation";
    let mut tx = ledger.read(what).await?;
    let row: Option<ConversationRow> = sqlx::query_as(
        "SELECT c.id, c.title, c.backend, c.created_at FROM conversations c
         JOIN teams t ON t.id = c.team_id
         WHERE c.id = ? AND c.team_id = ? AND t.tenant = ?",
    )
    .bind(conversation)
    .bind(team)
    .bind(ledger.tenant.as_str())
    .fetch_optional(&mut *tx)
    .await
    .map_err(ledger.db(what))?;
    let row = row.ok_or_else(|| BusError::not_found(format!("conversation {conversation}")))?;
    let mut found = ledger.with_members(&mut tx, team, vec![row]).await?;
    Ok(found.remove(0))
}

pub(super) async fn conversations(
    ledger: &SqliteLedger,
    team: Uuid,
) -> BusResult<Vec<Conversation>> {
    let what = "conversations";
    let mut tx = ledger.read(what).await?;
    ledger.require_team(&mut tx, team).await?;
    let rows: Vec<ConversationRow> = sqlx::query_as(
        "SELECT c.id, c.title, c.backend, c.created_at FROM conversations c
         WHERE c.team_id = ? ORDER BY c.ord",
    )
    .bind(team)
    .fetch_all(&mut *tx)
    .await
    .map_err(ledger.db(what))?;
    ledger.with_members(&mut tx, team, rows).await
}

pub(super) async fn conversations_for(
    ledger: &SqliteLedger,
    team: Uuid,
    agent: Uuid,
) -> BusResult<Vec<Conversation>> {
    let what = "conversations";
    let mut tx = ledger.read(what).await?;
    ledger.agent_row(&mut tx, team, agent).await?;
    let rows: Vec<ConversationRow> = sqlx::query_as(
        "SELECT c.id, c.title, c.backend, c.created_at FROM conversations c
         JOIN members m ON m.conversation_id = c.id AND m.agent_id = ?2
         WHERE c.team_id = ?1 ORDER BY c.ord",
    )
    .bind(team)
    .bind(agent)
    .fetch_all(&mut *tx)
    .await
    .map_err(ledger.db(what))?;
    ledger.with_members(&mut tx, team, rows).await
}
