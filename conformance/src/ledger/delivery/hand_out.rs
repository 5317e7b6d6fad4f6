//! `Ledger` behaviours of delivery, the hand-outs: held for the grace period, explained when
//! not issued, decided per item of a batch, and the sweeps of the waiting fetches.

use std::sync::Arc;

use crewbus_domain::{
    BusError, ConfirmOutcome, DeliveryId, HandOut, HandOutOutcome, HandOutRequest, InboxAck,
    SweepTarget, WakeupTarget,
};
use tokio::task::JoinSet;
use uuid::Uuid;

use super::super::delivery::{GRACE, any_message, from_inbox, from_ledger, issued, out_id};
use super::super::scene::{INBOX, REMOTE, scene};
use super::super::time::t;
use crate::LedgerFixture;

/// A message handed out and not confirmed is held for the grace period (also within one batch),
/// then handed out again marked redelivered.
pub async fn hand_out_holds_a_message_for_the_grace_period<F: LedgerFixture + ?Sized>(fx: &F) {
    let s = scene(fx, REMOTE).await;
    let m = s.send_stored(&s.a, "r1", "hi", t(0)).await;
    let out = s
        .hand_out_to(&s.b, &[from_ledger(m.id), from_ledger(m.id)], t(10))
        .await;
    let first = issued(&out[0]);
    assert_eq!((first.message, first.recipient), (m.id, s.b.id));
    assert_eq!((first.conversation, first.seq), (s.conv.id, 1));
    assert!(!first.redelivered);
    assert_eq!(first.issued_at, t(10));
    assert_eq!(first.held_until, t(70));
    assert_eq!(
        out[1],
        HandOutOutcome::Held {
            message: m.id,
            until: t(70)
        },
        "one fetch never returns the same message twice"
    );
    let held = s.hand_out_to(&s.b, &[from_ledger(m.id)], t(69)).await;
    assert!(matches!(held[0], HandOutOutcome::Held { .. }));
    let c_out = s.hand_out_to(&s.c, &[from_ledger(m.id)], t(69)).await;
    assert!(!issued(&c_out[0]).redelivered, "hold is per recipient");
    let later = s.hand_out_to(&s.b, &[from_ledger(m.id)], t(70)).await;
    let second = issued(&later[0]);
    assert!(second.redelivered);
    assert_ne!(second.delivery, first.delivery);
    let counted = s
        .hand_out_to(&s.c, &[from_inbox(m.id, "ack-x", 2)], t(1000))
        .await;
    assert!(
        issued(&counted[0]).redelivered,
        "an inbox delivery count above 1 is a redelivery"
    );
}

/// Unknown, foreign, not-stored messages and non-recipients are `Unknown`; a delivered receipt
/// makes a candidate `AlreadyDelivered`.
pub async fn hand_out_explains_what_it_does_not_issue<F: LedgerFixture + ?Sized>(fx: &F) {
    let s = scene(fx, REMOTE).await;
    let stored = s.send_stored(&s.a, "r1", "stored", t(0)).await;
    let pending = s.send(&s.a, "r2", "pending", t(1)).await;
    let out = s
        .hand_out_to(
            &s.b,
            &[
                from_ledger(Uuid::new_v4()),
                from_ledger(pending.id),
                from_ledger(stored.id),
            ],
            t(2),
        )
        .await;
    assert_eq!(
        out[0],
        HandOutOutcome::Unknown {
            message: out_id(&out[0])
        }
    );
    assert_eq!(
        out[1],
        HandOutOutcome::Unknown {
            message: pending.id
        }
    );
    let h = issued(&out[2]);
    let own = s.hand_out_to(&s.a, &[from_ledger(stored.id)], t(2)).await;
    assert_eq!(
        own[0],
        HandOutOutcome::Unknown { message: stored.id },
        "the sender is no recipient"
    );
    s.ledger
        .confirm(s.team.id, s.b.id, &[h.delivery], None, t(3))
        .await
        .unwrap();
    let after = s
        .hand_out_to(&s.b, &[from_inbox(stored.id, "ack-1", 2)], t(4))
        .await;
    assert_eq!(
        after[0],
        HandOutOutcome::AlreadyDelivered { message: stored.id }
    );
    let other = s.other_team().await;
    let stranger = s.agent_of(&other, "x").await;
    let foreign = s
        .ledger
        .hand_out(
            other.id,
            stranger.id,
            &[from_ledger(stored.id)],
            GRACE,
            t(5),
        )
        .await
        .unwrap();
    assert_eq!(foreign[0], HandOutOutcome::Unknown { message: stored.id });
    assert!(matches!(
        s.ledger
            .hand_out(
                s.team.id,
                stranger.id,
                &[from_ledger(stored.id)],
                GRACE,
                t(5)
            )
            .await,
        Err(BusError::NotFound { .. })
    ));
}

