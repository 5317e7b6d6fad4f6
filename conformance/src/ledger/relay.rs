//! `Ledger` behaviours of the relay: outbox slots leased, fenced by generation and lease, and
//! settled.

use std::collections::HashSet;

use crewbus_domain::{
    BusError, Publication, ReferencePayload, SettleOutcome, Settlement, SlotOutcome,
};
use uuid::Uuid;

use super::scene::{INBOX, LEASE, REMOTE, locator_for, scene};
use super::time::t;
use crate::LedgerFixture;

/// A leased slot is not leased again until its lease expires; a slot is not due before
/// `next_attempt_at`. Each lease bumps the generation.
pub async fn slot_is_leased_once_until_its_lease_expires<F: LedgerFixture + ?Sized>(fx: &F) {
    let s = scene(fx, REMOTE).await;
    let m = s.send(&s.a, "r1", "hi", t(10)).await;
    assert!(
        s.lease_all(t(9)).await.is_empty(),
        "not due before it was sent"
    );
    let first = s.lease_all(t(10)).await.remove(&m.id).expect("leased");
    assert!(s.lease_all(t(11)).await.is_empty(), "leased: hidden");
    assert!(
        s.lease_all(t(39)).await.is_empty(),
        "still leased 1 s before expiry"
    );
    let second = s
        .lease_all(t(40))
        .await
        .remove(&m.id)
        .expect("expired: leased again");
    assert!(second.generation > first.generation);
    assert_eq!(second.envelope.publish_key, first.envelope.publish_key);
    assert_eq!(
        second.attempts, 0,
        "an expired lease is not a settled attempt"
    );
}

/// Due slots are leased oldest due first; a slot backing off does not hold back the others,
/// of its own team or another.
pub async fn backing_off_slot_does_not_block_others<F: LedgerFixture + ?Sized>(fx: &F) {
    let s = scene(fx, REMOTE).await;
    let stuck = s.send(&s.a, "r1", "stuck", t(0)).await;
    let slot = s.lease_all(t(0)).await.remove(&stuck.id).unwrap();
    let backoff = SlotOutcome::Retryable {
        error: BusError::quota_exceeded("body stream"),
        next_attempt_at: t(100),
    };
    assert_eq!(s.settle(&slot, backoff, t(1)).await, SettleOutcome::Applied);
    let other = scene(fx, REMOTE).await;
    let mine = s.send(&s.a, "r2", "mine", t(2)).await;
    let theirs = other.send(&other.a, "r1", "theirs", t(3)).await;
    let first = s.ledger.lease_slots(t(10), LEASE, 1).await.unwrap();
    assert_eq!(first.len(), 1);
    assert_eq!(first[0].envelope.message_id, mine.id, "oldest due first");
    let second = s.ledger.lease_slots(t(10), LEASE, 10).await.unwrap();
    let ids: Vec<Uuid> = second.iter().map(|l| l.envelope.message_id).collect();
    assert_eq!(ids, vec![theirs.id], "the backing-off slot is not due");
    let last = s.lease_all(t(100)).await;
    assert!(last.contains_key(&stuck.id));
}

/// A settlement under an older generation writes nothing, even while unexpired.
pub async fn stale_generation_writes_nothing<F: LedgerFixture + ?Sized>(fx: &F) {
    let s = scene(fx, REMOTE).await;
    let m = s.send(&s.a, "r1", "hi", t(0)).await;
    let old = s.lease_all(t(0)).await.remove(&m.id).unwrap();
    let new = s.lease_all(t(30)).await.remove(&m.id).unwrap();
    let confirmed = SlotOutcome::Confirmed {
        locator: locator_for(m.id),
    };
    assert_eq!(
        s.settle(&old, confirmed.clone(), t(31)).await,
        SettleOutcome::Stale
    );
    let after = s.message(m.id).await;
    assert_eq!(after.publication, Publication::PendingPublication);
    assert!(after.locator.is_none());
    for outcome in [
        SlotOutcome::Fatal {
            error: BusError::TooLarge { size: 2, limit: 1 },
        },
        SlotOutcome::Retryable {
            error: BusError::unavailable("x"),
            next_attempt_at: t(31),
        },
    ] {
        assert_eq!(s.settle(&old, outcome, t(31)).await, SettleOutcome::Stale);
    }
    assert_eq!(
        s.message(m.id).await.publication,
        Publication::PendingPublication
    );
    assert_eq!(
        s.settle(&new, confirmed, t(32)).await,
        SettleOutcome::Applied
    );
    assert_eq!(s.message(m.id).await.publication, Publication::Stored);
}

