//! The oversight port (`crewbus_ports::Oversight`: what the console reads, and the operators'
//! human members), once for both SQL stores ([`impl_oversight!`](crate::impl_oversight)), over [`SqlOversight`]: the
//! SQL text that differs by dialect and the adapter's own lookups.
//!
//! How each operation holds the store follows [`SqlDirectory`]: the team's reads of several
//! statements (`agent_activity`, `activity`, `storage_use`) as its lookups (Postgres a pool
//! connection, SQLite one read transaction), `conversation_summaries` as its lists (Postgres a
//! read-committed transaction, SQLite one read transaction), `set_status` as its one-statement
//! writes (Postgres a pool connection, SQLite a write transaction), `recipient_states` on a
//! connection (one statement), `human_member` in a write transaction. Each read is one
//! statement after the team check, a constant number whatever the team's size.
//!
//! `human_member` locks the team's row where writers lock rows (`FOR NO KEY UPDATE`), so two
//! first posts of one operator in one team create one human member (the partial unique index
//! `agents_human` says so too); on SQLite the write transaction serialises them.
//!
//! Bucket starts (`activity`) are computed in SQL on the times' microseconds,
//! `t − ((t mod b) + b) mod b` (floor, also before 1970), so they are multiples of the bucket
//! length since the epoch as `crewbus_domain::bucket_start` says.

use std::collections::HashSet;
use std::future::Future;
use std::time::Duration;

use chrono::{DateTime, Utc};
use crewbus_domain::{
    ActivityBucket, Agent, AgentActivity, AgentKind, BusError, BusResult, ConversationSummary,
    Operator, RecipientState, StorageUse, TokenHash, WakeupTarget, human_member_name,
    in_asked_order, recipient_key_for, validate_activity, validate_batch,
};
use uuid::Uuid;

use crate::counter::from_db;
use crate::dialect::Dialect;
use crate::directory::{
    SqlDirectory, agent_insert, hold, inserted_agent, release, team_rows, with_members,
};
use crate::driver::stmt;
use crate::rows::{AGENT_COLUMNS, ActivityRow, AgentRow, RecipientRow};

/// What the shared oversight needs of an SQL ledger beyond [`SqlDirectory`]: the statements
/// whose text differs by dialect (Postgres `LATERAL` joins and `FILTER`, SQLite subqueries and
/// sums of conditions), each with its placeholders as documented, and how `touch_agents`
/// writes.
pub trait SqlOversight: SqlDirectory {
    /// `agent_activity`'s select of [`ActivityRow`]s: the agents of team `$1` by name (byte
    /// order), each with its last activity, its undelivered stored receipts (count and oldest
    /// `stored_at`), its status and its current (unsealed, latest admitted) run.
    fn agent_activity_sql() -> String;

    /// `set_status`'s update of agent `$1` of team `$2` of tenant `$5`: status `$3` (text,
    /// `NULL` to clear) set at `$4` unless it is revoked, returning whether it is revoked (one
    /// `bool` column; no row for an unknown agent).
    const SET_STATUS: &'static str;

    /// `recipient_states`' select of [`RecipientRow`]s of team `$1` of tenant `$2`, up to
    /// (without) the condition on the messages `r.message_id`, which follows as ` AND …` with
    /// its ids from `$3` ([`Dialect::any_id`]).
    const RECIPIENT_STATES: &'static str;

    /// `activity`'s select of `(bucket start in µs, sent, delivered)` by start: the messages of
    /// team `$2` sent, and its receipts delivered, in `[$3, $4)`, in buckets of `$1` µs.
    const ACTIVITY: &'static str;

    /// `storage_use`'s select of `(backend, stored messages, their body bytes, pending
    /// messages)` of team `$1` by backend (byte order): stored and not yet retained, or pending
    /// publication.
    const STORAGE_USE: &'static str;

    /// Marks each of `seen` (non-empty, each once) active at `at` unless it was later already;
    /// returns how many agents changed. Unknown agents are left out.
    fn touch(
        &self,
        seen: &[WakeupTarget],
        at: DateTime<Utc>,
    ) -> impl Future<Output = BusResult<u64>> + Send;
}

