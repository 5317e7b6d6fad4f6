//! The ledger's directory section (teams, agents, conversations), once for every SQL store: the
//! functions `impl LedgerSections for SqlLedger<D>` (`crate::ledger`) calls, over [`SqlLedger`]
//! and its [`Dialect`].
//!
//! # What differs, and stays different
//! - **How reads hold the store** ([`Via`]). Postgres runs `team`, `agent`, `agents`,
//!   `conversation` and `history` ([`crate::history`]) on a pool connection (each statement its own read-committed
//!   snapshot) and `conversations`, `conversations_for` (and the oversight summaries) in a
//!   read-committed transaction; SQLite runs every read of more than one statement in one read
//!   transaction of the read pool (one WAL snapshot). [`Dialect::READS`] and
//!   [`Dialect::LISTS`] say which, per store.
//! - **One-statement writes** (`create_team`, `set_team_backends`): a pool connection on
//!   Postgres (the statement is its own transaction), a write transaction on SQLite (its one
//!   write connection): [`Dialect::ONE_WRITE`].
//! - **Locks**: where writers lock rows ([`Dialect::ROW_LOCKS`]), `create_conversation` reads
//!   its members `FOR SHARE` (none is revoked before the insert) and `revoke_agent` first locks
//!   the team's lease fence (the lease lock order: fence, runs, then the agent's row; an acquire
//!   for the agent either committed before, and its lease is ended here, or reads the agent
//!   again after this commits and is refused). On SQLite the write transaction serialises both,
//!   and `revoke_agent` checks the agent first instead.
//! - **Returning an agent's row**: Postgres returns the written row (`RETURNING` the
//!   alias-qualified [`AGENT_COLUMNS`]); SQLite 3.40 refuses a qualified `RETURNING`, so the row
//!   is read back in the same transaction ([`QUALIFIED_RETURNING`]).
//! - **Names in byte order**: `ORDER BY name` plus [`BYTEWISE`] (` COLLATE "C"` on Postgres;
//!   SQLite's default `BINARY` collation is byte order already).
//! - **The members' insert** ([`Dialect::insert_members`]): one row per statement unless the
//!   store writes them in one (Postgres: `unnest`).
//! - **The token-hash check** against operators is the shared operators'
//!   ([`SqlLedger::operator_holds`](crate::ledger::SqlLedger::operator_holds):
//!   Postgres takes an advisory lock on the hash first).

use std::collections::{HashMap, HashSet};

use chrono::{DateTime, Utc};
use crewbus_domain::{
    Agent, BusError, BusResult, Conversation, LeaseEnd, Member, Team, TokenHash, recipient_key_for,
};
use uuid::Uuid;

use crate::dialect::{BYTEWISE, Conn, Dialect, PerDialect, Via};
use crate::driver::{Reads, Stmt, stmt};
use crate::leases::{Ending, end_leases, lock_or_create_fence};
use crate::ledger::SqlLedger;
use crate::rows::{AGENT_COLUMNS, AgentRow, MemberRow, TEAM_COLUMNS, TeamRow};

/// The rows of `select` after checking that `team` is this tenant's, both held `via` (on one
/// snapshot where `via` is one). Errors: unknown team → `NotFound`; the statement's, as the
/// error of `what`.
pub async fn team_rows<D: Dialect, R: Send>(
    ledger: &SqlLedger<D>,
    via: Via,
    team: Uuid,
    what: &'static str,
    select: Stmt<'_, D::Db>,
) -> BusResult<Vec<R>>
where
    D::Db: Reads<R>,
{
    let mut held = ledger.hold(via, what).await?;
    ledger.require_team(&mut held, team).await?;
    let rows = select.all(&mut held).await.map_err(ledger.db(what))?;
    ledger.release(held, what).await?;
    Ok(rows)
}

