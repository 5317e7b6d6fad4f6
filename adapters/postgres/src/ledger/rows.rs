//! Rows of the ledger's tables and their conversion to domain types.

use chrono::{DateTime, Utc};
use crewbus_domain::{
    Agent, AgentActivity, AgentKind, BusError, BusResult, Locator, Member, Message, Operator,
    OperatorScope, Publication, Receipt, RecipientState, Team, TokenHash,
};
use uuid::Uuid;

/// Saturating `u64` → `bigint`.
pub(crate) fn db_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// `bigint` (CHECKed non-negative) → `u64`.
pub(crate) fn from_db(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

pub(crate) const TEAM_COLUMNS: &str = "id, name, body_backend, inbox, created_at";

#[derive(sqlx::FromRow)]
pub(crate) struct TeamRow {
    id: Uuid,
    name: String,
    body_backend: String,
    inbox: String,
    created_at: DateTime<Utc>,
}

impl From<TeamRow> for Team {
    fn from(r: TeamRow) -> Team {
        Team {
            id: r.id,
            name: r.name,
            body_backend: r.body_backend,
            inbox: r.inbox,
            created_at: r.created_at,
        }
    }
}

pub(crate) const AGENT_COLUMNS: &str =
    "a.id, a.team_id, a.name, a.recipient_key, a.token_hash, a.created_at, a.revoked_at, a.kind";

#[derive(sqlx::FromRow)]
pub(crate) struct AgentRow {
    id: Uuid,
    team_id: Uuid,
    name: String,
    recipient_key: String,
    token_hash: Vec<u8>,
    created_at: DateTime<Utc>,
    revoked_at: Option<DateTime<Utc>>,
    kind: String,
}

impl TryFrom<AgentRow> for Agent {
    type Error = BusError;
    fn try_from(r: AgentRow) -> BusResult<Agent> {
        Ok(Agent {
            id: r.id,
            team: r.team_id,
            name: r.name,
            recipient_key: r.recipient_key,
            token_hash: TokenHash::from_stored(r.token_hash)?,
            created_at: r.created_at,
            revoked_at: r.revoked_at,
            kind: AgentKind::from_stored(&r.kind)?,
        })
    }
}

#[derive(sqlx::FromRow)]
pub(crate) struct MemberRow {
    pub(crate) conversation_id: Uuid,
    agent_id: Uuid,
    recipient_key: String,
    joined_at: DateTime<Utc>,
}

impl From<MemberRow> for Member {
    fn from(r: MemberRow) -> Member {
        Member {
            agent: r.agent_id,
            recipient_key: r.recipient_key,
            joined_at: r.joined_at,
        }
    }
}

pub(crate) const MESSAGE_COLUMNS: &str = "m.id, m.team_id, m.conversation_id, m.seq, m.sender_id, \
     m.request_id, m.body_sha256, m.body_len, m.backend, m.publication, m.locator, m.failure, \
     m.sent_at, m.stored_at, m.retained_at, m.sender_kind";

#[derive(sqlx::FromRow)]
pub(crate) struct MessageRow {
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
    sent_at: DateTime<Utc>,
    stored_at: Option<DateTime<Utc>>,
    retained_at: Option<DateTime<Utc>>,
    sender_kind: String,
}

impl TryFrom<MessageRow> for Message {
    type Error = BusError;
    fn try_from(r: MessageRow) -> BusResult<Message> {
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
            sent_at: r.sent_at,
            stored_at: r.stored_at,
            retained_at: r.retained_at,
            failure: r.failure,
            sender_kind: AgentKind::from_stored(&r.sender_kind)?,
        })
    }
}

/// A receipt's columns, read from [`RECEIPTS`] (its stored time is its message's: written once).
pub(crate) const RECEIPT_COLUMNS: &str =
    "r.message_id, r.recipient_id, r.recipient_key, m.stored_at, r.delivered_at, r.acknowledged_at";

/// What [`RECEIPT_COLUMNS`] are read from: each receipt `r` with its message `m`.
pub(crate) const RECEIPTS: &str = "receipts r JOIN messages m ON m.id = r.message_id";

#[derive(sqlx::FromRow)]
pub(crate) struct ReceiptRow {
    message_id: Uuid,
    recipient_id: Uuid,
    recipient_key: String,
    stored_at: Option<DateTime<Utc>>,
    delivered_at: Option<DateTime<Utc>>,
    acknowledged_at: Option<DateTime<Utc>>,
}

impl From<ReceiptRow> for Receipt {
    fn from(r: ReceiptRow) -> Receipt {
        Receipt {
            message: r.message_id,
            recipient: r.recipient_id,
            recipient_key: r.recipient_key,
            stored_at: r.stored_at,
            delivered_at: r.delivered_at,
            acknowledged_at: r.acknowledged_at,
        }
    }
}

pub(crate) const OPERATOR_COLUMNS: &str = "o.id, o.name, o.token_hash, o.all_teams, o.created_at, o.revoked_at, \
     COALESCE((SELECT array_agg(ot.team_id) FROM operator_teams ot \
               WHERE ot.operator_id = o.id), '{}') AS teams";

/// An operator with the teams of its scope (`teams`, aggregated in the query: ignored for every
/// team).
#[derive(sqlx::FromRow)]
pub(crate) struct OperatorRow {
    id: Uuid,
    name: String,
    token_hash: Vec<u8>,
    all_teams: bool,
    created_at: DateTime<Utc>,
    revoked_at: Option<DateTime<Utc>>,
    teams: Vec<Uuid>,
}

impl TryFrom<OperatorRow> for Operator {
    type Error = BusError;
    fn try_from(r: OperatorRow) -> BusResult<Operator> {
        Ok(Operator {
            id: r.id,
            name: r.name,
            scope: if r.all_teams {
                OperatorScope::Everything
            } else {
                OperatorScope::Teams(r.teams.into_iter().collect())
            },
            token_hash: TokenHash::from_stored(r.token_hash)?,
            created_at: r.created_at,
            revoked_at: r.revoked_at,
        })
    }
}

/// An agent with what `Oversight::agent_activity` adds to it.
#[derive(sqlx::FromRow)]
pub(crate) struct ActivityRow {
    #[sqlx(flatten)]
    agent: AgentRow,
    last_active_at: Option<DateTime<Utc>>,
    pending: i64,
    oldest_pending_at: Option<DateTime<Utc>>,
}

impl TryFrom<ActivityRow> for AgentActivity {
    type Error = BusError;
    fn try_from(r: ActivityRow) -> BusResult<AgentActivity> {
        Ok(AgentActivity {
            agent: r.agent.try_into()?,
            last_active_at: r.last_active_at,
            pending: from_db(r.pending),
            oldest_pending_at: r.oldest_pending_at,
        })
    }
}

/// A receipt with its hand-outs, as `Oversight::recipient_states` reads it.
#[derive(sqlx::FromRow)]
pub(crate) struct RecipientRow {
    #[sqlx(flatten)]
    receipt: ReceiptRow,
    hand_outs: i64,
    last_handed_out_at: Option<DateTime<Utc>>,
}

impl From<RecipientRow> for RecipientState {
    fn from(r: RecipientRow) -> RecipientState {
        RecipientState {
            receipt: r.receipt.into(),
            hand_outs: u32::try_from(r.hand_outs).unwrap_or(u32::MAX),
            last_handed_out_at: r.last_handed_out_at,
        }
    }
}
