//! Outbox slots: the relay's leased work and how it is settled.

use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::{BusError, Envelope, Locator};

/// A slot leased to a relay: one message body to hand to its body backend.
///
/// Leasing bumps the slot's `generation`; only a settlement carrying this generation, made
/// before `leased_until`, writes anything.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeasedSlot {
    /// The slot (one per message, never reused).
    pub slot: Uuid,
    /// The lease's fencing token: strictly greater than every earlier lease of the slot.
    pub generation: u64,
    /// The body backend name to publish to (`Backends::body_backend(team, backend)`).
    pub backend: String,
    /// What to publish; `publish_key` is the same on every lease of the slot.
    pub envelope: Envelope,
    /// Attempts settled so far (`Retryable` or `Uncertain` settlements), not counting this lease.
    pub attempts: u32,
    /// The last attempt ended without an answer: reconcile before publishing again.
    pub uncertain: bool,
    /// The lease ends at this instant (the leasing caller's `at + lease_for`).
    pub leased_until: DateTime<Utc>,
}

/// The result of one leased attempt, reported to the ledger.
#[derive(Debug, Clone)]
pub struct Settlement {
    /// The slot.
    pub slot: Uuid,
    /// The generation of the lease the attempt ran under.
    pub generation: u64,
    /// What the attempt came to.
    pub outcome: SlotOutcome,
}

/// What one attempt came to, as the relay decided it from `Published` (or reconcile).
#[derive(Debug, Clone)]
pub enum SlotOutcome {
    /// The body is stored at `locator`: the message becomes `Stored`, the slot is deleted and one
    /// inbox event per recipient is enqueued — one transaction.
    Confirmed {
        /// Where the backend keeps the body.
        locator: Locator,
    },
    /// Known not stored; try again at `next_attempt_at` (the caller's capped, jittered backoff).
    /// Clears the slot's uncertain flag.
    Retryable {
        /// Why; its `code()` is recorded, never backend text.
        error: BusError,
        /// When the slot is due again.
        next_attempt_at: DateTime<Utc>,
    },
    /// Known not stored and never will be: the message becomes `Failed`; the slot is kept as
    /// evidence and never leased again.
    Fatal {
        /// Why; its `code()` is recorded on the message.
        error: BusError,
    },
    /// The attempt may or may not have landed: the slot is marked uncertain and is due again at
    /// `next_attempt_at`, when the relay reconciles it. The message stays pending.
    Uncertain {
        /// Why; its `code()` is recorded.
        error: BusError,
        /// When the slot is due again.
        next_attempt_at: DateTime<Utc>,
    },
}

/// What the ledger did with one [`Settlement`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SettleOutcome {
    /// Written.
    Applied,
    /// Nothing written: the lease is not the slot's current one (a newer generation exists),
    /// it expired (`leased_until <= at`), or the slot no longer exists / is no longer leasable.
    Stale,
}
