//! `PostgresLedger`: the bus's authority in Postgres.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use crewbus_domain::{
    Agent, BusError, BusResult, ConfirmOutcome, Conversation, DeliveryId, Envelope, HandOut,
    HandOutOutcome, HandOutRequest, HandOutSource, HistoryPage, InboxAck, InboxEvent, LeasedSlot,
    LedgerCounts, Member, Message, Publication, Receipt, RecordKind, ReferencePayload,
    RetentionTarget, RunId, SendRequest, Sent, SettleOutcome, Settlement, Team, TenantId,
    TokenHash, WakeupTarget, body_sha256, ledger_span, positive_ledger_span, recipient_key_for,
    validate_backend_name, validate_batch, validate_limit, validate_name, validate_request_id,
};
use crewbus_ports::Ledger;
use sqlx::{PgConnection, PgPool, Postgres, Transaction};
use uuid::Uuid;

use crate::body::{SCHEME, locator_for, store_body};
use crate::error::bus_error;
use crate::journal::{PostgresJournal, append, lock_run};
use crate::ledger_rows::{
    AGENT_COLUMNS, AgentRow, MESSAGE_COLUMNS, MemberRow, MessageRow, RECEIPT_COLUMNS, ReceiptRow,
    TEAM_COLUMNS, TeamRow, db_i64, from_db,
};
use crate::ledger_settle;

/// One tenant's ledger in Postgres.
///
/// Every method is one transaction. Invariants are also enforced by the schema (unique
/// `(conversation, seq)` and `(conversation, request_id)`, one receipt per (message, recipient),
/// one inbox event per (kind, message, recipient), non-negative counters). In particular:
///
/// - **send** locks the conversation row (`SELECT … FOR NO KEY UPDATE`), so concurrent senders are
///   serialised per conversation: `seq` comes from the row's counter, gap-free (a rolled-back
///   send gives its number back), and a concurrent duplicate request waits and then finds the
///   first one's message. The lock statement also checks the sender and looks the request id
///   up; the writes (seq bump, message, receipts, then the outbox slot or the inbox events) are
///   one statement of data-modifying CTEs whose insert skips a request id taken meanwhile
///   (`ON CONFLICT DO NOTHING`: a repeat committed during the lock wait, answered by the
///   repeat rule) — four round trips for a send without a run (BEGIN, lock, write, COMMIT).
///   For Postgres conversations ([`Ledger::local_backend`] is `Some("postgres")`) the body is
///   written to the table [`crate::PostgresBackend`] reads and the inbox events are enqueued in
///   the same transaction (five round trips); other backends get an outbox slot holding the
///   body.
/// - **lease_slots** / **lease_inbox_events** take rows with `FOR UPDATE SKIP LOCKED`, so
///   concurrent relays never lease the same row, and scan every due row each time (no cursor),
///   so a slot whose send committed after a later one is never skipped.
/// - **settle** locks the batch's live slots in one statement (`FOR UPDATE`, in id order, so
///   concurrent settlers never deadlock) and applies a settlement only with the current
///   generation before `leased_until`; the writes are one statement per outcome kind, whatever
///   the batch size (see `ledger_settle`).
/// - **hand_out** / **confirm** are set-based: a constant number of statements per call
///   (`= ANY($1)` reads, `unnest` writes), whatever the batch size; each item is decided in
///   order in memory, with exactly the per-item rules of the trait. Both lock the receipt rows
///   first, in message id order (`ORDER BY … FOR NO KEY UPDATE OF r`), so concurrent calls
///   serialise per (message, recipient) and cannot deadlock. `confirm` appends one journal
///   record per first confirmation when a run is given.
/// - **messages** is one `id = ANY($1)` read.
/// - Time is always the caller's `at`, bound as a parameter (never `now()` in SQL). Postgres
///   keeps timestamps to the microsecond: times read back are the caller's truncated to µs.
#[derive(Clone)]
pub struct PostgresLedger {
    pool: PgPool,
    tenant: TenantId,
}

impl std::fmt::Debug for PostgresLedger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresLedger")
            .field("tenant", &self.tenant)
            .finish_non_exhaustive()
    }
}

type Tx = Transaction<'static, Postgres>;

/// A candidate of one `hand_out` call as the ledger knows it: the message's place and whether
/// the recipient's receipt is delivered (read under the receipt's row lock).
struct Candidate {
    conversation: Uuid,
    seq: i64,
    delivered: bool,
}

/// The hand-outs of one (message, recipient) recorded before a `hand_out` call: the live one
/// (unconfirmed, `held_until > at`; the latest if several), and whether any exists at all.
struct Prior {
    live: Option<(DeliveryId, DateTime<Utc>)>,
    earlier: bool,
}

/// A hand-out a `hand_out` call inserts (its ack may still be replaced by a later inbox
/// candidate of the same message in the batch).
struct NewHandOut {
    hand_out: HandOut,
    seq: i64,
    ack: Option<InboxAck>,
}

/// Where a message of a `hand_out` call is held: by a hand-out recorded before the call (its
/// delivery id) or by one this call inserts (index into the inserts).
#[derive(Clone, Copy)]
enum Holder {
    Recorded(DeliveryId),
    Inserted(usize),
}

/// `|e| bus_error(e, what)`.
fn db(what: &'static str) -> impl Fn(sqlx::Error) -> BusError {
    move |e| bus_error(e, what)
}

/// `send`'s write (after the checks, under the conversation lock), shared head: bumps the
/// conversation's `next_seq`, inserts the message (`$1` id, `$2` team, `$3` conversation, `$4`
/// seq, `$5` sender, `$6` request id, `$7` body SHA-256, `$8` body length, `$9` backend, `$10`
/// publication, `$11` locator, `$12` sent at, `$13` stored at) unless the request id is taken
/// or the sender is no longer an active member, and one receipt per member other than the
/// sender. The statement returns the message id, or no row when the message was not inserted
/// (nothing else is written then but the bump, which the caller rolls back). The sender is
/// checked again here because this statement's snapshot is taken after the conversation lock
/// was granted: a revocation committed while the send waited for the lock is seen.
macro_rules! send_head {
    () => {
        "WITH bump AS (
             UPDATE conversations SET next_seq = next_seq + 1 WHERE id = $3
         ), msg AS (
             INSERT INTO messages
                 (id, team_id, conversation_id, seq, sender_id, request_id, body_sha256,
                  body_len, backend, publication, locator, sent_at, stored_at)
             SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13
             WHERE EXISTS (
                 SELECT 1 FROM members m JOIN agents a ON a.id = m.agent_id
                 WHERE m.conversation_id = $3 AND m.agent_id = $5 AND a.team_id = $2
                   AND a.revoked_at IS NULL)
             ON CONFLICT (conversation_id, request_id) DO NOTHING
             RETURNING id
         ), rec AS (
             INSERT INTO receipts (message_id, recipient_id, recipient_key, stored_at)
             SELECT msg.id, mb.agent_id, mb.recipient_key, $13
             FROM msg JOIN members mb ON mb.conversation_id = $3 AND mb.agent_id <> $5
             RETURNING message_id, recipient_id, recipient_key
         )"
    };
}

/// `send` to another backend than the ledger's: [`send_head!`] and the outbox slot (`$14` slot
/// id, `$15` tenant, `$16` publish key, `$17` body bytes; due at `$12`).
const SEND_REMOTE: &str = concat!(
    send_head!(),
    ", slot AS (
         INSERT INTO outbox_slots
             (id, tenant, message_id, team_id, conversation_id, backend, publish_key, body,
              next_attempt_at)
         SELECT $14, $15, msg.id, $2, $3, $9, $16, $17, $12 FROM msg
     )
     SELECT id FROM msg"
);

