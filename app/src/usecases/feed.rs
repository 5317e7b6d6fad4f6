//! The console event feed, as the use cases use it: they [`emit`](Bus::emit) what they changed
//! after its commit, a publisher task sends it through the [`Feed`](crewbus_ports::Feed) port,
//! and one listener per process hands it to every console viewer ([`Bus::watch_feed`]).
//!
//! # Cost
//! - **Emitting** is a push into an unbounded in-process channel: no I/O on the request's path.
//! - **Publishing**: the publisher takes everything queued, coalesces it
//!   ([`crewbus_domain::coalesce`]) and publishes it with one `Feed::publish` (one `NOTIFY` on
//!   Postgres), then waits [`FEED_INTERVAL`] before the next publish, so a server publishes at
//!   most 10 batches a second however busy it is — whether or not anybody watches.
//! - **Listening**: the first [`Bus::watch_feed`] starts one subscription for the whole process
//!   (on Postgres, one listener connection); it is dropped again within [`IDLE_CHECK`] of the
//!   last viewer leaving.
//!
//! A lost batch (the transport down, a listener's session lost) is a hint lost: viewers get
//! [`FeedUpdate::Lagged`] and look again. A listener lost while someone watches is logged at
//! WARN and counted (`crewbus_feed_listener_lost_total`), subscribed again at once, and its
//! return logged at INFO and counted (`crewbus_feed_listener_reconnected_total`).

use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use crewbus_domain::{FeedEvent, FeedUpdate, coalesce};
use crewbus_ports::Feed;
use tokio::sync::{broadcast, mpsc, watch};

use crate::metrics::Metrics;
use crate::usecases::bus::Bus;

/// A server publishes at most one feed batch per this interval (100 ms).
pub const FEED_INTERVAL: Duration = Duration::from_millis(100);

/// How often the process's feed listener checks whether anybody still watches (10 s).
pub const IDLE_CHECK: Duration = Duration::from_secs(10);

/// After a failed subscription, the listener tries again after this pause (1 s).
const RESUBSCRIBE_AFTER: Duration = Duration::from_secs(1);

/// Updates buffered per viewer before it is told it lagged.
const VIEWER_BUFFER: usize = 256;

/// The feed's in-process half: the publisher's queue (spawned on first use, on the runtime
/// serving it) and the viewers' broadcast (its listener task started by the first viewer).
#[derive(Default)]
pub(crate) struct FeedHub {
    publisher: OnceLock<mpsc::UnboundedSender<Vec<FeedEvent>>>,
    viewers: Mutex<Option<Viewers>>,
}

/// The process's viewers: their broadcast, and whether its listener is subscribed now.
struct Viewers {
    tx: broadcast::Sender<FeedUpdate>,
    subscribed: watch::Receiver<bool>,
}

/// How long [`Bus::watch_feed`] waits for the process's subscription before it answers anyway
/// (the viewer is told it lagged once the subscription is made).
const SUBSCRIBE_WAIT: Duration = Duration::from_secs(2);

impl FeedHub {
    /// Queues `events` for the publisher over `feed`, spawning it on first use (on the runtime
    /// of the caller).
    fn emit(&self, feed: &Arc<dyn Feed>, events: Vec<FeedEvent>) {
        if events.is_empty() {
            return;
        }
        let tx = self.publisher.get_or_init(|| {
            let (tx, rx) = mpsc::unbounded_channel();
            tokio::spawn(publish_loop(Arc::clone(feed), rx));
            tx
        });
        // The publisher lives as long as the hub (every clone of the bus, and the sinks); a
        // send fails only after that.
        let _ = tx.send(events);
    }
}

impl Bus {
    /// Says that `events` were committed: queued for the publisher, never waited for. Call it
    /// after the commit that made the change.
    pub(crate) fn emit(&self, events: Vec<FeedEvent>) {
        self.feed.emit(&self.ports.feed, events);
    }

    /// A sink for what a worker outside the use cases commits (the push delivery worker's
    /// parked registrations): each event is [emitted](Bus::emit) as if a use case had. It holds
    /// the feed, not the bus.
    pub(crate) fn feed_sink(&self) -> crate::push::EventSink {
        let hub = Arc::clone(&self.feed);
        let feed = Arc::clone(&self.ports.feed);
        Arc::new(move |event| hub.emit(&feed, vec![event]))
    }