/// A settlement at or after the lease's end writes nothing, and the slot is leased again.
pub async fn expired_lease_writes_nothing<F: LedgerFixture + ?Sized>(fx: &F) {
    let s = scene(fx, REMOTE).await;
    let m = s.send(&s.a, "r1", "hi", t(0)).await;
    let slot = s.lease_all(t(0)).await.remove(&m.id).unwrap();
    let at_expiry = t(30);
    assert_eq!(slot.leased_until, at_expiry);
    let outcome = SlotOutcome::Confirmed {
        locator: locator_for(m.id),
    };
    assert_eq!(
        s.settle(&slot, outcome, at_expiry).await,
        SettleOutcome::Stale
    );
    assert_eq!(
        s.message(m.id).await.publication,
        Publication::PendingPublication
    );
    assert!(
        s.ledger
            .lease_inbox_events(t(31), LEASE, 100)
            .await
            .unwrap()
            .is_empty(),
        "a stale confirmation enqueues nothing"
    );
    let again = s.lease_all(t(31)).await.remove(&m.id).expect("due again");
    s.confirm_slot(&again, t(32)).await;
}

/// `Confirmed` stores the message (locator, `stored_at` on message and receipts), deletes the
/// slot and makes the message's references due — one per recipient, under the id derived from
/// (message, recipient); a second settlement of it is stale.
pub async fn settle_confirmed_stores_and_makes_references_due<F: LedgerFixture + ?Sized>(fx: &F) {
    let s = scene(fx, REMOTE).await;
    let m = s.send(&s.b, "r1", "hi", t(0)).await;
    let slot = s.lease_all(t(1)).await.remove(&m.id).unwrap();
    s.confirm_slot(&slot, t(2)).await;
    let stored = s.message(m.id).await;
    assert_eq!(stored.publication, Publication::Stored);
    assert_eq!(stored.locator, Some(locator_for(m.id)));
    assert_eq!(stored.stored_at, Some(t(2)));
    for r in s.ledger.receipts(s.team.id, m.id).await.unwrap() {
        assert_eq!(r.stored_at, Some(t(2)));
    }
    let events = s.ledger.lease_inbox_events(t(2), LEASE, 100).await.unwrap();
    assert_eq!(events.len(), 2, "one event per recipient");
    let keys: HashSet<&str> = events.iter().map(|e| e.recipient_key.as_str()).collect();
    assert_eq!(
        keys,
        HashSet::from([s.a.recipient_key.as_str(), s.c.recipient_key.as_str()])
    );
    for e in &events {
        assert_eq!(
            (e.team, e.message, e.inbox.as_str()),
            (s.team.id, m.id, INBOX)
        );
        assert_eq!(e.id, crewbus_domain::InboxEvent::id_for(m.id, e.recipient));
        let payload = ReferencePayload::from_json(&e.payload).unwrap();
        assert_eq!(
            payload,
            ReferencePayload {
                message: m.id,
                conversation: s.conv.id,
                seq: 1
            }
        );
        assert!(
            !e.payload.contains("hi"),
            "a reference never carries the body"
        );
    }
    assert_eq!(
        s.settle(
            &slot,
            SlotOutcome::Confirmed {
                locator: locator_for(m.id)
            },
            t(3)
        )
        .await,
        SettleOutcome::Stale,
        "the slot is gone"
    );
    assert!(s.lease_all(t(1000)).await.is_empty(), "the slot is deleted");
}

