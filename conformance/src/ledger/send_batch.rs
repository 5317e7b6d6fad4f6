//! `Ledger` behaviours of `send_batch` (group commit): one outcome per request in order, the
//! repeat rule across the batch, gap-free seqs in queue order, and nothing written for what is
//! refused.

use std::collections::HashSet;

use crewbus_domain::{
    BusError, BusResult, MAX_PAGE, Publication, RecordKind, RunOutcome, SendRequest, Sent, Seq,
};
use uuid::Uuid;

use super::scene::{LEASE, REMOTE, scene};
use super::time::t;
use crate::LedgerFixture;

/// The created message of an outcome (panics, naming `what`, on anything else).
fn created(outcome: &BusResult<Sent>, what: &str) -> crewbus_domain::Message {
    let sent = outcome
        .as_ref()
        .unwrap_or_else(|e| panic!("{what}: expected a created message, got {e:?}"));
    assert!(sent.created, "{what}: expected a new message");
    sent.message.clone()
}

/// A request id no store can hold (U+0000: Postgres text refuses it) among good sends of other
/// agents: it is answered `Invalid` alone, and the batch's other requests are created as if it
/// were not there (found by a new user: on Postgres the whole batch failed with it).
pub async fn send_batch_answers_an_unstorable_request_id_alone<F: LedgerFixture + ?Sized>(fx: &F) {
    let s = scene(fx, REMOTE).await;
    let batch = vec![
        s.request(&s.a, "r1", "first", None),
        s.request(&s.b, "n\u{0}1", "a NUL in the request id", None),
        s.request(&s.b, "r2", "second", None),
    ];
    let out = s.ledger.send_batch(&batch, t(1)).await.expect("the batch");
    assert_eq!(out.len(), batch.len(), "one outcome per request");
    let first = created(&out[0], "a good send beside the bad one");
    assert!(
        matches!(out[1], Err(BusError::Invalid { .. })),
        "{:?}",
        out[1]
    );
    let second = created(&out[2], "a good send after the bad one");
    assert_eq!(
        (first.seq, second.seq),
        (1, 2),
        "gap-free: the bad one took no seq"
    );
    assert_eq!(s.message(first.id).await, first, "answered as recorded");
    assert_eq!(s.message(second.id).await, second, "answered as recorded");
    let alone = s
        .ledger
        .send(s.request(&s.a, "\u{0}", "alone", None), t(2))
        .await;
    assert!(matches!(alone, Err(BusError::Invalid { .. })), "{alone:?}");
}

/// A mixed batch: good sends, a revoked member's, a repeat of an earlier message, a repeat
/// within the batch, a conflict (same request id, another body), a bad request id and an unknown
/// conversation — each answered in order, the good ones created with gap-free seqs, the refused
/// ones writing nothing.
pub async fn send_batch_answers_each_request_in_order<F: LedgerFixture + ?Sized>(fx: &F) {
    let s = scene(fx, REMOTE).await;
    let earlier = s.send(&s.a, "earlier", "said before", t(1)).await;
    s.ledger
        .revoke_agent(s.team.id, s.c.id, t(1))
        .await
        .unwrap();
    let mut unknown = s.request(&s.a, "elsewhere", "hi", None);
    unknown.conversation = Uuid::new_v4();
    let batch = vec![
        s.request(&s.a, "r1", "first", None),
        s.request(&s.c, "r2", "from the revoked", None),
        s.request(&s.a, "earlier", "said before", None),
        s.request(&s.b, "r3", "second", None),
        s.request(&s.a, "r1", "first", None),
        s.request(&s.a, "r1", "another body", None),
        s.request(&s.b, "bad id", "x", None),
        unknown,
    ];
    let out = s.ledger.send_batch(&batch, t(2)).await.expect("the batch");
    assert_eq!(out.len(), batch.len(), "one outcome per request");
    let first = created(&out[0], "a good send");
    assert!(matches!(out[1], Err(BusError::Forbidden { .. })));
    let repeat = out[2].as_ref().expect("a repeat of an earlier message");
    assert!(!repeat.created);
    assert_eq!(repeat.message, earlier);
    let second = created(&out[3], "another good send");
    let within = out[4].as_ref().expect("a repeat within the batch");
    assert!(!within.created);
    assert_eq!(within.message, first, "the first in queue order wins");
    assert!(matches!(out[5], Err(BusError::Conflict { .. })));
    assert!(matches!(out[6], Err(BusError::Invalid { .. })));
    assert!(matches!(out[7], Err(BusError::NotFound { .. })));

    assert_eq!(
        (first.seq, second.seq),
        (2, 3),
        "gap-free after the earlier one"
    );
    assert_eq!((first.sender, second.sender), (s.a.id, s.b.id));
    assert_eq!(first.sent_at, t(2));
    assert_eq!(first.publication, Publication::PendingPublication);
    assert_eq!(s.message(first.id).await, first, "answered as recorded");
    let slots = s.lease_all(t(3)).await;
    assert_eq!(
        slots.keys().copied().collect::<HashSet<_>>(),
        HashSet::from([earlier.id, first.id, second.id]),
        "one slot per created message"
    );
    assert_eq!(slots[&first.id].envelope.body, "first");
    for slot in slots.values() {
        s.confirm_slot(slot, t(3)).await;
    }
    let seqs: Vec<u64> = s
        .first_page()
        .await
        .items
        .iter()
        .map(|i| i.message.seq)
        .collect();
    assert_eq!(
        seqs,
        vec![1, 2, 3],
        "the earlier message and the two good ones, nothing else"
    );
    let receipts = s.ledger.receipts(s.team.id, second.id).await.unwrap();
    let recipients: HashSet<Uuid> = receipts.iter().map(|r| r.recipient).collect();
    assert_eq!(
        recipients,
        HashSet::from([s.a.id, s.c.id]),
        "as `send` writes them"
    );
}

