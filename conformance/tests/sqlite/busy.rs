//! A write lock held elsewhere (another process: an operator command, a backup) past the busy
//! timeout: every write port answers a retryable `Unavailable` — never SQLite's text — and the
//! pools count it; reads go on (WAL), and writes succeed again once the lock is gone.

use std::sync::Arc;
use std::time::Duration;

use crewbus_domain::{BusError, Envelope, Published, Seq, StoreError, TenantId};
use crewbus_memory::ManualClock;
use crewbus_ports::{Backends, Journal, Ledger, PushStore};
use crewbus_sqlite::{SqliteBackends, SqliteConfig, SqlitePushStore, SqliteSettings};
use libtest_mimic::Failed;
use uuid::Uuid;

use crate::TestFn;
use crate::support::{open_migrated, request, server_config, t, world};
use crewbus_conformance::sqlite::TempStore;

pub(crate) const TESTS: &[(&str, TestFn)] =
    tests![a_lock_held_past_the_busy_timeout_is_unavailable_and_counted];

fn unavailable(e: &BusError) -> bool {
    matches!(e, BusError::Unavailable { .. })
        && e.is_retryable()
        && !e.to_string().contains("locked")
}

async fn a_lock_held_past_the_busy_timeout_is_unavailable_and_counted() -> Result<(), Failed> {
    let temp = TempStore::new("sqlite::a_lock_held_past_the_busy_timeout_is_unavailable");
    let config = SqliteConfig {
        busy_timeout: Duration::from_millis(200),
        ..server_config()
    };
    let pools = open_migrated(&temp, &config).await;
    let w = world(&pools, crewbus_sqlite::NAME, 2).await;
    let registry = SqliteBackends::new(
        pools.clone(),
        Arc::new(ManualClock::default()),
        SqliteSettings::default(),
    );
    let bodies = registry
        .body_backend(w.team.id, crewbus_sqlite::NAME)
        .await?;
    let inbox = registry.inbox(w.team.id, crewbus_sqlite::NAME).await?;
    let push = SqlitePushStore::new(pools.clone(), TenantId::default());
    let journal = w.ledger.journal();
    let envelope = Envelope {
        message_id: Uuid::new_v4(),
        conversation_id: w.conv.id,
        team_id: w.team.id,
        body: "b".to_owned(),
        publish_key: Uuid::new_v4(),
    };

    // Another connection (as another process would) takes the write lock and keeps it.
    let mut other = pools.side_connection().await?;
    sqlx::query("BEGIN IMMEDIATE").execute(&mut other).await?;
    assert_eq!(pools.busy_errors(), 0);

    let sent = w
        .ledger
        .send(request(&w, w.conv.id, 0, "r", "x"), t(1))
        .await;
    assert!(sent.as_ref().is_err_and(unavailable), "ledger: {sent:?}");
    let admitted = journal.admit(w.team.id, w.agents[0].id, t(1)).await;
    assert!(
        matches!(admitted, Err(StoreError::Unavailable { .. })),
        "journal: {admitted:?}"
    );
    let put = push
        .put(
            &crewbus_domain::PushConfig {
                id: "operator:a".to_owned(),
                run: crewbus_domain::RunId::new(),
                url: "https://receiver.example/".to_owned(),
                authentication: None,
            },
            Seq(1),
            t(1),
        )
        .await;
    assert!(
        matches!(&put, Err(e @ StoreError::Unavailable { .. }) if e.is_retryable()),
        "push store: {put:?}"
    );
    match bodies.publish(envelope.clone()).await {
        Published::Retryable(e) if unavailable(&e) => {}
        other => panic!("body publish: {other:?}"),
    }
    let key = &w.agents[1].recipient_key;
    match inbox.publish_reference(key, Uuid::new_v4(), "{}").await {
        Published::Retryable(e) if unavailable(&e) => {}
        other => panic!("reference publish: {other:?}"),
    }
    assert_eq!(pools.busy_errors(), 5, "one per refused write");

    // Readers are not blocked by the writer (WAL).
    let page = w.ledger.history(w.team.id, w.conv.id, 0, 10).await?;
    assert!(page.items.is_empty());

    sqlx::query("ROLLBACK").execute(&mut other).await?;
    let sent = w
        .ledger
        .send(request(&w, w.conv.id, 0, "r", "x"), t(2))
        .await?;
    assert!(sent.created);
    assert!(bodies.publish(envelope).await.is_confirmed());
    assert_eq!(pools.busy_errors(), 5, "nothing more was counted");
    pools.close().await;
    Ok(())
}