/// Whether `RETURNING` may name alias-qualified columns ([`AGENT_COLUMNS`]): Postgres yes;
/// SQLite 3.40 no (the row is read back with [`SqlLedger::agent_row`]).
const QUALIFIED_RETURNING: PerDialect<bool> = PerDialect {
    postgres: true,
    sqlite: false,
};

/// The team `team` of this tenant. Errors: unknown → `NotFound`.
pub async fn team_row<D: Dialect>(
    ledger: &SqlLedger<D>,
    conn: &mut Conn<D>,
    team: Uuid,
) -> BusResult<Team> {
    let row: Option<TeamRow<D::Time>> = stmt::<D>(&format!(
        "SELECT {TEAM_COLUMNS} FROM teams WHERE id = $1 AND tenant = $2"
    ))
    .arg(team)
    .arg(ledger.tenant().as_str().to_owned())
    .optional(conn)
    .await
    .map_err(ledger.db("team lookup"))?;
    row.map(Team::from)
        .ok_or_else(|| BusError::not_found(format!("team {team}")))
}

/// The members of `conversations`, by conversation, each list by join time then agent id (no
/// statement for no conversations).
async fn members_of<D: Dialect>(
    ledger: &SqlLedger<D>,
    conn: &mut Conn<D>,
    conversations: &[Uuid],
) -> BusResult<HashMap<Uuid, Vec<Member>>> {
    let mut by_conversation: HashMap<Uuid, Vec<Member>> = HashMap::new();
    if conversations.is_empty() {
        return Ok(by_conversation);
    }
    let sql = format!(
        "SELECT conversation_id, agent_id, recipient_key, joined_at FROM members
         WHERE {} ORDER BY joined_at, agent_id",
        D::any_id("conversation_id", 1, conversations.len())
    );
    let rows: Vec<MemberRow<D::Time>> = D::bind_ids(stmt::<D>(&sql), conversations)
        .all(conn)
        .await
        .map_err(ledger.db("members"))?;
    for row in rows {
        by_conversation
            .entry(row.conversation_id)
            .or_default()
            .push(row.into());
    }
    Ok(by_conversation)
}

/// A conversation row without its members: id, title, backend, created at (`T` the stored
/// time).
pub type ConversationRow<T> = (Uuid, String, String, T);

/// Completes conversation rows of `team` with their members, read on the same connection, in
/// the rows' order.
pub async fn with_members<D: Dialect>(
    ledger: &SqlLedger<D>,
    conn: &mut Conn<D>,
    team: Uuid,
    rows: Vec<ConversationRow<D::Time>>,
) -> BusResult<Vec<Conversation>> {
    let ids: Vec<Uuid> = rows.iter().map(|r| r.0).collect();
    let mut members = members_of(ledger, conn, &ids).await?;
    Ok(rows
        .into_iter()
        .map(|(id, title, backend, created_at)| Conversation {
            id,
            team,
            title,
            backend,
            created_at: created_at.into(),
            members: members.remove(&id).unwrap_or_default(),
        })
        .collect())
}

/// `Ledger::create_team`. Errors: the name taken in this tenant → `Conflict`.
pub async fn create_team<D: Dialect>(
    ledger: &SqlLedger<D>,
    name: &str,
    body_backend: &str,
    inbox: &str,
    at: DateTime<Utc>,
) -> BusResult<Team> {
    let what = "create team";
    let mut held = ledger.hold(D::ONE_WRITE, what).await?;
    let row: TeamRow<D::Time> = stmt::<D>(&format!(
        "INSERT INTO teams (id, tenant, name, body_backend, inbox, created_at)
         VALUES ($1, $2, $3, $4, $5, $6) RETURNING {TEAM_COLUMNS}"
    ))
    .arg(Uuid::new_v4())
    .arg(ledger.tenant().as_str().to_owned())
    .arg(name.to_owned())
    .arg(body_backend.to_owned())
    .arg(inbox.to_owned())
    .arg(D::time(at))
    .one(&mut held)
    .await
    .map_err(|e| match ledger.bus_error(e, what) {
        BusError::Conflict { .. } => BusError::conflict(format!("team name {name:?} is taken")),
        other => other,
    })?;
    ledger.release(held, what).await?;
    Ok(row.into())
}

