//! The body backend port.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use crewbus_domain::{BusResult, Envelope, Locator, Published};
use uuid::Uuid;

/// Keeps message bodies for one team: persist idempotently, read back by locator, apply
/// retention, and settle an attempt that ended without an answer.
///
/// One instance serves one team (the registry, [`crate::Backends`], hands them out); every
/// instance handed out for the same team sees the same stored bodies. Implemented by the memory,
/// Postgres and JetStream adapters; every one passes the same conformance suite
/// (`crewbus-conformance`), which is the executable form of this contract.
///
/// # Terms
/// - **Held**: a body is held from the publish that stored it until [`MessagingBackend::retain`]
///   removes it. "For the life of the body" means while it is held.
/// - **Locator**: what a confirmed publish returns, `<scheme>:<rest>` (see
///   [`Locator`](crewbus_domain::Locator)). By convention the scheme is [`MessagingBackend::name`];
///   the rest is the adapter's own and must let `fetch` tell this team's body store from anything
///   else (another team, this team's inbox) without trusting the caller. The ledger stores it
///   and fetches with it later, possibly from another process: it stays valid while the body is
///   held, and one body always has the same locator.
/// - **Refusal**: every `Retryable` or `Fatal` answer stores nothing and consumes nothing: the
///   publish key and the message id stay free, so a later publish that can succeed is stored
///   as new (`duplicate: false`).
///
/// # Body size
/// Every implementation has an effective maximum body size in bytes, measured as
/// [`Envelope::body_len`](crewbus_domain::Envelope::body_len) (UTF-8 bytes of the body only, no
/// headers): the bus contract is [`MAX_BODY_BYTES`](crewbus_domain::MAX_BODY_BYTES) (1 MiB),
/// configurable lower; JetStream also bounds it by the server's `max_payload`. A body of exactly
/// the maximum is stored; one byte more is
/// `Published::Fatal(BusError::TooLarge { size: body_len, limit: effective maximum })`.
///
/// # Time
/// Store times (what `retain` compares with) come from the adapter's time source: an injected
/// [`crate::Clock`] for memory and Postgres (they never read a clock of their own), the server's
/// message timestamp for JetStream.
#[cfg_attr(feature = "mock", mockall::automock)]
#[async_trait]
pub trait MessagingBackend: Send + Sync {
    /// The backend's name (`"memory"`, `"postgres"`, `"jetstream"`), recorded on the conversation
    /// and the outbox row; the registry looks a backend up by it, so it equals the
    /// [`crate::Backends::name`] of the registry that hands this backend out. The same for every
    /// team and constant for the life of the value.
    fn name(&self) -> &'static str;

    /// The effective maximum body size in bytes: a body of exactly this size is stored, one byte
    /// more is `Fatal(TooLarge)`. The application refuses larger bodies at the API (413) before
    /// they reach the outbox. Default: the bus contract, [`crewbus_domain::MAX_BODY_BYTES`];
    /// adapters whose effective maximum is lower (JetStream, bounded by the server's
    /// `max_payload`, or a lower configured limit) override it.
    fn max_body_bytes(&self) -> u64 {
        crewbus_domain::MAX_BODY_BYTES
    }