/// A held inbox candidate hands its (newer) ack subject to the live hand-out, which the confirm
/// then returns.
pub async fn held_inbox_candidate_takes_over_the_ack<F: LedgerFixture + ?Sized>(fx: &F) {
    let s = scene(fx, REMOTE).await;
    let m = s.send_stored(&s.a, "r1", "hi", t(0)).await;
    let out = s
        .hand_out_to(&s.b, &[from_inbox(m.id, "ack-1", 1)], t(1))
        .await;
    let h = issued(&out[0]);
    let held = s
        .hand_out_to(&s.b, &[from_inbox(m.id, "ack-2", 2)], t(2))
        .await;
    assert!(matches!(held[0], HandOutOutcome::Held { .. }));
    let confirmed = s
        .ledger
        .confirm(s.team.id, s.b.id, &[h.delivery], None, t(3))
        .await
        .unwrap();
    assert_eq!(
        confirmed,
        vec![ConfirmOutcome::Confirmed {
            message: m.id,
            ack: Some(InboxAck {
                inbox: INBOX.to_owned(),
                ack_subject: "ack-2".to_owned()
            })
        }]
    );
}

/// One batch mixing every case is decided item by item, in order, exactly as separate calls
/// would: issued, held by an earlier call (its ack replaced by the newest inbox candidate),
/// repeated within the batch (held; the last inbox ack wins), delivered, unknown, redelivered
/// after its hold lapsed; a confirm batch likewise.
pub async fn hand_out_and_confirm_decide_every_item_of_a_batch<F: LedgerFixture + ?Sized>(fx: &F) {
    let s = scene(fx, REMOTE).await;
    let mut m = Vec::new();
    for k in 0..5 {
        m.push(s.send_stored(&s.a, &format!("r{k}"), "hi", t(0)).await.id);
    }
    // m[0] held by a live hand-out; m[1] delivered; m[2] handed out, its hold lapsed by t(100).
    let first = s
        .hand_out_to(&s.b, &[from_ledger(m[1]), from_ledger(m[2])], t(1))
        .await;
    let held_m0 = s
        .hand_out_to(&s.b, &[from_inbox(m[0], "ack-0a", 1)], t(90))
        .await;
    let live = issued(&held_m0[0]);
    s.ledger
        .confirm(s.team.id, s.b.id, &[issued(&first[0]).delivery], None, t(2))
        .await
        .unwrap();
    let unknown = Uuid::new_v4();
    let out = s
        .hand_out_to(
            &s.b,
            &[
                from_inbox(m[3], "ack-3a", 1),
                from_inbox(m[0], "ack-0b", 2),
                from_ledger(m[1]),
                from_ledger(unknown),
                from_inbox(m[3], "ack-3b", 2),
                from_ledger(m[2]),
                from_ledger(m[3]),
                from_ledger(m[4]),
                from_inbox(m[0], "ack-0c", 3),
            ],
            t(100),
        )
        .await;
    assert_eq!(out.len(), 9, "one outcome per request");
    let m3 = issued(&out[0]);
    assert!(!m3.redelivered);
    assert_eq!(
        out[1],
        HandOutOutcome::Held {
            message: m[0],
            until: t(150)
        }
    );
    assert_eq!(out[2], HandOutOutcome::AlreadyDelivered { message: m[1] });
    assert_eq!(out[3], HandOutOutcome::Unknown { message: unknown });
    assert_eq!(
        out[4],
        HandOutOutcome::Held {
            message: m[3],
            until: t(160)
        }
    );
    let m2 = issued(&out[5]);
    assert!(m2.redelivered, "handed out before: a redelivery");
    assert_eq!(
        out[6],
        HandOutOutcome::Held {
            message: m[3],
            until: t(160)
        }
    );
    let m4 = issued(&out[7]);
    assert_eq!((m4.seq, m4.held_until), (5, t(160)));
    assert!(matches!(out[8], HandOutOutcome::Held { .. }));
    let ack = |subject: &str| {
        Some(InboxAck {
            inbox: INBOX.to_owned(),
            ack_subject: subject.to_owned(),
        })
    };
    let confirmed = s
        .ledger
        .confirm(
            s.team.id,
            s.b.id,
            &[
                m4.delivery,
                live.delivery,
                m3.delivery,
                DeliveryId(Uuid::new_v4()),
                m4.delivery,
                m2.delivery,
                issued(&first[0]).delivery,
            ],
            None,
            t(110),
        )
        .await
        .unwrap();
    assert_eq!(
        confirmed,
        vec![
            ConfirmOutcome::Confirmed {
                message: m[4],
                ack: None
            },
            ConfirmOutcome::Confirmed {
                message: m[0],
                ack: ack("ack-0c")
            },
            ConfirmOutcome::Confirmed {
                message: m[3],
                ack: ack("ack-3b")
            },
            ConfirmOutcome::Unknown,
            ConfirmOutcome::AlreadyConfirmed {
                message: m[4],
                ack: None
            },
            ConfirmOutcome::Confirmed {
                message: m[2],
                ack: None
            },
            ConfirmOutcome::AlreadyConfirmed {
                message: m[1],
                ack: None
            },
        ]
    );
    for id in &m {
        let receipts = s.ledger.receipts(s.team.id, *id).await.unwrap();
        let b = receipts.iter().find(|r| r.recipient == s.b.id).unwrap();
        let expected = if *id == m[1] { t(2) } else { t(110) };
        assert_eq!(
            b.delivered_at,
            Some(expected),
            "set once, by the first confirm"
        );
    }
    assert!(
        s.ledger
            .undelivered(s.team.id, s.b.id, t(1000), t(1000), 10)
            .await
            .unwrap()
            .is_empty(),
        "nothing left for b"
    );
}

