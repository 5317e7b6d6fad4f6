//! `Ledger` behaviours of delivery, the receipts: confirm once per receipt, acknowledge, the
//! acting run's rules, and reading receipts.

use std::sync::Arc;

use crewbus_domain::{BusError, ConfirmOutcome, DeliveryId, InboxAck, RecordKind, RunOutcome, Seq};
use uuid::Uuid;

use super::super::delivery::{GRACE, from_inbox, issued};
use super::super::scene::{INBOX, REMOTE, scene};
use super::super::time::t;
use crate::LedgerFixture;

/// The first confirm of a (message, recipient) sets `delivered_at`; any later one — same or
/// another delivery id — says already confirmed and changes nothing; foreign ids are unknown.
pub async fn confirm_is_once_per_receipt<F: LedgerFixture + ?Sized>(fx: &F) {
    let s = scene(fx, REMOTE).await;
    let m = s.send_stored(&s.a, "r1", "hi", t(0)).await;
    let first = issued(
        &s.ledger
            .hand_out(
                s.team.id,
                s.b.id,
                &[from_inbox(m.id, "ack-1", 1)],
                GRACE,
                t(1),
            )
            .await
            .unwrap()[0],
    );
    let second = s.issue(&s.b, m.id, t(100)).await;
    let c_hand_out = s.issue(&s.c, m.id, t(100)).await;
    let ack = Some(InboxAck {
        inbox: INBOX.to_owned(),
        ack_subject: "ack-1".to_owned(),
    });
    let outcomes = s
        .ledger
        .confirm(
            s.team.id,
            s.b.id,
            &[
                first.delivery,
                first.delivery,
                second.delivery,
                c_hand_out.delivery,
                DeliveryId(Uuid::new_v4()),
            ],
            None,
            t(101),
        )
        .await
        .unwrap();
    assert_eq!(
        outcomes,
        vec![
            ConfirmOutcome::Confirmed {
                message: m.id,
                ack: ack.clone()
            },
            ConfirmOutcome::AlreadyConfirmed {
                message: m.id,
                ack: ack.clone()
            },
            ConfirmOutcome::AlreadyConfirmed {
                message: m.id,
                ack: None
            },
            ConfirmOutcome::Unknown,
            ConfirmOutcome::Unknown,
        ]
    );
    let again = s
        .ledger
        .confirm(s.team.id, s.b.id, &[first.delivery], None, t(200))
        .await
        .unwrap();
    assert!(matches!(again[0], ConfirmOutcome::AlreadyConfirmed { .. }));
    let receipts = s.ledger.receipts(s.team.id, m.id).await.unwrap();
    let b = receipts.iter().find(|r| r.recipient == s.b.id).unwrap();
    let c = receipts.iter().find(|r| r.recipient == s.c.id).unwrap();
    assert_eq!(b.delivered_at, Some(t(101)), "set once, never moved");
    assert_eq!(
        c.delivered_at, None,
        "another recipient's delivery is untouched"
    );
    assert_eq!(s.ledger.counts(t(201)).await.unwrap().deliveries, 1);
}

/// Confirm writes `MessageDelivered` to the recipient's run; another agent's run is `Forbidden`
/// and a sealed run `Conflict`, both writing nothing.
pub async fn confirm_checks_the_run_and_journals_delivery<F: LedgerFixture + ?Sized>(fx: &F) {
    let s = scene(fx, REMOTE).await;
    let m = s.send_stored(&s.a, "r1", "hi", t(0)).await;
    let h = s.issue(&s.b, m.id, t(1)).await;
    let a_run = s.journal.admit(s.team.id, s.a.id, t(1)).await.unwrap();
    assert!(matches!(
        s.ledger
            .confirm(s.team.id, s.b.id, &[h.delivery], Some(a_run), t(2))
            .await,
        Err(BusError::Forbidden { .. })
    ));
    let sealed = s.journal.admit(s.team.id, s.b.id, t(1)).await.unwrap();
    s.journal
        .seal(sealed, RunOutcome::Cancelled, "gone", t(1))
        .await
        .unwrap();
    assert!(matches!(
        s.ledger
            .confirm(s.team.id, s.b.id, &[h.delivery], Some(sealed), t(2))
            .await,
        Err(BusError::Conflict { .. })
    ));
    let receipts = s.ledger.receipts(s.team.id, m.id).await.unwrap();
    assert!(
        receipts.iter().all(|r| r.delivered_at.is_none()),
        "refused: nothing written"
    );
    let run = s.journal.admit(s.team.id, s.b.id, t(1)).await.unwrap();
    let out = s
        .ledger
        .confirm(
            s.team.id,
            s.b.id,
            &[h.delivery, h.delivery],
            Some(run),
            t(3),
        )
        .await
        .unwrap();
    assert!(matches!(out[0], ConfirmOutcome::Confirmed { .. }));
    let records = s.journal.read(run, Seq(1), 100).await.unwrap();
    assert_eq!(records.len(), 2, "one MessageDelivered for one delivery");
    assert_eq!(
        records[1].kind,
        RecordKind::MessageDelivered {
            conversation: s.conv.id,
            message: m.id
        }
    );
    assert_eq!(records[1].at, t(3));
}

