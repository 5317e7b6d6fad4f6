//! `Ledger` behaviours of delivery to a revoked agent: whatever a caller's token cache says, the
//! ledger hands it nothing, lists it nothing and confirms nothing for it.

use crewbus_domain::{BusError, BusResult, ConfirmOutcome, DeliveryId};
use uuid::Uuid;

use super::super::delivery::{from_inbox, from_ledger};
use super::super::scene::{REMOTE, scene};
use super::super::time::t;
use super::GRACE;
use crate::LedgerFixture;

/// Whether `result` is the refusal of a revoked recipient.
fn unauthenticated<T: std::fmt::Debug>(result: &BusResult<T>) -> bool {
    matches!(result, Err(BusError::Unauthenticated))
}

/// A revoked recipient with a delivery pending (stored, handed out, unconfirmed): `hand_out`
/// (an empty batch too), `undelivered` and `confirm` → `Unauthenticated`, and nothing is
/// written (its receipt stays undelivered); another agent of the team is unaffected; an unknown
/// recipient is still `NotFound`.
pub async fn a_revoked_recipient_is_handed_and_confirmed_nothing<F: LedgerFixture + ?Sized>(
    fx: &F,
) {
    let s = scene(fx, REMOTE).await;
    let m = s.send_stored(&s.a, "r1", "hi", t(0)).await;
    let pending = s.issue(&s.b, m.id, t(1)).await;
    s.ledger
        .revoke_agent(s.team.id, s.b.id, t(2))
        .await
        .expect("revoke");

    // Within the hold and after it: refused either way.
    for at in [t(3), t(100)] {
        let handed = s
            .ledger
            .hand_out(
                s.team.id,
                s.b.id,
                &[from_ledger(m.id), from_inbox(m.id, "ack-b", 2)],
                GRACE,
                at,
            )
            .await;
        assert!(unauthenticated(&handed), "hand_out: {handed:?}");
        let listed = s
            .ledger
            .undelivered(s.team.id, s.b.id, t(200), at, 10)
            .await;
        assert!(unauthenticated(&listed), "undelivered: {listed:?}");
    }
    let empty = s.ledger.hand_out(s.team.id, s.b.id, &[], GRACE, t(3)).await;
    assert!(unauthenticated(&empty), "an empty hand_out: {empty:?}");
    let confirmed = s
        .ledger
        .confirm(s.team.id, s.b.id, &[pending.delivery], None, t(4))
        .await;
    assert!(unauthenticated(&confirmed), "confirm: {confirmed:?}");
    let receipts = s.ledger.receipts(s.team.id, m.id).await.unwrap();
    let b_receipt = receipts
        .iter()
        .find(|r| r.recipient_key == s.b.recipient_key)
        .expect("b's receipt stays");
    assert_eq!(b_receipt.delivered_at, None, "nothing confirmed");

    // Another agent of the team: unaffected.
    assert_eq!(
        s.ledger
            .undelivered(s.team.id, s.c.id, t(200), t(5), 10)
            .await
            .unwrap(),
        vec![m.id]
    );
    let c_hand_out = s.issue(&s.c, m.id, t(5)).await;
    let outcomes = s
        .ledger
        .confirm(s.team.id, s.c.id, &[c_hand_out.delivery], None, t(6))
        .await
        .unwrap();
    assert!(matches!(outcomes[..], [ConfirmOutcome::Confirmed { .. }]));

    // An unknown recipient stays `NotFound`.
    let nobody = Uuid::new_v4();
    assert!(matches!(
        s.ledger
            .hand_out(s.team.id, nobody, &[from_ledger(m.id)], GRACE, t(7))
            .await,
        Err(BusError::NotFound { .. })
    ));
    assert!(matches!(
        s.ledger
            .undelivered(s.team.id, nobody, t(200), t(7), 10)
            .await,
        Err(BusError::NotFound { .. })
    ));
    assert!(matches!(
        s.ledger
            .confirm(s.team.id, nobody, &[DeliveryId(Uuid::new_v4())], None, t(7))
            .await,
        Err(BusError::NotFound { .. })
    ));
}
