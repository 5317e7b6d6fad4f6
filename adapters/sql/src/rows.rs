//! Rows of the ledger's tables and their conversion to domain types, for both SQL adapters.
//!
//! Each row is generic over how its times are stored (`T`, by default `DateTime<Utc>`; see the
//! crate's docs) and decodes on any driver whose column types match its fields: ids as `Uuid`,
//! counters as `i64` (read back with [`from_db`]), kinds and states as their stored text.
//! Conversions fail only where the domain refuses a stored value (`BusError::Internal`-class
//! errors from the domain's `from_stored` parsers).

use chrono::{DateTime, Utc};
use crewbus_domain::{
    Agent, AgentActivity, AgentKind, BusError, BusResult, Envelope, HistoryPage, InboxEvent,
    LeasedSlot, Locator, Member, Message, Operator, OperatorScope, Publication, Receipt,
    RecipientState, ReferencePayload, RetentionTarget, StatusLine, Team, TokenHash,
};
use uuid::Uuid;

use crate::counter::from_db;

/// `Option<T>` → `Option<DateTime<Utc>>`.
fn opt<T: Into<DateTime<Utc>>>(t: Option<T>) -> Option<DateTime<Utc>> {
    t.map(Into::into)
}

/// The columns of a [`TeamRow`], read from `teams`.
pub const TEAM_COLUMNS: &str = "id, name, body_backend, inbox, created_at";

/// A row of `teams`.
#[derive(sqlx::FromRow)]
pub struct TeamRow<T = DateTime<Utc>> {
    id: Uuid,
    name: String,
    body_backend: String,
    inbox: String,
    created_at: T,
}

impl<T: Into<DateTime<Utc>>> From<TeamRow<T>> for Team {
    fn from(r: TeamRow<T>) -> Team {
        Team {
            id: r.id,
            name: r.name,
            body_backend: r.body_backend,
            inbox: r.inbox,
            created_at: r.created_at.into(),
        }
    }
}

/// The columns of an [`AgentRow`], read from `agents a`.
pub const AGENT_COLUMNS: &str =
    "a.id, a.team_id, a.name, a.recipient_key, a.token_hash, a.created_at, a.revoked_at, a.kind";

/// A row of `agents`. Converting fails on a stored token hash or kind the domain refuses.
#[derive(sqlx::FromRow)]
pub struct AgentRow<T = DateTime<Utc>> {
    id: Uuid,
    team_id: Uuid,
    name: String,
    recipient_key: String,
    token_hash: Vec<u8>,
    created_at: T,
    revoked_at: Option<T>,
    kind: String,
}

impl<T: Into<DateTime<Utc>>> TryFrom<AgentRow<T>> for Agent {
    type Error = BusError;
    fn try_from(r: AgentRow<T>) -> BusResult<Agent> {
        Ok(Agent {
            id: r.id,
            team: r.team_id,
            name: r.name,
            recipient_key: r.recipient_key,
            token_hash: TokenHash::from_stored(r.token_hash)?,
            created_at: r.created_at.into(),
            revoked_at: opt(r.revoked_at),
            kind: AgentKind::from_stored(&r.kind)?,
        })
    }
}

/// A member of a conversation (`members` with its agent's recipient key).
#[derive(sqlx::FromRow)]
pub struct MemberRow<T = DateTime<Utc>> {
    /// The conversation the member belongs to (the domain's `Member` does not carry it).
    pub conversation_id: Uuid,
    agent_id: Uuid,
    recipient_key: String,
    joined_at: T,
}

impl<T: Into<DateTime<Utc>>> From<MemberRow<T>> for Member {
    fn from(r: MemberRow<T>) -> Member {
        Member {
            agent: r.agent_id,
            recipient_key: r.recipient_key,
            joined_at: r.joined_at.into(),
        }
    }
}

/// The columns of a [`MessageRow`], read from `messages m`.
pub const MESSAGE_COLUMNS: &str = "m.id, m.team_id, m.conversation_id, m.seq, m.sender_id, \
     m.request_id, m.body_sha256, m.body_len, m.backend, m.publication, m.locator, m.failure, \
     m.sent_at, m.stored_at, m.retained_at, m.sender_kind";

/// A row of `messages`. Converting fails on a stored publication or sender kind the domain
/// refuses.
#[derive(sqlx::FromRow)]
pub struct MessageRow<T = DateTime<Utc>> {
    id: Uuid,
    team_id: Uuid,
    conversation_id: Uuid,
    seq: i64,
    sender_id: Uuid,
    request_id: String,
    body_sha256: String,
    body_len: i64,
    backend: String,
    publication: String,
    locator: Option<String>,
    failure: Option<String>,
    sent_at: T,
    stored_at: Option<T>,
    retained_at: Option<T>,
    sender_kind: String,
}

