//! Postgres wake-ups: the shared `Wakeups` behaviours on two handles of one database, and what
//! only `LISTEN/NOTIFY` on a dedicated connection shows (the listener is not one of the pool's
//! connections; a lost session ends it with `Unavailable`, and a new one hears what follows).

use std::time::Duration;

use async_trait::async_trait;
use crewbus_conformance::FixtureError;
use crewbus_conformance::wakeups::{WakeupsFactory, WakeupsPair};
use crewbus_domain::{BusError, Uuid, Wakeup, WakeupTarget};
use crewbus_ports::Wakeups;
use crewbus_postgres::PostgresWakeups;
use libtest_mimic::Failed;
use sqlx::postgres::PgPoolOptions;
use std::sync::Arc;

use super::TestFn;
use super::support::database;

pub(crate) const TESTS: &[(&str, TestFn)] = tests![
    the_listener_is_not_a_connection_of_the_pool,
    a_lost_listener_session_ends_the_listener_as_unavailable,
];

/// Two servers' handles on one fresh database: each its own pool.
pub(crate) struct PgWakeupsFactory;

#[async_trait]
impl WakeupsFactory for PgWakeupsFactory {
    async fn pair(&self) -> Result<WakeupsPair, FixtureError> {
        let db = database("postgres::wakeups").await.drop_unless_panicking();
        let options = db.pool().connect_options().as_ref().clone();
        let second = PgPoolOptions::new()
            .max_connections(2)
            .connect_with(options.clone())
            .await?;
        Ok(WakeupsPair {
            a: Arc::new(PostgresWakeups::new(db.pool().clone(), options.clone())),
            b: Arc::new(PostgresWakeups::new(second, options)),
            keep: Box::new(db),
        })
    }
}

/// With the pool's only connection held, a listener still starts and hears a notify sent
/// through another pool: it has a session of its own.
async fn the_listener_is_not_a_connection_of_the_pool() -> Result<(), Failed> {
    let db = database("wakeups_own_session").await;
    let options = db.pool().connect_options().as_ref().clone();
    let one = PgPoolOptions::new()
        .max_connections(1)
        .acquire_timeout(Duration::from_millis(500))
        .connect_with(options.clone())
        .await?;
    let held = one.acquire().await?;
    let w = PostgresWakeups::new(one.clone(), options.clone());
    let mut listener = tokio::time::timeout(Duration::from_secs(10), w.listen())
        .await
        .map_err(|_| "listen waited for the pool")??;
    let other = PostgresWakeups::new(db.pool().clone(), options);
    let t = WakeupTarget::new(Uuid::new_v4(), Uuid::new_v4());
    other.notify(&[t]).await?;
    let got = tokio::time::timeout(Duration::from_secs(10), listener.next()).await??;
    assert_eq!(got, Wakeup::Agents(vec![t]));
    drop(held);
    db.passed().await;
    Ok(())
}

/// The listener's session is terminated (as a restart or a proxy would): its `next` answers
/// `Unavailable` (it does not reconnect behind the caller's back, so the caller sees the loss)
/// and it opens no other session; a listener started again hears later notifies as before.
async fn a_lost_listener_session_ends_the_listener_as_unavailable() -> Result<(), Failed> {
    let db = database("wakeups_reconnect").await;
    let options = db.pool().connect_options().as_ref().clone();
    let w = PostgresWakeups::new(db.pool().clone(), options.application_name("wake-listener"));
    let mut listener = w.listen().await?;
    let killed: Vec<bool> = sqlx::query_scalar(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
         WHERE datname = current_database() AND application_name = 'wake-listener'",
    )
    .fetch_all(db.pool())
    .await?;
    assert_eq!(killed, vec![true], "one listener session");
    let woke = tokio::time::timeout(Duration::from_secs(10), listener.next()).await?;
    assert!(
        matches!(woke, Err(BusError::Unavailable { .. })),
        "the loss is reported: {woke:?}"
    );
    // The terminated backend leaves pg_stat_activity shortly; a session opened in its place
    // (sqlx's eager reconnection, made before `next` answers) would stay.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let sessions: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity
             WHERE datname = current_database() AND application_name = 'wake-listener'",
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
    let mut listener = w.listen().await?;
    let t = WakeupTarget::new(Uuid::new_v4(), Uuid::new_v4());
    w.notify(&[t]).await?;
    let got = tokio::time::timeout(Duration::from_secs(10), listener.next()).await??;
    assert_eq!(got, Wakeup::Agents(vec![t]));
    db.passed().await;
    Ok(())
}