/// `send` to the ledger's own backend: [`send_head!`] and one inbox event per receipt, by
/// recipient key, in the team's inbox now (`$14` reference payload, `$15` tenant).
const SEND_LOCAL: &str = concat!(
    send_head!(),
    ", events AS (
         INSERT INTO inbox_events
             (id, tenant, team_id, message_id, recipient_id, recipient_key, inbox, payload,
              created_at)
         SELECT gen_random_uuid(), $15, $2, rec.message_id, rec.recipient_id, rec.recipient_key,
                t.inbox, $14, $12
         FROM rec JOIN teams t ON t.id = $2
         ORDER BY rec.recipient_key
     )
     SELECT id FROM msg"
);

impl PostgresLedger {
    /// The ledger of `tenant` over `pool` (migrated: [`crate::migrate`]).
    pub fn new(pool: PgPool, tenant: TenantId) -> Self {
        PostgresLedger { pool, tenant }
    }

    /// The journal over the same database and tenant: the runs this ledger checks and writes the
    /// bus's records to.
    pub fn journal(&self) -> PostgresJournal {
        PostgresJournal::new(self.pool.clone(), self.tenant.clone())
    }

    async fn begin(&self, what: &'static str) -> BusResult<Tx> {
        self.pool.begin().await.map_err(db(what))
    }

    async fn commit(tx: Tx, what: &'static str) -> BusResult<()> {
        tx.commit().await.map_err(db(what))
    }

    /// `NotFound` unless `team` is a team of this tenant.
    async fn require_team(&self, conn: &mut PgConnection, team: Uuid) -> BusResult<()> {
        let found: Option<i32> =
            sqlx::query_scalar("SELECT 1 FROM teams WHERE id = $1 AND tenant = $2")
                .bind(team)
                .bind(self.tenant.as_str())
                .fetch_optional(&mut *conn)
                .await
                .map_err(db("team lookup"))?;
        found
            .map(|_| ())
            .ok_or_else(|| BusError::not_found(format!("team {team}")))
    }

    async fn team_row(&self, conn: &mut PgConnection, team: Uuid) -> BusResult<Team> {
        let row: Option<TeamRow> = sqlx::query_as(&format!(
            "SELECT {TEAM_COLUMNS} FROM teams WHERE id = $1 AND tenant = $2"
        ))
        .bind(team)
        .bind(self.tenant.as_str())
        .fetch_optional(&mut *conn)
        .await
        .map_err(db("team lookup"))?;
        row.map(Team::from)
            .ok_or_else(|| BusError::not_found(format!("team {team}")))
    }

    async fn agent_row(
        &self,
        conn: &mut PgConnection,
        team: Uuid,
        agent: Uuid,
    ) -> BusResult<Agent> {
        let row: Option<AgentRow> = sqlx::query_as(&format!(
            "SELECT {AGENT_COLUMNS} FROM agents a JOIN teams t ON t.id = a.team_id
             WHERE a.id = $1 AND a.team_id = $2 AND t.tenant = $3"
        ))
        .bind(agent)
        .bind(team)
        .bind(self.tenant.as_str())
        .fetch_optional(&mut *conn)
        .await
        .map_err(db("agent lookup"))?;
        row.ok_or_else(|| BusError::not_found(format!("agent {agent}")))?
            .try_into()
    }