/// `Ledger::team`. Errors: unknown → `NotFound`.
pub async fn team<D: Dialect>(ledger: &SqlLedger<D>, team: Uuid) -> BusResult<Team> {
    let mut conn = ledger.reader("team lookup").await?;
    team_row(ledger, &mut conn, team).await
}

/// `Ledger::teams`: this tenant's teams by name (byte order).
pub async fn teams<D: Dialect>(ledger: &SqlLedger<D>) -> BusResult<Vec<Team>> {
    let what = "teams";
    let mut conn = ledger.reader(what).await?;
    let rows: Vec<TeamRow<D::Time>> = stmt::<D>(&format!(
        "SELECT {TEAM_COLUMNS} FROM teams WHERE tenant = $1 ORDER BY name{}",
        BYTEWISE.of::<D>()
    ))
    .arg(ledger.tenant().as_str().to_owned())
    .all(&mut conn)
    .await
    .map_err(ledger.db(what))?;
    Ok(rows.into_iter().map(Team::from).collect())
}

/// `Ledger::set_team_backends`. Errors: unknown team → `NotFound`.
pub async fn set_team_backends<D: Dialect>(
    ledger: &SqlLedger<D>,
    team: Uuid,
    body_backend: &str,
    inbox: &str,
) -> BusResult<Team> {
    let what = "set team backends";
    let mut held = ledger.hold(D::ONE_WRITE, what).await?;
    let row: Option<TeamRow<D::Time>> = stmt::<D>(&format!(
        "UPDATE teams SET body_backend = $3, inbox = $4 WHERE id = $1 AND tenant = $2
         RETURNING {TEAM_COLUMNS}"
    ))
    .arg(team)
    .arg(ledger.tenant().as_str().to_owned())
    .arg(body_backend.to_owned())
    .arg(inbox.to_owned())
    .optional(&mut held)
    .await
    .map_err(ledger.db(what))?;
    ledger.release(held, what).await?;
    row.map(Team::from)
        .ok_or_else(|| BusError::not_found(format!("team {team}")))
}

/// `Ledger::create_agent`. Errors: unknown team → `NotFound`; the name taken in the team, or
/// the token hash held by an agent or an operator → `Conflict`.
pub async fn create_agent<D: Dialect>(
    ledger: &SqlLedger<D>,
    team: Uuid,
    name: &str,
    token_hash: TokenHash,
    at: DateTime<Utc>,
) -> BusResult<Agent> {
    let what = "create agent";
    let mut tx = ledger.begin(what).await?;
    ledger.require_team(&mut tx, team).await?;
    let taken = || BusError::conflict("the agent name or token hash is already in use");
    if ledger.operator_holds(&mut tx, &token_hash).await? {
        return Err(taken());
    }
    let id = Uuid::new_v4();
    let sql = agent_insert::<D>(
        "INSERT INTO agents AS a (id, team_id, name, recipient_key, token_hash, created_at)
         VALUES ($1, $2, $3, $4, $5, $6)",
    );
    let insert = stmt::<D>(&sql)
        .arg(id)
        .arg(team)
        .arg(name.to_owned())
        .arg(recipient_key_for(id))
        .arg(token_hash.0.to_vec())
        .arg(D::time(at));
    let agent = inserted_agent(ledger, &mut tx, team, id, insert, what, |e| match e {
        BusError::Conflict { .. } => taken(),
        other => other,
    })
    .await?;
    ledger.commit(tx, what).await?;
    Ok(agent)
}

/// The statement of `insert` (an `INSERT INTO agents AS a …` of one agent) as
/// [`inserted_agent`] runs it: returning the row ([`AGENT_COLUMNS`]) where
/// [`QUALIFIED_RETURNING`], as it is otherwise.
pub fn agent_insert<D: Dialect>(insert: &str) -> String {
    if QUALIFIED_RETURNING.of::<D>() {
        format!("{insert} RETURNING {AGENT_COLUMNS}")
    } else {
        insert.to_owned()
    }
}

