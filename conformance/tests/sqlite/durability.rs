//! What an acknowledged write survives: closing and reopening the file, a crash image of the
//! files (the WAL not checkpointed), and an online backup opened as a store of its own.

use std::sync::Arc;
use std::time::Duration;

use crewbus_domain::{
    ConfirmOutcome, HandOutOutcome, HandOutRequest, HandOutSource, PushConfig, RecordKind, TenantId,
};
use crewbus_memory::ManualClock;
use crewbus_ports::{Backends, Journal, Ledger, PushStore};
use crewbus_sqlite::{SqliteBackends, SqliteConfig, SqlitePools, SqlitePushStore, SqliteSettings};
use libtest_mimic::Failed;
use uuid::Uuid;

use crate::TestFn;
use crate::support::{World, open_migrated, request, store, t, world};
use crewbus_conformance::sqlite::TempStore;

pub(crate) const TESTS: &[(&str, TestFn)] = tests![
    data_survives_closing_and_reopening,
    a_crash_image_of_the_files_holds_every_acknowledged_write,
    backup_then_open_the_copy_and_read_the_history_back,
];

/// What `write_some` recorded, to be found again.
struct Written {
    message: Uuid,
    run: crewbus_domain::RunId,
}

/// A run, a send into the (local) conversation with the run, a hand-out confirmed by agent 1,
/// and a push registration.
async fn write_some(w: &World, pools: &SqlitePools) -> Written {
    let journal = w.ledger.journal();
    let run = journal
        .admit(w.team.id, w.agents[0].id, t(0))
        .await
        .unwrap();
    let mut req = request(w, w.conv.id, 0, "kept", "survives \u{0} ✓");
    req.run = Some(run);
    let sent = w.ledger.send(req, t(1)).await.unwrap();
    let handed = w
        .ledger
        .hand_out(
            w.team.id,
            w.agents[1].id,
            &[HandOutRequest {
                message: sent.message.id,
                source: HandOutSource::Ledger,
            }],
            Duration::from_secs(60),
            t(2),
        )
        .await
        .unwrap();
    let HandOutOutcome::Issued(hand_out) = &handed[0] else {
        panic!("issued: {handed:?}")
    };
    let confirmed = w
        .ledger
        .confirm(w.team.id, w.agents[1].id, &[hand_out.delivery], None, t(3))
        .await
        .unwrap();
    assert!(matches!(confirmed[0], ConfirmOutcome::Confirmed { .. }));
    let push = SqlitePushStore::new(pools.clone(), TenantId::default());
    push.put(&push_config(run), crewbus_domain::Seq(1), t(4))
        .await
        .unwrap();
    Written {
        message: sent.message.id,
        run,
    }
}

fn push_config(run: crewbus_domain::RunId) -> PushConfig {
    PushConfig {
        id: "operator:audit".to_owned(),
        run,
        url: "https://receiver.example/audit".to_owned(),
        authentication: None,
    }
}

/// Everything `write_some` wrote, read through fresh adapters over `pools`.
async fn read_back(w: &World, pools: &SqlitePools, written: &Written) {
    let ledger = crewbus_sqlite::SqliteLedger::new(pools.clone(), TenantId::default());
    let page = ledger.history(w.team.id, w.conv.id, 0, 10).await.unwrap();
    assert_eq!(page.items.len(), 1);
    let message = &page.items[0].message;
    assert_eq!(message.id, written.message);
    let registry = SqliteBackends::new(
        pools.clone(),
        Arc::new(ManualClock::default()),
        SqliteSettings::default(),
    );
    let bodies = registry
        .body_backend(w.team.id, crewbus_sqlite::NAME)
        .await
        .unwrap();
    let locator = message.locator.as_ref().expect("stored");
    let body = bodies.fetch(locator, message.id).await.unwrap();
    assert_eq!(body.as_deref(), Some("survives \u{0} ✓"));
    let receipts = ledger.receipts(w.team.id, message.id).await.unwrap();
    let delivered: Vec<bool> = receipts.iter().map(|r| r.delivered_at.is_some()).collect();
    assert_eq!(delivered.iter().filter(|d| **d).count(), 1, "{receipts:?}");
    let records = ledger
        .journal()
        .read(written.run, crewbus_domain::Seq(1), 10)
        .await
        .unwrap();
    assert_eq!(records.len(), 2);
    assert!(matches!(records[1].kind, RecordKind::MessageSent { .. }));
    let events = ledger
        .lease_inbox_events(t(5), Duration::from_secs(5), 10)
        .await
        .unwrap();
    assert_eq!(
        events.len(),
        1,
        "one reference per recipient not yet delivered"
    );
    let push = SqlitePushStore::new(pools.clone(), TenantId::default());
    let config = push.get(written.run, "operator:audit").await.unwrap();
    assert_eq!(config.map(|c| c.url), Some(push_config(written.run).url));
}