    async fn message_row(
        &self,
        conn: &mut PgConnection,
        team: Uuid,
        message: Uuid,
    ) -> BusResult<Message> {
        let row: Option<MessageRow> = sqlx::query_as(&format!(
            "SELECT {MESSAGE_COLUMNS} FROM messages m JOIN teams t ON t.id = m.team_id
             WHERE m.id = $1 AND m.team_id = $2 AND t.tenant = $3"
        ))
        .bind(message)
        .bind(team)
        .bind(self.tenant.as_str())
        .fetch_optional(&mut *conn)
        .await
        .map_err(db("message lookup"))?;
        row.ok_or_else(|| BusError::not_found(format!("message {message}")))?
            .try_into()
    }

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
    async fn conversations_with_members(
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

    /// The run rules without the seal, for `agent` of `team`: unknown or of another team →
    /// `NotFound` (another team's run ids are never confirmed to exist), another agent's of
    /// this team → `Forbidden`. Locks the run row; returns whether it is sealed (`false`
    /// without a run).
    async fn check_run_owner(
        &self,
        conn: &mut PgConnection,
        run: Option<RunId>,
        team: Uuid,
        agent: Uuid,
    ) -> BusResult<bool> {
        let Some(run) = run else { return Ok(false) };
        let locked = lock_run(conn, &self.tenant, run)
            .await
            .map_err(db("run lookup"))?
            .filter(|locked| locked.team == team)
            .ok_or_else(|| BusError::not_found(format!("run {run}")))?;
        if locked.agent != agent {
            return Err(BusError::forbidden(format!(
                "run {run} belongs to another agent"
            )));
        }
        Ok(locked.sealed)
    }

    /// The repeat rule of `send`: the message already recorded under the request's
    /// `(conversation, request_id)`, as it stands, `created: false` — or `Conflict` when it was
    /// sent with another body; `None` when the request id is free.
    async fn repeated(
        conn: &mut PgConnection,
        conversation: Uuid,
        request_id: &str,
        sha: &str,
    ) -> BusResult<Option<Sent>> {
        let existing: Option<MessageRow> = sqlx::query_as(&format!(
            "SELECT {MESSAGE_COLUMNS} FROM messages m
             WHERE m.conversation_id = $1 AND m.request_id = $2"
        ))
        .bind(conversation)
        .bind(request_id)
        .fetch_optional(&mut *conn)
        .await
        .map_err(db("send"))?;
        let Some(existing) = existing else {
            return Ok(None);
        };
        let message = Message::try_from(existing)?;
        if message.body_sha256 != sha {
            return Err(BusError::conflict(
                "request id was already used with another body",
            ));
        }
        Ok(Some(Sent {
            message,
            created: false,
        }))
    }

    /// `hand_out`, step 1: the candidates among `ids` (sorted, distinct) that are `Stored`
    /// messages of `team` (of this tenant) with a receipt for `recipient`, by message id. The receipt rows are
    /// locked in message id order (deterministic, so concurrent calls cannot deadlock):
    /// concurrent hand-outs of one message to one recipient are serialised, and the hand-outs
    /// read next (a later statement, a fresh snapshot) include the other call's.
    async fn lock_candidates(
        &self,
        conn: &mut PgConnection,
        team: Uuid,
        recipient: Uuid,
        ids: &[Uuid],
    ) -> BusResult<HashMap<Uuid, Candidate>> {
        if ids.is_empty() {
            return Ok(HashMap::new());
        }
        let rows: Vec<(Uuid, Uuid, i64, bool)> = sqlx::query_as(
            "SELECT m.id, m.conversation_id, m.seq, r.delivered_at IS NOT NULL
             FROM messages m
             JOIN teams t ON t.id = m.team_id AND t.tenant = $4
             JOIN receipts r ON r.message_id = m.id AND r.recipient_id = $2
             WHERE m.id = ANY($1) AND m.team_id = $3 AND m.publication = 'stored'
             ORDER BY m.id
             FOR NO KEY UPDATE OF r",
        )
        .bind(ids)
        .bind(recipient)
        .bind(team)
        .bind(self.tenant.as_str())
        .fetch_all(&mut *conn)
        .await
        .map_err(db("hand-out"))?;
        Ok(rows
            .into_iter()
            .map(|(id, conversation, seq, delivered)| {
                (
                    id,
                    Candidate {
                        conversation,
                        seq,
                        delivered,
                    },
                )
            })
            .collect())
    }

    /// `hand_out`, step 2: the hand-outs of `ids` to `recipient` recorded so far, by message id
    /// (a message never handed out is absent).
    async fn prior_hand_outs(
        conn: &mut PgConnection,
        recipient: Uuid,
        ids: &[Uuid],
        at: DateTime<Utc>,
    ) -> BusResult<HashMap<Uuid, Prior>> {
        let rows: Vec<(Uuid, bool, Uuid, DateTime<Utc>)> = sqlx::query_as(
            "SELECT DISTINCT ON (message_id)
                    message_id, confirmed_at IS NULL AND held_until > $3, delivery_id, held_until
             FROM hand_outs
             WHERE message_id = ANY($1) AND recipient_id = $2
             ORDER BY message_id, (confirmed_at IS NULL AND held_until > $3) DESC, ord DESC",
        )
        .bind(ids)
        .bind(recipient)
        .bind(at)
        .fetch_all(&mut *conn)
        .await
        .map_err(db("hand-out"))?;
        Ok(rows
            .into_iter()
            .map(|(message, live, delivery, until)| {
                let prior = Prior {
                    live: live.then_some((DeliveryId(delivery), until)),
                    earlier: true,
                };
                (message, prior)
            })
            .collect())
    }

    /// `hand_out`, step 3: replaces the acks of hand-outs recorded before the call (one
    /// statement; rows in delivery id order).
    async fn replace_acks(
        conn: &mut PgConnection,
        acks: &BTreeMap<Uuid, InboxAck>,
    ) -> BusResult<()> {
        if acks.is_empty() {
            return Ok(());
        }
        let deliveries: Vec<Uuid> = acks.keys().copied().collect();
        let inboxes: Vec<&str> = acks.values().map(|a| a.inbox.as_str()).collect();
        let subjects: Vec<&str> = acks.values().map(|a| a.ack_subject.as_str()).collect();
        sqlx::query(
            "UPDATE hand_outs h SET ack_inbox = u.inbox, ack_subject = u.subject
             FROM unnest($1::uuid[], $2::text[], $3::text[]) AS u (delivery_id, inbox, subject)
             WHERE h.delivery_id = u.delivery_id",
        )
        .bind(&deliveries)
        .bind(&inboxes)
        .bind(&subjects)
        .execute(&mut *conn)
        .await
        .map_err(db("hand-out"))?;
        Ok(())
    }

    /// `hand_out`, step 4: inserts the new hand-outs (one statement).
    async fn insert_hand_outs(
        conn: &mut PgConnection,
        team: Uuid,
        rows: &[NewHandOut],
    ) -> BusResult<()> {
        let Some(first) = rows.first() else {
            return Ok(());
        };
        let (recipient, issued_at, held_until) = (
            first.hand_out.recipient,
            first.hand_out.issued_at,
            first.hand_out.held_until,
        );
        let deliveries: Vec<Uuid> = rows.iter().map(|r| r.hand_out.delivery.0).collect();
        let messages: Vec<Uuid> = rows.iter().map(|r| r.hand_out.message).collect();
        let conversations: Vec<Uuid> = rows.iter().map(|r| r.hand_out.conversation).collect();
        let seqs: Vec<i64> = rows.iter().map(|r| r.seq).collect();
        let redelivered: Vec<bool> = rows.iter().map(|r| r.hand_out.redelivered).collect();
        let inboxes: Vec<Option<&str>> = rows
            .iter()
            .map(|r| r.ack.as_ref().map(|a| a.inbox.as_str()))
            .collect();
        let subjects: Vec<Option<&str>> = rows
            .iter()
            .map(|r| r.ack.as_ref().map(|a| a.ack_subject.as_str()))
            .collect();
        sqlx::query(
            "INSERT INTO hand_outs
                 (delivery_id, team_id, message_id, recipient_id, conversation_id, seq,
                  redelivered, issued_at, held_until, ack_inbox, ack_subject)
             SELECT u.delivery_id, $1, u.message_id, $2, u.conversation_id, u.seq,
                    u.redelivered, $3, $4, u.ack_inbox, u.ack_subject
             FROM unnest($5::uuid[], $6::uuid[], $7::uuid[], $8::int8[], $9::bool[],
                         $10::text[], $11::text[])
                  AS u (delivery_id, message_id, conversation_id, seq, redelivered,
                        ack_inbox, ack_subject)",
        )
        .bind(team)
        .bind(recipient)
        .bind(issued_at)
        .bind(held_until)
        .bind(&deliveries)
        .bind(&messages)
        .bind(&conversations)
        .bind(&seqs)
        .bind(&redelivered)
        .bind(&inboxes)
        .bind(&subjects)
        .execute(&mut *conn)
        .await
        .map_err(db("hand-out"))?;
        Ok(())
    }
}

#[async_trait]
impl Ledger for PostgresLedger {
    fn tenant(&self) -> &TenantId {
        &self.tenant
    }

    fn local_backend(&self) -> Option<&'static str> {
        Some(SCHEME)
    }

    async fn create_team(
        &self,
        name: &str,
        body_backend: &str,
        inbox: &str,
        at: DateTime<Utc>,
    ) -> BusResult<Team> {
        validate_name("team name", name)?;
        validate_backend_name("body backend", body_backend)?;
        validate_backend_name("inbox", inbox)?;
        let row: TeamRow = sqlx::query_as(&format!(
            "INSERT INTO teams (id, tenant, name, body_backend, inbox, created_at)
             VALUES ($1, $2, $3, $4, $5, $6) RETURNING {TEAM_COLUMNS}"
        ))
        .bind(Uuid::new_v4())
        .bind(self.tenant.as_str())
        .bind(name)
        .bind(body_backend)
        .bind(inbox)
        .bind(at)
        .fetch_one(&self.pool)
        .await
        .map_err(|e| match bus_error(e, "create team") {
            BusError::Conflict { .. } => BusError::conflict(format!("team name {name:?} is taken")),
            other => other,
        })?;
        Ok(row.into())
    }

    async fn team(&self, team: Uuid) -> BusResult<Team> {
        let mut conn = self.pool.acquire().await.map_err(db("team lookup"))?;
        self.team_row(&mut conn, team).await
    }

    async fn teams(&self) -> BusResult<Vec<Team>> {
        let rows: Vec<TeamRow> = sqlx::query_as(&format!(
            "SELECT {TEAM_COLUMNS} FROM teams WHERE tenant = $1 ORDER BY name COLLATE \"C\""
        ))
        .bind(self.tenant.as_str())
        .fetch_all(&self.pool)
        .await
        .map_err(db("teams"))?;
        Ok(rows.into_iter().map(Team::from).collect())
    }

    async fn set_team_backends(
        &self,
        team: Uuid,
        body_backend: &str,
        inbox: &str,
    ) -> BusResult<Team> {
        validate_backend_name("body backend", body_backend)?;
        validate_backend_name("inbox", inbox)?;
        let row: Option<TeamRow> = sqlx::query_as(&format!(
            "UPDATE teams SET body_backend = $3, inbox = $4 WHERE id = $1 AND tenant = $2
             RETURNING {TEAM_COLUMNS}"
        ))
        .bind(team)
        .bind(self.tenant.as_str())
        .bind(body_backend)
        .bind(inbox)
        .fetch_optional(&self.pool)
        .await
        .map_err(db("set team backends"))?;
        row.map(Team::from)
            .ok_or_else(|| BusError::not_found(format!("team {team}")))
    }

