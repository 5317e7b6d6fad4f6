//! `Ledger` behaviours of the counts the health and metrics endpoints report.

use std::time::Duration;

use super::scene::{REMOTE, scene};
use super::time::t;
use crate::LedgerFixture;

/// Counts: pending (and the oldest's age), uncertain, failed, pending references, deliveries,
/// undelivered.
pub async fn counts_report_publication_and_delivery<F: LedgerFixture + ?Sized>(fx: &F) {
    let s = scene(fx, REMOTE).await;
    let empty = s.ledger.counts(t(0)).await.unwrap();
    assert_eq!(empty, crewbus_domain::LedgerCounts::default());
    let stored = s.send_stored(&s.a, "r1", "stored", t(0)).await;
    s.send(&s.a, "r2", "pending", t(10)).await;
    s.send(&s.a, "r3", "pending", t(20)).await;
    let counts = s.ledger.counts(t(25)).await.unwrap();
    assert_eq!(counts.pending_publications, 2);
    assert_eq!(counts.oldest_pending_age, Some(Duration::from_secs(15)));
    assert_eq!(counts.failed_publications, 0);
    assert_eq!(counts.pending_inbox_events, 2);
    assert_eq!(counts.undelivered, 2);
    assert_eq!(counts.deliveries, 0);
    let h = s.issue(&s.b, stored.id, t(26)).await;
    s.ledger
        .confirm(s.team.id, s.b.id, &[h.delivery], None, t(27))
        .await
        .unwrap();
    let counts = s.ledger.counts(t(28)).await.unwrap();
    assert_eq!((counts.deliveries, counts.undelivered), (1, 1));
    assert_eq!(
        counts.pending_inbox_events, 1,
        "a delivered receipt needs no reference"
    );
}
