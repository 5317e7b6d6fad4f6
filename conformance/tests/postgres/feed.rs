//! The Postgres console feed: the shared `Feed` behaviours on two handles of one database, and
//! what only `LISTEN/NOTIFY` shows (the listener is a session of its own; it reconnects and says
//! it lagged; a batch too big for one notification, or a payload it cannot read, is `Lagged`).

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use crewbus_conformance::FixtureError;
use crewbus_conformance::feed::{FeedFactory, FeedPair};
use crewbus_domain::{BusError, FeedEvent, FeedKind, FeedUpdate, Uuid};
use crewbus_ports::Feed;
use crewbus_postgres::{FEED_CHANNEL, PostgresFeed};
use libtest_mimic::Failed;
use sqlx::postgres::PgPoolOptions;

use super::TestFn;
use super::support::database;

pub(crate) const TESTS: &[(&str, TestFn)] = tests![
    the_feed_listener_is_not_a_connection_of_the_pool,
    a_lost_feed_session_ends_the_listener_as_unavailable,
    a_batch_too_big_for_a_notification_arrives_as_lagged,
    a_payload_the_listener_cannot_read_is_lagged,
];

/// How long a test waits for a notification.
const ARRIVAL: Duration = Duration::from_secs(10);

/// Two servers' handles on one fresh database: each its own pool.
pub(crate) struct PgFeedFactory;

#[async_trait]
impl FeedFactory for PgFeedFactory {
    async fn pair(&self) -> Result<FeedPair, FixtureError> {
        let db = database("postgres::feed").await.drop_unless_panicking();
        let options = db.pool().connect_options().as_ref().clone();
        let second = PgPoolOptions::new()
            .max_connections(2)
            .connect_with(options.clone())
            .await?;
        Ok(FeedPair {
            a: Arc::new(PostgresFeed::new(db.pool().clone(), options.clone())),
            b: Arc::new(PostgresFeed::new(second, options)),
            keep: Box::new(db),
        })
    }
}

fn batch() -> Vec<FeedEvent> {
    vec![FeedEvent::new(Uuid::new_v4(), FeedKind::MessageStored).conversation(Uuid::new_v4())]
}

/// With the pool's only connection held, a subscriber still starts and hears a publish made
/// through another pool: it has a session of its own.
async fn the_feed_listener_is_not_a_connection_of_the_pool() -> Result<(), Failed> {
    let db = database("feed_own_session").await;
    let options = db.pool().connect_options().as_ref().clone();
    let one = PgPoolOptions::new()
        .max_connections(1)
        .acquire_timeout(Duration::from_millis(500))
        .connect_with(options.clone())
        .await?;
    let held = one.acquire().await?;
    let feed = PostgresFeed::new(one.clone(), options.clone());
    let mut listener = tokio::time::timeout(ARRIVAL, feed.subscribe())
        .await
        .map_err(|_| "subscribe waited for the pool")??;
    let other = PostgresFeed::new(db.pool().clone(), options);
    let sent = batch();
    other.publish(&sent).await?;
    let got = tokio::time::timeout(ARRIVAL, listener.next()).await??;
    assert_eq!(got, FeedUpdate::Events(sent));
    drop(held);
    db.passed().await;
    Ok(())
}

/// The listener's session is terminated (as a restart or a proxy would): its `next` answers
/// `Unavailable` (it does not reconnect behind the caller's back) and it opens no other
/// session; a subscription made again hears later publishes as before.
async fn a_lost_feed_session_ends_the_listener_as_unavailable() -> Result<(), Failed> {
    let db = database("feed_reconnect").await;
    let options = db.pool().connect_options().as_ref().clone();
    let feed = PostgresFeed::new(db.pool().clone(), options.application_name("feed-listener"));
    let mut listener = feed.subscribe().await?;
    let killed: Vec<bool> = sqlx::query_scalar(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
         WHERE datname = current_database() AND application_name = 'feed-listener'",
    )
    .fetch_all(db.pool())
    .await?;
    assert_eq!(killed, vec![true], "one listener session");
    let next = tokio::time::timeout(ARRIVAL, listener.next()).await?;
    assert!(
        matches!(next, Err(BusError::Unavailable { .. })),
        "the loss is reported: {next:?}"
    );
    // The terminated backend leaves pg_stat_activity shortly; a session opened in its place
    // (sqlx's eager reconnection, made before `next` answers) would stay.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let sessions: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity
             WHERE datname = current_database() AND application_name = 'feed-listener'",
        )
        .fetch_one(db.pool())
        .await?;
        if sessions == 0 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "a session was opened behind the caller's back"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    drop(listener);
    let mut listener = feed.subscribe().await?;
    let sent = batch();
    feed.publish(&sent).await?;
    let got = tokio::time::timeout(ARRIVAL, listener.next()).await??;
    assert_eq!(got, FeedUpdate::Events(sent));
    db.passed().await;
    Ok(())
}

/// Changes of 300 teams do not fit in one notification even coarsened (one event per team and
/// kind): they are published as the `lagged` payload and arrive as `Lagged`.
async fn a_batch_too_big_for_a_notification_arrives_as_lagged() -> Result<(), Failed> {
    let db = database("feed_too_big").await;
    let options = db.pool().connect_options().as_ref().clone();
    let feed = PostgresFeed::new(db.pool().clone(), options);
    let mut listener = feed.subscribe().await?;
    let many: Vec<FeedEvent> = (0..300)
        .map(|_| FeedEvent::new(Uuid::new_v4(), FeedKind::Confirmed))
        .collect();
    feed.publish(&many).await?;
    let got = tokio::time::timeout(ARRIVAL, listener.next()).await??;
    assert_eq!(got, FeedUpdate::Lagged);
    db.passed().await;
    Ok(())
}

/// A notification on the feed's channel that is not the feed's wire form (another program's,
/// a newer format) is `Lagged`: pages look again rather than miss something.
async fn a_payload_the_listener_cannot_read_is_lagged() -> Result<(), Failed> {
    let db = database("feed_foreign").await;
    let options = db.pool().connect_options().as_ref().clone();
    let feed = PostgresFeed::new(db.pool().clone(), options);
    let mut listener = feed.subscribe().await?;
    sqlx::query("SELECT pg_notify($1, 'not json')")
        .bind(FEED_CHANNEL)
        .execute(db.pool())
        .await?;
    let got = tokio::time::timeout(ARRIVAL, listener.next()).await??;
    assert_eq!(got, FeedUpdate::Lagged);
    let sent = batch();
    feed.publish(&sent).await?;
    let got = tokio::time::timeout(ARRIVAL, listener.next()).await??;
    assert_eq!(got, FeedUpdate::Events(sent));
    db.passed().await;
    Ok(())
}