/// `Oversight::touch_agents`. Errors: a batch over `MAX_PAGE` → `Invalid`.
pub async fn touch_agents<L: SqlOversight>(
    ledger: &L,
    seen: &[WakeupTarget],
    at: DateTime<Utc>,
) -> BusResult<u64> {
    validate_batch(seen.len())?;
    let mut done = HashSet::new();
    let targets: Vec<WakeupTarget> = seen.iter().copied().filter(|t| done.insert(*t)).collect();
    if targets.is_empty() {
        return Ok(0);
    }
    ledger.touch(&targets, at).await
}

/// `Oversight::agent_activity`. Errors: unknown team → `NotFound`.
pub async fn agent_activity<L: SqlOversight>(
    ledger: &L,
    team: Uuid,
) -> BusResult<Vec<AgentActivity>> {
    let sql = L::agent_activity_sql();
    let select = stmt::<L::D>(&sql).arg(team);
    let rows: Vec<ActivityRow<<L::D as Dialect>::Time>> =
        team_rows(ledger, L::LOOKUPS, team, "agent activity", select).await?;
    rows.into_iter().map(AgentActivity::try_from).collect()
}

/// `Oversight::set_status`: `status` (empty clears it) for `agent`. Errors: unknown →
/// `NotFound`; revoked → `Forbidden` (nothing changed).
pub async fn set_status<L: SqlOversight>(
    ledger: &L,
    agent: &Agent,
    status: &str,
    at: DateTime<Utc>,
) -> BusResult<()> {
    let what = "set status";
    let line = (!status.is_empty()).then(|| status.to_owned());
    let mut held = hold(ledger, L::ONE_WRITE, what).await?;
    let revoked: Option<(bool,)> = stmt::<L::D>(L::SET_STATUS)
        .arg(agent.id)
        .arg(agent.team)
        .arg(line)
        .arg(L::D::time(at))
        .arg(ledger.tenant().as_str().to_owned())
        .optional(&mut held)
        .await
        .map_err(ledger.db(what))?;
    release(ledger, held, what).await?;
    crate::presence::status_set(revoked.map(|(r,)| r), agent)
}

/// `Oversight::conversation_summaries`: the team's conversations in creation order with their
/// members, message counts and last send times. Errors: unknown team → `NotFound`.
pub async fn conversation_summaries<L: SqlOversight>(
    ledger: &L,
    team: Uuid,
) -> BusResult<Vec<ConversationSummary>> {
    let what = "conversation summaries";
    let mut held = hold(ledger, L::LISTS, what).await?;
    ledger.require_team(&mut held, team).await?;
    type Row<T> = (Uuid, String, String, T, i64, Option<T>);
    let rows: Vec<Row<<L::D as Dialect>::Time>> = stmt::<L::D>(
        "SELECT c.id, c.title, c.backend, c.created_at, c.next_seq - 1,
                (SELECT m.sent_at FROM messages m WHERE m.conversation_id = c.id
                 ORDER BY m.seq DESC LIMIT 1)
         FROM conversations c WHERE c.team_id = $1 ORDER BY c.ord",
    )
    .arg(team)
    .all(&mut held)
    .await
    .map_err(ledger.db(what))?;
    let mut conversations = Vec::with_capacity(rows.len());
    let mut sizes = Vec::with_capacity(rows.len());
    for (id, title, backend, created_at, messages, last_sent_at) in rows {
        conversations.push((id, title, backend, created_at));
        sizes.push((messages, last_sent_at));
    }
    let conversations = with_members(ledger, &mut held, team, conversations).await?;
    release(ledger, held, what).await?;
    Ok(conversations
        .into_iter()
        .zip(sizes)
        .map(
            |(conversation, (messages, last_sent_at))| ConversationSummary {
                conversation,
                messages: from_db(messages),
                last_sent_at: last_sent_at.map(Into::into),
            },
        )
        .collect())
}

