//! The Postgres ledger's directory: teams, agents and conversations.

use std::collections::{HashMap, HashSet};

use chrono::{DateTime, Utc};
use crewbus_domain::{
    Agent, BusError, BusResult, Conversation, LeaseEnd, Member, Team, TokenHash, recipient_key_for,
};
use crewbus_sql::ledger::SqlLedger;
use sqlx::PgConnection;
use uuid::Uuid;

use super::rows::{AGENT_COLUMNS, AgentRow, MemberRow, TEAM_COLUMNS, TeamRow};
use super::{PostgresLedger, Tx, db};
use crate::dialect::Pg;
use crate::error::bus_error;
use crewbus_sql::leases::{Ending, end_leases, lock_or_create_fence};

impl PostgresLedger {
    async fn members_of(
        conn: &mut PgConnection,
        conversations: &[Uuid],
    ) -> BusResult<HashMap<Uuid, Vec<Member>>> {
        let rows: Vec<MemberRow> = sqlx::query_as(
            "SELECT conversation_id, agent_id, recipient_key, joined_at FROM members
             WHERE conversation_id = ANY($1) ORDER BY joined_at, agent_id",
        )
        .bind(conversations)
        .fetch_all(&mut *conn)
        .await
        .map_err(db("members"))?;
        let mut by_conversation: HashMap<Uuid, Vec<Member>> = HashMap::new();
        for row in rows {
            by_conversation
                .entry(row.conversation_id)
                .or_default()
                .push(row.into());
        }
        Ok(by_conversation)
    }

    /// Completes conversation rows with their members and commits.
    pub(super) async fn conversations_with_members(
        mut tx: Tx,
        team: Uuid,
        rows: Vec<(Uuid, String, String, DateTime<Utc>)>,
    ) -> BusResult<Vec<Conversation>> {
        let ids: Vec<Uuid> = rows.iter().map(|r| r.0).collect();
        let mut members = Self::members_of(&mut tx, &ids).await?;
        Self::commit(tx, "conversations").await?;
        Ok(rows
            .into_iter()
            .map(|(id, title, backend, created_at)| Conversation {
                id,
                team,
                title,
                backend,
                created_at,
                members: members.remove(&id).unwrap_or_default(),
            })
            .collect())
    }
}

pub(super) async fn create_team(
    ledger: &PostgresLedger,
    name: &str,
    body_backend: &str,
    inbox: &str,
    at: DateTime<Utc>,
) -> BusResult<Team> {
    let row: TeamRow = sqlx::query_as(&format!(
        "INSERT INTO teams (id, tenant, name, body_backend, inbox, created_at)
         VALUES ($1, $2, $3, $4, $5, $6) RETURNING {TEAM_COLUMNS}"
    ))
    .bind(Uuid::new_v4())
    .bind(ledger.tenant.as_str())
    .bind(name)
    .bind(body_backend)
    .bind(inbox)
    .bind(at)
    .fetch_one(&ledger.pool)
    .await
    .map_err(|e| match bus_error(e, "create team") {
        BusError::Conflict { .. } => BusError::conflict(format!("team name {name:?} is taken")),
        other => other,
    })?;
    Ok(row.into())
}

pub(super) async fn team(ledger: &PostgresLedger, team: Uuid) -> BusResult<Team> {
    let mut conn = ledger.pool.acquire().await.map_err(db("team lookup"))?;
    ledger.team_row(&mut conn, team).await
}

pub(super) async fn teams(ledger: &PostgresLedger) -> BusResult<Vec<Team>> {
    let rows: Vec<TeamRow> = sqlx::query_as(&format!(
        "SELECT {TEAM_COLUMNS} FROM teams WHERE tenant = $1 ORDER BY name COLLATE \"C\""
    ))
    .bind(ledger.tenant.as_str())
    .fetch_all(&ledger.pool)
    .await
    .map_err(db("teams"))?;
    Ok(rows.into_iter().map(Team::from).collect())
}

pub(super) async fn set_team_backends(
    ledger: &PostgresLedger,
    team: Uuid,
    body_backend: &str,
    inbox: &str,
) -> BusResult<Team> {
    let row: Option<TeamRow> = sqlx::query_as(&format!(
        "UPDATE teams SET body_backend = $3, inbox = $4 WHERE id = $1 AND tenant = $2
         RETURNING {TEAM_COLUMNS}"
    ))
    .bind(team)
    .bind(ledger.tenant.as_str())
    .bind(body_backend)
    .bind(inbox)
    .fetch_optional(&ledger.pool)
    .await
    .map_err(db("set team backends"))?;
    row.map(Team::from)
        .ok_or_else(|| BusError::not_found(format!("team {team}")))
}

