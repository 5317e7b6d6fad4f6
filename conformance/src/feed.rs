//! `Feed` behaviours: a publish reaches every subscriber started before it, on every handle of
//! one deployment (two handles stand for two servers sharing a ledger), coalesced, in order.
//!
//! Each behaviour takes a [`FeedPair`] — two handles onto one fresh deployment — and waits for
//! what it expects with a deadline, never a fixed sleep. [`feed_trials`] registers them for a
//! test target.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use crewbus_domain::{FeedEvent, FeedKind, FeedUpdate, Uuid, coalesce};
use crewbus_ports::{Feed, FeedListener};
use libtest_mimic::Trial;
use tokio::runtime::Runtime;

use crate::FixtureError;
use crate::trial::{Behaviour, Lack, Source, Suite, behaviours};
use crate::wait::Deadline;

/// How long a behaviour waits for a batch to arrive.
const ARRIVAL: Duration = Duration::from_secs(10);

/// Two handles onto one fresh deployment (as two servers of it would hold), and whatever keeps
/// it alive (a database) for the behaviour's life.
pub struct FeedPair {
    /// The first server's handle.
    pub a: Arc<dyn Feed>,
    /// The second server's handle.
    pub b: Arc<dyn Feed>,
    /// Dropped after the behaviour.
    pub keep: Box<dyn Send + Sync>,
}

/// Builds a fresh [`FeedPair`] per behaviour.
#[async_trait]
pub trait FeedFactory: Send + Sync {
    /// A fresh deployment. Errors: its server cannot be had (fails the trial loudly).
    async fn pair(&self) -> Result<FeedPair, FixtureError>;
}

#[async_trait]
impl Source for dyn FeedFactory {
    type Fixture = FeedPair;
    type Need = Infallible;

    fn lacks(&self, _needs: &[Infallible]) -> Option<Lack> {
        None
    }

    async fn fixture(&self) -> Result<Box<FeedPair>, FixtureError> {
        self.pair().await.map(Box::new)
    }
}

/// Every `Feed` behaviour, by name.
pub fn feed_behaviours() -> Vec<Behaviour<FeedPair>> {
    behaviours!["feed" =>
        a_publish_reaches_every_subscriber_on_every_handle,
        a_batch_arrives_coalesced_and_in_order_of_publish,
        an_empty_publish_sends_nothing,
        a_batch_too_big_for_one_message_arrives_coarsened_or_lagged,
    ]
}

/// The next update of `listener`, failing after [`ARRIVAL`] or on a listener error.
async fn next(listener: &mut Box<dyn FeedListener>, what: &str) -> FeedUpdate {
    Deadline::new(ARRIVAL, what)
        .within(listener.next())
        .await
        .unwrap_or_else(|| panic!("{what} never arrived"))
        .expect("the listener failed")
}

/// The events of the next update, failing on `Lagged` (nothing may be lost in these tests).
async fn events(listener: &mut Box<dyn FeedListener>, what: &str) -> Vec<FeedEvent> {
    match next(listener, what).await {
        FeedUpdate::Events(events) => events,
        FeedUpdate::Lagged => panic!("{what}: the listener lagged"),
    }
}

fn event(team: Uuid, kind: FeedKind) -> FeedEvent {
    FeedEvent::new(team, kind).conversation(Uuid::new_v4())
}

/// A publish through either handle reaches every subscriber started before it, on both handles
/// (the publisher's own included), whole.
pub async fn a_publish_reaches_every_subscriber_on_every_handle(p: &FeedPair) {
    let mut on_a = p.a.subscribe().await.expect("subscribe on a");
    let mut on_b = p.b.subscribe().await.expect("subscribe on b");
    let mut also_on_b = p.b.subscribe().await.expect("subscribe on b again");
    let team = Uuid::new_v4();
    let first = vec![
        event(team, FeedKind::MessageStored).message(Uuid::new_v4()),
        event(team, FeedKind::AgentRevoked).agent(Uuid::new_v4()),
    ];
    p.a.publish(&first).await.expect("publish through a");
    for l in [&mut on_a, &mut on_b, &mut also_on_b] {
        assert_eq!(events(l, "the first batch").await, first);
    }
    let second = vec![event(team, FeedKind::RunChanged).run(Uuid::new_v4())];
    p.b.publish(&second).await.expect("publish through b");
    assert_eq!(events(&mut on_a, "the second batch").await, second);
}

/// A batch arrives coalesced (one event per team, kind and conversation, counting its parts),
/// and two batches arrive in the order they were published.
pub async fn a_batch_arrives_coalesced_and_in_order_of_publish(p: &FeedPair) {
    let mut listener = p.b.subscribe().await.expect("subscribe");
    let (team, conversation) = (Uuid::new_v4(), Uuid::new_v4());
    let stored = |m: Uuid| {
        FeedEvent::new(team, FeedKind::MessageStored)
            .conversation(conversation)
            .message(m)
    };
    let batch: Vec<FeedEvent> = (0..5).map(|_| stored(Uuid::new_v4())).collect();
    let last = vec![FeedEvent::new(team, FeedKind::Confirmed).conversation(conversation)];
    p.a.publish(&batch).await.expect("publish the batch");
    p.a.publish(&last).await.expect("publish the last");
    let got = events(&mut listener, "the batch").await;
    assert_eq!(got, coalesce(&batch));
    assert_eq!((got[0].count, got[0].message), (5, None));
    assert_eq!(events(&mut listener, "the last batch").await, last);
}

/// Publishing an empty batch sends nothing: the next thing a subscriber hears is the next
/// batch.
pub async fn an_empty_publish_sends_nothing(p: &FeedPair) {
    let mut listener = p.a.subscribe().await.expect("subscribe");
    p.a.publish(&[]).await.expect("an empty batch is fine");
    p.b.publish(&[]).await.expect("an empty batch is fine");
    let batch = vec![event(Uuid::new_v4(), FeedKind::AgentAdded)];
    p.b.publish(&batch).await.expect("publish");
    assert_eq!(events(&mut listener, "the batch").await, batch);
}

/// A batch of changes in 300 conversations arrives as events standing for all 300 (coarsened
/// to one per team and kind where a message has a size limit), or as `Lagged` — never as part
/// of it.
pub async fn a_batch_too_big_for_one_message_arrives_coarsened_or_lagged(p: &FeedPair) {
    let mut listener = p.b.subscribe().await.expect("subscribe");
    let team = Uuid::new_v4();
    let batch: Vec<FeedEvent> = (0..300)
        .map(|_| event(team, FeedKind::MessageStored))
        .collect();
    p.a.publish(&batch).await.expect("publish");
    match next(&mut listener, "the big batch").await {
        FeedUpdate::Lagged => {}
        FeedUpdate::Events(events) => {
            assert!(events.iter().all(|e| e.team == team));
            assert_eq!(events.iter().map(|e| u64::from(e.count)).sum::<u64>(), 300);
        }
    }
}

/// Every `Feed` behaviour as its own trial, named `<target>::feed::<behaviour>`, each on a fresh
/// pair from `factory`, failing on a panic, a fixture error or after
/// [`TRIAL_TIMEOUT`](crate::trial::TRIAL_TIMEOUT).
pub fn feed_trials(
    target: &str,
    factory: Arc<dyn FeedFactory>,
    runtime: &Arc<Runtime>,
) -> Vec<Trial> {
    Suite::new(factory, runtime).trials(target, feed_behaviours())
}