/// A run of another team is `NotFound` on send, confirm and acknowledge — the same answer as a
/// run id that never existed, so another team's ids are never confirmed to exist — also when
/// that run was admitted for the acting agent's own id. Another agent of the same team stays
/// `Forbidden`. Refused calls write nothing, to either run.
pub async fn runs_of_another_team_are_not_found<F: LedgerFixture + ?Sized>(fx: &F) {
    let s = scene(fx, REMOTE).await;
    let other = s.other_team().await;
    let x = s.agent_of(&other, "x").await;
    // Another team's runs: its own agent's, and one bearing the acting agent's id.
    let foreign = |agent: Uuid| {
        let journal = Arc::clone(&s.journal);
        let team = other.id;
        async move {
            [
                journal.admit(team, x.id, t(0)).await.unwrap(),
                journal.admit(team, agent, t(0)).await.unwrap(),
            ]
        }
    };
    let c_run = s.journal.admit(s.team.id, s.c.id, t(0)).await.unwrap();

    let a_foreign = foreign(s.a.id).await;
    for run in a_foreign {
        let got = s
            .ledger
            .send(s.request(&s.a, "r1", "hi", Some(run)), t(1))
            .await;
        assert!(matches!(got, Err(BusError::NotFound { .. })), "{got:?}");
    }
    let got = s
        .ledger
        .send(s.request(&s.a, "r1", "hi", Some(c_run)), t(1))
        .await;
    assert!(matches!(got, Err(BusError::Forbidden { .. })), "{got:?}");

    let m = s.send_stored(&s.a, "r1", "hi", t(2)).await;
    let h = s.issue(&s.b, m.id, t(3)).await;
    let b_foreign = foreign(s.b.id).await;
    for run in b_foreign {
        let got = s
            .ledger
            .confirm(s.team.id, s.b.id, &[h.delivery], Some(run), t(4))
            .await;
        assert!(matches!(got, Err(BusError::NotFound { .. })), "{got:?}");
    }
    let got = s
        .ledger
        .confirm(s.team.id, s.b.id, &[h.delivery], Some(c_run), t(4))
        .await;
    assert!(matches!(got, Err(BusError::Forbidden { .. })), "{got:?}");
    let receipts = s.ledger.receipts(s.team.id, m.id).await.unwrap();
    assert!(
        receipts.iter().all(|r| r.delivered_at.is_none()),
        "refused confirms write nothing"
    );

    s.ledger
        .confirm(s.team.id, s.b.id, &[h.delivery], None, t(5))
        .await
        .unwrap();
    for run in b_foreign {
        let got = s
            .ledger
            .acknowledge(s.team.id, s.b.id, m.id, Some(run), t(6))
            .await;
        assert!(matches!(got, Err(BusError::NotFound { .. })), "{got:?}");
    }
    let got = s
        .ledger
        .acknowledge(s.team.id, s.b.id, m.id, Some(c_run), t(6))
        .await;
    assert!(matches!(got, Err(BusError::Forbidden { .. })), "{got:?}");
    let receipts = s.ledger.receipts(s.team.id, m.id).await.unwrap();
    assert!(
        receipts.iter().all(|r| r.acknowledged_at.is_none()),
        "refused acknowledgements write nothing"
    );
    for run in a_foreign.into_iter().chain(b_foreign).chain([c_run]) {
        let records = s.journal.read(run, Seq(1), 100).await.unwrap();
        assert_eq!(
            records.len(),
            1,
            "only RunAdmitted: refused calls journal nothing"
        );
    }
}