/// Runs `insert` (the statement of [`agent_insert`] of the agent `id` of `team`, its arguments
/// bound) on `conn` and returns the agent: the row it returned, or else the row read back on
/// `conn`. Errors: the statement's as the error of `what`, passed through `refine` (a unique
/// violation is `Conflict`).
pub async fn inserted_agent<D: Dialect>(
    ledger: &SqlLedger<D>,
    conn: &mut Conn<D>,
    team: Uuid,
    id: Uuid,
    insert: Stmt<'_, D::Db>,
    what: &str,
    refine: impl Fn(BusError) -> BusError + Send,
) -> BusResult<Agent> {
    let failed = |e| refine(ledger.bus_error(e, what));
    if QUALIFIED_RETURNING.of::<D>() {
        let row: AgentRow<D::Time> = insert.one(conn).await.map_err(failed)?;
        row.try_into()
    } else {
        insert.run(conn).await.map_err(failed)?;
        ledger.agent_row(conn, team, id).await
    }
}

/// `Ledger::agent`. Errors: unknown in `team` → `NotFound`.
pub async fn agent<D: Dialect>(ledger: &SqlLedger<D>, team: Uuid, agent: Uuid) -> BusResult<Agent> {
    let mut conn = ledger.reader("agent lookup").await?;
    ledger.agent_row(&mut conn, team, agent).await
}

/// `Ledger::agent_by_token`: the unrevoked agent (not a human member) of this tenant holding
/// `token_hash`. Errors: none → `Unauthenticated`.
pub async fn agent_by_token<D: Dialect>(
    ledger: &SqlLedger<D>,
    token_hash: &TokenHash,
) -> BusResult<Agent> {
    let what = "authenticate";
    let mut conn = ledger.reader(what).await?;
    let row: Option<AgentRow<D::Time>> = stmt::<D>(&format!(
        "SELECT {AGENT_COLUMNS} FROM agents a JOIN teams t ON t.id = a.team_id
         WHERE a.token_hash = $1 AND t.tenant = $2 AND a.revoked_at IS NULL AND a.kind = 'agent'"
    ))
    .arg(token_hash.0.to_vec())
    .arg(ledger.tenant().as_str().to_owned())
    .optional(&mut conn)
    .await
    .map_err(ledger.db(what))?;
    row.ok_or(BusError::Unauthenticated)?.try_into()
}

/// `Ledger::agents`: the team's agents by name (byte order). Errors: unknown team →
/// `NotFound`.
pub async fn agents<D: Dialect>(ledger: &SqlLedger<D>, team: Uuid) -> BusResult<Vec<Agent>> {
    let sql = format!(
        "SELECT {AGENT_COLUMNS} FROM agents a WHERE a.team_id = $1 ORDER BY a.name{}",
        BYTEWISE.of::<D>()
    );
    let rows: Vec<AgentRow<D::Time>> =
        team_rows(ledger, D::READS, team, "agents", stmt::<D>(&sql).arg(team)).await?;
    rows.into_iter().map(Agent::try_from).collect()
}

