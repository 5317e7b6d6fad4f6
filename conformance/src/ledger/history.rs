//! `Ledger` behaviours of history: pages in `seq` order, stopping at the first pending message
//! and explaining absences.

use crewbus_domain::{Absence, BusError, SlotOutcome};

use super::scene::{REMOTE, scene};
use super::time::t;
use crate::LedgerFixture;

/// A page ends with the first pending message (an explained absence), and the next cursor is its
/// `seq − 1`, so it is read again once stored.
pub async fn history_stops_at_the_first_pending<F: LedgerFixture + ?Sized>(fx: &F) {
    let s = scene(fx, REMOTE).await;
    let m1 = s.send_stored(&s.a, "r1", "one", t(0)).await;
    let m2 = s.send(&s.a, "r2", "two", t(1)).await;
    let held = s.lease_all(t(1)).await.remove(&m2.id).unwrap();
    let m3 = s.send(&s.a, "r3", "three", t(2)).await;
    let s3 = s.lease_all(t(2)).await.remove(&m3.id).unwrap();
    s.confirm_slot(&s3, t(2)).await;

    let page = s
        .ledger
        .history(s.team.id, s.conv.id, 0, 100)
        .await
        .unwrap();
    let seqs: Vec<u64> = page.items.iter().map(|i| i.message.seq).collect();
    assert_eq!(seqs, vec![1, 2]);
    assert_eq!(page.items[0].absence, None);
    assert_eq!(page.items[0].message.id, m1.id);
    assert_eq!(page.items[1].absence, Some(Absence::Pending));
    assert_eq!(page.next_after_seq, 1);

    s.confirm_slot(&held, t(3)).await;
    let next = s
        .ledger
        .history(s.team.id, s.conv.id, page.next_after_seq, 100)
        .await
        .unwrap();
    let seqs: Vec<u64> = next.items.iter().map(|i| i.message.seq).collect();
    assert_eq!(seqs, vec![2, 3]);
    assert!(next.items.iter().all(|i| i.absence.is_none()));
    assert_eq!(next.next_after_seq, 3);
    let empty = s
        .ledger
        .history(s.team.id, s.conv.id, 3, 100)
        .await
        .unwrap();
    assert!(empty.items.is_empty());
    assert_eq!(empty.next_after_seq, 3);
}

/// Failed and retained messages are explained absences that do not stop the cursor.
pub async fn history_explains_failed_and_retained_without_stopping<F: LedgerFixture + ?Sized>(
    fx: &F,
) {
    let s = scene(fx, REMOTE).await;
    let m1 = s.send(&s.a, "r1", "fails", t(0)).await;
    let slot = s.lease_all(t(0)).await.remove(&m1.id).unwrap();
    s.settle(
        &slot,
        SlotOutcome::Fatal {
            error: BusError::TooLarge { size: 2, limit: 1 },
        },
        t(0),
    )
    .await;
    s.send_stored(&s.a, "r2", "retained", t(1)).await;
    s.ledger
        .mark_retained(s.team.id, REMOTE, t(2), t(5))
        .await
        .unwrap();
    s.send_stored(&s.a, "r3", "kept", t(10)).await;
    let page = s
        .ledger
        .history(s.team.id, s.conv.id, 0, 100)
        .await
        .unwrap();
    let absences: Vec<Option<Absence>> = page.items.iter().map(|i| i.absence).collect();
    assert_eq!(
        absences,
        vec![Some(Absence::Failed), Some(Absence::Retained), None]
    );
    assert_eq!(page.next_after_seq, 3);
}

/// Pages hold at most `limit` items; a bad limit is `Invalid`; another team's conversation is
/// `NotFound`.
pub async fn history_pages_by_limit<F: LedgerFixture + ?Sized>(fx: &F) {
    let s = scene(fx, REMOTE).await;
    for i in 1..=5 {
        s.send(&s.a, &format!("r{i}"), "x", t(i)).await;
    }
    s.store_all(t(10)).await;
    let mut cursor = 0;
    let mut seen = Vec::new();
    loop {
        let page = s
            .ledger
            .history(s.team.id, s.conv.id, cursor, 2)
            .await
            .unwrap();
        if page.items.is_empty() {
            break;
        }
        assert!(page.items.len() <= 2);
        seen.extend(page.items.iter().map(|i| i.message.seq));
        cursor = page.next_after_seq;
    }
    assert_eq!(seen, vec![1, 2, 3, 4, 5]);
    for bad in [0, crewbus_domain::MAX_PAGE + 1] {
        assert!(matches!(
            s.ledger.history(s.team.id, s.conv.id, 0, bad).await,
            Err(BusError::Invalid { .. })
        ));
    }
    let other = s.other_team().await;
    assert!(matches!(
        s.ledger.history(other.id, s.conv.id, 0, 10).await,
        Err(BusError::NotFound { .. })
    ));
}
