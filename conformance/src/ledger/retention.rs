//! `Ledger` behaviours of retention: bodies past the cutoff listed and marked retained once.

use crewbus_domain::{BusError, Publication};
use uuid::Uuid;

use super::scene::{REMOTE, scene};
use super::time::t;
use crate::LedgerFixture;

/// Retention lists (team, backend) pairs with bodies stored before the cutoff, marks them retained
/// once, and ignores pending, failed and newer messages.
pub async fn retention_marks_bodies_past_the_cutoff<F: LedgerFixture + ?Sized>(fx: &F) {
    let s = scene(fx, REMOTE).await;
    let old1 = s.send_stored(&s.a, "r1", "old", t(1)).await;
    let old2 = s.send_stored(&s.a, "r2", "old", t(2)).await;
    let new = s.send_stored(&s.a, "r3", "new", t(20)).await;
    let pending = s.send(&s.a, "r4", "pending", t(0)).await;
    let due = s.ledger.retention_due(t(10), 100).await.unwrap();
    assert_eq!(due.len(), 1);
    assert_eq!(
        (due[0].team, due[0].backend.as_str(), due[0].messages),
        (s.team.id, REMOTE, 2)
    );
    assert_eq!(
        s.ledger
            .mark_retained(s.team.id, "another-backend", t(10), t(30))
            .await
            .unwrap(),
        0,
        "only the named backend"
    );
    assert_eq!(
        s.ledger
            .mark_retained(s.team.id, REMOTE, t(10), t(30))
            .await
            .unwrap(),
        2
    );
    assert_eq!(
        s.ledger
            .mark_retained(s.team.id, REMOTE, t(10), t(31))
            .await
            .unwrap(),
        0,
        "idempotent"
    );
    for id in [old1.id, old2.id] {
        let m = s.message(id).await;
        assert_eq!(m.retained_at, Some(t(30)));
        assert_eq!(m.publication, Publication::Stored);
        assert!(m.locator.is_some());
    }
    assert_eq!(s.message(new.id).await.retained_at, None);
    assert_eq!(s.message(pending.id).await.retained_at, None);
    assert!(s.ledger.retention_due(t(10), 100).await.unwrap().is_empty());
    assert!(matches!(
        s.ledger
            .mark_retained(Uuid::new_v4(), REMOTE, t(10), t(30))
            .await,
        Err(BusError::NotFound { .. })
    ));
}