pub(super) async fn create_agent(
    ledger: &PostgresLedger,
    team: Uuid,
    name: &str,
    token_hash: TokenHash,
    at: DateTime<Utc>,
) -> BusResult<Agent> {
    let what = "create agent";
    let mut tx = ledger.begin(what).await?;
    ledger.require_team(&mut tx, team).await?;
    let taken = || BusError::conflict("the agent name or token hash is already in use");
    if crewbus_sql::operators::operator_holds(ledger, &mut tx, &token_hash).await? {
        return Err(taken());
    }
    let id = Uuid::new_v4();
    let row: AgentRow = sqlx::query_as(&format!(
        "INSERT INTO agents AS a (id, team_id, name, recipient_key, token_hash, created_at)
         VALUES ($1, $2, $3, $4, $5, $6) RETURNING {AGENT_COLUMNS}"
    ))
    .bind(id)
    .bind(team)
    .bind(name)
    .bind(recipient_key_for(id))
    .bind(&token_hash.0[..])
    .bind(at)
    .fetch_one(&mut *tx)
    .await
    .map_err(|e| match bus_error(e, what) {
        BusError::Conflict { .. } => taken(),
        other => other,
    })?;
    PostgresLedger::commit(tx, what).await?;
    row.try_into()
}

pub(super) async fn agent(ledger: &PostgresLedger, team: Uuid, agent: Uuid) -> BusResult<Agent> {
    let mut conn = ledger.pool.acquire().await.map_err(db("agent lookup"))?;
    ledger.agent_row(&mut conn, team, agent).await
}

pub(super) async fn agent_by_token(
    ledger: &PostgresLedger,
    token_hash: &TokenHash,
) -> BusResult<Agent> {
    let row: Option<AgentRow> = sqlx::query_as(&format!(
        "SELECT {AGENT_COLUMNS} FROM agents a JOIN teams t ON t.id = a.team_id
         WHERE a.token_hash = $1 AND t.tenant = $2 AND a.revoked_at IS NULL AND a.kind = 'agent'"
    ))
    .bind(&token_hash.0[..])
    .bind(ledger.tenant.as_str())
    .fetch_optional(&ledger.pool)
    .await
    .map_err(db("authenticate"))?;
    row.ok_or(BusError::Unauthenticated)?.try_into()
}

pub(super) async fn agents(ledger: &PostgresLedger, team: Uuid) -> BusResult<Vec<Agent>> {
    let what = "agents";
    let mut conn = ledger.pool.acquire().await.map_err(db(what))?;
    ledger.require_team(&mut conn, team).await?;
    let rows: Vec<AgentRow> = sqlx::query_as(&format!(
        "SELECT {AGENT_COLUMNS} FROM agents a WHERE a.team_id = $1
         ORDER BY a.name COLLATE \"C\""
    ))
    .bind(team)
    .fetch_all(&mut *conn)
    .await
    .map_err(db(what))?;
    rows.into_iter().map(Agent::try_from).collect()
}

pub(super) async fn revoke_agent(
    ledger: &PostgresLedger,
    team: Uuid,
    agent: Uuid,
    at: DateTime<Utc>,
) -> BusResult<Agent> {
    let what = "revoke agent";
    let mut tx = ledger.begin(what).await?;
    // The team's lease fence first, always (the lease lock order: fence, runs, then the agent's
    // row): an acquire for this agent either committed before (its lease is ended below) or
    // reads the agent again after this commits and is refused. Without the lock an agent that
    // held no lease could be granted one by an acquire racing this revocation.
    ledger.require_team(&mut tx, team).await?;
    lock_or_create_fence::<Pg>(&mut tx, team)
        .await
        .map_err(db(what))?;
    // Its leases end in the revocation's transaction; an unknown agent rolls it all back.
    end_leases::<Pg>(
        &mut tx,
        &ledger.tenant,
        Ending::Agent(agent),
        LeaseEnd::Revoked,
        at,
    )
    .await
    .map_err(db(what))?;
    let row: Option<AgentRow> = sqlx::query_as(&format!(
        "UPDATE agents AS a SET revoked_at = COALESCE(a.revoked_at, $3)
         FROM teams t
         WHERE a.id = $1 AND a.team_id = $2 AND t.id = a.team_id AND t.tenant = $4
         RETURNING {AGENT_COLUMNS}"
    ))
    .bind(agent)
    .bind(team)
    .bind(at)
    .bind(ledger.tenant.as_str())
    .fetch_optional(&mut *tx)
    .await
    .map_err(db(what))?;
    let revoked = row
        .ok_or_else(|| BusError::not_found(format!("agent {agent}")))?
        .try_into()?;
    PostgresLedger::commit(tx, what).await?;
    Ok(revoked)
}

