//! The feed port: the console's live events, across every server that shares one ledger.

use async_trait::async_trait;
use crewbus_domain::{BusResult, FeedEvent, FeedUpdate};

/// The console event feed: what changed on the bus (a message stored, handed out, confirmed; an
/// agent revoked; a push registration parked …), said after the commit that changed it, so
/// pages update live without polling the ledger.
///
/// A hint, like [`crate::Wakeups`]: the ledger stays the truth; an event may be lost (a listener
/// reconnecting), in which case the listener reports [`FeedUpdate::Lagged`] and pages look
/// again. Events carry ids and kinds, never message bodies. New kinds are added to
/// [`crewbus_domain::FeedKind`] without changing this port.
///
/// Implemented in process (memory and SQLite: one server per store) and by Postgres (one
/// `NOTIFY` per published batch on its own channel, coalesced and kept under the payload limit;
/// a listener connection opened only while someone subscribes). Every publish reaches every
/// listener subscribed before it, on any server of the deployment, including the publisher's own.
#[cfg_attr(feature = "mock", mockall::automock)]
#[async_trait]
pub trait Feed: Send + Sync {
    /// Publishes one committed batch of changes to every server: one round trip (one `NOTIFY`
    /// on Postgres) for the whole batch, coalesced; an empty batch does nothing. Called after the
    /// commit, off the request's path. Errors: the transport unreachable → `Unavailable` (pages
    /// see the change at their next look).
    async fn publish(&self, events: &[FeedEvent]) -> BusResult<()>;

    /// Starts listening: every publish from now on arrives on the returned listener. Errors:
    /// the transport unreachable → `Unavailable` (retry after a pause).
    async fn subscribe(&self) -> BusResult<Box<dyn FeedListener>>;
}

/// A started listener of [`Feed`].
#[async_trait]
pub trait FeedListener: Send {
    /// The next batch, waiting until one arrives; [`FeedUpdate::Lagged`] when some may have been
    /// missed. Errors: the transport's session lost → `Unavailable`, and this listener is
    /// finished (an adapter does not reconnect behind the caller's back): subscribe again and
    /// treat it as lagged.
    async fn next(&mut self) -> BusResult<FeedUpdate>;
}