/// `Retryable` counts an attempt, releases the lease and makes the slot due at the given time.
pub async fn settle_retryable_backs_off<F: LedgerFixture + ?Sized>(fx: &F) {
    let s = scene(fx, REMOTE).await;
    let m = s.send(&s.a, "r1", "hi", t(0)).await;
    let slot = s.lease_all(t(0)).await.remove(&m.id).unwrap();
    let outcome = SlotOutcome::Retryable {
        error: BusError::unavailable("broker down"),
        next_attempt_at: t(20),
    };
    assert_eq!(s.settle(&slot, outcome, t(1)).await, SettleOutcome::Applied);
    assert!(s.lease_all(t(19)).await.is_empty(), "backing off");
    let again = s.lease_all(t(20)).await.remove(&m.id).expect("due again");
    assert_eq!(again.attempts, 1);
    assert!(!again.uncertain);
    assert_eq!(again.envelope.publish_key, slot.envelope.publish_key);
    assert_eq!(
        s.message(m.id).await.publication,
        Publication::PendingPublication
    );
}

/// `Fatal` fails the message (with the error's code) and keeps the slot, never leased again.
pub async fn settle_fatal_fails_the_message_and_keeps_the_slot<F: LedgerFixture + ?Sized>(fx: &F) {
    let s = scene(fx, REMOTE).await;
    let m = s.send(&s.a, "r1", "hi", t(0)).await;
    let slot = s.lease_all(t(0)).await.remove(&m.id).unwrap();
    let error = BusError::TooLarge { size: 9, limit: 1 };
    let code = error.code();
    assert_eq!(
        s.settle(&slot, SlotOutcome::Fatal { error }, t(1)).await,
        SettleOutcome::Applied
    );
    let failed = s.message(m.id).await;
    assert_eq!(failed.publication, Publication::Failed);
    assert_eq!(failed.failure.as_deref(), Some(code));
    assert!(failed.locator.is_none());
    assert!(
        s.lease_all(t(100_000)).await.is_empty(),
        "never leased again"
    );
    let counts = s.ledger.counts(t(2)).await.unwrap();
    assert_eq!(counts.failed_publications, 1);
    assert_eq!(counts.pending_publications, 0);
    assert!(
        s.ledger
            .lease_inbox_events(t(2), LEASE, 100)
            .await
            .unwrap()
            .is_empty(),
        "a failed message has no inbox events"
    );
}

/// `Uncertain` keeps the message pending and marks the slot for reconcile; a later `Retryable`
/// (reconcile found nothing) clears the mark.
pub async fn settle_uncertain_marks_the_slot_for_reconcile<F: LedgerFixture + ?Sized>(fx: &F) {
    let s = scene(fx, REMOTE).await;
    let m = s.send(&s.a, "r1", "hi", t(0)).await;
    let slot = s.lease_all(t(0)).await.remove(&m.id).unwrap();
    let uncertain = SlotOutcome::Uncertain {
        error: BusError::timeout("PubAck"),
        next_attempt_at: t(10),
    };
    assert_eq!(
        s.settle(&slot, uncertain, t(1)).await,
        SettleOutcome::Applied
    );
    assert_eq!(
        s.message(m.id).await.publication,
        Publication::PendingPublication
    );
    let counts = s.ledger.counts(t(2)).await.unwrap();
    assert_eq!(
        (counts.pending_publications, counts.uncertain_publications),
        (1, 1)
    );
    assert!(s.lease_all(t(9)).await.is_empty());
    let again = s
        .lease_all(t(10))
        .await
        .remove(&m.id)
        .expect("due for reconcile");
    assert!(again.uncertain);
    assert_eq!(again.attempts, 1);
    assert_eq!(
        again.envelope, slot.envelope,
        "reconcile gets the whole envelope"
    );
    let retry = SlotOutcome::Retryable {
        error: BusError::unavailable("nothing held"),
        next_attempt_at: t(11),
    };
    assert_eq!(s.settle(&again, retry, t(10)).await, SettleOutcome::Applied);
    let third = s.lease_all(t(11)).await.remove(&m.id).unwrap();
    assert!(!third.uncertain);
    assert_eq!(third.attempts, 2);
    assert_eq!(
        s.ledger.counts(t(12)).await.unwrap().uncertain_publications,
        0
    );
}