/// Concurrent hand-outs of the same messages to one recipient, in opposite orders, never issue
/// a message twice while it is held (and never deadlock).
pub async fn concurrent_hand_outs_issue_each_message_once<F: LedgerFixture + ?Sized>(fx: &F) {
    let s = scene(fx, REMOTE).await;
    let mut ids = Vec::new();
    for k in 0..12 {
        ids.push(s.send_stored(&s.a, &format!("r{k}"), "hi", t(0)).await.id);
    }
    let mut tasks = JoinSet::new();
    for k in 0..8 {
        let ledger = Arc::clone(&s.ledger);
        let (team, b) = (s.team.id, s.b.id);
        let mut requests: Vec<HandOutRequest> = ids.iter().map(|id| from_ledger(*id)).collect();
        if k % 2 == 1 {
            requests.reverse();
        }
        tasks.spawn(async move { ledger.hand_out(team, b, &requests, GRACE, t(1)).await });
    }
    let mut issued_per_message: std::collections::HashMap<Uuid, usize> = Default::default();
    while let Some(joined) = tasks.join_next().await {
        for outcome in joined.expect("task").expect("hand-out") {
            match outcome {
                HandOutOutcome::Issued(h) => *issued_per_message.entry(h.message).or_default() += 1,
                HandOutOutcome::Held { .. } => {}
                other => panic!("expected Issued or Held, got {other:?}"),
            }
        }
    }
    assert_eq!(issued_per_message.len(), ids.len(), "every message issued");
    assert!(
        issued_per_message.values().all(|n| *n == 1),
        "each once: {issued_per_message:?}"
    );
}

/// The top-up lists stored messages whose receipt is undelivered and which have no live hand-out,
/// stored before the cutoff, oldest first.
pub async fn top_up_lists_stored_undelivered_without_live_hand_out<F: LedgerFixture + ?Sized>(
    fx: &F,
) {
    let s = scene(fx, REMOTE).await;
    let m1 = s.send_stored(&s.a, "r1", "one", t(1)).await;
    let m2 = s.send_stored(&s.a, "r2", "two", t(2)).await;
    let m3 = s.send_stored(&s.a, "r3", "three", t(3)).await;
    let pending = s.send(&s.a, "r4", "pending", t(4)).await;
    let top_up = |before, at| {
        let ledger = Arc::clone(&s.ledger);
        let (team, b) = (s.team.id, s.b.id);
        async move { ledger.undelivered(team, b, before, at, 100).await.unwrap() }
    };
    assert_eq!(top_up(t(10), t(10)).await, vec![m1.id, m2.id, m3.id]);
    assert_eq!(
        top_up(t(3), t(10)).await,
        vec![m1.id, m2.id],
        "stored before the cutoff"
    );
    let limited = s
        .ledger
        .undelivered(s.team.id, s.b.id, t(10), t(10), 1)
        .await
        .unwrap();
    assert_eq!(limited, vec![m1.id]);
    let h1 = s.issue(&s.b, m1.id, t(10)).await;
    let h2 = s.issue(&s.b, m2.id, t(10)).await;
    assert_eq!(
        top_up(t(100), t(11)).await,
        vec![m3.id],
        "live hand-outs are excluded"
    );
    s.ledger
        .confirm(s.team.id, s.b.id, &[h1.delivery], None, t(12))
        .await
        .unwrap();
    assert_eq!(
        top_up(t(100), t(70)).await,
        vec![m2.id, m3.id],
        "delivered excluded; an expired hold comes back"
    );
    let _ = (h2, pending);
    assert_eq!(
        s.ledger
            .undelivered(s.team.id, s.c.id, t(100), t(70), 100)
            .await
            .unwrap(),
        vec![m1.id, m2.id, m3.id],
        "per recipient"
    );
    assert!(
        s.ledger
            .undelivered(s.team.id, s.a.id, t(100), t(70), 100)
            .await
            .unwrap()
            .is_empty()
    );
}

