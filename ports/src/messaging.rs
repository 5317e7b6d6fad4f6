//! The body backend port.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use crewbus_domain::{BusResult, Envelope, Locator, Published};
use uuid::Uuid;

/// Keeps message bodies for one team: persist idempotently, read back by locator, apply
/// retention, and settle an attempt that ended without an answer.
///
/// One instance serves one team (the registry, [`crate::Backends`], hands them out). Implemented
/// by the memory, Postgres and JetStream adapters; every one passes the same conformance suite.
///
/// # Body size
/// Every implementation has an effective maximum body size (the bus contract is 1 MiB, configurable
/// lower; JetStream also bounds it by the server's `max_payload`). A body of exactly the maximum is
/// stored; one byte more is `Published::Fatal(BusError::TooLarge)`.
#[cfg_attr(feature = "mock", mockall::automock)]
#[async_trait]
pub trait MessagingBackend: Send + Sync {
    /// The backend's name (`"memory"`, `"postgres"`, `"jetstream"`), recorded on the conversation
    /// and the outbox row; the registry looks a backend up by it.
    fn name(&self) -> &'static str;

    /// Persists `envelope.body`.
    ///
    /// Contract:
    /// - Idempotent on `publish_key` for the life of the body (not only a broker's duplicate
    ///   window): presented again, it stores nothing new and returns the same locator with
    ///   `duplicate: true`.
    /// - The same `message_id` under a different `publish_key` → `Fatal(BusError::Conflict)`.
    /// - An envelope whose `team_id` is not this backend's team → `Fatal(BusError::Forbidden)`.
    /// - A body above the effective maximum → `Fatal(BusError::TooLarge)`.
    /// - A full discard-new quota → `Retryable(BusError::QuotaExceeded)`.
    /// - Backend unreachable before sending → `Retryable(Unavailable | Timeout)`; sent but not
    ///   answered → `Uncertain(..)` (settle with [`MessagingBackend::reconcile`]).
    /// - Once `Confirmed`, [`MessagingBackend::fetch`] returns the body at once.
    async fn publish(&self, envelope: Envelope) -> Published;

    /// Reads a body back by the locator `publish` returned.
    ///
    /// Returns `Ok(Some(body))`, or `Ok(None)` when the position is unknown (never stored, or
    /// removed by retention). Errors: a malformed locator or another scheme →
    /// [`BusError::Invalid`](crewbus_domain::BusError::Invalid); a locator of another stream or
    /// team (including this team's inbox stream), or a stored body whose message id or team
    /// differs from `message_id`/this team → `Forbidden`; backend down → `Unavailable`/`Timeout`.
    /// Never panics on any input.
    async fn fetch(&self, locator: &Locator, message_id: Uuid) -> BusResult<Option<String>>;

    /// Removes every body stored strictly before `before` (the backend's own store time) and
    /// returns how many were removed. The ledger decides the policy; the backend executes it.
    /// Idempotent: a second call with the same instant removes 0.
    async fn retain(&self, before: DateTime<Utc>) -> BusResult<u64>;

    /// Settles an attempt that ended without an answer (`Published::Uncertain`), given the whole
    /// envelope of that attempt.
    ///
    /// - Body held under `envelope.publish_key` → `Ok(Some(locator))`.
    /// - Not held → publishes the real body under the same key (never a throwaway probe, which
    ///   would consume the key): confirmed → `Ok(Some(locator))`; refused in a way that proves it
    ///   is not stored and may be retried (`Retryable`) → `Ok(None)`, a retry is safe.
    /// - Still no answer, or a fatal refusal → `Err` with that error (`is_retryable` tells).
    async fn reconcile(&self, envelope: &Envelope) -> BusResult<Option<Locator>>;
}