/// `Ledger::revoke_agent`: revokes the agent (keeping the first revocation's time) and ends its
/// leases, in one transaction. Errors: unknown team or agent → `NotFound` (nothing changed).
pub async fn revoke_agent<D: Dialect>(
    ledger: &SqlLedger<D>,
    team: Uuid,
    agent: Uuid,
    at: DateTime<Utc>,
) -> BusResult<Agent> {
    let what = "revoke agent";
    let mut tx = ledger.begin(what).await?;
    if D::ROW_LOCKS {
        // The team's lease fence first, always (see the module docs). Without the lock an agent
        // that held no lease could be granted one by an acquire racing this revocation.
        ledger.require_team(&mut tx, team).await?;
        lock_or_create_fence::<D>(&mut tx, team)
            .await
            .map_err(ledger.db(what))?;
    } else {
        // The lookup checks team and tenant.
        ledger.agent_row(&mut tx, team, agent).await?;
    }
    // Its leases end in the revocation's transaction; an unknown agent rolls it all back.
    end_leases::<D>(
        &mut tx,
        ledger.tenant(),
        Ending::Agent(agent),
        LeaseEnd::Revoked,
        at,
    )
    .await
    .map_err(ledger.db(what))?;
    let revoked = if QUALIFIED_RETURNING.of::<D>() {
        let row: Option<AgentRow<D::Time>> = stmt::<D>(&format!(
            "UPDATE agents AS a SET revoked_at = COALESCE(a.revoked_at, $3)
             FROM teams t
             WHERE a.id = $1 AND a.team_id = $2 AND t.id = a.team_id AND t.tenant = $4
             RETURNING {AGENT_COLUMNS}"
        ))
        .arg(agent)
        .arg(team)
        .arg(D::time(at))
        .arg(ledger.tenant().as_str().to_owned())
        .optional(&mut tx)
        .await
        .map_err(ledger.db(what))?;
        row.ok_or_else(|| BusError::not_found(format!("agent {agent}")))?
            .try_into()?
    } else {
        // The agent was found above, in this transaction.
        stmt::<D>("UPDATE agents SET revoked_at = COALESCE(revoked_at, $1) WHERE id = $2")
            .arg(D::time(at))
            .arg(agent)
            .run(&mut tx)
            .await
            .map_err(ledger.db(what))?;
        ledger.agent_row(&mut tx, team, agent).await?
    };
    ledger.commit(tx, what).await?;
    Ok(revoked)
}

