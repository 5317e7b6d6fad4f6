//! The inbox port: durable per-recipient references.

use async_trait::async_trait;
use crewbus_domain::{BusResult, InboxRef, InboxStatus, Published};
use uuid::Uuid;

/// Per-recipient references for one team: publish (deduplicated on the event id), fetch without
/// acknowledging, acknowledge after the receipt is committed, and status.
///
/// Implemented by memory, Postgres (a queue table) and JetStream (a work-queue stream with one
/// durable pull consumer per recipient). The same use cases run on all three, and every one
/// passes the same conformance suite (`crewbus-conformance`). One instance serves one team (the
/// registry, [`crate::Backends`], hands them out); every instance handed out for the same team
/// sees the same references and consumers.
///
/// # Terms
/// - **Reference**: one stored item `(recipient_key, event_id, payload)` at a position
///   ([`InboxRef::stream_seq`](crewbus_domain::InboxRef::stream_seq)) in the team's inbox.
///   Positions start at 1, grow in publish order across all recipients of the team and are never
///   reused. A reference is stored until it is acknowledged (work-queue retention) or discarded
///   by overflow.
/// - **Consumer**: each recipient's cursor over its own references. It is created by the first
///   [`Inbox::fetch_references`] for the recipient (nothing else creates it) and then hands out
///   every reference still stored for the recipient, including those published before it
///   existed. A consumer can disappear (deleted by an operator or an accident): the next fetch
///   recreates it, and it hands out again every reference still stored, counting `deliveries`
///   from 1.
/// - **Hand-out**: one delivery of a reference by `fetch_references`. A reference handed out and
///   not acknowledged becomes due again once the inbox's **ack wait** has elapsed since that
///   hand-out (at hand-out + ack wait, or later).
/// - **Max deliver**: the most hand-outs of one reference by one consumer (count). Once the ack
///   wait of its last permitted hand-out has elapsed, the reference is *retired*: never handed
///   out again by this consumer and not counted as awaiting an ack; it stays stored (and
///   acknowledgeable) until acked, discarded, or its consumer is recreated.
///
/// Ack wait, max deliver, the overflow limit and the duplicate window are the adapter's
/// configuration (durations and counts), not arguments.
///
/// # Recipient keys
/// Every method taking `recipient_key` validates it first with
/// [`validate_recipient_key`](crewbus_domain::validate_recipient_key): an invalid key is
/// `Invalid` (for `publish_reference`, `Published::Fatal(Invalid)`), before the backend is asked.
///
/// # Time
/// Ack waits and duplicate windows are measured on the adapter's clock: an injected
/// [`crate::Clock`] for memory and Postgres (they never read a clock of their own), the server's
/// clock for JetStream.
#[cfg_attr(feature = "mock", mockall::automock)]
#[async_trait]
pub trait Inbox: Send + Sync {
    /// Stores one reference on the recipient's own subject (queue).
    ///
    /// - **Deduplicated on `event_id` across the whole team inbox** (every recipient): a repeat
    ///   stores nothing and answers `Confirmed { duplicate: true }` with the first locator; the
    ///   repeat's `recipient_key` and `payload` are ignored. So an event id names one
    ///   (message, recipient) pair. Memory and Postgres remember an event id for the life of the
    ///   inbox; JetStream within the duplicate window, which never exceeds the inbox's `max_age`.
    ///   `duplicate: true` means the event id was seen, not that the reference is still stored:
    ///   it may have been acked or discarded since, and it is not stored again.
    /// - Otherwise → `Confirmed { duplicate: false }`. The locator names the inbox (same scheme
    ///   as the adapter's body backend), and [`crate::MessagingBackend::fetch`] refuses it with
    ///   `Forbidden`; the application does not need it beyond the outcome.
    /// - `payload` is opaque to the inbox: stored and handed out byte for byte, never parsed.
    ///   The caller puts JSON naming the message there; it never carries a body. An adapter that
    ///   bounds its size (JetStream: the server's `max_payload`) answers a larger one with
    ///   `Fatal(TooLarge)`.
    /// - **Overflow**: the team's inbox keeps at most its configured number of references,
    ///   across all recipients. Beyond it the *oldest* references of the team are discarded,
    ///   whoever they were for (discard-old); a discarded reference is never handed out again.
    ///   The ledger stays the authority and tops the recipient up — with a fresh event id, since
    ///   the discarded one may still be remembered (see dedup above).
    /// - Invalid `recipient_key` → `Fatal(Invalid)`. Backend unreachable, no responders, or the
    ///   inbox store missing → `Retryable(Unavailable | Timeout)`; sent but not answered →
    ///   `Uncertain(Timeout | Unavailable)`. There is no reconcile for references: settle
    ///   `Uncertain` by publishing the same event id again (deduplicated while it is
    ///   remembered).
    /// - Concurrent publishes of one event id store it once: exactly one answers
    ///   `duplicate: false`.
    async fn publish_reference(
        &self,
        recipient_key: &str,
        event_id: Uuid,
        payload: &str,
    ) -> Published;

