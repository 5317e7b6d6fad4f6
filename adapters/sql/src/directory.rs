//! The ledger's directory section (teams, agents, conversations), once for both SQL stores: the
//! functions `crewbus_ports::impl_ledger_by_sections!` calls as `directory::…` (an adapter's
//! `directory` module re-exports them), over [`SqlDirectory`], the few hooks where the stores
//! differ.
//!
//! # What differs, and stays different
//! - **How reads hold the store** ([`Via`]). Postgres runs `team`, `agent`, `agents`,
//!   `conversation` and `history` ([`crate::history`]) on a pool connection (each statement its own read-committed
//!   snapshot) and `conversations`, `conversations_for` (and the oversight summaries) in a
//!   read-committed transaction; SQLite runs every read of more than one statement in one read
//!   transaction of the read pool (one WAL snapshot). [`SqlDirectory::LOOKUPS`] and
//!   [`SqlDirectory::LISTS`] say which, per store.
//! - **One-statement writes** (`create_team`, `set_team_backends`): a pool connection on
//!   Postgres (the statement is its own transaction), a write transaction on SQLite (its one
//!   write connection): [`SqlDirectory::ONE_WRITE`].
//! - **Locks**: where writers lock rows ([`Dialect::ROW_LOCKS`]), `create_conversation` reads
//!   its members `FOR SHARE` (none is revoked before the insert) and `revoke_agent` first locks
//!   the team's lease fence (the lease lock order: fence, runs, then the agent's row; an acquire
//!   for the agent either committed before, and its lease is ended here, or reads the agent
//!   again after this commits and is refused). On SQLite the write transaction serialises both,
//!   and `revoke_agent` checks the agent first instead.
//! - **Returning an agent's row**: Postgres returns the written row (`RETURNING` the
//!   alias-qualified [`AGENT_COLUMNS`]); SQLite 3.40 refuses a qualified `RETURNING`, so the row
//!   is read back in the same transaction ([`SqlDirectory::QUALIFIED_RETURNING`]).
//! - **Names in byte order**: `ORDER BY name` plus [`SqlDirectory::BYTE_ORDER`] (` COLLATE "C"`
//!   on Postgres; SQLite's default `BINARY` collation is byte order already).
//! - **The members' insert** ([`SqlDirectory::insert_members`]): one row per statement unless
//!   the store writes them in one (Postgres: `unnest`).
//! - **The token-hash check** against operators is the shared operators'
//!   ([`SqlLedger::operator_holds`](crate::ledger::SqlLedger::operator_holds):
//!   Postgres takes an advisory lock on the hash first).

use std::collections::{HashMap, HashSet};
use std::future::Future;

use chrono::{DateTime, Utc};
use crewbus_domain::{
    Agent, BusError, BusResult, Conversation, LeaseEnd, Member, Team, TokenHash, recipient_key_for,
};
use uuid::Uuid;

use crate::dialect::{Conn, Dialect};
pub use crate::dialect::{Held, Via};
use crate::driver::{Reads, Stmt, stmt};
use crate::leases::{Ending, end_leases, lock_or_create_fence};
use crate::ledger::LedgerHooks;
use crate::rows::{AGENT_COLUMNS, AgentRow, MemberRow, TEAM_COLUMNS, TeamRow};

/// [`SqlLedger::hold`] of the ledger underneath.
pub async fn hold<L: LedgerHooks>(
    ledger: &L,
    via: Via,
    what: &'static str,
) -> BusResult<Held<L::D>> {
    ledger.sql().hold(via, what).await
}

/// [`SqlLedger::release`] of the ledger underneath.
pub async fn release<L: LedgerHooks>(
    ledger: &L,
    held: Held<L::D>,
    what: &'static str,
) -> BusResult<()> {
    ledger.sql().release(held, what).await
}

/// The rows of `select` after checking that `team` is this tenant's, both held `via` (on one
/// snapshot where `via` is one). Errors: unknown team → `NotFound`; the statement's, as the
/// error of `what`.
pub async fn team_rows<L: LedgerHooks, R: Send>(
    ledger: &L,
    via: Via,
    team: Uuid,
    what: &'static str,
    select: Stmt<'_, <L::D as Dialect>::Db>,
) -> BusResult<Vec<R>>
where
    <L::D as Dialect>::Db: Reads<R>,
{
    let mut held = hold(ledger, via, what).await?;
    ledger.require_team(&mut held, team).await?;
    let rows = select.all(&mut held).await.map_err(ledger.db(what))?;
    release(ledger, held, what).await?;
    Ok(rows)
}