/// Seqs are gap-free per conversation in queue order when a batch interleaves two
/// conversations; the runs' `MessageSent` records follow the same order; on the ledger's local
/// backend every message is stored in the batch with its inbox events, elsewhere each gets a
/// slot.
pub async fn send_batch_numbers_each_conversation_in_queue_order<F: LedgerFixture + ?Sized>(
    fx: &F,
) {
    let backend = fx.ledger().local_backend().unwrap_or(REMOTE).to_owned();
    let s = scene(fx, &backend).await;
    let other = s
        .ledger
        .create_conversation(s.team.id, s.b.id, "other", &[s.a.id], t(0))
        .await
        .unwrap();
    let run = s.journal.admit(s.team.id, s.a.id, t(0)).await.unwrap();
    let in_other = |from: &crewbus_domain::Agent, id: &str, run| SendRequest {
        conversation: other.id,
        ..s.request(from, id, &format!("body {id}"), run)
    };
    let batch = vec![
        s.request(&s.a, "x1", "body x1", Some(run)),
        in_other(&s.b, "y1", None),
        s.request(&s.b, "x2", "body x2", None),
        in_other(&s.a, "y2", Some(run)),
        s.request(&s.c, "x3", "body x3", None),
        in_other(&s.a, "y3", Some(run)),
    ];
    let out = s.ledger.send_batch(&batch, t(1)).await.expect("the batch");
    let messages: Vec<_> = out
        .iter()
        .map(|o| created(o, "every request is good"))
        .collect();
    let seqs: Vec<(Uuid, u64)> = messages.iter().map(|m| (m.conversation, m.seq)).collect();
    assert_eq!(
        seqs,
        vec![
            (s.conv.id, 1),
            (other.id, 1),
            (s.conv.id, 2),
            (other.id, 2),
            (s.conv.id, 3),
            (other.id, 3),
        ]
    );
    let records = s.journal.read(run, Seq(1), 100).await.unwrap();
    let sent: Vec<RecordKind> = records[1..].iter().map(|r| r.kind.clone()).collect();
    let expected: Vec<RecordKind> = [0, 3, 5]
        .iter()
        .map(|&i| RecordKind::MessageSent {
            conversation: messages[i].conversation,
            message: messages[i].id,
            seq: messages[i].seq,
        })
        .collect();
    assert_eq!(sent, expected, "the run's records in queue order");
    assert_eq!(
        records.iter().map(|r| r.seq).collect::<Vec<_>>(),
        vec![Seq(1), Seq(2), Seq(3), Seq(4)],
        "the run's journal stays gap-free"
    );
    let receipts: usize = {
        let mut n = 0;
        for m in &messages {
            n += s.ledger.receipts(s.team.id, m.id).await.unwrap().len();
        }
        n
    };
    assert_eq!(
        receipts,
        3 * 2 + 3,
        "one receipt per member other than the sender"
    );
    if s.ledger.local_backend() == Some(backend.as_str()) {
        assert!(messages.iter().all(|m| m.publication == Publication::Stored
            && m.locator.is_some()
            && m.stored_at == Some(t(1))));
        assert!(s.lease_all(t(2)).await.is_empty(), "no outbox slot");
        let events = s.ledger.lease_inbox_events(t(2), LEASE, 100).await.unwrap();
        assert_eq!(events.len(), receipts, "one reference per receipt");
    } else {
        assert_eq!(
            s.lease_all(t(2)).await.len(),
            messages.len(),
            "one slot each"
        );
    }
    let next = s.send(&s.a, "after", "after the batch", t(3)).await;
    assert_eq!(next.seq, 4, "a later send goes on from the batch");
}