    /// Persists `envelope.body`.
    ///
    /// Contract, checked in this order (the first that applies answers):
    /// 1. An envelope whose `team_id` is not this backend's team → `Fatal(BusError::Forbidden)`.
    /// 2. A body above the effective maximum → `Fatal(BusError::TooLarge)` (see "Body size").
    /// 3. A **repeat** — `publish_key` of a held body of the same `message_id` — stores nothing
    ///    new and answers `Confirmed { duplicate: true }` with that body's locator, for the life
    ///    of the body (not only a broker's duplicate window), also when the quota is full. The
    ///    repeat's `body` and `conversation_id` are not compared: the stored body stays.
    /// 4. A `publish_key` held by another message, or this `message_id` held under another
    ///    `publish_key` → `Fatal(BusError::Conflict)`; the stored body stays.
    /// 5. A body that does not fit the discard-new quota (count or bytes, as the backend
    ///    accounts them) → `Retryable(BusError::QuotaExceeded)`; retention or a raised quota
    ///    frees room.
    /// 6. Otherwise the body is stored → `Confirmed { duplicate: false }` with a locator no other
    ///    held body has.
    ///
    /// Failures of the backend itself: unreachable before sending, no responders, or the store
    /// missing for a moment (intake paused during a quota change) → `Retryable(Unavailable |
    /// Timeout)`; sent but not answered → `Uncertain(Timeout | Unavailable)`, settle it with
    /// [`MessagingBackend::reconcile`]. A revoked credential → `Fatal(Unauthenticated)`.
    ///
    /// Concurrent publishes of one envelope store it once: all are confirmed at one locator and
    /// exactly one says `duplicate: false`. Once `Confirmed`, [`MessagingBackend::fetch`] returns
    /// the body at once, from any instance of this team (no eventual consistency, also on a
    /// replicated store).
    async fn publish(&self, envelope: Envelope) -> Published;

    /// Reads a body back by the locator `publish` returned, for the message `message_id`.
    ///
    /// Returns `Ok(Some(body))` exactly as published, or `Ok(None)` when the locator is well
    /// formed and names this team's body store but no body is held there (never stored, or
    /// removed by retention). Errors:
    /// - another scheme, no `<scheme>:` prefix, or a rest this adapter cannot parse (empty,
    ///   wrong shape, a position that cannot exist such as `0` or one that overflows) →
    ///   [`BusError::Invalid`](crewbus_domain::BusError::Invalid);
    /// - a parsable locator of another team, another stream or store (including this team's
    ///   inbox, whose `publish_reference` locators share the scheme) → `Forbidden`, whatever
    ///   `message_id` is;
    /// - a held body whose message id (or team) is not `message_id` (this team) → `Forbidden`:
    ///   a locator is not proof of access;
    /// - backend down → `Unavailable`/`Timeout`.
    ///
    /// Read-only; never panics on any input.
    async fn fetch(&self, locator: &Locator, message_id: Uuid) -> BusResult<Option<String>>;

    /// Removes every body stored strictly before `before` (store time on the adapter's time
    /// source, see "Time"; a body stored exactly at `before` stays) and returns how many bodies
    /// were removed (count). The ledger decides the policy; the backend executes it.
    ///
    /// A removed body fetches as `Ok(None)`, its bytes and count leave the quota, and its
    /// `publish_key` and `message_id` are forgotten: presented again, they are stored anew
    /// (`duplicate: false`) at a locator that holds the body (a new one, or the same where the
    /// locator names the message, as Postgres' does) — also within a broker's duplicate window,
    /// where the broker still remembers the removed copy. Idempotent: a second call with the same instant
    /// removes 0. Errors: backend down → `Unavailable`/`Timeout` (some bodies may already be
    /// removed; calling again finishes the job).
    async fn retain(&self, before: DateTime<Utc>) -> BusResult<u64>;

    /// Settles an attempt that ended without an answer (`Published::Uncertain`), given the whole
    /// envelope of that attempt. Safe to call any number of times, also when the attempt did
    /// land.
    ///
    /// - Body held under `envelope.publish_key` for this message → `Ok(Some(locator))`, the
    ///   locator it was stored at.
    /// - Not held → publishes the real body under the same key (never a throwaway probe, which
    ///   would consume the key), with the rules of [`MessagingBackend::publish`]: confirmed →
    ///   `Ok(Some(locator))`; refused with a retryable error the backend answered (a full quota:
    ///   known not stored) → `Ok(None)`, nothing is held and a retry of the publish is safe.
    /// - A fatal refusal → `Err` with it: another team's envelope → `Forbidden`, too large →
    ///   `TooLarge`, the key or message held by another message → `Conflict`.
    /// - No answer, or the backend cannot be reached → `Err(Timeout | Unavailable)`: unknown
    ///   still, reconcile again later
    ///   ([`is_retryable`](crewbus_domain::BusError::is_retryable) tells which errors to retry).
    async fn reconcile(&self, envelope: &Envelope) -> BusResult<Option<Locator>>;
}