/// Acknowledge: only a recipient, only after delivery, once (the first time stays), writing
/// `MessageAcknowledged`; run rules apply.
pub async fn acknowledge_only_a_recipient_after_delivery_once<F: LedgerFixture + ?Sized>(fx: &F) {
    let s = scene(fx, REMOTE).await;
    let m = s.send_stored(&s.a, "r1", "hi", t(0)).await;
    let run = s.journal.admit(s.team.id, s.b.id, t(0)).await.unwrap();
    assert!(matches!(
        s.ledger
            .acknowledge(s.team.id, s.b.id, m.id, Some(run), t(1))
            .await,
        Err(BusError::Conflict { .. })
    ));
    assert!(matches!(
        s.ledger
            .acknowledge(s.team.id, s.a.id, m.id, None, t(1))
            .await,
        Err(BusError::Forbidden { .. })
    ));
    assert!(matches!(
        s.ledger
            .acknowledge(s.team.id, s.b.id, Uuid::new_v4(), None, t(1))
            .await,
        Err(BusError::NotFound { .. })
    ));
    let h = s.issue(&s.b, m.id, t(2)).await;
    s.ledger
        .confirm(s.team.id, s.b.id, &[h.delivery], None, t(3))
        .await
        .unwrap();
    let c_run = s.journal.admit(s.team.id, s.c.id, t(0)).await.unwrap();
    assert!(matches!(
        s.ledger
            .acknowledge(s.team.id, s.b.id, m.id, Some(c_run), t(4))
            .await,
        Err(BusError::Forbidden { .. })
    ));
    let receipt = s
        .ledger
        .acknowledge(s.team.id, s.b.id, m.id, Some(run), t(5))
        .await
        .unwrap();
    assert_eq!(receipt.acknowledged_at, Some(t(5)));
    assert_eq!(receipt.delivered_at, Some(t(3)));
    let again = s
        .ledger
        .acknowledge(s.team.id, s.b.id, m.id, Some(run), t(6))
        .await
        .unwrap();
    assert_eq!(again.acknowledged_at, Some(t(5)), "set once");
    let records = s.journal.read(run, Seq(1), 100).await.unwrap();
    let acks: Vec<_> = records
        .iter()
        .filter(|r| matches!(r.kind, RecordKind::MessageAcknowledged { .. }))
        .collect();
    assert_eq!(acks.len(), 1);
    assert_eq!(
        acks[0].kind,
        RecordKind::MessageAcknowledged {
            conversation: s.conv.id,
            message: m.id
        }
    );
    // c: delivered, then its run sealed before acknowledging → Conflict, nothing written.
    let hc = s.issue(&s.c, m.id, t(7)).await;
    s.ledger
        .confirm(s.team.id, s.c.id, &[hc.delivery], None, t(7))
        .await
        .unwrap();
    s.journal
        .seal(c_run, RunOutcome::Succeeded, "done", t(8))
        .await
        .unwrap();
    assert!(matches!(
        s.ledger
            .acknowledge(s.team.id, s.c.id, m.id, Some(c_run), t(9))
            .await,
        Err(BusError::Conflict { .. })
    ));
    let receipts = s.ledger.receipts(s.team.id, m.id).await.unwrap();
    let c = receipts.iter().find(|r| r.recipient == s.c.id).unwrap();
    assert_eq!(c.acknowledged_at, None);
}

/// Receipts: one per recipient, the sender excluded, not readable from another team.
pub async fn receipts_are_one_per_recipient<F: LedgerFixture + ?Sized>(fx: &F) {
    let s = scene(fx, REMOTE).await;
    let m = s.send(&s.c, "r1", "hi", t(0)).await;
    let receipts = s.ledger.receipts(s.team.id, m.id).await.unwrap();
    assert_eq!(receipts.len(), 2);
    let keys: Vec<&str> = receipts.iter().map(|r| r.recipient_key.as_str()).collect();
    let mut sorted = keys.clone();
    sorted.sort_unstable();
    assert_eq!(keys, sorted, "ordered by recipient key");
    assert!(
        receipts
            .iter()
            .all(|r| r.message == m.id && r.recipient != s.c.id)
    );
    let other = s.other_team().await;
    assert!(matches!(
        s.ledger.receipts(other.id, m.id).await,
        Err(BusError::NotFound { .. })
    ));
    assert!(matches!(
        s.ledger.message(other.id, m.id).await,
        Err(BusError::NotFound { .. })
    ));
}
