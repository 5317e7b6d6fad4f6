//! The inbox port: durable per-recipient references.

use async_trait::async_trait;
use crewbus_domain::{BusResult, InboxRef, InboxStatus, Published};
use uuid::Uuid;

/// Per-recipient references for one team: publish (deduplicated on the event id), fetch without
/// acknowledging, acknowledge after the receipt is committed, and status.
///
/// Implemented by memory, Postgres (a queue table) and JetStream (a work-queue stream with one
/// durable pull consumer per recipient). The same use cases run on all three.
///
/// Every method validates `recipient_key` with
/// [`validate_recipient_key`](crewbus_domain::validate_recipient_key): an invalid key is
/// `Invalid` (for `publish_reference`, `Published::Fatal(Invalid)`).
///
/// Time: redelivery happens when a handed-out reference is not acknowledged within the inbox's
/// ack wait, measured on the adapter's clock (an injected [`crate::Clock`] for memory and Postgres,
/// the server's clock for JetStream).
#[cfg_attr(feature = "mock", mockall::automock)]
#[async_trait]
pub trait Inbox: Send + Sync {
    /// Stores one reference on the recipient's own subject (queue).
    ///
    /// Deduplicated on `event_id`: a repeat returns `Confirmed { duplicate: true }` with the
    /// first locator and stores nothing — also after the reference was acked (memory and Postgres
    /// remember the event id for the life of the inbox; JetStream within the duplicate window,
    /// which never exceeds the inbox's `max_age`). The `Confirmed` locator names the inbox, and
    /// [`crate::MessagingBackend::fetch`] refuses it with `Forbidden`. `payload` is JSON naming the message;
    /// it never carries a body. A full inbox discards its *oldest* references (discard-old); the
    /// ledger stays the authority and tops the recipient up.
    async fn publish_reference(
        &self,
        recipient_key: &str,
        event_id: Uuid,
        payload: &str,
    ) -> Published;

    /// Hands out up to `limit` references of the recipient without acknowledging any.
    ///
    /// The recipient's consumer is created on first use. Returns references not yet handed out,
    /// and those handed out earlier whose ack wait has passed (with `deliveries` incremented),
    /// while `deliveries` stays within the inbox's max deliver. Never waits for new references;
    /// a short batch never means "caught up". Errors: `Invalid` key; backend down →
    /// `Unavailable`/`Timeout`; the inbox stream missing → `NotProvisioned`.
    async fn fetch_references(&self, recipient_key: &str, limit: usize)
    -> BusResult<Vec<InboxRef>>;

    /// Acknowledges one handed-out reference by its opaque `ack_subject`, and waits for the
    /// backend to confirm (a double ack on JetStream).
    ///
    /// Send it only after the recipient's receipt is committed. Acknowledging twice is harmless
    /// (`Ok`). An `ack_subject` this inbox did not issue (another team's, or anything outside
    /// this team's inbox) is `Forbidden` — the caller never takes one from an agent. A lost ack
    /// only causes a redelivery, which the receipt absorbs.
    async fn ack_reference(&self, ack_subject: &str) -> BusResult<()>;

    /// The recipient's consumer state.
    ///
    /// A missing consumer or stream → `Ok(InboxStatus { present: false, .. })`; any other failure
    /// (backend down) is an error, never an empty inbox.
    async fn inbox_status(&self, recipient_key: &str) -> BusResult<InboxStatus>;
}
