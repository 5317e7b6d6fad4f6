//! Hand-outs: which reference an agent was given, and the confirmation of it.

use std::fmt;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// Identifies one hand-out of one message to one recipient. Agents confirm by it; it never
/// reveals the inbox's ack subject.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct DeliveryId(pub Uuid);

impl fmt::Display for DeliveryId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// Where an acknowledgement must go once a receipt is committed: the inbox (by the name the
/// `Backends` registry knows) that issued the reference, and its opaque ack subject. Kept
/// server-side; never shown to an agent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InboxAck {
    /// The inbox name (the team's inbox when the reference was published).
    pub inbox: String,
    /// The opaque token `Inbox::ack_reference` takes.
    pub ack_subject: String,
}

/// Where a candidate for a hand-out came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum HandOutSource {
    /// A reference fetched from an inbox (`Inbox::fetch_references`).
    Inbox {
        /// The reference's event id (the ledger's inbox event).
        event_id: Uuid,
        /// How to acknowledge it after the receipt is committed.
        ack: InboxAck,
        /// The inbox's delivery count of the reference (≥ 1; > 1 is a redelivery).
        deliveries: u64,
    },
    /// A top-up from the ledger ([`crate::Message`]s found by the ledger's undelivered query):
    /// there is no reference to acknowledge.
    Ledger,
}

/// One candidate the caller wants to hand to a recipient.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HandOutRequest {
    /// The message named by the reference (or found by the top-up).
    pub message: Uuid,
    /// Where it came from.
    pub source: HandOutSource,
}

/// A recorded hand-out: give `delivery` and the message to the agent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HandOut {
    /// What the agent confirms.
    pub delivery: DeliveryId,
    /// The message handed out.
    pub message: Uuid,
    /// Its conversation.
    pub conversation: Uuid,
    /// Its position in the conversation.
    pub seq: u64,
    /// The recipient agent.
    pub recipient: Uuid,
    /// Whether the recipient may have seen this message before (an earlier hand-out of it, or an
    /// inbox delivery count above 1).
    pub redelivered: bool,
    /// When it was handed out (the caller's `at`).
    pub issued_at: DateTime<Utc>,
    /// Until when the message is held for this hand-out: not handed out again before, unless
    /// confirmed. `issued_at + grace`.
    pub held_until: DateTime<Utc>,
}

/// What happened to one [`HandOutRequest`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum HandOutOutcome {
    /// A new hand-out was recorded: give it to the agent.
    Issued(HandOut),
    /// The recipient's receipt is already delivered (a redelivery after commit-but-no-ack, or a
    /// duplicate reference): do not hand it out; acknowledge the reference if it came from an
    /// inbox.
    AlreadyDelivered {
        /// The message.
        message: Uuid,
    },
    /// A live hand-out (unconfirmed, held until `until`) exists, or the same message appeared
    /// earlier in this batch: do not hand it out. If the candidate came from an inbox, the live
    /// hand-out's ack now names this newer reference delivery (the one the inbox expects).
    Held {
        /// The message.
        message: Uuid,
        /// When the live hand-out's hold ends.
        until: DateTime<Utc>,
    },
    /// The message is unknown, of another team, not stored, or the agent is not among its
    /// recipients: do not hand it out; an inbox reference naming it can be acknowledged.
    Unknown {
        /// The message id as asked.
        message: Uuid,
    },
}

/// What happened to one [`DeliveryId`] of a confirm batch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ConfirmOutcome {
    /// This call set the receipt's `delivered_at` (and wrote `MessageDelivered` to the run).
    /// Acknowledge `ack` now, after the commit.
    Confirmed {
        /// The message.
        message: Uuid,
        /// Where to acknowledge; `None` for a ledger top-up.
        ack: Option<InboxAck>,
    },
    /// The receipt was already delivered (this or another hand-out of the message was confirmed
    /// before): nothing changed. Acknowledging `ack` again is harmless and heals a lost ack.
    AlreadyConfirmed {
        /// The message.
        message: Uuid,
        /// Where to acknowledge; `None` for a ledger top-up.
        ack: Option<InboxAck>,
    },
    /// No hand-out with this id for this recipient (never issued, or another agent's).
    Unknown,
}
