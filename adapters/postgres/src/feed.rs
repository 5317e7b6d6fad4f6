//! The console feed over Postgres `LISTEN/NOTIFY`: a change committed through one crewbus server
//! shows on the console pages of every server of the database.

use async_trait::async_trait;
use crewbus_domain::{BusError, BusResult, FeedEvent, FeedUpdate, decode_feed, encode_feed};
use crewbus_ports::{Feed, FeedListener};
use sqlx::PgPool;
use sqlx::postgres::{PgConnectOptions, PgListener};

use crate::error::bus_error;

/// The one channel every crewbus server of a database publishes console events on.
pub const FEED_CHANNEL: &str = "crewbus_feed";

/// The payload of a batch too big for one notification even coarsened: listeners report
/// [`FeedUpdate::Lagged`] (every page looks again).
pub const LAGGED_PAYLOAD: &str = "lagged";

/// Longest payload published, bytes: Postgres refuses a `NOTIFY` payload of 8000 bytes or more.
const PAYLOAD_LIMIT: usize = 7900;

/// [`Feed`] over Postgres `LISTEN/NOTIFY`, on its own channel ([`FEED_CHANNEL`]).
///
/// - `publish` sends one `pg_notify` per batch on the shared pool: the batch coalesced and
///   encoded by [`encode_feed`] within 7900 bytes, or [`LAGGED_PAYLOAD`] when even its coarse
///   form does not fit.
/// - `subscribe` opens a **dedicated connection** (never one of the shared pool's, opened only
///   while someone subscribes), from the options given at construction (as
///   [`crate::PostgresWakeups`] does: behind a transaction-pooling proxy they point at the
///   database directly). When that session is lost, the listener's `next` answers
///   `Unavailable` and the listener is finished (it does not reconnect by itself: the caller
///   sees every loss, subscribes again and treats what it missed as lagged); a payload it
///   cannot read is [`FeedUpdate::Lagged`].
#[derive(Clone)]
pub struct PostgresFeed {
    pool: PgPool,
    listen: PgConnectOptions,
}

impl std::fmt::Debug for PostgresFeed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresFeed")
            .field("channel", &FEED_CHANNEL)
            .finish_non_exhaustive()
    }
}

impl PostgresFeed {
    /// Publishes on `pool`; subscribes on a connection of its own opened with `listen`.
    pub fn new(pool: PgPool, listen: PgConnectOptions) -> Self {
        PostgresFeed { pool, listen }
    }
}

#[async_trait]
impl Feed for PostgresFeed {
    async fn publish(&self, events: &[FeedEvent]) -> BusResult<()> {
        if events.is_empty() {
            return Ok(());
        }
        let payload = encode_feed(events, PAYLOAD_LIMIT).unwrap_or_else(|| LAGGED_PAYLOAD.into());
        sqlx::query("SELECT pg_notify($1, $2)")
            .bind(FEED_CHANNEL)
            .bind(payload)
            .execute(&self.pool)
            .await
            .map_err(|e| bus_error(e, "feed publish"))?;
        Ok(())
    }

    async fn subscribe(&self) -> BusResult<Box<dyn FeedListener>> {
        let listener =
            crate::connect::listen_on(&self.listen, FEED_CHANNEL, "feed listener").await?;
        Ok(Box::new(PostgresFeedListener { listener }))
    }
}

struct PostgresFeedListener {
    listener: PgListener,
}

#[async_trait]
impl FeedListener for PostgresFeedListener {
    async fn next(&mut self) -> BusResult<FeedUpdate> {
        let notification = self
            .listener
            .try_recv()
            .await
            .map_err(|e| bus_error(e, "feed listener"))?
            // `None`: the session was lost (without eager reconnection sqlx opens no other).
            .ok_or_else(|| BusError::unavailable("feed listener: its database session was lost"))?;
        Ok(decode_feed(notification.payload()).map_or(FeedUpdate::Lagged, FeedUpdate::Events))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crewbus_domain::{FeedKind, Uuid};

    #[test]
    fn a_batch_that_fits_in_no_notification_is_published_as_lagged() {
        let many: Vec<FeedEvent> = (0..300)
            .map(|_| FeedEvent::new(Uuid::new_v4(), FeedKind::Confirmed))
            .collect();
        assert_eq!(encode_feed(&many, PAYLOAD_LIMIT), None);
        assert_eq!(
            decode_feed(LAGGED_PAYLOAD),
            None,
            "listeners read it as lagged"
        );
    }
}