pub(super) async fn create_conversation(
    ledger: &PostgresLedger,
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
    // Lock the agents so none is revoked between the check and the insert.
    let active: Vec<(Uuid, String)> = sqlx::query_as(
        "SELECT id, recipient_key FROM agents
         WHERE id = ANY($1) AND team_id = $2 AND revoked_at IS NULL
         FOR SHARE",
    )
    .bind(&ids)
    .bind(team)
    .fetch_all(&mut *tx)
    .await
    .map_err(db(what))?;
    let keys: HashMap<Uuid, String> = active.into_iter().collect();
    if let Some(missing) = ids.iter().find(|id| !keys.contains_key(id)) {
        return Err(BusError::invalid(format!(
            "agent {missing} is not an active agent of the team"
        )));
    }
    let id = Uuid::new_v4();
    sqlx::query(
        "INSERT INTO conversations (id, team_id, title, backend, created_at)
         VALUES ($1, $2, $3, $4, $5)",
    )
    .bind(id)
    .bind(team)
    .bind(title)
    .bind(&backend)
    .bind(at)
    .execute(&mut *tx)
    .await
    .map_err(db(what))?;
    let key_list: Vec<&str> = ids.iter().map(|i| keys[i].as_str()).collect();
    sqlx::query(
        "INSERT INTO members (conversation_id, agent_id, recipient_key, joined_at)
         SELECT $1, agent, key, $4 FROM unnest($2::uuid[], $3::text[]) AS u(agent, key)",
    )
    .bind(id)
    .bind(&ids)
    .bind(&key_list)
    .bind(at)
    .execute(&mut *tx)
    .await
    .map_err(db(what))?;
    PostgresLedger::commit(tx, what).await?;
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
    ledger: &PostgresLedger,
    team: Uuid,
    conversation: Uuid,
) -> BusResult<Conversation> {
    let what = "conversation";
    let mut conn = ledger.pool.acquire().await.map_err(db(what))?;
    let (title, backend, created_at) = ledger
        .conversation_row(&mut conn, team, conversation, what)
        .await?;
    let mut members = PostgresLedger::members_of(&mut conn, &[conversation]).await?;
    Ok(Conversation {
        id: conversation,
        team,
        title,
        backend,
        created_at,
        members: members.remove(&conversation).unwrap_or_default(),
    })
}

pub(super) async fn conversations(
    ledger: &PostgresLedger,
    team: Uuid,
) -> BusResult<Vec<Conversation>> {
    let what = "conversations";
    let mut tx = ledger.begin(what).await?;
    ledger.require_team(&mut tx, team).await?;
    let rows: Vec<(Uuid, String, String, DateTime<Utc>)> = sqlx::query_as(
        "SELECT c.id, c.title, c.backend, c.created_at FROM conversations c
         WHERE c.team_id = $1 ORDER BY c.ord",
    )
    .bind(team)
    .fetch_all(&mut *tx)
    .await
    .map_err(db(what))?;
    PostgresLedger::conversations_with_members(tx, team, rows).await
}

pub(super) async fn conversations_for(
    ledger: &PostgresLedger,
    team: Uuid,
    agent: Uuid,
) -> BusResult<Vec<Conversation>> {
    let what = "conversations";
    let mut tx = ledger.begin(what).await?;
    ledger.agent_row(&mut tx, team, agent).await?;
    let rows: Vec<(Uuid, String, String, DateTime<Utc>)> = sqlx::query_as(
        "SELECT c.id, c.title, c.backend, c.created_at FROM conversations c
         JOIN members m ON m.conversation_id = c.id AND m.agent_id = $2
         WHERE c.team_id = $1 ORDER BY c.ord",
    )
    .bind(team)
    .bind(agent)
    .fetch_all(&mut *tx)
    .await
    .map_err(db(what))?;
    PostgresLedger::conversations_with_members(tx, team, rows).await
}