/// `Ledger::create_conversation`: the creator and `members` (each once, the creator first) in a
/// new conversation on the team's body backend. Errors: unknown team → `NotFound`; a member not
/// an active agent of the team → `Invalid`.
pub async fn create_conversation<D: Dialect>(
    ledger: &SqlLedger<D>,
    team: Uuid,
    creator: Uuid,
    title: &str,
    members: &[Uuid],
    at: DateTime<Utc>,
) -> BusResult<Conversation> {
    let what = "create conversation";
    let mut tx = ledger.begin(what).await?;
    let backend = team_row(ledger, &mut tx, team).await?.body_backend;
    let mut seen = HashSet::new();
    let ids: Vec<Uuid> = std::iter::once(creator)
        .chain(members.iter().copied())
        .filter(|id| seen.insert(*id))
        .collect();
    // Where writers lock rows the agents are locked so none is revoked between the check and
    // the insert; inside a SQLite write transaction none can be anyway.
    let sql = format!(
        "SELECT id, recipient_key FROM agents
         WHERE team_id = $1 AND revoked_at IS NULL AND {}{}",
        D::any_id("id", 2, ids.len()),
        if D::ROW_LOCKS { " FOR SHARE" } else { "" }
    );
    let active: Vec<(Uuid, String)> = D::bind_ids(stmt::<D>(&sql).arg(team), &ids)
        .all(&mut tx)
        .await
        .map_err(ledger.db(what))?;
    let keys: HashMap<Uuid, String> = active.into_iter().collect();
    if let Some(missing) = ids.iter().find(|id| !keys.contains_key(id)) {
        return Err(BusError::invalid(format!(
            "agent {missing} is not an active agent of the team"
        )));
    }
    let id = Uuid::new_v4();
    stmt::<D>(
        "INSERT INTO conversations (id, team_id, title, backend, created_at)
         VALUES ($1, $2, $3, $4, $5)",
    )
    .arg(id)
    .arg(team)
    .arg(title.to_owned())
    .arg(backend.clone())
    .arg(D::time(at))
    .run(&mut tx)
    .await
    .map_err(ledger.db(what))?;
    let joined: Vec<(Uuid, String)> = ids.iter().map(|a| (*a, keys[a].clone())).collect();
    D::insert_members(ledger, &mut tx, id, &joined, at).await?;
    ledger.commit(tx, what).await?;
    let mut list: Vec<Member> = joined
        .into_iter()
        .map(|(agent, recipient_key)| Member {
            agent,
            recipient_key,
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

/// The conversation `conversation` of `team` (this tenant's) without its members. Errors:
/// unknown or another team's → `NotFound`.
pub async fn conversation_row<D: Dialect>(
    ledger: &SqlLedger<D>,
    conn: &mut Conn<D>,
    team: Uuid,
    conversation: Uuid,
    what: &str,
) -> BusResult<ConversationRow<D::Time>> {
    let row: Option<ConversationRow<D::Time>> = stmt::<D>(
        "SELECT c.id, c.title, c.backend, c.created_at FROM conversations c
         JOIN teams t ON t.id = c.team_id
         WHERE c.id = $1 AND c.team_id = $2 AND t.tenant = $3",
    )
    .arg(conversation)
    .arg(team)
    .arg(ledger.tenant().as_str().to_owned())
    .optional(conn)
    .await
    .map_err(ledger.db(what))?;
    row.ok_or_else(|| BusError::not_found(format!("conversation {conversation}")))
}

/// `Ledger::conversation`, with its members. Errors: unknown or another team's → `NotFound`.
pub async fn conversation<D: Dialect>(
    ledger: &SqlLedger<D>,
    team: Uuid,
    conversation: Uuid,
) -> BusResult<Conversation> {
    let what = "conversation";
    let mut held = ledger.hold(D::READS, what).await?;
    let row = conversation_row(ledger, &mut held, team, conversation, what).await?;
    let mut found = with_members(ledger, &mut held, team, vec![row]).await?;
    ledger.release(held, what).await?;
    Ok(found.remove(0))
}

/// `Ledger::conversations`: the team's conversations in creation order, with their members.
/// Errors: unknown team → `NotFound`.
pub async fn conversations<D: Dialect>(
    ledger: &SqlLedger<D>,
    team: Uuid,
) -> BusResult<Vec<Conversation>> {
    listed(ledger, team, None).await
}

/// `Ledger::conversations_for`: the conversations `agent` is a member of, in creation order.
/// Errors: unknown agent of `team` → `NotFound`.
pub async fn conversations_for<D: Dialect>(
    ledger: &SqlLedger<D>,
    team: Uuid,
    agent: Uuid,
) -> BusResult<Vec<Conversation>> {
    listed(ledger, team, Some(agent)).await
}

/// The team's conversations (those `member` is a member of, if given) in creation order, with
/// their members, held as [`Dialect::LISTS`]. Errors: unknown team or member →
/// `NotFound`.
async fn listed<D: Dialect>(
    ledger: &SqlLedger<D>,
    team: Uuid,
    member: Option<Uuid>,
) -> BusResult<Vec<Conversation>> {
    let what = "conversations";
    let mut held = ledger.hold(D::LISTS, what).await?;
    let select = match member {
        Some(agent) => {
            ledger.agent_row(&mut held, team, agent).await?;
            stmt::<D>(
                "SELECT c.id, c.title, c.backend, c.created_at FROM conversations c
                 JOIN members m ON m.conversation_id = c.id AND m.agent_id = $2
                 WHERE c.team_id = $1 ORDER BY c.ord",
            )
            .arg(team)
            .arg(agent)
        }
        None => {
            ledger.require_team(&mut held, team).await?;
            stmt::<D>(
                "SELECT c.id, c.title, c.backend, c.created_at FROM conversations c
                 WHERE c.team_id = $1 ORDER BY c.ord",
            )
            .arg(team)
        }
    };
    let rows: Vec<ConversationRow<D::Time>> =
        select.all(&mut held).await.map_err(ledger.db(what))?;
    let found = with_members(ledger, &mut held, team, rows).await?;
    ledger.release(held, what).await?;
    Ok(found)
}
