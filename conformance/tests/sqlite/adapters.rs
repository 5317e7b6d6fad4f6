//! SQLite-specific checks of the registry, the inbox queue and the journal beyond the shared
//! behaviours.

use std::collections::HashSet;
use std::sync::Arc;

use crewbus_domain::{BusError, Published, RecordKind, Seq};
use crewbus_memory::ManualClock;
use crewbus_ports::{Backends, Clock, Inbox, Journal};
use crewbus_sqlite::{SqliteBackends, SqliteSettings};
use libtest_mimic::Failed;
use uuid::Uuid;

use crate::TestFn;
use crate::support::{store, t, world};

pub(crate) const TESTS: &[(&str, TestFn)] = tests![
    registry_answers_for_sqlite_only,
    concurrent_fetchers_never_share_a_reference,
    purge_removes_only_acknowledged_references_and_positions_are_never_reused,
    nul_notes_round_trip,
];

fn registry(pools: &crewbus_sqlite::SqlitePools, clock: &ManualClock) -> SqliteBackends {
    SqliteBackends::new(
        pools.clone(),
        Arc::new(clock.clone()),
        SqliteSettings::default(),
    )
}

async fn registry_answers_for_sqlite_only() -> Result<(), Failed> {
    let store = store("sqlite::registry_answers_for_sqlite_only").await;
    let registry = registry(&store.pools, &ManualClock::default());
    assert_eq!(registry.name(), crewbus_sqlite::NAME);
    let team = Uuid::new_v4();
    for other in ["postgres", "memory", "jetstream", ""] {
        let body = registry.body_backend(team, other).await;
        assert!(matches!(body, Err(BusError::NotFound { .. })), "{other}");
        let inbox = registry.inbox(team, other).await;
        assert!(matches!(inbox, Err(BusError::NotFound { .. })), "{other}");
    }
    let body = registry.body_backend(team, crewbus_sqlite::NAME).await?;
    assert_eq!(body.name(), crewbus_sqlite::NAME);
    Ok(())
}

/// Eight fetchers of one recipient race over 100 references: each is handed out once.
async fn concurrent_fetchers_never_share_a_reference() -> Result<(), Failed> {
    let store = store("sqlite::concurrent_fetchers_never_share_a_reference").await;
    let registry = registry(&store.pools, &ManualClock::default());
    let inbox = registry.inbox(Uuid::new_v4(), crewbus_sqlite::NAME).await?;
    for _ in 0..100 {
        let published = inbox
            .publish_reference("agent-1", Uuid::new_v4(), "{}")
            .await;
        assert!(published.is_confirmed(), "{published:?}");
    }
    let fetchers: Vec<_> = (0..8)
        .map(|_| {
            let inbox = inbox.clone();
            tokio::spawn(async move {
                let mut mine = Vec::new();
                loop {
                    let got = inbox.fetch_references("agent-1", 7).await.expect("fetch");
                    if got.is_empty() {
                        return mine;
                    }
                    mine.extend(got.into_iter().map(|r| r.event_id));
                }
            })
        })
        .collect();
    let mut all = Vec::new();
    for fetcher in fetchers {
        all.extend(fetcher.await?);
    }
    let distinct: HashSet<Uuid> = all.iter().copied().collect();
    assert_eq!((all.len(), distinct.len()), (100, 100));
    Ok(())
}

/// `purge_acknowledged` deletes acknowledged references only; an event id published again after
/// its purge is stored again, at a position never used before (AUTOINCREMENT, also when the
/// newest row was the purged one).
async fn purge_removes_only_acknowledged_references_and_positions_are_never_reused()
-> Result<(), Failed> {
    let store = store("sqlite::purge_removes_only_acknowledged_references").await;
    let clock = ManualClock::default();
    let registry = registry(&store.pools, &clock);
    let team = Uuid::new_v4();
    let inbox = registry.team_inbox(team);
    let (kept, acked) = (Uuid::new_v4(), Uuid::new_v4());
    for id in [kept, acked] {
        assert!(
            inbox
                .publish_reference("agent-1", id, "{}")
                .await
                .is_confirmed()
        );
    }
    let refs = inbox.fetch_references("agent-1", 10).await?;
    let newest = refs.iter().map(|r| r.stream_seq).max().unwrap_or(0);
    let acked_ref = refs.iter().find(|r| r.event_id == acked).expect("fetched");
    inbox.ack_reference(&acked_ref.ack_subject).await?;
    clock.advance(std::time::Duration::from_secs(1));
    assert_eq!(inbox.purge_acknowledged(clock.now()).await?, 1);
    let again = inbox.publish_reference("agent-1", acked, "{}").await;
    let Published::Confirmed { duplicate, locator } = again else {
        panic!("{again:?}")
    };
    assert!(!duplicate, "a purged event id is stored again");
    let seq: u64 = locator
        .as_str()
        .rsplit(':')
        .next()
        .and_then(|s| s.parse().ok())
        .expect("sqlite:inbox:<seq>");
    assert!(seq > newest, "position {seq} reused (newest was {newest})");
    let status = inbox.inbox_status("agent-1").await?;
    assert_eq!((status.pending, status.awaiting_ack), (1, 1), "{status:?}");
    Ok(())
}

/// A note holding U+0000 and other control characters comes back byte for byte.
async fn nul_notes_round_trip() -> Result<(), Failed> {
    let store = store("sqlite::nul_notes_round_trip").await;
    let w = world(&store.pools, crewbus_sqlite::NAME, 2).await;
    let journal = w.ledger.journal();
    let run = journal.admit(w.team.id, w.agents[0].id, t(0)).await?;
    let text = "a\u{0}b\u{1}c\u{7f} ✓";
    journal.note(run, text, t(1)).await?;
    let records = journal.read(run, Seq(2), 10).await?;
    assert!(
        matches!(&records[0].kind, RecordKind::Note { text: got } if got == text),
        "{records:?}"
    );
    Ok(())
}
