//! The console feed in process: the memory and SQLite stores' [`Feed`] (one server per store).

use std::sync::Arc;

use async_trait::async_trait;
use crewbus_domain::{BusError, BusResult, FeedEvent, FeedUpdate, coalesce};
use crewbus_ports::{Feed, FeedListener};
use tokio::sync::broadcast;

/// How many published batches a listener may fall behind before it is told it lagged.
const BACKLOG: usize = 1024;

/// [`Feed`] inside one process: a broadcast channel from every publish to every listener
/// subscribed before it, this value's and its clones'.
///
/// Each publish sends its batch coalesced ([`coalesce`]) as one item; a listener that falls more
/// than 1024 batches behind gets [`FeedUpdate::Lagged`] (nothing is silently dropped) and then
/// the batches still held.
#[derive(Clone)]
pub struct MemoryFeed {
    tx: broadcast::Sender<Arc<[FeedEvent]>>,
}

impl std::fmt::Debug for MemoryFeed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryFeed")
            .field("listeners", &self.tx.receiver_count())
            .finish()
    }
}

impl Default for MemoryFeed {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryFeed {
    /// A feed whose publishes reach every listener of this value and its clones.
    pub fn new() -> Self {
        MemoryFeed {
            tx: broadcast::channel(BACKLOG).0,
        }
    }
}

#[async_trait]
impl Feed for MemoryFeed {
    async fn publish(&self, events: &[FeedEvent]) -> BusResult<()> {
        if !events.is_empty() {
            // An error only means nobody listens now: no page waits for it.
            let _ = self.tx.send(coalesce(events).into());
        }
        Ok(())
    }

    async fn subscribe(&self) -> BusResult<Box<dyn FeedListener>> {
        Ok(Box::new(MemoryFeedListener {
            rx: self.tx.subscribe(),
        }))
    }
}

struct MemoryFeedListener {
    rx: broadcast::Receiver<Arc<[FeedEvent]>>,
}

#[async_trait]
impl FeedListener for MemoryFeedListener {
    async fn next(&mut self) -> BusResult<FeedUpdate> {
        match self.rx.recv().await {
            Ok(events) => Ok(FeedUpdate::Events(events.to_vec())),
            Err(broadcast::error::RecvError::Lagged(_)) => Ok(FeedUpdate::Lagged),
            // Every `MemoryFeed` clone was dropped: nothing will ever be published again.
            Err(broadcast::error::RecvError::Closed) => {
                Err(BusError::unavailable("in-process feed closed"))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crewbus_domain::{FeedKind, Uuid};

    #[tokio::test]
    async fn a_publish_reaches_every_listener_coalesced() {
        let feed = MemoryFeed::new();
        let mut a = feed.subscribe().await.unwrap();
        let mut b = feed.clone().subscribe().await.unwrap();
        let team = Uuid::new_v4();
        let e = FeedEvent::new(team, FeedKind::MessageSent);
        feed.publish(&[]).await.unwrap();
        feed.publish(&[e.clone(), e.clone()]).await.unwrap();
        let want = FeedUpdate::Events(coalesce(&[e.clone(), e]));
        assert_eq!(a.next().await.unwrap(), want);
        assert_eq!(b.next().await.unwrap(), want);
    }

    #[tokio::test]
    async fn a_listener_far_behind_is_told_it_lagged() {
        let feed = MemoryFeed::new();
        let mut l = feed.subscribe().await.unwrap();
        let e = FeedEvent::new(Uuid::new_v4(), FeedKind::Confirmed);
        for _ in 0..=BACKLOG {
            feed.publish(std::slice::from_ref(&e)).await.unwrap();
        }
        assert_eq!(l.next().await.unwrap(), FeedUpdate::Lagged);
        assert!(matches!(l.next().await.unwrap(), FeedUpdate::Events(_)));
    }

    #[tokio::test]
    async fn a_feed_dropped_by_everyone_is_unavailable() {
        let feed = MemoryFeed::new();
        let mut l = feed.subscribe().await.unwrap();
        drop(feed);
        assert!(matches!(l.next().await, Err(BusError::Unavailable { .. })));
    }
}