/// What the shared directory needs of an SQL ledger beyond [`LedgerHooks`]: where the two
/// stores differ (see the module docs).
pub trait SqlDirectory: LedgerHooks {
    /// How `create_team` and `set_team_backends` (one statement each) write: Postgres
    /// [`Via::Connection`], SQLite [`Via::Transaction`].
    const ONE_WRITE: Via;
    /// How `agents`, `conversation` and `history` read: Postgres [`Via::Connection`], SQLite
    /// [`Via::Snapshot`].
    const LOOKUPS: Via;
    /// How `conversations`, `conversations_for` and the oversight's conversation summaries
    /// read: Postgres [`Via::Transaction`] (read committed), SQLite [`Via::Snapshot`].
    const LISTS: Via;
    /// What follows `ORDER BY name` for byte order: ` COLLATE "C"` on Postgres, nothing on
    /// SQLite.
    const BYTE_ORDER: &'static str;
    /// Whether `RETURNING` may name alias-qualified columns ([`AGENT_COLUMNS`]): Postgres yes;
    /// SQLite no (the row is read back with [`LedgerHooks::agent_row`]).
    const QUALIFIED_RETURNING: bool;

    /// Inserts the members `(agent, recipient key)` of the new `conversation`, joined at `at`.
    /// By default one statement per member; a store may write them in one.
    fn insert_members(
        &self,
        conn: &mut Conn<Self::D>,
        conversation: Uuid,
        members: &[(Uuid, String)],
        at: DateTime<Utc>,
    ) -> impl Future<Output = BusResult<()>> + Send {
        async move {
            for (agent, key) in members {
                stmt::<Self::D>(
                    "INSERT INTO members (conversation_id, agent_id, recipient_key, joined_at)
                     VALUES ($1, $2, $3, $4)",
                )
                .arg(conversation)
                .arg(*agent)
                .arg(key.clone())
                .arg(<Self::D as Dialect>::time(at))
                .run(conn)
                .await
                .map_err(self.db("create conversation"))?;
            }
            Ok(())
        }
    }
}

