//! The wake-up port: tells a waiting fetch that a message became fetchable for its agent.

use async_trait::async_trait;
use crewbus_domain::{BusResult, Wakeup, WakeupTarget};
use uuid::Uuid;

/// Wake-ups between the servers that share one ledger: a hint that a message became fetchable
/// for an agent (its inbox reference was published — the reference worker notifies once the
/// inbox confirmed the publish, before its markers' commit — or the agent was revoked).
///
/// A hint only: the ledger stays the truth. A wake-up may be lost (a listener's session lost, a
/// server restarting) or arrive for nothing (the message was fetched by another request); a
/// waiting fetch therefore re-checks on a bounded safety interval, so a lost wake-up delays a
/// delivery, never loses it.
///
/// Implemented in process (memory ledger: one server per store) and by Postgres
/// (`LISTEN/NOTIFY` on one channel, on a dedicated connection per server), which also covers
/// inboxes kept elsewhere whose references that ledger marks. Every notify reaches every listener
/// started before it, on any server of the deployment, including the notifier's own.
#[cfg_attr(feature = "mock", mockall::automock)]
#[async_trait]
pub trait Wakeups: Send + Sync {
    /// Wakes the waiters of `targets` on every server (one round trip for the whole batch; an
    /// empty batch does nothing). Called after the change is committed, never inside the
    /// transaction that makes it. Errors: the transport unreachable → `Unavailable` (the
    /// waiters' safety re-check covers the loss).
    async fn notify(&self, targets: &[WakeupTarget]) -> BusResult<()>;

    /// Wakes the lease acquires waiting in `teams` on every server (a lease of theirs ended),
    /// one round trip for the batch; an empty batch does nothing. Called after the change is
    /// committed. Errors: the transport unreachable → `Unavailable` (a waiting acquire's own
    /// re-check bounds the loss).
    async fn notify_leases(&self, teams: &[Uuid]) -> BusResult<()>;

    /// Starts listening: every notify from now on arrives on the returned listener. Errors: the
    /// transport unreachable → `Unavailable` (retry after a pause).
    async fn listen(&self) -> BusResult<Box<dyn WakeupListener>>;
}

/// A started listener of [`Wakeups`].
#[async_trait]
pub trait WakeupListener: Send {
    /// The next wake-up, waiting until one arrives. [`Wakeup::Everyone`] when some may have been
    /// missed (the listener fell behind): every waiter should look again. Errors: the
    /// transport's session lost → `Unavailable`, and this listener is finished (an adapter does
    /// not reconnect behind the caller's back, so every loss is seen): the caller starts a new
    /// listener and, once it listens, wakes everyone.
    async fn next(&mut self) -> BusResult<Wakeup>;
}