/// One call settles many slots, one outcome per item in order; a slot settled twice in one call
/// is applied once.
pub async fn settle_reports_one_outcome_per_item<F: LedgerFixture + ?Sized>(fx: &F) {
    let s = scene(fx, REMOTE).await;
    let m1 = s.send(&s.a, "r1", "one", t(0)).await;
    let m2 = s.send(&s.a, "r2", "two", t(0)).await;
    let m3 = s.send(&s.a, "r3", "three", t(0)).await;
    let slots = s.lease_all(t(0)).await;
    assert_eq!(slots.len(), 3);
    let confirm = |id: Uuid| SlotOutcome::Confirmed {
        locator: locator_for(id),
    };
    let batch = vec![
        Settlement {
            slot: slots[&m1.id].slot,
            generation: slots[&m1.id].generation,
            outcome: confirm(m1.id),
        },
        Settlement {
            slot: slots[&m2.id].slot,
            generation: slots[&m2.id].generation + 1,
            outcome: confirm(m2.id),
        },
        Settlement {
            slot: slots[&m3.id].slot,
            generation: slots[&m3.id].generation,
            outcome: SlotOutcome::Fatal {
                error: BusError::forbidden("x"),
            },
        },
        Settlement {
            slot: slots[&m3.id].slot,
            generation: slots[&m3.id].generation,
            outcome: confirm(m3.id),
        },
        Settlement {
            slot: Uuid::new_v4(),
            generation: 1,
            outcome: confirm(m3.id),
        },
    ];
    let outcomes = s.ledger.settle(&batch, t(1)).await.unwrap();
    use SettleOutcome::{Applied, Stale};
    assert_eq!(outcomes, vec![Applied, Stale, Applied, Stale, Stale]);
    assert_eq!(s.message(m1.id).await.publication, Publication::Stored);
    assert_eq!(
        s.message(m2.id).await.publication,
        Publication::PendingPublication
    );
    assert_eq!(s.message(m3.id).await.publication, Publication::Failed);
    assert!(s.ledger.settle(&[], t(1)).await.unwrap().is_empty());
}

