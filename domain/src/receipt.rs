//! Receipts: one per (message, recipient), snapshotted at send.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// What the ledger has observed about one recipient of one message.
///
/// Created at send for every member except the sender; each time is set once and never moves.
/// "Exactly once" on the bus means: one receipt per (message, recipient), `delivered_at` set once.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Receipt {
    /// The message.
    pub message: Uuid,
    /// The recipient agent.
    pub recipient: Uuid,
    /// The recipient's key (snapshotted at send).
    pub recipient_key: String,
    /// When the body was recorded as stored (the same instant as `Message::stored_at`).
    pub stored_at: Option<DateTime<Utc>>,
    /// When the recipient confirmed a hand-out of the message (the confirming caller's `at`).
    pub delivered_at: Option<DateTime<Utc>>,
    /// When the recipient acknowledged having read the message.
    pub acknowledged_at: Option<DateTime<Utc>>,
}