/// The waiting fetches' sweep: of the waiting agents, those with a stored, undelivered message
/// without a live hand-out (stored before the cutoff), and those revoked, unknown or of another
/// team; each once, whatever order they were asked in.
pub async fn wakeable_finds_waiters_with_something_to_hand_out_or_revoked<
    F: LedgerFixture + ?Sized,
>(
    fx: &F,
) {
    let s = scene(fx, REMOTE).await;
    let target = |a: &crewbus_domain::Agent| WakeupTarget::new(s.team.id, a.id);
    let sorted = |mut v: Vec<WakeupTarget>| {
        v.sort();
        v
    };
    let (a, b, c) = (target(&s.a), target(&s.b), target(&s.c));
    let wakeable = |targets: Vec<WakeupTarget>, before, at| {
        let ledger = Arc::clone(&s.ledger);
        async move {
            let targets: Vec<SweepTarget> = targets.into_iter().map(any_message).collect();
            sorted(ledger.wakeable(&targets, before, at).await.unwrap())
        }
    };
    assert!(
        wakeable(vec![a, b, c], t(10), t(10)).await.is_empty(),
        "nothing sent: nobody to wake"
    );
    let first = s.send(&s.a, "r0", "pending", t(1)).await;
    assert!(
        wakeable(vec![a, b, c], t(10), t(10)).await.is_empty(),
        "a pending message is not fetchable"
    );
    // Stores every due message: `first` too.
    let m = s.send_stored(&s.a, "r1", "one", t(2)).await;
    assert_eq!(
        wakeable(vec![c, a, b, b], t(10), t(10)).await,
        sorted(vec![b, c]),
        "the recipients, once each; not the sender"
    );
    assert!(
        wakeable(vec![b, c], t(2), t(10)).await.is_empty(),
        "stored before the cutoff only"
    );
    let held: Vec<HandOut> = s
        .hand_out_to(&s.b, &[from_ledger(first.id), from_ledger(m.id)], t(10))
        .await
        .iter()
        .map(issued)
        .collect();
    assert_eq!(
        wakeable(vec![b, c], t(20), t(11)).await,
        vec![c],
        "live hand-outs hold them"
    );
    let deliveries: Vec<DeliveryId> = held.iter().map(|h| h.delivery).collect();
    s.ledger
        .confirm(s.team.id, s.b.id, &deliveries, None, t(12))
        .await
        .unwrap();
    assert_eq!(
        wakeable(vec![b, c], t(100), t(100)).await,
        vec![c],
        "delivered: nothing left for b"
    );
    s.ledger
        .revoke_agent(s.team.id, s.a.id, t(13))
        .await
        .unwrap();
    let unknown = WakeupTarget::new(s.team.id, Uuid::new_v4());
    let other_team = WakeupTarget::new(Uuid::new_v4(), s.b.id);
    assert_eq!(
        wakeable(vec![a, b, unknown, other_team], t(100), t(100)).await,
        sorted(vec![a, unknown, other_team]),
        "revoked, unknown and another team's agents are woken (their wait ends)"
    );
    assert!(matches!(
        s.ledger
            .wakeable(
                &vec![any_message(b); crewbus_domain::MAX_PAGE + 1],
                t(1),
                t(1)
            )
            .await,
        Err(BusError::Invalid { .. })
    ));
}