    async fn create_agent(
        &self,
        team: Uuid,
        name: &str,
        token_hash: TokenHash,
        at: DateTime<Utc>,
    ) -> BusResult<Agent> {
        validate_name("agent name", name)?;
        let what = "create agent";
        let mut tx = self.begin(what).await?;
        self.require_team(&mut tx, team).await?;
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
            BusError::Conflict { .. } => {
                BusError::conflict("the agent name or token hash is already in use")
            }
            other => other,
        })?;
        Self::commit(tx, what).await?;
        row.try_into()
    }

    async fn agent(&self, team: Uuid, agent: Uuid) -> BusResult<Agent> {
        let mut conn = self.pool.acquire().await.map_err(db("agent lookup"))?;
        self.agent_row(&mut conn, team, agent).await
    }

    async fn agent_by_token(&self, token_hash: &TokenHash) -> BusResult<Agent> {
        let row: Option<AgentRow> = sqlx::query_as(&format!(
            "SELECT {AGENT_COLUMNS} FROM agents a JOIN teams t ON t.id = a.team_id
             WHERE a.token_hash = $1 AND t.tenant = $2 AND a.revoked_at IS NULL"
        ))
        .bind(&token_hash.0[..])
        .bind(self.tenant.as_str())
        .fetch_optional(&self.pool)
        .await
        .map_err(db("authenticate"))?;
        row.ok_or(BusError::Unauthenticated)?.try_into()
    }

    async fn agents(&self, team: Uuid) -> BusResult<Vec<Agent>> {
        let what = "agents";
        let mut conn = self.pool.acquire().await.map_err(db(what))?;
        self.require_team(&mut conn, team).await?;
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

    async fn revoke_agent(&self, team: Uuid, agent: Uuid, at: DateTime<Utc>) -> BusResult<Agent> {
        let row: Option<AgentRow> = sqlx::query_as(&format!(
            "UPDATE agents AS a SET revoked_at = COALESCE(a.revoked_at, $3)
             FROM teams t
             WHERE a.id = $1 AND a.team_id = $2 AND t.id = a.team_id AND t.tenant = $4
             RETURNING {AGENT_COLUMNS}"
        ))
        .bind(agent)
        .bind(team)
        .bind(at)
        .bind(self.tenant.as_str())
        .fetch_optional(&self.pool)
        .await
        .map_err(db("revoke agent"))?;
        row.ok_or_else(|| BusError::not_found(format!("agent {agent}")))?
            .try_into()
    }

    async fn create_conversation(
        &self,
        team: Uuid,
        creator: Uuid,
        title: &str,
        members: &[Uuid],
        at: DateTime<Utc>,
    ) -> BusResult<Conversation> {
        validate_name("conversation title", title)?;
        validate_batch(members.len())?;
        let what = "create conversation";
        let mut tx = self.begin(what).await?;
        let backend = self.team_row(&mut tx, team).await?.body_backend;
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
        Self::commit(tx, what).await?;
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

    async fn conversation(&self, team: Uuid, conversation: Uuid) -> BusResult<Conversation> {
        let what = "conversation";
        let mut conn = self.pool.acquire().await.map_err(db(what))?;
        let row: Option<(String, String, DateTime<Utc>)> = sqlx::query_as(
            "SELECT c.title, c.backend, c.created_at FROM conversations c
             JOIN teams t ON t.id = c.team_id
             WHERE c.id = $1 AND c.team_id = $2 AND t.tenant = $3",
        )
        .bind(conversation)
        .bind(team)
        .bind(self.tenant.as_str())
        .fetch_optional(&mut *conn)
        .await
        .map_err(db(what))?;
        let (title, backend, created_at) =
            row.ok_or_else(|| BusError::not_found(format!("conversation {conversation}")))?;
        let mut members = Self::members_of(&mut conn, &[conversation]).await?;
        Ok(Conversation {
            id: conversation,
            team,
            title,
            backend,
            created_at,
            members: members.remove(&conversation).unwrap_or_default(),
        })
    }

    async fn conversations(&self, team: Uuid) -> BusResult<Vec<Conversation>> {
        let what = "conversations";
        let mut tx = self.begin(what).await?;
        self.require_team(&mut tx, team).await?;
        let rows: Vec<(Uuid, String, String, DateTime<Utc>)> = sqlx::query_as(
            "SELECT c.id, c.title, c.backend, c.created_at FROM conversations c
             WHERE c.team_id = $1 ORDER BY c.ord",
        )
        .bind(team)
        .fetch_all(&mut *tx)
        .await
        .map_err(db(what))?;
        Self::conversations_with_members(tx, team, rows).await
    }

    async fn conversations_for(&self, team: Uuid, agent: Uuid) -> BusResult<Vec<Conversation>> {
        let what = "conversations";
        let mut tx = self.begin(what).await?;
        self.agent_row(&mut tx, team, agent).await?;
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
        Self::conversations_with_members(tx, team, rows).await
    }
    async fn send(&self, request: SendRequest, at: DateTime<Utc>) -> BusResult<Sent> {
        validate_request_id(&request.request_id)?;
        let what = "send";
        let mut tx = self.begin(what).await?;
        // The conversation row is the per-conversation lock: seq allocation and the insert
        // happen under it. The same statement checks the sender and whether the request id is
        // taken, under the statement's snapshot (taken before any wait for the lock); `next_seq`
        // is the locked row's latest. A repeat that committed while this send waited for the
        // lock is caught by the insert (`ON CONFLICT … DO NOTHING`) and looked up again.
        let conv: Option<(String, i64, bool, bool)> = sqlx::query_as(
            "SELECT c.backend, c.next_seq,
                    EXISTS (
                        SELECT 1 FROM members m JOIN agents a ON a.id = m.agent_id
                        WHERE m.conversation_id = c.id AND m.agent_id = $4
                          AND a.team_id = c.team_id AND a.revoked_at IS NULL),
                    EXISTS (
                        SELECT 1 FROM messages e
                        WHERE e.conversation_id = c.id AND e.request_id = $5)
             FROM conversations c JOIN teams t ON t.id = c.team_id
             WHERE c.id = $1 AND c.team_id = $2 AND t.tenant = $3
             FOR NO KEY UPDATE OF c",
        )
        .bind(request.conversation)
        .bind(request.team)
        .bind(self.tenant.as_str())
        .bind(request.sender)
        .bind(&request.request_id)
        .fetch_optional(&mut *tx)
        .await
        .map_err(db(what))?;
        let (backend, next_seq, sender_ok, repeat) = conv
            .ok_or_else(|| BusError::not_found(format!("conversation {}", request.conversation)))?;
        if !sender_ok {
            return Err(BusError::forbidden(
                "the sender is not an active member of the conversation",
            ));
        }
        let sealed = self
            .check_run_owner(&mut tx, request.run, request.team, request.sender)
            .await?;
        let sha = body_sha256(&request.body);
        // The repeat rule; when sealed, look again: a repeat committed during the lock wait
        // answers before the seal does.
        if (repeat || sealed)
            && let Some(sent) =
                Self::repeated(&mut tx, request.conversation, &request.request_id, &sha).await?
        {
            return Ok(sent);
        }
        if sealed {
            return Err(BusError::conflict(format!(
                "run {} is sealed",
                request.run.map(|r| r.to_string()).unwrap_or_default()
            )));
        }
        let seq = from_db(next_seq);
        let id = Uuid::new_v4();
        let local = backend == SCHEME;
        let mut message = Message {
            id,
            team: request.team,
            conversation: request.conversation,
            seq,
            sender: request.sender,
            request_id: request.request_id.clone(),
            body_sha256: sha,
            body_len: request.body.len() as u64,
            backend: backend.clone(),
            locator: None,
            publication: Publication::PendingPublication,
            sent_at: at,
            stored_at: None,
            retained_at: None,
            failure: None,
        };
        if local {
            message.publication = Publication::Stored;
            message.locator = Some(locator_for(id));
            message.stored_at = Some(at);
        }
        let envelope = Envelope {
            message_id: id,
            conversation_id: request.conversation,
            team_id: request.team,
            body: request.body,
            publish_key: Uuid::new_v4(),
        };
        // One statement: seq bump, message, receipts, and the outbox slot (other backends) or
        // the inbox events (local backend). Foreign keys are checked at the statement's end.
        let query = sqlx::query_scalar(if local { SEND_LOCAL } else { SEND_REMOTE })
            .bind(id)
            .bind(request.team)
            .bind(request.conversation)
            .bind(next_seq)
            .bind(request.sender)
            .bind(&request.request_id)
            .bind(&message.body_sha256)
            .bind(db_i64(message.body_len))
            .bind(&backend)
            .bind(message.publication.as_str())
            .bind(message.locator.as_ref().map(|l| l.as_str()))
            .bind(at)
            .bind(message.stored_at);
        let query = if local {
            let payload = ReferencePayload {
                message: id,
                conversation: request.conversation,
                seq,
            };
            query.bind(payload.to_json()).bind(self.tenant.as_str())
        } else {
            query
                .bind(Uuid::new_v4())
                .bind(self.tenant.as_str())
                .bind(envelope.publish_key)
                .bind(envelope.body.as_bytes())
        };
        let inserted: Option<Uuid> = query.fetch_optional(&mut *tx).await.map_err(db(what))?;
        if inserted.is_none() {
            // Not inserted: the sender was revoked, or the request id was taken by a send that
            // committed while this one waited for the conversation lock (this transaction is
            // rolled back). Checked in the trait's order: the sender, then the repeat rule.
            let active: bool = sqlx::query_scalar(
                "SELECT EXISTS (
                     SELECT 1 FROM members m JOIN agents a ON a.id = m.agent_id
                     WHERE m.conversation_id = $1 AND m.agent_id = $2 AND a.team_id = $3
                       AND a.revoked_at IS NULL)",
            )
            .bind(request.conversation)
            .bind(request.sender)
            .bind(request.team)
            .fetch_one(&mut *tx)
            .await
            .map_err(db(what))?;
            if !active {
                return Err(BusError::forbidden(
                    "the sender is not an active member of the conversation",
                ));
            }
            return Self::repeated(
                &mut tx,
                request.conversation,
                &request.request_id,
                &message.body_sha256,
            )
            .await?
            .ok_or_else(|| BusError::conflict("the request id is taken"));
        }
        if local {
            match store_body(&mut tx, &envelope, at).await {
                Ok(_) => {}
                Err(Ok(refused)) => return Err(refused),
                Err(Err(e)) => return Err(bus_error(e, what)),
            }
        }
        if let Some(run) = request.run {
            let kind = RecordKind::MessageSent {
                conversation: request.conversation,
                message: id,
                seq,
            };
            append(&mut tx, run, at, &kind).await.map_err(db(what))?;
        }
        Self::commit(tx, what).await?;
        Ok(Sent {
            message,
            created: true,
        })
    }

    async fn message(&self, team: Uuid, message: Uuid) -> BusResult<Message> {
        let mut conn = self.pool.acquire().await.map_err(db("message lookup"))?;
        self.message_row(&mut conn, team, message).await
    }

    async fn messages(&self, team: Uuid, ids: &[Uuid]) -> BusResult<Vec<Message>> {
        validate_batch(ids.len())?;
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let what = "message lookup";
        let rows: Vec<MessageRow> = sqlx::query_as(&format!(
            "SELECT {MESSAGE_COLUMNS} FROM messages m JOIN teams t ON t.id = m.team_id
             WHERE m.id = ANY($1) AND m.team_id = $2 AND t.tenant = $3"
        ))
        .bind(ids)
        .bind(team)
        .bind(self.tenant.as_str())
        .fetch_all(&self.pool)
        .await
        .map_err(db(what))?;
        let mut found: HashMap<Uuid, Message> = HashMap::with_capacity(rows.len());
        for row in rows {
            let message = Message::try_from(row)?;
            found.insert(message.id, message);
        }
        // The order of first appearance in `ids`; `remove` answers a repeated id once.
        Ok(ids.iter().filter_map(|id| found.remove(id)).collect())
    }

    async fn lease_slots(
        &self,
        at: DateTime<Utc>,
        lease_for: Duration,
        limit: usize,
    ) -> BusResult<Vec<LeasedSlot>> {
        validate_limit(limit)?;
        let until = at + positive_ledger_span(lease_for, "lease_for")?;
        #[derive(sqlx::FromRow)]
        struct Row {
            id: Uuid,
            generation: i64,
            backend: String,
            message_id: Uuid,
            conversation_id: Uuid,
            team_id: Uuid,
            body: Vec<u8>,
            publish_key: Uuid,
            attempts: i32,
            uncertain: bool,
            next_attempt_at: DateTime<Utc>,
            ord: i64,
        }
        let mut rows: Vec<Row> = sqlx::query_as(
            "WITH due AS (
                 SELECT id FROM outbox_slots
                 WHERE tenant = $1 AND NOT failed AND next_attempt_at <= $2
                   AND (leased_until IS NULL OR leased_until <= $2)
                 ORDER BY next_attempt_at, ord
                 LIMIT $3
                 FOR UPDATE SKIP LOCKED)
             UPDATE outbox_slots s SET generation = s.generation + 1, leased_until = $4
             FROM due WHERE s.id = due.id
             RETURNING s.id, s.generation, s.backend, s.message_id, s.conversation_id,
                       s.team_id, s.body, s.publish_key, s.attempts, s.uncertain,
                       s.next_attempt_at, s.ord",
        )
        .bind(self.tenant.as_str())
        .bind(at)
        .bind(limit as i64)
        .bind(until)
        .fetch_all(&self.pool)
        .await
        .map_err(db("lease slots"))?;
        rows.sort_by_key(|r| (r.next_attempt_at, r.ord));
        rows.into_iter()
            .map(|r| {
                let body = String::from_utf8(r.body)
                    .map_err(|_| BusError::invalid("a slot's stored body is not UTF-8"))?;
                Ok(LeasedSlot {
                    slot: r.id,
                    generation: from_db(r.generation),
                    backend: r.backend,
                    envelope: Envelope {
                        message_id: r.message_id,
                        conversation_id: r.conversation_id,
                        team_id: r.team_id,
                        body,
                        publish_key: r.publish_key,
                    },
                    attempts: u32::try_from(r.attempts).unwrap_or(0),
                    uncertain: r.uncertain,
                    leased_until: until,
                })
            })
            .collect()
    }

    async fn settle(
        &self,
        settlements: &[Settlement],
        at: DateTime<Utc>,
    ) -> BusResult<Vec<SettleOutcome>> {
        validate_batch(settlements.len())?;
        if settlements.is_empty() {
            return Ok(Vec::new());
        }
        let what = "settle";
        let mut tx = self.begin(what).await?;
        let outcomes = ledger_settle::settle(&mut tx, &self.tenant, settlements, at).await?;
        Self::commit(tx, what).await?;
        Ok(outcomes)
    }

    async fn lease_inbox_events(
        &self,
        at: DateTime<Utc>,
        lease_for: Duration,
        limit: usize,
    ) -> BusResult<Vec<InboxEvent>> {
        validate_limit(limit)?;
        let until = at + positive_ledger_span(lease_for, "lease_for")?;
        #[derive(sqlx::FromRow)]
        struct Row {
            id: Uuid,
            team_id: Uuid,
            inbox: String,
            message_id: Uuid,
            recipient_id: Uuid,
            recipient_key: String,
            payload: String,
            created_at: DateTime<Utc>,
            ord: i64,
        }
        let mut rows: Vec<Row> = sqlx::query_as(
            "WITH due AS (
                 SELECT id FROM inbox_events
                 WHERE tenant = $1 AND published_at IS NULL
                   AND (leased_until IS NULL OR leased_until <= $2)
                 ORDER BY ord
                 LIMIT $3
                 FOR UPDATE SKIP LOCKED)
             UPDATE inbox_events e SET leased_until = $4
             FROM due WHERE e.id = due.id
             RETURNING e.id, e.team_id, e.inbox, e.message_id, e.recipient_id,
                       e.recipient_key, e.payload, e.created_at, e.ord",
        )
        .bind(self.tenant.as_str())
        .bind(at)
        .bind(limit as i64)
        .bind(until)
        .fetch_all(&self.pool)
        .await
        .map_err(db("lease inbox events"))?;
        rows.sort_by_key(|r| r.ord);
        Ok(rows
            .into_iter()
            .map(|r| InboxEvent {
                id: r.id,
                team: r.team_id,
                inbox: r.inbox,
                message: r.message_id,
                recipient: r.recipient_id,
                recipient_key: r.recipient_key,
                payload: r.payload,
                created_at: r.created_at,
            })
            .collect())
    }

    async fn mark_published(&self, events: &[Uuid], at: DateTime<Utc>) -> BusResult<u64> {
        validate_batch(events.len())?;
        let done = sqlx::query(
            "UPDATE inbox_events SET published_at = $2
             WHERE id = ANY($1) AND tenant = $3 AND published_at IS NULL",
        )
        .bind(events)
        .bind(at)
        .bind(self.tenant.as_str())
        .execute(&self.pool)
        .await
        .map_err(db("mark published"))?;
        Ok(done.rows_affected())
    }

    async fn hand_out(
        &self,
        team: Uuid,
        recipient: Uuid,
        requests: &[HandOutRequest],
        grace: Duration,
        at: DateTime<Utc>,
    ) -> BusResult<Vec<HandOutOutcome>> {
        validate_batch(requests.len())?;
        let held_until = at + ledger_span(grace)?;
        let what = "hand-out";
        let mut tx = self.begin(what).await?;
        // A constant number of statements whatever the batch size: lock the receipts, read the
        // earlier hand-outs, then decide every request here, in order, and write the acks that
        // move and the new hand-outs in one statement each.
        let mut ids: Vec<Uuid> = requests.iter().map(|r| r.message).collect();
        ids.sort_unstable();
        ids.dedup();
        let candidates = self.lock_candidates(&mut tx, team, recipient, &ids).await?;
        if candidates.is_empty() {
            // A receipt of the team's message proves the recipient is the team's agent; without
            // one, an unknown recipient is `NotFound`.
            self.agent_row(&mut tx, team, recipient).await?;
        }
        if requests.is_empty() {
            Self::commit(tx, what).await?;
            return Ok(Vec::new());
        }
        let open: Vec<Uuid> = ids
            .into_iter()
            .filter(|id| candidates.get(id).is_some_and(|c| !c.delivered))
            .collect();
        let prior = if open.is_empty() {
            HashMap::new()
        } else {
            Self::prior_hand_outs(&mut tx, recipient, &open, at).await?
        };
        let mut holders: HashMap<Uuid, (Holder, DateTime<Utc>)> = prior
            .iter()
            .filter_map(|(m, p)| p.live.map(|(d, until)| (*m, (Holder::Recorded(d), until))))
            .collect();
        let mut inserts: Vec<NewHandOut> = Vec::new();
        let mut moved_acks: BTreeMap<Uuid, InboxAck> = BTreeMap::new();
        let mut outcomes = Vec::with_capacity(requests.len());
        for request in requests {
            let message = request.message;
            let Some(candidate) = candidates.get(&message) else {
                outcomes.push(HandOutOutcome::Unknown { message });
                continue;
            };
            if candidate.delivered {
                outcomes.push(HandOutOutcome::AlreadyDelivered { message });
                continue;
            }
            if let Some((holder, until)) = holders.get(&message).copied() {
                // Held: an inbox candidate's ack replaces the holding hand-out's.
                if let HandOutSource::Inbox { ack, .. } = &request.source {
                    match holder {
                        Holder::Recorded(d) => {
                            moved_acks.insert(d.0, ack.clone());
                        }
                        Holder::Inserted(i) => inserts[i].ack = Some(ack.clone()),
                    }
                }
                outcomes.push(HandOutOutcome::Held { message, until });
                continue;
            }
            let earlier = prior.get(&message).is_some_and(|p| p.earlier);
            let (ack, deliveries) = match &request.source {
                HandOutSource::Inbox {
                    ack, deliveries, ..
                } => (Some(ack.clone()), *deliveries),
                HandOutSource::Ledger => (None, 1),
            };
            let hand_out = HandOut {
                delivery: DeliveryId(Uuid::new_v4()),
                message,
                conversation: candidate.conversation,
                seq: from_db(candidate.seq),
                recipient,
                redelivered: earlier || deliveries > 1,
                issued_at: at,
                held_until,
            };
            holders.insert(message, (Holder::Inserted(inserts.len()), held_until));
            outcomes.push(HandOutOutcome::Issued(hand_out.clone()));
            inserts.push(NewHandOut {
                hand_out,
                seq: candidate.seq,
                ack,
            });
        }
        Self::replace_acks(&mut tx, &moved_acks).await?;
        Self::insert_hand_outs(&mut tx, team, &inserts).await?;
        Self::commit(tx, what).await?;
        Ok(outcomes)
    }

    async fn undelivered(
        &self,
        team: Uuid,
        recipient: Uuid,
        stored_before: DateTime<Utc>,
        at: DateTime<Utc>,
        limit: usize,
    ) -> BusResult<Vec<Uuid>> {
        validate_limit(limit)?;
        let what = "undelivered";
        let mut conn = self.pool.acquire().await.map_err(db(what))?;
        self.agent_row(&mut conn, team, recipient).await?;
        let ids: Vec<Uuid> = sqlx::query_scalar(
            "SELECT m.id FROM receipts r JOIN messages m ON m.id = r.message_id
             WHERE r.recipient_id = $1 AND r.delivered_at IS NULL AND m.team_id = $2
               AND m.publication = 'stored' AND m.stored_at < $3
               AND NOT EXISTS (
                   SELECT 1 FROM hand_outs h
                   WHERE h.message_id = m.id AND h.recipient_id = $1
                     AND h.confirmed_at IS NULL AND h.held_until > $4)
             ORDER BY m.stored_at, m.conversation_id, m.seq
             LIMIT $5",
        )
        .bind(recipient)
        .bind(team)
        .bind(stored_before)
        .bind(at)
        .bind(limit as i64)
        .fetch_all(&mut *conn)
        .await
        .map_err(db(what))?;
        Ok(ids)
    }

    async fn wakeable(
        &self,
        targets: &[WakeupTarget],
        stored_before: DateTime<Utc>,
        at: DateTime<Utc>,
    ) -> BusResult<Vec<WakeupTarget>> {
        validate_batch(targets.len())?;
        if targets.is_empty() {
            return Ok(Vec::new());
        }
        let teams: Vec<Uuid> = targets.iter().map(|t| t.team).collect();
        let agents: Vec<Uuid> = targets.iter().map(|t| t.agent).collect();
        // One statement for every waiter: the agent gone or revoked, or the top-up query's
        // condition (`undelivered`) holding for at least one message.
        let rows: Vec<(Uuid, Uuid)> = sqlx::query_as(
            "SELECT DISTINCT w.team, w.agent FROM unnest($1::uuid[], $2::uuid[]) AS w(team, agent)
             WHERE NOT EXISTS (
                     SELECT 1 FROM agents a JOIN teams t ON t.id = a.team_id
                     WHERE a.id = w.agent AND a.team_id = w.team AND t.tenant = $3
                       AND a.revoked_at IS NULL)
                OR EXISTS (
                     SELECT 1 FROM receipts r JOIN messages m ON m.id = r.message_id
                     WHERE r.recipient_id = w.agent AND r.delivered_at IS NULL
                       AND m.team_id = w.team AND m.publication = 'stored'
                       AND m.stored_at < $4
                       AND NOT EXISTS (
                           SELECT 1 FROM hand_outs h
                           WHERE h.message_id = m.id AND h.recipient_id = w.agent
                             AND h.confirmed_at IS NULL AND h.held_until > $5))",
        )
        .bind(&teams)
        .bind(&agents)
        .bind(self.tenant.as_str())
        .bind(stored_before)
        .bind(at)
        .fetch_all(&self.pool)
        .await
        .map_err(db("wakeable"))?;
        Ok(rows
            .into_iter()
            .map(|(team, agent)| WakeupTarget { team, agent })
            .collect())
    }

    async fn confirm(
        &self,
        team: Uuid,
        recipient: Uuid,
        deliveries: &[DeliveryId],
        run: Option<RunId>,
        at: DateTime<Utc>,
    ) -> BusResult<Vec<ConfirmOutcome>> {
        validate_batch(deliveries.len())?;
        let what = "confirm";
        let mut tx = self.begin(what).await?;
        self.agent_row(&mut tx, team, recipient).await?;
        if self.check_run_owner(&mut tx, run, team, recipient).await? {
            return Err(BusError::conflict("the run is sealed"));
        }
        if deliveries.is_empty() {
            Self::commit(tx, what).await?;
            return Ok(Vec::new());
        }
        // A constant number of statements whatever the batch size (plus one journal append per
        // first confirmation with a run): read the hand-outs with their receipts locked in
        // message id order (deterministic, the order `hand_out` locks them in), decide every id
        // here, in order, then set the receipts and hand-outs in one statement each.
        let mut ids: Vec<Uuid> = deliveries.iter().map(|d| d.0).collect();
        ids.sort_unstable();
        ids.dedup();
        type Found = (Uuid, Uuid, Uuid, Option<String>, Option<String>, bool);
        let rows: Vec<Found> = sqlx::query_as(
            "SELECT h.delivery_id, h.message_id, h.conversation_id, h.ack_inbox, h.ack_subject,
                    r.delivered_at IS NOT NULL
             FROM hand_outs h
             JOIN receipts r ON r.message_id = h.message_id AND r.recipient_id = h.recipient_id
             WHERE h.delivery_id = ANY($1) AND h.team_id = $2 AND h.recipient_id = $3
             ORDER BY h.message_id, h.delivery_id
             FOR NO KEY UPDATE OF r",
        )
        .bind(&ids)
        .bind(team)
        .bind(recipient)
        .fetch_all(&mut *tx)
        .await
        .map_err(db(what))?;
        let found: HashMap<Uuid, Found> = rows.into_iter().map(|r| (r.0, r)).collect();
        let mut delivered: HashSet<Uuid> = found.values().filter(|r| r.5).map(|r| r.1).collect();
        let mut confirmed_deliveries: Vec<Uuid> = Vec::new();
        let mut confirmed_messages: Vec<Uuid> = Vec::new();
        let mut records: Vec<RecordKind> = Vec::new();
        let mut outcomes = Vec::with_capacity(deliveries.len());
        for delivery in deliveries {
            let Some((_, message, conversation, ack_inbox, ack_subject, _)) =
                found.get(&delivery.0)
            else {
                outcomes.push(ConfirmOutcome::Unknown);
                continue;
            };
            let message = *message;
            let ack = match (ack_inbox, ack_subject) {
                (Some(inbox), Some(ack_subject)) => Some(InboxAck {
                    inbox: inbox.clone(),
                    ack_subject: ack_subject.clone(),
                }),
                _ => None,
            };
            // Once per receipt: a receipt delivered before, or earlier in this call, is
            // already confirmed.
            if !delivered.insert(message) {
                outcomes.push(ConfirmOutcome::AlreadyConfirmed { message, ack });
                continue;
            }
            confirmed_deliveries.push(delivery.0);
            confirmed_messages.push(message);
            records.push(RecordKind::MessageDelivered {
                conversation: *conversation,
                message,
            });
            outcomes.push(ConfirmOutcome::Confirmed { message, ack });
        }
        if !confirmed_messages.is_empty() {
            confirmed_messages.sort_unstable();
            confirmed_deliveries.sort_unstable();
            sqlx::query(
                "UPDATE receipts SET delivered_at = $3
                 WHERE recipient_id = $2 AND message_id = ANY($1)",
            )
            .bind(&confirmed_messages)
            .bind(recipient)
            .bind(at)
            .execute(&mut *tx)
            .await
            .map_err(db(what))?;
            sqlx::query("UPDATE hand_outs SET confirmed_at = $2 WHERE delivery_id = ANY($1)")
                .bind(&confirmed_deliveries)
                .bind(at)
                .execute(&mut *tx)
                .await
                .map_err(db(what))?;
        }
        if let Some(run) = run {
            for kind in &records {
                append(&mut tx, run, at, kind).await.map_err(db(what))?;
            }
        }
        Self::commit(tx, what).await?;
        Ok(outcomes)
    }

    async fn acknowledge(
        &self,
        team: Uuid,
        agent: Uuid,
        message: Uuid,
        run: Option<RunId>,
        at: DateTime<Utc>,
    ) -> BusResult<Receipt> {
        let what = "acknowledge";
        let mut tx = self.begin(what).await?;
        let conversation = self.message_row(&mut tx, team, message).await?.conversation;
        let is_recipient: bool = sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM receipts WHERE message_id = $1 AND recipient_id = $2)",
        )
        .bind(message)
        .bind(agent)
        .fetch_one(&mut *tx)
        .await
        .map_err(db(what))?;
        if !is_recipient {
            return Err(BusError::forbidden(
                "only a recipient acknowledges a message",
            ));
        }
        // Lock order everywhere: run, then receipt (as `confirm`), so the two never deadlock.
        let sealed = self.check_run_owner(&mut tx, run, team, agent).await?;
        let receipt: ReceiptRow = sqlx::query_as(&format!(
            "SELECT {RECEIPT_COLUMNS} FROM receipts
             WHERE message_id = $1 AND recipient_id = $2 FOR NO KEY UPDATE"
        ))
        .bind(message)
        .bind(agent)
        .fetch_one(&mut *tx)
        .await
        .map_err(db(what))?;
        let receipt = Receipt::from(receipt);
        if receipt.acknowledged_at.is_some() {
            return Ok(receipt);
        }
        if receipt.delivered_at.is_none() {
            return Err(BusError::conflict(
                "the message has not been delivered to this recipient yet",
            ));
        }
        if sealed {
            return Err(BusError::conflict("the run is sealed"));
        }
        sqlx::query(
            "UPDATE receipts SET acknowledged_at = $3 WHERE message_id = $1 AND recipient_id = $2",
        )
        .bind(message)
        .bind(agent)
        .bind(at)
        .execute(&mut *tx)
        .await
        .map_err(db(what))?;
        if let Some(run) = run {
            let kind = RecordKind::MessageAcknowledged {
                conversation,
                message,
            };
            append(&mut tx, run, at, &kind).await.map_err(db(what))?;
        }
        Self::commit(tx, what).await?;
        Ok(Receipt {
            acknowledged_at: Some(at),
            ..receipt
        })
    }

    async fn receipts(&self, team: Uuid, message: Uuid) -> BusResult<Vec<Receipt>> {
        let what = "receipts";
        let mut conn = self.pool.acquire().await.map_err(db(what))?;
        self.message_row(&mut conn, team, message).await?;
        let rows: Vec<ReceiptRow> = sqlx::query_as(&format!(
            "SELECT {RECEIPT_COLUMNS} FROM receipts WHERE message_id = $1
             ORDER BY recipient_key COLLATE \"C\""
        ))
        .bind(message)
        .fetch_all(&mut *conn)
        .await
        .map_err(db(what))?;
        Ok(rows.into_iter().map(Receipt::from).collect())
    }

    async fn history(
        &self,
        team: Uuid,
        conversation: Uuid,
        after_seq: u64,
        limit: usize,
    ) -> BusResult<HistoryPage> {
        validate_limit(limit)?;
        let what = "history";
        let mut conn = self.pool.acquire().await.map_err(db(what))?;
        let found: Option<i32> = sqlx::query_scalar(
            "SELECT 1 FROM conversations c JOIN teams t ON t.id = c.team_id
             WHERE c.id = $1 AND c.team_id = $2 AND t.tenant = $3",
        )
        .bind(conversation)
        .bind(team)
        .bind(self.tenant.as_str())
        .fetch_optional(&mut *conn)
        .await
        .map_err(db(what))?;
        if found.is_none() {
            return Err(BusError::not_found(format!("conversation {conversation}")));
        }
        let rows: Vec<MessageRow> = sqlx::query_as(&format!(
            "SELECT {MESSAGE_COLUMNS} FROM messages m
             WHERE m.conversation_id = $1 AND m.seq > $2 ORDER BY m.seq LIMIT $3"
        ))
        .bind(conversation)
        .bind(db_i64(after_seq))
        .bind(limit as i64)
        .fetch_all(&mut *conn)
        .await
        .map_err(db(what))?;
        let messages = rows
            .into_iter()
            .map(Message::try_from)
            .collect::<BusResult<Vec<_>>>()?;
        Ok(HistoryPage::build(after_seq, messages))
    }

    async fn retention_due(
        &self,
        before: DateTime<Utc>,
        limit: usize,
    ) -> BusResult<Vec<RetentionTarget>> {
        validate_limit(limit)?;
        let rows: Vec<(Uuid, String, i64)> = sqlx::query_as(
            "SELECT m.team_id, m.backend, count(*) FROM messages m
             JOIN teams t ON t.id = m.team_id
             WHERE t.tenant = $1 AND m.publication = 'stored' AND m.retained_at IS NULL
               AND m.stored_at < $2
             GROUP BY m.team_id, m.backend
             ORDER BY m.team_id, m.backend COLLATE \"C\"
             LIMIT $3",
        )
        .bind(self.tenant.as_str())
        .bind(before)
        .bind(limit as i64)
        .fetch_all(&self.pool)
        .await
        .map_err(db("retention due"))?;
        Ok(rows
            .into_iter()
            .map(|(team, backend, messages)| RetentionTarget {
                team,
                backend,
                messages: from_db(messages),
            })
            .collect())
    }

    async fn mark_retained(
        &self,
        team: Uuid,
        backend: &str,
        before: DateTime<Utc>,
        at: DateTime<Utc>,
    ) -> BusResult<u64> {
        let what = "mark retained";
        let mut tx = self.begin(what).await?;
        self.require_team(&mut tx, team).await?;
        let done = sqlx::query(
            "UPDATE messages SET retained_at = $4
             WHERE team_id = $1 AND backend = $2 AND publication = 'stored'
               AND retained_at IS NULL AND stored_at < $3",
        )
        .bind(team)
        .bind(backend)
        .bind(before)
        .bind(at)
        .execute(&mut *tx)
        .await
        .map_err(db(what))?;
        Self::commit(tx, what).await?;
        Ok(done.rows_affected())
    }

    async fn counts(&self, at: DateTime<Utc>) -> BusResult<LedgerCounts> {
        let what = "counts";
        // One transaction at REPEATABLE READ: every count sees the same snapshot.
        let mut tx = self.begin(what).await?;
        sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
            .execute(&mut *tx)
            .await
            .map_err(db(what))?;
        let tenant = self.tenant.as_str();
        let (pending, failed, oldest): (i64, i64, Option<DateTime<Utc>>) = sqlx::query_as(
            "SELECT count(*) FILTER (WHERE m.publication = 'pending_publication'),
                    count(*) FILTER (WHERE m.publication = 'failed'),
                    min(m.sent_at) FILTER (WHERE m.publication = 'pending_publication')
             FROM messages m JOIN teams t ON t.id = m.team_id
             WHERE t.tenant = $1 AND m.publication <> 'stored'",
        )
        .bind(tenant)
        .fetch_one(&mut *tx)
        .await
        .map_err(db(what))?;
        let uncertain: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM outbox_slots WHERE tenant = $1 AND NOT failed AND uncertain",
        )
        .bind(tenant)
        .fetch_one(&mut *tx)
        .await
        .map_err(db(what))?;
        let events: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM inbox_events WHERE tenant = $1 AND published_at IS NULL",
        )
        .bind(tenant)
        .fetch_one(&mut *tx)
        .await
        .map_err(db(what))?;
        let (deliveries, undelivered): (i64, i64) = sqlx::query_as(
            "SELECT count(*) FILTER (WHERE r.delivered_at IS NOT NULL),
                    count(*) FILTER (WHERE r.delivered_at IS NULL AND m.publication = 'stored')
             FROM receipts r JOIN messages m ON m.id = r.message_id
             JOIN teams t ON t.id = m.team_id
             WHERE t.tenant = $1",
        )
        .bind(tenant)
        .fetch_one(&mut *tx)
        .await
        .map_err(db(what))?;
        Self::commit(tx, what).await?;
        Ok(LedgerCounts {
            pending_publications: from_db(pending),
            uncertain_publications: from_db(uncertain),
            failed_publications: from_db(failed),
            oldest_pending_age: oldest.map(|o| (at - o).to_std().unwrap_or(Duration::ZERO)),
            pending_inbox_events: from_db(events),
            deliveries: from_db(deliveries),
            undelivered: from_db(undelivered),
        })
    }
}