impl<T: Into<DateTime<Utc>>> TryFrom<MessageRow<T>> for Message {
    type Error = BusError;
    fn try_from(r: MessageRow<T>) -> BusResult<Message> {
        Ok(Message {
            id: r.id,
            team: r.team_id,
            conversation: r.conversation_id,
            seq: from_db(r.seq),
            sender: r.sender_id,
            request_id: r.request_id,
            body_sha256: r.body_sha256,
            body_len: from_db(r.body_len),
            backend: r.backend,
            locator: r.locator.map(Locator),
            publication: Publication::from_stored(&r.publication)?,
            sent_at: r.sent_at.into(),
            stored_at: opt(r.stored_at),
            retained_at: opt(r.retained_at),
            failure: r.failure,
            sender_kind: AgentKind::from_stored(&r.sender_kind)?,
        })
    }
}

/// A receipt's columns, read from [`RECEIPTS`] (its stored time is its message's: written once).
pub const RECEIPT_COLUMNS: &str =
    "r.message_id, r.recipient_id, r.recipient_key, m.stored_at, r.delivered_at, r.acknowledged_at";

/// What [`RECEIPT_COLUMNS`] are read from: each receipt `r` with its message `m`.
pub const RECEIPTS: &str = "receipts r JOIN messages m ON m.id = r.message_id";

/// A receipt as [`RECEIPT_COLUMNS`] read it.
#[derive(sqlx::FromRow)]
pub struct ReceiptRow<T = DateTime<Utc>> {
    message_id: Uuid,
    recipient_id: Uuid,
    recipient_key: String,
    stored_at: Option<T>,
    delivered_at: Option<T>,
    acknowledged_at: Option<T>,
}

impl<T: Into<DateTime<Utc>>> From<ReceiptRow<T>> for Receipt {
    fn from(r: ReceiptRow<T>) -> Receipt {
        Receipt {
            message: r.message_id,
            recipient: r.recipient_id,
            recipient_key: r.recipient_key,
            stored_at: opt(r.stored_at),
            delivered_at: opt(r.delivered_at),
            acknowledged_at: opt(r.acknowledged_at),
        }
    }
}

/// A row of `operators`, without the teams of its scope (`operator_teams`: each adapter reads
/// them its own way and passes them to [`OperatorRow::into_operator`]).
#[derive(sqlx::FromRow)]
pub struct OperatorRow<T = DateTime<Utc>> {
    /// The operator's id (the key its `operator_teams` rows are read by).
    pub id: Uuid,
    name: String,
    token_hash: Vec<u8>,
    all_teams: bool,
    created_at: T,
    revoked_at: Option<T>,
}

impl<T: Into<DateTime<Utc>>> OperatorRow<T> {
    /// The operator, with the teams of its scope (`operator_teams`; ignored for every team).
    /// Errors: a stored token hash the domain refuses.
    pub fn into_operator(self, teams: Vec<Uuid>) -> BusResult<Operator> {
        Ok(Operator {
            id: self.id,
            name: self.name,
            scope: if self.all_teams {
                OperatorScope::Everything
            } else {
                OperatorScope::Teams(teams.into_iter().collect())
            },
            token_hash: TokenHash::from_stored(self.token_hash)?,
            created_at: self.created_at.into(),
            revoked_at: opt(self.revoked_at),
        })
    }
}

/// An agent with what `Oversight::agent_activity` adds to it: the last time it was active, how
/// many receipts wait for it and since when the oldest has.
#[derive(sqlx::FromRow)]
pub struct ActivityRow<T = DateTime<Utc>> {
    #[sqlx(flatten)]
    agent: AgentRow<T>,
    last_active_at: Option<T>,
    pending: i64,
    oldest_pending_at: Option<T>,
    status: Option<String>,
    status_set_at: Option<T>,
    current_run: Option<Uuid>,
}

impl<T: Into<DateTime<Utc>>> TryFrom<ActivityRow<T>> for AgentActivity {
    type Error = BusError;
    fn try_from(r: ActivityRow<T>) -> BusResult<AgentActivity> {
        Ok(AgentActivity {
            agent: r.agent.try_into()?,
            last_active_at: opt(r.last_active_at),
            pending: from_db(r.pending),
            oldest_pending_at: opt(r.oldest_pending_at),
            status: match (r.status, r.status_set_at) {
                (Some(text), Some(set_at)) => Some(StatusLine {
                    text,
                    set_at: set_at.into(),
                }),
                _ => None,
            },
            current_run: r.current_run,
        })
    }
}