/// `Oversight::recipient_states`: the receipts of `messages` (of `team`), in the asked order
/// (`in_asked_order`). Errors: a batch over `MAX_PAGE` → `Invalid`.
pub async fn recipient_states<L: SqlOversight>(
    ledger: &L,
    team: Uuid,
    messages: &[Uuid],
) -> BusResult<Vec<RecipientState>> {
    validate_batch(messages.len())?;
    let mut seen = HashSet::new();
    let ids: Vec<Uuid> = messages
        .iter()
        .copied()
        .filter(|m| seen.insert(*m))
        .collect();
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let what = "recipient states";
    let mut conn = ledger.reader(what).await?;
    let sql = format!(
        "{} AND {}",
        L::RECIPIENT_STATES,
        L::D::any_id("r.message_id", 3, ids.len())
    );
    let q = stmt::<L::D>(&sql)
        .arg(team)
        .arg(ledger.tenant().as_str().to_owned());
    let rows: Vec<RecipientRow<<L::D as Dialect>::Time>> = L::D::bind_ids(q, &ids)
        .all(&mut conn)
        .await
        .map_err(ledger.db(what))?;
    Ok(in_asked_order(
        &ids,
        rows.into_iter().map(RecipientState::from).collect(),
    ))
}

/// `Oversight::activity`: the team's sends and deliveries in `[since, until)` by `bucket`.
/// Errors: a bucket under a second or a window the domain refuses → `Invalid`; unknown team →
/// `NotFound`.
pub async fn activity<L: SqlOversight>(
    ledger: &L,
    team: Uuid,
    since: DateTime<Utc>,
    until: DateTime<Utc>,
    bucket: Duration,
) -> BusResult<Vec<ActivityBucket>> {
    let step = validate_activity(since, until, bucket)?;
    let select = stmt::<L::D>(L::ACTIVITY)
        .arg(step)
        .arg(team)
        .arg(L::D::time(since))
        .arg(L::D::time(until));
    let rows: Vec<(i64, i64, i64)> =
        team_rows(ledger, L::LOOKUPS, team, "activity", select).await?;
    Ok(rows
        .into_iter()
        .map(|(start, sent, delivered)| ActivityBucket {
            start: DateTime::from_timestamp_micros(start).unwrap_or(since),
            sent: from_db(sent),
            delivered: from_db(delivered),
        })
        .collect())
}

/// `Oversight::storage_use`: the team's stored and pending messages by backend. Errors: unknown
/// team → `NotFound`.
pub async fn storage_use<L: SqlOversight>(ledger: &L, team: Uuid) -> BusResult<Vec<StorageUse>> {
    let select = stmt::<L::D>(L::STORAGE_USE).arg(team);
    let rows: Vec<(String, i64, i64, i64)> =
        team_rows(ledger, L::LOOKUPS, team, "storage use", select).await?;
    Ok(rows
        .into_iter()
        .map(|(backend, messages, bytes, pending)| StorageUse {
            backend,
            messages: from_db(messages),
            bytes: from_db(bytes),
            pending: from_db(pending),
        })
        .collect())
}

