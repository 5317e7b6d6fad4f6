//! `Ledger` behaviours of the reference worker: one marker per stored message, leased until the
//! message's references are published, the references re-created from the ledger each time.

use std::collections::HashSet;

use chrono::{DateTime, Utc};
use crewbus_domain::{ConfirmOutcome, InboxEvent};
use crewbus_ports::Ledger;
use uuid::Uuid;

use super::scene::{INBOX, LEASE, REMOTE, scene};
use super::time::t;
use crate::LedgerFixture;

/// (message, recipient, event id) of each event, in order.
fn keys(events: &[InboxEvent]) -> Vec<(Uuid, Uuid, Uuid)> {
    events
        .iter()
        .map(|e| (e.message, e.recipient, e.id))
        .collect()
}

/// A stored message's references are leased per message — every undelivered recipient's at
/// once, each with the id derived from (message, recipient) — hidden until the lease ends,
/// offered again after it with the same ids (so the inbox drops the repeat), with `limit`
/// counting messages; never again once marked published; a recipient whose receipt is delivered
/// gets none, and a message whose receipts are all delivered is dropped by the lease.
/// (Replaces `inbox_events_are_leased_until_published`: the guarantee it protected — a
/// reference is re-created from the ledger until it is published, and published under one id.)
pub async fn references_are_leased_per_message_until_published<F: LedgerFixture + ?Sized>(fx: &F) {
    let s = scene(fx, REMOTE).await;
    let m1 = s.send_stored(&s.a, "r1", "hi", t(0)).await;
    let m2 = s.send_stored(&s.a, "r2", "ho", t(0)).await;

    let first = s.ledger.lease_inbox_events(t(1), LEASE, 1).await.unwrap();
    assert_eq!(
        first.len(),
        2,
        "limit counts messages: both recipients of the oldest"
    );
    let recipients: HashSet<Uuid> = first.iter().map(|e| e.recipient).collect();
    assert_eq!(recipients, HashSet::from([s.b.id, s.c.id]));
    for e in &first {
        assert_eq!(
            (e.message, e.team, e.inbox.as_str()),
            (m1.id, s.team.id, INBOX)
        );
        assert_eq!(e.id, InboxEvent::id_for(m1.id, e.recipient), "derived id");
    }
    let keys_sorted = {
        let mut k: Vec<&str> = first.iter().map(|e| e.recipient_key.as_str()).collect();
        k.sort_unstable();
        k
    };
    assert_eq!(
        first
            .iter()
            .map(|e| e.recipient_key.as_str())
            .collect::<Vec<_>>(),
        keys_sorted,
        "a message's references in recipient key order"
    );
    let second = s.ledger.lease_inbox_events(t(2), LEASE, 100).await.unwrap();
    assert!(
        second.iter().all(|e| e.message == m2.id) && second.len() == 2,
        "the leased message is hidden; the other is offered"
    );
    assert!(
        s.ledger
            .lease_inbox_events(t(3), LEASE, 100)
            .await
            .unwrap()
            .is_empty()
    );

    // The leases lapse (a crash between the commit and the publication): the same references,
    // under the same ids, oldest marker first.
    let again = s
        .ledger
        .lease_inbox_events(t(40), LEASE, 100)
        .await
        .unwrap();
    assert_eq!(
        keys(&again),
        [keys(&first), keys(&second)].concat(),
        "re-created from the ledger, the same ids"
    );

    let removed = s
        .ledger
        .mark_references_published(&[m1.id, m1.id, Uuid::new_v4()], t(41))
        .await
        .unwrap();
    assert_eq!(
        removed, 1,
        "one marker per message; repeats and unknown ids ignored"
    );
    assert_eq!(
        s.ledger
            .mark_references_published(&[m1.id], t(42))
            .await
            .unwrap(),
        0
    );
    assert_eq!(
        s.ledger.counts(t(42)).await.unwrap().pending_inbox_events,
        2,
        "m2's two references are still pending"
    );

    // b takes m2 through the top-up and confirms it: b's reference is no longer offered.
    let out = s.issue(&s.b, m2.id, t(43)).await;
    let confirmed = s
        .ledger
        .confirm(s.team.id, s.b.id, &[out.delivery], None, t(44))
        .await
        .unwrap();
    assert!(matches!(confirmed[0], ConfirmOutcome::Confirmed { .. }));
    let only_c = s
        .ledger
        .lease_inbox_events(t(100), LEASE, 100)
        .await
        .unwrap();
    assert_eq!(
        keys(&only_c),
        vec![(m2.id, s.c.id, InboxEvent::id_for(m2.id, s.c.id))]
    );
    assert_eq!(
        s.ledger.counts(t(100)).await.unwrap().pending_inbox_events,
        1
    );

    // c too: the message has nothing left to publish, and the lease drops its marker.
    let out = s.issue(&s.c, m2.id, t(101)).await;
    s.ledger
        .confirm(s.team.id, s.c.id, &[out.delivery], None, t(102))
        .await
        .unwrap();
    assert!(
        s.ledger
            .lease_inbox_events(t(200), LEASE, 100)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        s.ledger
            .mark_references_published(&[m2.id], t(201))
            .await
            .unwrap(),
        0,
        "the lease removed the marker of a fully delivered message"
    );
    assert_eq!(
        s.ledger.counts(t(201)).await.unwrap().pending_inbox_events,
        0
    );
}

/// A stored message with no recipient (its sender alone in the conversation) has no marker:
/// nothing is ever leased for it.
pub async fn a_message_without_recipients_has_no_references<F: LedgerFixture + ?Sized>(fx: &F) {
    let s = scene(fx, REMOTE).await;
    let solo = s
        .ledger
        .create_conversation(s.team.id, s.a.id, "solo", &[], t(0))
        .await
        .unwrap();
    let mut request = s.request(&s.a, "r1", "alone", None);
    request.conversation = solo.id;
    let sent = s.ledger.send(request, t(1)).await.unwrap();
    assert!(sent.created);
    s.store_all(t(2)).await;
    assert!(
        s.ledger
            .lease_inbox_events(t(3), LEASE, 100)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(s.ledger.counts(t(3)).await.unwrap().pending_inbox_events, 0);
}

/// For the upgrade tests: after the migration that keeps references as one marker per message
/// (`20261202000002`), the lease at `at` answers exactly one reference per `recipients` of
/// `message` (those an unpublished inbox event left due), under the derived ids, and `stored`'s
/// receipts of `team` carry their message's stored time `stored_at`. Panics (the test fails)
/// otherwise.
pub async fn references_due_after_the_upgrade(
    ledger: &dyn Ledger,
    team: Uuid,
    message: Uuid,
    recipients: &[Uuid],
    stored: Uuid,
    stored_at: DateTime<Utc>,
    at: DateTime<Utc>,
) {
    let events = ledger.lease_inbox_events(at, LEASE, 100).await.unwrap();
    assert_eq!(
        events
            .iter()
            .map(|e| (e.message, e.recipient, e.id))
            .collect::<HashSet<_>>(),
        recipients
            .iter()
            .map(|r| (message, *r, InboxEvent::id_for(message, *r)))
            .collect(),
        "every undelivered recipient of the message, under the derived ids"
    );
    assert!(
        ledger
            .receipts(team, stored)
            .await
            .unwrap()
            .iter()
            .all(|r| r.stored_at == Some(stored_at)),
        "a receipt's stored time is its message's"
    );
}