/// A receipt with its hand-outs (count, saturated to `u32`, and the last one's time), as
/// `Oversight::recipient_states` reads it.
#[derive(sqlx::FromRow)]
pub struct RecipientRow<T = DateTime<Utc>> {
    #[sqlx(flatten)]
    receipt: ReceiptRow<T>,
    hand_outs: i64,
    last_handed_out_at: Option<T>,
}

impl<T: Into<DateTime<Utc>>> From<RecipientRow<T>> for RecipientState {
    fn from(r: RecipientRow<T>) -> RecipientState {
        RecipientState {
            receipt: r.receipt.into(),
            hand_outs: u32::try_from(r.hand_outs).unwrap_or(u32::MAX),
            last_handed_out_at: opt(r.last_handed_out_at),
        }
    }
}

/// An outbox slot as a lease returns it (`outbox_slots`, after the lease bumped its generation).
/// `A` is how the adapter stores the attempt count (any integer type; a value outside `u32`
/// reads as `u32::MAX`, which the schema's `CHECK (attempts >= 0)` keeps from happening).
#[derive(sqlx::FromRow)]
pub struct SlotRow<T = DateTime<Utc>, A = i32> {
    id: Uuid,
    generation: i64,
    backend: String,
    message_id: Uuid,
    conversation_id: Uuid,
    team_id: Uuid,
    body: Vec<u8>,
    publish_key: Uuid,
    attempts: A,
    uncertain: bool,
    next_attempt_at: T,
    ord: i64,
}

/// The leased slots, in lease order (`next_attempt_at`, then `ord`: a statement's `RETURNING`
/// has no order), each leased until `until`. Errors: a slot's stored body not UTF-8 →
/// `Invalid`.
pub fn leased_slots<T, A>(
    mut rows: Vec<SlotRow<T, A>>,
    until: DateTime<Utc>,
) -> BusResult<Vec<LeasedSlot>>
where
    T: Ord + Copy,
    A: TryInto<u32>,
{
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
                attempts: r.attempts.try_into().unwrap_or(u32::MAX),
                uncertain: r.uncertain,
                leased_until: until,
            })
        })
        .collect()
}

/// One reference of a leased marker (`reference_marks` `k`): the marker's fields with one
/// undelivered receipt `r` of its message `m`.
#[derive(sqlx::FromRow)]
pub struct ReferenceRow<T = DateTime<Utc>> {
    team_id: Uuid,
    inbox: String,
    message_id: Uuid,
    created_at: T,
    conversation_id: Uuid,
    seq: i64,
    recipient_id: Uuid,
    recipient_key: String,
}

impl<T> ReferenceRow<T> {
    /// The receipt's recipient key (references of one marker go out in its byte order).
    pub fn recipient_key(&self) -> &str {
        &self.recipient_key
    }
}

impl<T: Into<DateTime<Utc>>> From<ReferenceRow<T>> for InboxEvent {
    /// The inbox event of the reference: its id derived from (message, recipient)
    /// ([`InboxEvent::id_for`]), its payload the message's place in its conversation.
    fn from(r: ReferenceRow<T>) -> InboxEvent {
        InboxEvent {
            id: InboxEvent::id_for(r.message_id, r.recipient_id),
            team: r.team_id,
            inbox: r.inbox,
            message: r.message_id,
            recipient: r.recipient_id,
            recipient_key: r.recipient_key,
            payload: ReferencePayload {
                message: r.message_id,
                conversation: r.conversation_id,
                seq: from_db(r.seq),
            }
            .to_json(),
            created_at: r.created_at.into(),
        }
    }
}

/// One retention target from a `(team_id, backend, count)` row: the team's messages on
/// `backend` whose retention is due.
pub fn retention_target((team, backend, messages): (Uuid, String, i64)) -> RetentionTarget {
    RetentionTarget {
        team,
        backend,
        messages: from_db(messages),
    }
}

/// A history page after `after_seq` from the messages read for it (`seq > after_seq`, in seq
/// order, at most the page's limit). Errors: a row the domain refuses (see [`MessageRow`]).
pub fn history_page<T: Into<DateTime<Utc>>>(
    after_seq: u64,
    rows: Vec<MessageRow<T>>,
) -> BusResult<HistoryPage> {
    let messages = rows
        .into_iter()
        .map(Message::try_from)
        .collect::<BusResult<Vec<_>>>()?;
    Ok(HistoryPage::build(after_seq, messages))
}
