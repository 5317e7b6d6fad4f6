//! What health and metrics report about the ledger, and retention targets.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// Counts over the whole ledger (one tenant), taken at the caller's `at`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct LedgerCounts {
    /// Messages in `PendingPublication` (slots not yet confirmed), uncertain ones included.
    pub pending_publications: u64,
    /// Of those, slots whose last attempt was uncertain (awaiting reconcile).
    pub uncertain_publications: u64,
    /// Messages in `Failed`.
    pub failed_publications: u64,
    /// Age of the oldest pending publication: `at − sent_at` (zero if `sent_at` is after
    /// `at`); `None` when nothing is pending.
    pub oldest_pending_age: Option<Duration>,
    /// References not yet confirmed published: the undelivered receipts of stored messages
    /// whose reference marker stands (one per recipient, as the reference worker publishes them).
    pub pending_inbox_events: u64,
    /// Receipts with `delivered_at` set (deliveries confirmed, all time).
    pub deliveries: u64,
    /// Receipts of stored messages not yet delivered.
    pub undelivered: u64,
}

/// A team's body backend holding bodies that retention should remove.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetentionTarget {
    /// The team.
    pub team: Uuid,
    /// The body backend name (as recorded on the messages).
    pub backend: String,
    /// Stored, not yet retained messages of this team and backend stored before the cutoff.
    pub messages: u64,
}