async fn data_survives_closing_and_reopening() -> Result<(), Failed> {
    let store = store("sqlite::data_survives_closing_and_reopening").await;
    let w = world(&store.pools, crewbus_sqlite::NAME, 3).await;
    let written = write_some(&w, &store.pools).await;
    store.pools.close().await;
    // An operator command opens the existing store without creating anything, and migrating it
    // again is a no-op.
    let reopened = open_migrated(&store.temp, &SqliteConfig::default()).await;
    read_back(&w, &reopened, &written).await;
    Ok(())
}

/// The files as they are on disk while the server runs — the database file and its
/// write-ahead log, never checkpointed, as a kill or power loss would leave them — copied
/// elsewhere and opened: SQLite recovers every committed transaction from the log.
async fn a_crash_image_of_the_files_holds_every_acknowledged_write() -> Result<(), Failed> {
    let store = store("sqlite::a_crash_image_of_the_files_holds_every_acknowledged_write").await;
    let w = world(&store.pools, crewbus_sqlite::NAME, 3).await;
    let written = write_some(&w, &store.pools).await;
    let image = TempStore::new("sqlite::a_crash_image (image)");
    let wal = store.temp.sibling("bus.db-wal");
    let wal_len = std::fs::metadata(&wal)?.len();
    assert!(
        wal_len > 0,
        "the commits are in the log, not yet checkpointed"
    );
    std::fs::copy(store.temp.path(), image.path())?;
    std::fs::copy(&wal, image.sibling("bus.db-wal"))?;
    let recovered = open_migrated(&image, &SqliteConfig::default()).await;
    read_back(&w, &recovered, &written).await;
    recovered.close().await;
    store.pools.close().await;
    Ok(())
}

/// `backup_to` while the store is in use; the copy opens as a store of its own and holds what
/// was committed before the backup, and nothing after it.
async fn backup_then_open_the_copy_and_read_the_history_back() -> Result<(), Failed> {
    let store = store("sqlite::backup_then_open_the_copy_and_read_the_history_back").await;
    let w = world(&store.pools, crewbus_sqlite::NAME, 2).await;
    for i in 0..3 {
        let req = request(
            &w,
            w.conv.id,
            0,
            &format!("before-{i}"),
            &format!("body {i}"),
        );
        w.ledger.send(req, t(1)).await?;
    }
    let target = store.temp.sibling("backup.db");
    crewbus_sqlite::backup_to(&store.pools, &target).await?;
    let after = request(&w, w.conv.id, 1, "after", "not in the copy");
    w.ledger.send(after, t(2)).await?;
    let again = crewbus_sqlite::backup_to(&store.pools, &target).await;
    assert!(
        matches!(again, Err(crewbus_domain::BusError::Conflict { .. })),
        "an existing target is refused: {again:?}"
    );
    let copy = crewbus_sqlite::open(&target, &SqliteConfig::default()).await?;
    crewbus_sqlite::migrate(&copy).await?;
    let ledger = crewbus_sqlite::SqliteLedger::new(copy.clone(), TenantId::default());
    let page = ledger.history(w.team.id, w.conv.id, 0, 10).await?;
    let ids: Vec<&str> = page
        .items
        .iter()
        .map(|i| i.message.request_id.as_str())
        .collect();
    assert_eq!(ids, ["before-0", "before-1", "before-2"]);
    let registry = SqliteBackends::new(
        copy.clone(),
        Arc::new(ManualClock::default()),
        SqliteSettings::default(),
    );
    let bodies = registry
        .body_backend(w.team.id, crewbus_sqlite::NAME)
        .await?;
    for (i, item) in page.items.iter().enumerate() {
        let locator = item.message.locator.as_ref().expect("stored");
        let body = bodies.fetch(locator, item.message.id).await?;
        assert_eq!(body, Some(format!("body {i}")));
    }
    copy.close().await;
    store.pools.close().await;
    Ok(())
}
