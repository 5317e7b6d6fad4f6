//! The Postgres listeners' lost sessions are seen and survived: when the session of a server's
//! wake-up listener, or of its console feed listener, is terminated (as a database restart or a
//! proxy would), `/metrics` counts the loss and the reconnection of each, and afterwards a fetch
//! waiting on that server is woken by a message sent through another server, and a console
//! viewer there gets the change.
//!
//! Server A (whose listeners are killed) has its own workers idle for 60 s and its safety sweep
//! every 60 s, so within the fetch's 30 s wait only a wake-up through its listener can answer
//! the fetch: server B's reference worker publishes the reference and notifies.

use crate::common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{TestApp, counter, test_config};
use crewbus::client::{ApiClient, uuid_of};
use crewbus::server::Server;
use crewbus::shutdown::Shutdown;
use crewbus_domain::FeedUpdate;
use sqlx::PgPool;

/// How long a test waits for a condition.
const DEADLINE: Duration = Duration::from_secs(20);

/// Polls `f` until it returns `Some`, failing after [`DEADLINE`].
async fn until<T, F, Fut>(what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + DEADLINE;
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Terminates the session listening on `channel` in this database, once one does.
async fn terminate_listener(pool: &PgPool, channel: &str) {
    let query = format!("LISTEN \"{channel}\"");
    let killed: Vec<bool> = until(&format!("a session listening on {channel}"), || async {
        let killed: Vec<bool> = sqlx::query_scalar(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
             WHERE datname = current_database() AND query = $1",
        )
        .bind(&query)
        .fetch_all(pool)
        .await
        .unwrap();
        (!killed.is_empty()).then_some(killed)
    })
    .await;
    assert_eq!(killed, vec![true], "one listener on {channel}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_listener_sessions_are_counted_and_waiting_fetches_are_still_woken() {
    let mut quiet = test_config();
    quiet.bus.idle_poll_ms = 60_000;
    quiet.bus.topup_after_ms = 120_000;
    let a = TestApp::postgres_with("pg_listener_losses", quiet, &["alice", "bob"]).await;
    let [alice, bob] = &a.agents[..] else {
        unreachable!()
    };
    let pool = a.db.as_ref().unwrap().pool().clone();
    let url = a.server.url();
    let conv = uuid_of(
        &alice
            .client
            .create_conversation("after the loss", &[bob.id])
            .await
            .unwrap()["id"],
    );
    let mut viewer = a.bus.watch_feed().await;

    for name in [
        "crewbus_wakeup_listener_lost",
        "crewbus_wakeup_listener_reconnected",
        "crewbus_feed_listener_lost",
        "crewbus_feed_listener_reconnected",
    ] {
        assert_eq!(counter(&url, name).await, 0, "{name} before any loss");
    }
    terminate_listener(&pool, "crewbus_wakeups").await;
    terminate_listener(&pool, "crewbus_feed").await;
    for listener in ["wakeup", "feed"] {
        let reconnected = format!("crewbus_{listener}_listener_reconnected");
        until(&reconnected, || async {
            (counter(&url, &reconnected).await > 0).then_some(())
        })
        .await;
        let lost = format!("crewbus_{listener}_listener_lost");
        assert_eq!(
            (
                counter(&url, &lost).await,
                counter(&url, &reconnected).await
            ),
            (1, 1),
            "{listener}: one loss, one reconnection"
        );
    }

    // What the viewer got before the reconnection (the old listener hands every update on
    // before it ends) is put aside: an event from now on came through the new listener.
    while let Ok(_) | Err(tokio::sync::broadcast::error::TryRecvError::Lagged(_)) =
        viewer.try_recv()
    {}

    // Server B on the same database, with its workers at the usual pace.
    let composed = crewbus::compose::postgres_with_pool(
        &test_config(),
        pool.clone(),
        Arc::new(a.clock.clone()),
    )
    .await
    .unwrap();
    let b = Server::start(
        composed.bus,
        "127.0.0.1:0".parse().unwrap(),
        Shutdown::new(),
    )
    .await
    .unwrap();
    let alice_on_b = ApiClient::new(b.url(), Some(alice.token.clone()));

    let waiting = {
        let client = bob.client.clone();
        tokio::spawn(async move { client.fetch_waiting(10, 30_000).await })
    };
    until("bob's fetch waiting on server A", || async {
        (a.bus.waiting_fetches() == 1).then_some(())
    })
    .await;
    let sent = alice_on_b
        .send(conv, "after-the-loss", "still heard")
        .await
        .unwrap();
    let (status, page) = waiting.await.unwrap().unwrap();
    assert_eq!(status, 200, "{page}");
    let deliveries = page["deliveries"].as_array().unwrap();
    assert_eq!(deliveries.len(), 1, "woken before the wait ran out: {page}");
    assert_eq!(deliveries[0]["message"]["id"], sent["message"]["id"]);

    // The console viewer on A gets the change made through B.
    let deadline = Instant::now() + DEADLINE;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, viewer.recv()).await {
            Ok(Ok(FeedUpdate::Events(events))) if !events.is_empty() => break,
            Ok(Ok(_)) | Ok(Err(tokio::sync::broadcast::error::RecvError::Lagged(_))) => {}
            Ok(Err(e)) => panic!("the viewer's feed ended: {e}"),
            Err(_) => panic!("the viewer on A got no event after the reconnection"),
        }
    }
    b.stop().await;
    a.finish_test().await;
}
