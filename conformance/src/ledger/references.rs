//! `Ledger` behaviours of the reference worker: inbox events leased until published.

use uuid::Uuid;

use super::scene::{LEASE, REMOTE, scene};
use super::time::t;
use crate::LedgerFixture;

/// Inbox events are leased (hidden until the lease ends), offered again after it, and never again
/// once marked published.
pub async fn inbox_events_are_leased_until_published<F: LedgerFixture + ?Sized>(fx: &F) {
    let s = scene(fx, REMOTE).await;
    let m = s.send_stored(&s.a, "r1", "hi", t(0)).await;
    let events = s.ledger.lease_inbox_events(t(1), LEASE, 100).await.unwrap();
    assert_eq!(events.len(), 2);
    assert!(events.iter().all(|e| e.message == m.id));
    assert!(
        s.ledger
            .lease_inbox_events(t(2), LEASE, 100)
            .await
            .unwrap()
            .is_empty()
    );
    let again = s.ledger.lease_inbox_events(t(31), LEASE, 1).await.unwrap();
    assert_eq!(again.len(), 1, "limit respected");
    let ids: Vec<Uuid> = events.iter().map(|e| e.id).collect();
    assert!(ids.contains(&again[0].id), "the same event, same id");
    let changed = s
        .ledger
        .mark_published(&[ids[0], ids[1], ids[0], Uuid::new_v4()], t(32))
        .await
        .unwrap();
    assert_eq!(changed, 2);
    assert_eq!(s.ledger.mark_published(&ids, t(33)).await.unwrap(), 0);
    assert!(
        s.ledger
            .lease_inbox_events(t(1000), LEASE, 100)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        s.ledger.counts(t(1000)).await.unwrap().pending_inbox_events,
        0
    );
}