    /// A receiver of every feed update from now on, on every server (the console's SSE streams
    /// call it once per viewer, before they render what they show, so nothing committed after
    /// the render is missed). The first call starts the process's one subscription and waits
    /// for it (at most [`SUBSCRIBE_WAIT`]; if the transport is down the receiver is answered
    /// anyway and told it lagged once the subscription is made). A receiver that falls
    /// [`VIEWER_BUFFER`] updates behind gets a `Lagged` error: treat it as
    /// [`FeedUpdate::Lagged`].
    pub async fn watch_feed(&self) -> broadcast::Receiver<FeedUpdate> {
        let (rx, mut subscribed) = {
            let mut viewers = self.feed.viewers.lock().unwrap_or_else(|e| e.into_inner());
            match viewers.as_ref() {
                Some(v) if v.tx.receiver_count() > 0 => (v.tx.subscribe(), v.subscribed.clone()),
                _ => {
                    let (tx, rx) = broadcast::channel(VIEWER_BUFFER);
                    let (ready, subscribed) = watch::channel(false);
                    *viewers = Some(Viewers {
                        tx: tx.clone(),
                        subscribed: subscribed.clone(),
                    });
                    tokio::spawn(listen_loop(
                        Arc::clone(&self.ports.feed),
                        Arc::clone(&self.feed),
                        Arc::clone(&self.metrics),
                        tx,
                        ready,
                    ));
                    (rx, subscribed)
                }
            }
        };
        let _ = tokio::time::timeout(SUBSCRIBE_WAIT, subscribed.wait_for(|s| *s)).await;
        rx
    }
}

/// The publisher: one `Feed::publish` per drain of the queue, at most one per [`FEED_INTERVAL`];
/// ends when every clone of the bus is gone.
async fn publish_loop(feed: Arc<dyn Feed>, mut rx: mpsc::UnboundedReceiver<Vec<FeedEvent>>) {
    while let Some(mut batch) = rx.recv().await {
        while let Ok(more) = rx.try_recv() {
            batch.extend(more);
        }
        let events = coalesce(&batch);
        if let Err(error) = feed.publish(&events).await {
            tracing::debug!(code = error.code(), error = ?error, "publishing console feed events failed");
        }
        tokio::time::sleep(FEED_INTERVAL).await;
    }
}

/// The process's feed listener: hands every update to `viewers` until nobody watches, then
/// stops (a later viewer starts another). A lost subscription (logged at WARN, counted in
/// [`Metrics::feed_listener_lost`]) is made again at once (after [`RESUBSCRIBE_AFTER`] when it
/// lived less than that), a failed one after that pause; the one made after a loss is logged
/// at INFO and counted in [`Metrics::feed_listener_reconnected`], and the viewers are told they
/// lagged.
async fn listen_loop(
    feed: Arc<dyn Feed>,
    hub: Arc<FeedHub>,
    metrics: Arc<Metrics>,
    viewers: broadcast::Sender<FeedUpdate>,
    subscribed: watch::Sender<bool>,
) {
    // Whether viewers may have missed changes: a subscription failed or was lost.
    let mut missed = false;
    // Set while the last subscription was lost and no other has been made since.
    let mut lost = false;
    'subscribe: while !nobody_watches(&hub, &viewers) {
        let mut listener = match feed.subscribe().await {
            Ok(listener) => listener,
            Err(error) => {
                tracing::debug!(code = error.code(), error = ?error, "console feed: cannot subscribe; retrying");
                subscribed.send_replace(false);
                missed = true;
                tokio::time::sleep(RESUBSCRIBE_AFTER).await;
                continue;
            }
        };
        let started = tokio::time::Instant::now();
        if std::mem::take(&mut lost) {
            Metrics::inc(&metrics.feed_listener_reconnected);
            tracing::info!("console feed listener reconnected; viewers look again");
        }
        // Viewers answered while there was no subscription (a first one that stopped waiting,
        // or every viewer after a lost one) look again.
        if std::mem::take(&mut missed) {
            let _ = viewers.send(FeedUpdate::Lagged);
        }
        subscribed.send_replace(true);
        loop {
            tokio::select! {
                next = listener.next() => match next {
                    Ok(update) => {
                        if viewers.send(update).is_err() && nobody_watches(&hub, &viewers) {
                            break 'subscribe;
                        }
                    }
                    Err(error) => {
                        Metrics::inc(&metrics.feed_listener_lost);
                        tracing::warn!(code = error.code(), error = ?error, "console feed listener lost; reconnecting");
                        subscribed.send_replace(false);
                        missed = true;
                        lost = true;
                        // At once, unless it was lost as soon as it was made: no spinning.
                        tokio::time::sleep(RESUBSCRIBE_AFTER.saturating_sub(started.elapsed()))
                            .await;
                        continue 'subscribe;
                    }
                },
                () = tokio::time::sleep(IDLE_CHECK) => {
                    if nobody_watches(&hub, &viewers) {
                        break 'subscribe;
                    }
                }
            }
        }
    }
}

/// Whether nobody watches `viewers` any more, decided under the hub's lock (where
/// [`Bus::watch_feed`] subscribes): when so, the hub forgets the channel before the listener
/// stops, so a viewer arriving meanwhile starts a new listener instead of joining one that ends.
fn nobody_watches(hub: &FeedHub, viewers: &broadcast::Sender<FeedUpdate>) -> bool {
    let mut slot = hub.viewers.lock().unwrap_or_else(|e| e.into_inner());
    if viewers.receiver_count() > 0 {
        return false;
    }
    if slot.as_ref().is_some_and(|v| v.tx.same_channel(viewers)) {
        *slot = None;
    }
    true
}