    /// Hands out up to `limit` references of the recipient without acknowledging any.
    ///
    /// Creates the recipient's consumer if it does not exist (even when nothing is stored, and
    /// for `limit == 0`). Hands out, redeliveries first: references handed out earlier whose ack
    /// wait has elapsed and that are not retired (`deliveries` incremented), then references this
    /// consumer never handed out, in stream order. Each one handed out waits a new ack wait from
    /// now. Every [`InboxRef`](crewbus_domain::InboxRef) carries the `event_id` and `payload` as
    /// published, its `stream_seq`, `deliveries` (1 on the first hand-out by this consumer) and
    /// the `ack_subject` of this hand-out.
    ///
    /// Never waits for new references: an empty or short batch never means "caught up" (a
    /// broker may hand out fewer than are due); call again. Errors: invalid key → `Invalid`;
    /// backend down → `Unavailable`/`Timeout`; the inbox store missing → `NotProvisioned`.
    async fn fetch_references(&self, recipient_key: &str, limit: usize)
    -> BusResult<Vec<InboxRef>>;

    /// Acknowledges one handed-out reference by its opaque `ack_subject` (from the most recent
    /// hand-out of that reference), and waits for the backend to confirm (a double ack on
    /// JetStream). The acknowledged reference is removed: never handed out again, no longer
    /// counted in [`Inbox::inbox_status`].
    ///
    /// Send it only after the recipient's receipt is committed. `Ok` also when there is nothing
    /// left to do: acknowledged before (acking twice is harmless), discarded by overflow, or a
    /// subject of this inbox that names nothing handed out. If the consumer was deleted since
    /// the hand-out, the ack may be `Ok` without effect or a retryable error; either way the
    /// recreated consumer hands the reference out again, which the receipt absorbs — as it
    /// absorbs any lost ack.
    ///
    /// Errors: a subject that is not an ack subject of this team's inbox — another team's,
    /// another stream's or prefix, empty or malformed — is `Forbidden` (never `Invalid`), decided
    /// from the subject itself; the caller never takes one from an agent. Backend down →
    /// `Unavailable`/`Timeout` (retry the ack).
    async fn ack_reference(&self, ack_subject: &str) -> BusResult<()>;

    /// The recipient's consumer state, as JetStream consumer info reports it. Never creates the
    /// consumer.
    ///
    /// A missing consumer (never fetched, or deleted) or a missing inbox store →
    /// `Ok(InboxStatus { present: false, pending: 0, awaiting_ack: 0, redelivered: 0 })`, even
    /// when references are stored for the recipient: a fact, not an empty inbox. Otherwise
    /// `present: true` and the counts of [`InboxStatus`](crewbus_domain::InboxStatus): `pending`
    /// (stored for the recipient, not yet handed out by this consumer), `awaiting_ack` (handed
    /// out, not acknowledged, not retired; due or not) and `redelivered` (of those, handed out
    /// more than once). A broker may lag: a retired reference may keep counting in
    /// `awaiting_ack` until the next `fetch_references`, and in `redelivered` on JetStream
    /// (nats-server 2.9.10 keeps it in `num_redelivered`); poll rather than expect an instant
    /// change. Errors: invalid key → `Invalid`; any other failure (backend down) is an error
    /// (`Unavailable`/`Timeout`), never an empty inbox.
    async fn inbox_status(&self, recipient_key: &str) -> BusResult<InboxStatus>;
}