/// `Oversight::human_member`: `operator`'s human member of `team` (created on its first post),
/// made a member of `conversation`. Errors: unknown team or conversation → `NotFound`; the
/// operator revoked or its human member revoked → `Forbidden`; the team outside its scope → its
/// error; the member's name taken → `Conflict`.
pub async fn human_member<L: SqlOversight>(
    ledger: &L,
    team: Uuid,
    conversation: Uuid,
    operator: &Operator,
    at: DateTime<Utc>,
) -> BusResult<Agent> {
    let what = "human member";
    let mut tx = ledger.begin(what).await?;
    // Where writers lock rows, the team's row lock serialises first posts into the team (see
    // the module docs).
    let locked: Option<(i32,)> = stmt::<L::D>(&format!(
        "SELECT 1 FROM teams WHERE id = $1 AND tenant = $2{}",
        L::D::FOR_NO_KEY_UPDATE
    ))
    .arg(team)
    .arg(ledger.tenant().as_str().to_owned())
    .optional(&mut tx)
    .await
    .map_err(ledger.db(what))?;
    if locked.is_none() {
        return Err(BusError::not_found(format!("team {team}")));
    }
    let known: Option<(i32,)> =
        stmt::<L::D>("SELECT 1 FROM conversations WHERE id = $1 AND team_id = $2")
            .arg(conversation)
            .arg(team)
            .optional(&mut tx)
            .await
            .map_err(ledger.db(what))?;
    if known.is_none() {
        return Err(BusError::not_found(format!("conversation {conversation}")));
    }
    let stored = ledger
        .sql()
        .operator_row(&mut tx, operator.id)
        .await?
        .filter(|o| !o.revoked() && !operator.revoked())
        .ok_or_else(|| BusError::forbidden("the operator is revoked"))?;
    stored.check_team(team, &format!("team {team}"))?;
    let found: Option<AgentRow<<L::D as Dialect>::Time>> = stmt::<L::D>(&format!(
        "SELECT {AGENT_COLUMNS} FROM agents a
         WHERE a.team_id = $1 AND a.operator_id = $2 AND a.kind = 'human'"
    ))
    .arg(team)
    .arg(stored.id)
    .optional(&mut tx)
    .await
    .map_err(ledger.db(what))?;
    let agent: Agent = match found {
        Some(row) => row.try_into()?,
        None => {
            let id = Uuid::new_v4();
            let name = human_member_name(&stored.name);
            let sql = agent_insert::<L>(
                "INSERT INTO agents AS a
                     (id, team_id, name, recipient_key, token_hash, created_at, kind, operator_id)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
            );
            let insert = stmt::<L::D>(&sql)
                .arg(id)
                .arg(team)
                .arg(name.clone())
                .arg(recipient_key_for(id))
                .arg(TokenHash::held_by_nobody().0.to_vec())
                .arg(L::D::time(at))
                .arg(AgentKind::Human.as_str().to_owned())
                .arg(stored.id);
            inserted_agent(ledger, &mut tx, team, id, insert, what, |e| match e {
                BusError::Conflict { .. } => {
                    BusError::conflict(format!("agent name {name:?} is taken"))
                }
                other => other,
            })
            .await?
        }
    };
    if agent.revoked() {
        return Err(BusError::forbidden(
            "the operator's human member is revoked",
        ));
    }
    stmt::<L::D>(
        "INSERT INTO members (conversation_id, agent_id, recipient_key, joined_at)
         VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING",
    )
    .arg(conversation)
    .arg(agent.id)
    .arg(agent.recipient_key.clone())
    .arg(L::D::time(at))
    .run(&mut tx)
    .await
    .map_err(ledger.db(what))?;
    ledger.commit(tx, what).await?;
    Ok(agent)
}

/// Implements `crewbus_ports::Oversight` for an [`SqlOversight`] type by delegating every
/// method to this module's function of the same name, so that neither adapter restates the
/// trait.
///
/// ```ignore
/// crewbus_sql::impl_oversight!(MyLedger);
/// ```
#[macro_export]
macro_rules! impl_oversight {
    ($ty:ty) => {
        const _: () = {
            use $crate::__private::{
                ActivityBucket, Agent, AgentActivity, BusResult, ConversationSummary, DateTime,
                Duration, Operator, Oversight, RecipientState, StorageUse, Utc, Uuid, WakeupTarget,
                async_trait,
            };
            use $crate::oversight as sql;

            #[async_trait]
            impl Oversight for $ty {
                async fn touch_agents(
                    &self,
                    seen: &[WakeupTarget],
                    at: DateTime<Utc>,
                ) -> BusResult<u64> {
                    sql::touch_agents(self, seen, at).await
                }

                async fn agent_activity(&self, team: Uuid) -> BusResult<Vec<AgentActivity>> {
                    sql::agent_activity(self, team).await
                }

                async fn set_status(
                    &self,
                    agent: &Agent,
                    status: &str,
                    at: DateTime<Utc>,
                ) -> BusResult<()> {
                    sql::set_status(self, agent, status, at).await
                }

                async fn conversation_summaries(
                    &self,
                    team: Uuid,
                ) -> BusResult<Vec<ConversationSummary>> {
                    sql::conversation_summaries(self, team).await
                }

                async fn recipient_states(
                    &self,
                    team: Uuid,
                    messages: &[Uuid],
                ) -> BusResult<Vec<RecipientState>> {
                    sql::recipient_states(self, team, messages).await
                }

                async fn activity(
                    &self,
                    team: Uuid,
                    since: DateTime<Utc>,
                    until: DateTime<Utc>,
                    bucket: Duration,
                ) -> BusResult<Vec<ActivityBucket>> {
                    sql::activity(self, team, since, until, bucket).await
                }

                async fn storage_use(&self, team: Uuid) -> BusResult<Vec<StorageUse>> {
                    sql::storage_use(self, team).await
                }

                async fn human_member(
                    &self,
                    team: Uuid,
                    conversation: Uuid,
                    operator: &Operator,
                    at: DateTime<Utc>,
                ) -> BusResult<Agent> {
                    sql::human_member(self, team, conversation, operator, at).await
                }
            }
        };
    };
}