/// One call mixing every outcome, a stale generation followed by the current one for the same
/// slot, a slot settled twice and an unknown slot: each settlement is judged in call order (a
/// stale one does not consume the slot, an applied one does), every applied outcome is written,
/// and the confirmed messages' inbox events follow call order.
pub async fn settle_applies_a_mixed_batch_in_call_order<F: LedgerFixture + ?Sized>(fx: &F) {
    let s = scene(fx, REMOTE).await;
    let mut sent = Vec::new();
    for i in 1..=5 {
        sent.push(s.send(&s.a, &format!("r{i}"), "body", t(0)).await);
    }
    let [m1, m2, m3, m4, m5] = [0, 1, 2, 3, 4].map(|i| sent[i].clone());
    let slots = s.lease_all(t(0)).await;
    assert_eq!(slots.len(), 5);
    let settlement = |m: Uuid, generation: u64, outcome: SlotOutcome| Settlement {
        slot: slots[&m].slot,
        generation,
        outcome,
    };
    let gen_of = |m: Uuid| slots[&m].generation;
    let confirm = |id: Uuid| SlotOutcome::Confirmed {
        locator: locator_for(id),
    };
    let fatal = BusError::TooLarge { size: 9, limit: 1 };
    let fatal_code = fatal.code();
    let batch = vec![
        settlement(m2.id, gen_of(m2.id), confirm(m2.id)),
        settlement(m1.id, gen_of(m1.id) + 1, confirm(m1.id)),
        settlement(m1.id, gen_of(m1.id), confirm(m1.id)),
        settlement(
            m3.id,
            gen_of(m3.id),
            SlotOutcome::Retryable {
                error: BusError::unavailable("down"),
                next_attempt_at: t(20),
            },
        ),
        settlement(
            m4.id,
            gen_of(m4.id),
            SlotOutcome::Uncertain {
                error: BusError::timeout("PubAck"),
                next_attempt_at: t(25),
            },
        ),
        settlement(m5.id, gen_of(m5.id), SlotOutcome::Fatal { error: fatal }),
        settlement(
            m4.id,
            gen_of(m4.id),
            SlotOutcome::Retryable {
                error: BusError::unavailable("again"),
                next_attempt_at: t(1),
            },
        ),
        settlement(m2.id, gen_of(m2.id), confirm(m2.id)),
        Settlement {
            slot: Uuid::new_v4(),
            generation: gen_of(m1.id),
            outcome: confirm(m1.id),
        },
    ];
    let outcomes = s.ledger.settle(&batch, t(1)).await.unwrap();
    use SettleOutcome::{Applied, Stale};
    assert_eq!(
        outcomes,
        vec![
            Applied, Stale, Applied, Applied, Applied, Applied, Stale, Stale, Stale
        ]
    );
    for m in [&m1, &m2] {
        let stored = s.message(m.id).await;
        assert_eq!(stored.publication, Publication::Stored);
        assert_eq!(stored.locator, Some(locator_for(m.id)));
        assert_eq!(stored.stored_at, Some(t(1)));
        for r in s.ledger.receipts(s.team.id, m.id).await.unwrap() {
            assert_eq!(r.stored_at, Some(t(1)));
        }
    }
    for m in [&m3, &m4] {
        let pending = s.message(m.id).await;
        assert_eq!(pending.publication, Publication::PendingPublication);
        assert!(pending.stored_at.is_none());
    }
    let failed = s.message(m5.id).await;
    assert_eq!(failed.publication, Publication::Failed);
    assert_eq!(failed.failure.as_deref(), Some(fatal_code));
    let counts = s.ledger.counts(t(2)).await.unwrap();
    assert_eq!(
        (
            counts.pending_publications,
            counts.uncertain_publications,
            counts.failed_publications
        ),
        (2, 1, 1)
    );
    let events = s.ledger.lease_inbox_events(t(2), LEASE, 100).await.unwrap();
    let order: Vec<Uuid> = events.iter().map(|e| e.message).collect();
    assert_eq!(
        order,
        vec![m2.id, m2.id, m1.id, m1.id],
        "events in call order, one per recipient"
    );
    for e in &events {
        let seq = if e.message == m1.id { 1 } else { 2 };
        assert_eq!(
            ReferencePayload::from_json(&e.payload).unwrap(),
            ReferencePayload {
                message: e.message,
                conversation: s.conv.id,
                seq
            }
        );
    }
    assert!(
        s.lease_all(t(19)).await.is_empty(),
        "retryable and uncertain back off; confirmed and fatal slots are never due"
    );
    let retried = s.lease_all(t(20)).await;
    assert_eq!(retried.keys().copied().collect::<Vec<_>>(), vec![m3.id]);
    assert_eq!(
        (retried[&m3.id].attempts, retried[&m3.id].uncertain),
        (1, false)
    );
    let reconciled = s.lease_all(t(25)).await;
    assert_eq!(reconciled.keys().copied().collect::<Vec<_>>(), vec![m4.id]);
    assert_eq!(
        (reconciled[&m4.id].attempts, reconciled[&m4.id].uncertain),
        (1, true)
    );
    assert!(
        s.lease_all(t(100_000)).await.len() == 2,
        "m5 is never leased again"
    );
}