/// The team `team` of this tenant. Errors: unknown → `NotFound`.
pub async fn team_row<L: LedgerHooks>(
    ledger: &L,
    conn: &mut Conn<L::D>,
    team: Uuid,
) -> BusResult<Team> {
    let row: Option<TeamRow<<L::D as Dialect>::Time>> = stmt::<L::D>(&format!(
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
async fn members_of<L: LedgerHooks>(
    ledger: &L,
    conn: &mut Conn<L::D>,
    conversations: &[Uuid],
) -> BusResult<HashMap<Uuid, Vec<Member>>> {
    let mut by_conversation: HashMap<Uuid, Vec<Member>> = HashMap::new();
    if conversations.is_empty() {
        return Ok(by_conversation);
    }
    let sql = format!(
        "SELECT conversation_id, agent_id, recipient_key, joined_at FROM members
         WHERE {} ORDER BY joined_at, agent_id",
        L::D::any_id("conversation_id", 1, conversations.len())
    );
    let rows: Vec<MemberRow<<L::D as Dialect>::Time>> =
        L::D::bind_ids(stmt::<L::D>(&sql), conversations)
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
pub async fn with_members<L: LedgerHooks>(
    ledger: &L,
    conn: &mut Conn<L::D>,
    team: Uuid,
    rows: Vec<ConversationRow<<L::D as Dialect>::Time>>,
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
pub async fn create_team<L: SqlDirectory>(
    ledger: &L,
    name: &str,
    body_backend: &str,
    inbox: &str,
    at: DateTime<Utc>,
) -> BusResult<Team> {
    let what = "create team";
    let mut held = hold(ledger, L::ONE_WRITE, what).await?;
    let row: TeamRow<<L::D as Dialect>::Time> = stmt::<L::D>(&format!(
        "INSERT INTO teams (id, tenant, name, body_backend, inbox, created_at)
         VALUES ($1, $2, $3, $4, $5, $6) RETURNING {TEAM_COLUMNS}"
    ))
    .arg(Uuid::new_v4())
    .arg(ledger.tenant().as_str().to_owned())
    .arg(name.to_owned())
    .arg(body_backend.to_owned())
    .arg(inbox.to_owned())
    .arg(L::D::time(at))
    .one(&mut held)
    .await
    .map_err(|e| match ledger.bus_error(e, what) {
        BusError::Conflict { .. } => BusError::conflict(format!("team name {name:?} is taken")),
        other => other,
    })?;
    release(ledger, held, what).await?;
    Ok(row.into())
}

/// `Ledger::team`. Errors: unknown → `NotFound`.
pub async fn team<L: SqlDirectory>(ledger: &L, team: Uuid) -> BusResult<Team> {
    let mut conn = ledger.reader("team lookup").await?;
    team_row(ledger, &mut conn, team).await
}

/// `Ledger::teams`: this tenant's teams by name (byte order).
pub async fn teams<L: SqlDirectory>(ledger: &L) -> BusResult<Vec<Team>> {
    let what = "teams";
    let mut conn = ledger.reader(what).await?;
    let rows: Vec<TeamRow<<L::D as Dialect>::Time>> = stmt::<L::D>(&format!(
        "SELECT {TEAM_COLUMNS} FROM teams WHERE tenant = $1 ORDER BY name{}",
        L::BYTE_ORDER
    ))
    .arg(ledger.tenant().as_str().to_owned())
    .all(&mut conn)
    .await
    .map_err(ledger.db(what))?;
    Ok(rows.into_iter().map(Team::from).collect())
}

/// `Ledger::set_team_backends`. Errors: unknown team → `NotFound`.
pub async fn set_team_backends<L: SqlDirectory>(
    ledger: &L,
    team: Uuid,
    body_backend: &str,
    inbox: &str,
) -> BusResult<Team> {
    let what = "set team backends";
    let mut held = hold(ledger, L::ONE_WRITE, what).await?;
    let row: Option<TeamRow<<L::D as Dialect>::Time>> = stmt::<L::D>(&format!(
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
    release(ledger, held, what).await?;
    row.map(Team::from)
        .ok_or_else(|| BusError::not_found(format!("team {team}")))
}

/// `Ledger::create_agent`. Errors: unknown team → `NotFound`; the name taken in the team, or
/// the token hash held by an agent or an operator → `Conflict`.
pub async fn create_agent<L: SqlDirectory>(
    ledger: &L,
    team: Uuid,
    name: &str,
    token_hash: TokenHash,
    at: DateTime<Utc>,
) -> BusResult<Agent> {
    let what = "create agent";
    let mut tx = ledger.begin(what).await?;
    ledger.require_team(&mut tx, team).await?;
    let taken = || BusError::conflict("the agent name or token hash is already in use");
    if ledger.sql().operator_holds(&mut tx, &token_hash).await? {
        return Err(taken());
    }
    let id = Uuid::new_v4();
    let sql = agent_insert::<L>(
        "INSERT INTO agents AS a (id, team_id, name, recipient_key, token_hash, created_at)
         VALUES ($1, $2, $3, $4, $5, $6)",
    );
    let insert = stmt::<L::D>(&sql)
        .arg(id)
        .arg(team)
        .arg(name.to_owned())
        .arg(recipient_key_for(id))
        .arg(token_hash.0.to_vec())
        .arg(L::D::time(at));
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
/// [`SqlDirectory::QUALIFIED_RETURNING`], as it is otherwise.
pub fn agent_insert<L: SqlDirectory>(insert: &str) -> String {
    if L::QUALIFIED_RETURNING {
        format!("{insert} RETURNING {AGENT_COLUMNS}")
    } else {
        insert.to_owned()
    }
}

/// Runs `insert` (the statement of [`agent_insert`] of the agent `id` of `team`, its arguments
/// bound) on `conn` and returns the agent: the row it returned, or else the row read back on
/// `conn`. Errors: the statement's as the error of `what`, passed through `refine` (a unique
/// violation is `Conflict`).
pub async fn inserted_agent<L: SqlDirectory>(
    ledger: &L,
    conn: &mut Conn<L::D>,
    team: Uuid,
    id: Uuid,
    insert: Stmt<'_, <L::D as Dialect>::Db>,
    what: &str,
    refine: impl Fn(BusError) -> BusError + Send,
) -> BusResult<Agent> {
    let failed = |e| refine(ledger.bus_error(e, what));
    if L::QUALIFIED_RETURNING {
        let row: AgentRow<<L::D as Dialect>::Time> = insert.one(conn).await.map_err(failed)?;
        row.try_into()
    } else {
        insert.run(conn).await.map_err(failed)?;
        ledger.agent_row(conn, team, id).await
    }
}

/// `Ledger::agent`. Errors: unknown in `team` → `NotFound`.
pub async fn agent<L: SqlDirectory>(ledger: &L, team: Uuid, agent: Uuid) -> BusResult<Agent> {
    let mut conn = ledger.reader("agent lookup").await?;
    ledger.agent_row(&mut conn, team, agent).await
}

/// `Ledger::agent_by_token`: the unrevoked agent (not a human member) of this tenant holding
/// `token_hash`. Errors: none → `Unauthenticated`.
pub async fn agent_by_token<L: SqlDirectory>(
    ledger: &L,
    token_hash: &TokenHash,
) -> BusResult<Agent> {
    let what = "authenticate";
    let mut conn = ledger.reader(what).await?;
    let row: Option<AgentRow<<L::D as Dialect>::Time>> = stmt::<L::D>(&format!(
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
pub async fn agents<L: SqlDirectory>(ledger: &L, team: Uuid) -> BusResult<Vec<Agent>> {
    let sql = format!(
        "SELECT {AGENT_COLUMNS} FROM agents a WHERE a.team_id = $1 ORDER BY a.name{}",
        L::BYTE_ORDER
    );
    let rows: Vec<AgentRow<<L::D as Dialect>::Time>> = team_rows(
        ledger,
        L::LOOKUPS,
        team,
        "agents",
        stmt::<L::D>(&sql).arg(team),
    )
    .await?;
    rows.into_iter().map(Agent::try_from).collect()
}

/// `Ledger::revoke_agent`: revokes the agent (keeping the first revocation's time) and ends its
/// leases, in one transaction. Errors: unknown team or agent → `NotFound` (nothing changed).
pub async fn revoke_agent<L: SqlDirectory>(
    ledger: &L,
    team: Uuid,
    agent: Uuid,
    at: DateTime<Utc>,
) -> BusResult<Agent> {
    let what = "revoke agent";
    let mut tx = ledger.begin(what).await?;
    if L::D::ROW_LOCKS {
        // The team's lease fence first, always (see the module docs). Without the lock an agent
        // that held no lease could be granted one by an acquire racing this revocation.
        ledger.require_team(&mut tx, team).await?;
        lock_or_create_fence::<L::D>(&mut tx, team)
            .await
            .map_err(ledger.db(what))?;
    } else {
        // The lookup checks team and tenant.
        ledger.agent_row(&mut tx, team, agent).await?;
    }
    // Its leases end in the revocation's transaction; an unknown agent rolls it all back.
    end_leases::<L::D>(
        &mut tx,
        ledger.tenant(),
        Ending::Agent(agent),
        LeaseEnd::Revoked,
        at,
    )
    .await
    .map_err(ledger.db(what))?;
    let revoked = if L::QUALIFIED_RETURNING {
        let row: Option<AgentRow<<L::D as Dialect>::Time>> = stmt::<L::D>(&format!(
            "UPDATE agents AS a SET revoked_at = COALESCE(a.revoked_at, $3)
             FROM teams t
             WHERE a.id = $1 AND a.team_id = $2 AND t.id = a.team_id AND t.tenant = $4
             RETURNING {AGENT_COLUMNS}"
        ))
        .arg(agent)
        .arg(team)
        .arg(L::D::time(at))
        .arg(ledger.tenant().as_str().to_owned())
        .optional(&mut tx)
        .await
        .map_err(ledger.db(what))?;
        row.ok_or_else(|| BusError::not_found(format!("agent {agent}")))?
            .try_into()?
    } else {
        // The agent was found above, in this transaction.
        stmt::<L::D>("UPDATE agents SET revoked_at = COALESCE(revoked_at, $1) WHERE id = $2")
            .arg(L::D::time(at))
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
pub async fn create_conversation<L: SqlDirectory>(
    ledger: &L,
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
        L::D::any_id("id", 2, ids.len()),
        if L::D::ROW_LOCKS { " FOR SHARE" } else { "" }
    );
    let active: Vec<(Uuid, String)> = L::D::bind_ids(stmt::<L::D>(&sql).arg(team), &ids)
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
    stmt::<L::D>(
        "INSERT INTO conversations (id, team_id, title, backend, created_at)
         VALUES ($1, $2, $3, $4, $5)",
    )
    .arg(id)
    .arg(team)
    .arg(title.to_owned())
    .arg(backend.clone())
    .arg(L::D::time(at))
    .run(&mut tx)
    .await
    .map_err(ledger.db(what))?;
    let joined: Vec<(Uuid, String)> = ids.iter().map(|a| (*a, keys[a].clone())).collect();
    ledger.insert_members(&mut tx, id, &joined, at).await?;
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
pub async fn conversation_row<L: LedgerHooks>(
    ledger: &L,
    conn: &mut Conn<L::D>,
    team: Uuid,
    conversation: Uuid,
    what: &str,
) -> BusResult<ConversationRow<<L::D as Dialect>::Time>> {
    let row: Option<ConversationRow<<L::D as Dialect>::Time>> = stmt::<L::D>(
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
pub async fn conversation<L: SqlDirectory>(
    ledger: &L,
    team: Uuid,
    conversation: Uuid,
) -> BusResult<Conversation> {
    let what = "conversation";
    let mut held = hold(ledger, L::LOOKUPS, what).await?;
    let row = conversation_row(ledger, &mut held, team, conversation, what).await?;
    let mut found = with_members(ledger, &mut held, team, vec![row]).await?;
    release(ledger, held, what).await?;
    Ok(found.remove(0))
}

/// `Ledger::conversations`: the team's conversations in creation order, with their members.
/// Errors: unknown team → `NotFound`.
pub async fn conversations<L: SqlDirectory>(
    ledger: &L,
    team: Uuid,
) -> BusResult<Vec<Conversation>> {
    listed(ledger, team, None).await
}

/// `Ledger::conversations_for`: the conversations `agent` is a member of, in creation order.
/// Errors: unknown agent of `team` → `NotFound`.
pub async fn conversations_for<L: SqlDirectory>(
    ledger: &L,
    team: Uuid,
    agent: Uuid,
) -> BusResult<Vec<Conversation>> {
    listed(ledger, team, Some(agent)).await
}

/// The team's conversations (those `member` is a member of, if given) in creation order, with
/// their members, held as [`SqlDirectory::LISTS`]. Errors: unknown team or member →
/// `NotFound`.
async fn listed<L: SqlDirectory>(
    ledger: &L,
    team: Uuid,
    member: Option<Uuid>,
) -> BusResult<Vec<Conversation>> {
    let what = "conversations";
    let mut held = hold(ledger, L::LISTS, what).await?;
    let select = match member {
        Some(agent) => {
            ledger.agent_row(&mut held, team, agent).await?;
            stmt::<L::D>(
                "SELECT c.id, c.title, c.backend, c.created_at FROM conversations c
                 JOIN members m ON m.conversation_id = c.id AND m.agent_id = $2
                 WHERE c.team_id = $1 ORDER BY c.ord",
            )
            .arg(team)
            .arg(agent)
        }
        None => {
            ledger.require_team(&mut held, team).await?;
            stmt::<L::D>(
                "SELECT c.id, c.title, c.backend, c.created_at FROM conversations c
                 WHERE c.team_id = $1 ORDER BY c.ord",
            )
            .arg(team)
        }
    };
    let rows: Vec<ConversationRow<<L::D as Dialect>::Time>> =
        select.all(&mut held).await.map_err(ledger.db(what))?;
    let found = with_members(ledger, &mut held, team, rows).await?;
    release(ledger, held, what).await?;
    Ok(found)
}
