//! `Ledger` behaviours of a team's human members (made by `Oversight::human_member`): nothing is
//! delivered to them, no token authenticates them, and their messages say they are a human's.

use crewbus_domain::{AgentKind, BusError, HandOutOutcome, Publication};

use super::delivery::{GRACE, from_ledger};
use super::scene::{REMOTE, scene};
use super::time::t;
use crate::LedgerFixture;
use crate::oversight::operator;

/// A human member is a recipient of nothing: a send in its conversation writes receipts for the
/// agents only, it is handed out and listed nothing, and its token hash (held by nobody)
/// authenticates as `Unauthenticated` like any unknown token.
pub async fn a_human_member_gets_no_receipts_and_cannot_authenticate<F: LedgerFixture + ?Sized>(
    fx: &F,
) {
    let s = scene(fx, REMOTE).await;
    let ana = operator(&*s.operators, "ana").await;
    let h = s.human(&ana, t(0)).await;
    assert!(matches!(
        s.ledger.agent_by_token(&h.token_hash).await,
        Err(BusError::Unauthenticated)
    ));
    let m = s.send_stored(&s.a, "r1", "for the agents", t(1)).await;
    let recipients: Vec<_> = s
        .ledger
        .receipts(s.team.id, m.id)
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.recipient)
        .collect();
    assert_eq!(recipients.len(), 2);
    assert!(recipients.contains(&s.b.id) && recipients.contains(&s.c.id));
    assert!(
        s.ledger
            .undelivered(s.team.id, h.id, t(2), t(2), 10)
            .await
            .unwrap()
            .is_empty()
    );
    let outcome = s
        .ledger
        .hand_out(s.team.id, h.id, &[from_ledger(m.id)], GRACE, t(2))
        .await
        .unwrap();
    assert!(matches!(outcome[0], HandOutOutcome::Unknown { .. }));
    let activity = s.oversight.agent_activity(s.team.id).await.unwrap();
    let mine = activity
        .iter()
        .find(|x| x.agent.id == h.id)
        .expect("listed");
    assert_eq!((mine.pending, mine.oldest_pending_at), (0, None));
}

/// A human member may send in its conversation (the operator posts as it): its message carries
/// `sender_kind` human wherever it is read, and every agent member gets a receipt; an agent's
/// message carries `sender_kind` agent.
pub async fn messages_of_a_human_member_carry_its_kind<F: LedgerFixture + ?Sized>(fx: &F) {
    let s = scene(fx, REMOTE).await;
    let ana = operator(&*s.operators, "ana").await;
    let h = s.human(&ana, t(0)).await;
    let from_agent = s.send(&s.a, "r1", "an agent speaks", t(1)).await;
    assert_eq!(from_agent.sender_kind, AgentKind::Agent);
    let sent = s
        .ledger
        .send_batch(&[s.request(&h, "r2", "a human speaks", None)], t(2))
        .await
        .unwrap()
        .pop()
        .unwrap()
        .unwrap();
    assert!(sent.created);
    let from_human = sent.message;
    assert_eq!(from_human.sender_kind, AgentKind::Human);
    assert_eq!(from_human.sender, h.id);
    s.store_all(t(3)).await;
    let stored = s.message(from_human.id).await;
    assert_eq!(stored.publication, Publication::Stored);
    assert_eq!(stored.sender_kind, AgentKind::Human);
    let batch = s
        .ledger
        .messages(s.team.id, &[from_agent.id, from_human.id])
        .await
        .unwrap();
    let kinds: Vec<AgentKind> = batch.iter().map(|m| m.sender_kind).collect();
    assert_eq!(kinds, [AgentKind::Agent, AgentKind::Human]);
    let page = s.first_page().await;
    let kinds: Vec<AgentKind> = page.items.iter().map(|i| i.message.sender_kind).collect();
    assert_eq!(kinds, [AgentKind::Agent, AgentKind::Human]);
    let recipients = s.ledger.receipts(s.team.id, from_human.id).await.unwrap();
    assert_eq!(recipients.len(), 3, "every agent of the conversation");
    assert!(recipients.iter().all(|r| r.recipient != h.id));
    let again = s.send_again(&h, "r2", "a human speaks", t(4)).await;
    assert!(!again.created);
    assert_eq!(again.message.sender_kind, AgentKind::Human);
}