/// An empty batch is answered with an empty result; more than `MAX_PAGE` requests are
/// `Invalid` and write nothing.
pub async fn send_batch_bounds_are_checked<F: LedgerFixture + ?Sized>(fx: &F) {
    let s = scene(fx, REMOTE).await;
    assert!(s.ledger.send_batch(&[], t(1)).await.unwrap().is_empty());
    let too_many: Vec<SendRequest> = (0..=MAX_PAGE)
        .map(|i| s.request(&s.a, &format!("r{i}"), "x", None))
        .collect();
    assert!(matches!(
        s.ledger.send_batch(&too_many, t(1)).await,
        Err(BusError::Invalid { .. })
    ));
    assert!(s.first_page().await.items.is_empty());
}

/// A batch whose every request is refused writes nothing: no message, slot, receipt, event or
/// journal record; the counts are unchanged and no seq is consumed.
pub async fn send_batch_of_refusals_writes_nothing<F: LedgerFixture + ?Sized>(fx: &F) {
    let s = scene(fx, REMOTE).await;
    let earlier = s.send(&s.a, "earlier", "said before", t(1)).await;
    let sealed = s.journal.admit(s.team.id, s.a.id, t(1)).await.unwrap();
    s.journal
        .seal(sealed, RunOutcome::Succeeded, "done", t(1))
        .await
        .unwrap();
    let b_run = s.journal.admit(s.team.id, s.b.id, t(1)).await.unwrap();
    s.ledger
        .revoke_agent(s.team.id, s.c.id, t(1))
        .await
        .unwrap();
    let before = s.ledger.counts(t(2)).await.unwrap();
    let batch = vec![
        s.request(&s.c, "r1", "revoked", None),
        s.request(&s.a, "earlier", "another body", None),
        s.request(&s.a, "r2", "sealed run", Some(sealed)),
        s.request(&s.a, "r3", "another agent's run", Some(b_run)),
        s.request(&s.a, "", "bad id", None),
    ];
    let out = s.ledger.send_batch(&batch, t(2)).await.expect("the batch");
    assert!(matches!(out[0], Err(BusError::Forbidden { .. })));
    assert!(matches!(out[1], Err(BusError::Conflict { .. })));
    assert!(matches!(out[2], Err(BusError::Conflict { .. })));
    assert!(matches!(out[3], Err(BusError::Forbidden { .. })));
    assert!(matches!(out[4], Err(BusError::Invalid { .. })));
    assert_eq!(out.len(), 5);
    assert_eq!(
        s.ledger.counts(t(2)).await.unwrap(),
        before,
        "counts unchanged"
    );
    assert_eq!(s.first_page().await.items.len(), 1);
    assert_eq!(
        s.lease_all(t(3)).await.len(),
        1,
        "only the earlier message's slot"
    );
    assert_eq!(s.journal.read(sealed, Seq(1), 100).await.unwrap().len(), 2);
    assert_eq!(s.journal.read(b_run, Seq(1), 100).await.unwrap().len(), 1);
    assert_eq!(
        s.message(earlier.id).await.body_sha256,
        earlier.body_sha256,
        "the conflict changed nothing"
    );
    let next = s.send(&s.a, "next", "after the refusals", t(4)).await;
    assert_eq!(next.seq, 2, "refusals consume no seq");
}
