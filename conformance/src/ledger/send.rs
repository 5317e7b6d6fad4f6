//! `Ledger` behaviours of send: a message recorded once per request id, with its outbox slot,
//! and reading messages back.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use crewbus_domain::{BusError, Publication, RecordKind, RunOutcome, Seq, body_sha256};
use tokio::task::JoinSet;
use uuid::Uuid;

use super::scene::{LEASE, REMOTE, locator_for, scene, token};
use super::time::t;
use crate::LedgerFixture;

/// A send on a non-local backend records a pending message, its receipts and one outbox slot
/// carrying the body under a publish key.
pub async fn send_records_a_pending_message_with_an_outbox_slot<F: LedgerFixture + ?Sized>(fx: &F) {
    let s = scene(fx, REMOTE).await;
    let body = "hello \u{0} world ✓";
    let m = s.send(&s.a, "req-1", body, t(5)).await;
    assert_eq!(m.seq, 1);
    assert_eq!(m.sender, s.a.id);
    assert_eq!(m.conversation, s.conv.id);
    assert_eq!(m.team, s.team.id);
    assert_eq!(m.request_id, "req-1");
    assert_eq!(m.body_sha256, body_sha256(body));
    assert_eq!(m.body_len, body.len() as u64);
    assert_eq!(m.backend, REMOTE);
    assert_eq!(m.publication, Publication::PendingPublication);
    assert_eq!((m.locator.as_ref(), m.stored_at), (None, None));
    assert_eq!(m.sent_at, t(5));

    let receipts = s.ledger.receipts(s.team.id, m.id).await.unwrap();
    let recipients: HashSet<Uuid> = receipts.iter().map(|r| r.recipient).collect();
    assert_eq!(
        recipients,
        HashSet::from([s.b.id, s.c.id]),
        "the sender gets no receipt"
    );
    assert!(
        receipts.iter().all(|r| r.stored_at.is_none()
            && r.delivered_at.is_none()
            && r.acknowledged_at.is_none())
    );

    let slots = s.lease_all(t(5)).await;
    assert_eq!(slots.len(), 1);
    let slot = &slots[&m.id];
    assert_eq!(slot.backend, REMOTE);
    assert_eq!(
        slot.envelope.body, body,
        "the body is kept faithfully, U+0000 included"
    );
    assert_eq!(slot.envelope.team_id, s.team.id);
    assert_eq!(slot.envelope.conversation_id, s.conv.id);
    assert_eq!((slot.attempts, slot.uncertain), (0, false));
    assert_eq!(
        slot.leased_until,
        t(5) + chrono::Duration::from_std(LEASE).unwrap()
    );
    let events = s.ledger.lease_inbox_events(t(5), LEASE, 100).await.unwrap();
    assert!(events.is_empty(), "no reference before the body is stored");
}

/// With the ledger's co-located backend the message is stored in the send itself (no slot, its
/// references due at once); with any other backend it goes through the outbox.
pub async fn send_follows_the_local_backend<F: LedgerFixture + ?Sized>(fx: &F) {
    let ledger = fx.ledger();
    match ledger.local_backend() {
        Some(local) => {
            let s = scene(fx, local).await;
            let m = s.send(&s.a, "r1", "stored at once", t(1)).await;
            assert_eq!(m.publication, Publication::Stored);
            assert!(m.locator.is_some());
            assert_eq!(m.stored_at, Some(t(1)));
            assert!(s.lease_all(t(1)).await.is_empty(), "no outbox slot");
            let events = s.ledger.lease_inbox_events(t(1), LEASE, 100).await.unwrap();
            let keys: HashSet<String> = events.iter().map(|e| e.recipient_key.clone()).collect();
            assert_eq!(
                keys,
                HashSet::from([s.b.recipient_key.clone(), s.c.recipient_key.clone()])
            );
            for r in s.ledger.receipts(s.team.id, m.id).await.unwrap() {
                assert_eq!(r.stored_at, Some(t(1)));
            }
        }
        None => {
            let s = scene(fx, "memory").await;
            let m = s.send(&s.a, "r1", "through the outbox", t(1)).await;
            assert_eq!(m.publication, Publication::PendingPublication);
            assert_eq!(s.lease_all(t(1)).await.len(), 1, "one outbox slot");
        }
    }
}

/// The same request id with the same body returns the original message as it stands now and
/// writes nothing; with another body it is `Conflict`. A request id is the sender's own within a
/// conversation (the key is `(conversation, sender, request_id)`): another conversation, or
/// another member of the same one, using it creates a message of its own, and each sender's
/// repeat answers its own message.
pub async fn send_is_idempotent_on_request_id<F: LedgerFixture + ?Sized>(fx: &F) {
    let s = scene(fx, REMOTE).await;
    let first = s.send(&s.a, "same", "body", t(1)).await;
    let again = s.send_again(&s.a, "same", "body", t(2)).await;
    assert!(!again.created);
    assert_eq!(again.message, first);
    let slots = s.lease_all(t(3)).await;
    assert_eq!(slots.len(), 1, "a repeat enqueues no second slot");
    s.confirm_slot(&slots[&first.id], t(3)).await;
    let later = s.send_again(&s.a, "same", "body", t(4)).await;
    assert!(!later.created);
    assert_eq!(later.message.id, first.id);
    assert_eq!(
        later.message.publication,
        Publication::Stored,
        "current state"
    );
    assert_eq!(later.message.locator, Some(locator_for(first.id)));
    assert!(matches!(
        s.ledger
            .send(s.request(&s.a, "same", "another body", None), t(5))
            .await,
        Err(BusError::Conflict { .. })
    ));
    let other = s
        .ledger
        .create_conversation(s.team.id, s.a.id, "other", &[s.b.id], t(6))
        .await
        .unwrap();
    let mut req = s.request(&s.a, "same", "body", None);
    req.conversation = other.id;
    let elsewhere = s.ledger.send(req, t(6)).await.unwrap();
    assert!(
        elsewhere.created,
        "request ids are scoped to the conversation"
    );
    assert_eq!(elsewhere.message.seq, 1);
    assert_eq!(s.first_page().await.items.len(), 1);
    assert!(matches!(
        s.ledger
            .send(s.request(&s.a, "bad id", "body", None), t(7))
            .await,
        Err(BusError::Invalid { .. })
    ));

    // Two members pick the same request id: each gets a message of its own, with the other's
    // body or another one.
    let alices = s.send(&s.a, "t42-1", "the same body", t(8)).await;
    let bobs = s.send(&s.b, "t42-1", "the same body", t(9)).await;
    let carols = s.send(&s.c, "t42-1", "carol's own body", t(10)).await;
    assert_eq!(
        [alices.sender, bobs.sender, carols.sender],
        [s.a.id, s.b.id, s.c.id]
    );
    assert_eq!([alices.seq, bobs.seq, carols.seq], [2, 3, 4]);
    assert_eq!(
        HashSet::from([alices.id, bobs.id, carols.id]).len(),
        3,
        "three messages"
    );
    let pending = s.lease_all(t(11)).await;
    assert_eq!(
        pending.keys().copied().collect::<HashSet<Uuid>>(),
        HashSet::from([elsewhere.message.id, alices.id, bobs.id, carols.id]),
        "one slot per message"
    );
    for slot in pending.values() {
        s.confirm_slot(slot, t(11)).await;
    }
    assert_eq!(s.first_page().await.items.len(), 4);
    for m in [&alices, &bobs, &carols] {
        let receipts = s.ledger.receipts(s.team.id, m.id).await.unwrap();
        assert_eq!(receipts.len(), 2, "each message has its own receipts");
        assert!(receipts.iter().all(|r| r.recipient != m.sender));
    }
    // Each one's repeat answers its own message as it stands; another body is a conflict with
    // one's own.
    for (from, body, own) in [
        (&s.a, "the same body", &alices),
        (&s.b, "the same body", &bobs),
        (&s.c, "carol's own body", &carols),
    ] {
        let again = s.send_again(from, "t42-1", body, t(12)).await;
        assert!(!again.created, "{}'s repeat", from.name);
        assert_eq!(
            again.message,
            s.message(own.id).await,
            "{}'s own",
            from.name
        );
        assert_eq!(again.message.publication, Publication::Stored);
        assert!(matches!(
            s.ledger
                .send(s.request(from, "t42-1", "yet another body", None), t(12))
                .await,
            Err(BusError::Conflict { .. })
        ));
    }
    assert_eq!(s.first_page().await.items.len(), 4, "repeats write nothing");
    assert!(s.lease_all(t(13)).await.is_empty(), "nor a slot");
}

/// Concurrent identical requests create one message; concurrent requests of two senders under
/// one request id create one message per sender, each answered to its own sender.
pub async fn concurrent_identical_sends_create_one_message<F: LedgerFixture + ?Sized>(fx: &F) {
    let s = scene(fx, REMOTE).await;
    let mut set = JoinSet::new();
    for _ in 0..8 {
        let ledger = Arc::clone(&s.ledger);
        let req = s.request(&s.a, "once", "the body", None);
        set.spawn(async move { ledger.send(req, t(1)).await });
    }
    let mut ids = HashSet::new();
    let mut created = 0;
    while let Some(joined) = set.join_next().await {
        let sent = joined.expect("task").expect("every duplicate succeeds");
        created += usize::from(sent.created);
        ids.insert(sent.message.id);
    }
    assert_eq!(created, 1, "exactly one call created the message");
    assert_eq!(ids.len(), 1, "every call returned the same message");
    assert_eq!(s.first_page().await.items.len(), 1);
    assert_eq!(s.lease_all(t(2)).await.len(), 1);

    // Alice and bob, eight calls each, all with request id `t42-1` and one body.
    let mut set = JoinSet::new();
    for i in 0..16 {
        let ledger = Arc::clone(&s.ledger);
        let from = if i % 2 == 0 { &s.a } else { &s.b };
        let req = s.request(from, "t42-1", "one body", None);
        set.spawn(async move { (req.sender, ledger.send(req, t(3)).await) });
    }
    let mut created: HashMap<Uuid, usize> = HashMap::new();
    let mut answered: HashMap<Uuid, HashSet<Uuid>> = HashMap::new();
    while let Some(joined) = set.join_next().await {
        let (sender, sent) = joined.expect("task");
        let sent = sent.expect("every call succeeds");
        assert_eq!(
            sent.message.sender, sender,
            "a call answers its sender's message"
        );
        *created.entry(sender).or_default() += usize::from(sent.created);
        answered.entry(sender).or_default().insert(sent.message.id);
    }
    assert_eq!(
        created,
        HashMap::from([(s.a.id, 1), (s.b.id, 1)]),
        "exactly one call of each sender created its message"
    );
    for sender in [s.a.id, s.b.id] {
        assert_eq!(
            answered[&sender].len(),
            1,
            "every call of a sender got one message"
        );
    }
    assert_ne!(answered[&s.a.id], answered[&s.b.id], "two messages");
    let pending = s.lease_all(t(4)).await;
    assert_eq!(pending.len(), 2, "one slot each");
    for slot in pending.values() {
        s.confirm_slot(slot, t(4)).await;
    }
    s.store_all(t(40)).await;
    assert_eq!(s.first_page().await.items.len(), 3);
}

/// Concurrent distinct sends get distinct, gap-free seqs from 1.
pub async fn concurrent_sends_get_gap_free_seq<F: LedgerFixture + ?Sized>(fx: &F) {
    let s = scene(fx, REMOTE).await;
    let n = 20u64;
    let mut set = JoinSet::new();
    for i in 0..n {
        let ledger = Arc::clone(&s.ledger);
        let from = if i % 2 == 0 { &s.a } else { &s.b };
        let req = s.request(from, &format!("r{i}"), &format!("body {i}"), None);
        set.spawn(async move { ledger.send(req, t(1)).await });
    }
    let mut seqs = Vec::new();
    while let Some(joined) = set.join_next().await {
        seqs.push(joined.expect("task").expect("send").message.seq);
    }
    seqs.sort_unstable();
    assert_eq!(seqs, (1..=n).collect::<Vec<_>>());
}

/// A non-member, a revoked member and another team's caller are refused, and nothing is written.
pub async fn send_refuses_non_members_and_foreign_conversations<F: LedgerFixture + ?Sized>(fx: &F) {
    let s = scene(fx, REMOTE).await;
    let outsider = s
        .ledger
        .create_agent(s.team.id, "outsider", token(), t(0))
        .await
        .unwrap();
    assert!(matches!(
        s.ledger
            .send(s.request(&outsider, "r1", "hi", None), t(1))
            .await,
        Err(BusError::Forbidden { .. })
    ));
    s.ledger
        .revoke_agent(s.team.id, s.c.id, t(1))
        .await
        .unwrap();
    assert!(matches!(
        s.ledger.send(s.request(&s.c, "r2", "hi", None), t(2)).await,
        Err(BusError::Forbidden { .. })
    ));
    let other = s.other_team().await;
    let mut foreign = s.request(&s.a, "r3", "hi", None);
    foreign.team = other.id;
    assert!(matches!(
        s.ledger.send(foreign, t(3)).await,
        Err(BusError::NotFound { .. })
    ));
    let mut unknown = s.request(&s.a, "r4", "hi", None);
    unknown.conversation = Uuid::new_v4();
    assert!(matches!(
        s.ledger.send(unknown, t(3)).await,
        Err(BusError::NotFound { .. })
    ));
    let page = s
        .ledger
        .history(s.team.id, s.conv.id, 0, 100)
        .await
        .unwrap();
    assert!(page.items.is_empty(), "refused sends write nothing");
    assert!(s.lease_all(t(4)).await.is_empty());
    let m = s.send(&s.a, "r5", "first real", t(5)).await;
    assert_eq!(m.seq, 1, "refused sends consume no seq");
}

/// The acting run gets `MessageSent`; another agent's run is `Forbidden`, an unknown one
/// `NotFound`, a sealed one `Conflict` — except for a repeat of a committed request.
pub async fn send_checks_the_acting_run<F: LedgerFixture + ?Sized>(fx: &F) {
    let s = scene(fx, REMOTE).await;
    let run = s.journal.admit(s.team.id, s.a.id, t(1)).await.unwrap();
    let sent = s
        .ledger
        .send(s.request(&s.a, "r1", "hi", Some(run)), t(2))
        .await
        .unwrap();
    let records = s.journal.read(run, Seq(1), 100).await.unwrap();
    assert_eq!(records.len(), 2);
    assert_eq!(records[1].seq, Seq(2));
    assert_eq!(records[1].at, t(2));
    assert_eq!(
        records[1].kind,
        RecordKind::MessageSent {
            conversation: s.conv.id,
            message: sent.message.id,
            seq: 1
        }
    );

    let b_run = s.journal.admit(s.team.id, s.b.id, t(1)).await.unwrap();
    assert!(matches!(
        s.ledger
            .send(s.request(&s.a, "r2", "hi", Some(b_run)), t(3))
            .await,
        Err(BusError::Forbidden { .. })
    ));
    assert!(matches!(
        s.ledger
            .send(
                s.request(&s.a, "r2", "hi", Some(crewbus_domain::RunId::new())),
                t(3)
            )
            .await,
        Err(BusError::NotFound { .. })
    ));
    s.journal
        .seal(run, RunOutcome::Succeeded, "done", t(4))
        .await
        .unwrap();
    assert!(matches!(
        s.ledger
            .send(s.request(&s.a, "r2", "hi", Some(run)), t(5))
            .await,
        Err(BusError::Conflict { .. })
    ));
    let repeat = s
        .ledger
        .send(s.request(&s.a, "r1", "hi", Some(run)), t(6))
        .await
        .unwrap();
    assert!(
        !repeat.created,
        "a committed request is answered even after the seal"
    );
    assert_eq!(repeat.message.id, sent.message.id);
    let records = s.journal.read(run, Seq(1), 100).await.unwrap();
    assert_eq!(
        records.len(),
        3,
        "admitted, sent, sealed: nothing after the seal"
    );
    assert!(records[2].kind.is_terminal());
    assert_eq!(
        s.journal.read(b_run, Seq(1), 100).await.unwrap().len(),
        1,
        "a refused send writes nothing to any run"
    );
    assert_eq!(s.first_page().await.items.len(), 1);
}

/// `messages` reads several messages at once: known ones of the team in the order asked, each
/// once; unknown and other teams' ids left out; more than `MAX_PAGE` ids `Invalid`.
pub async fn messages_are_read_in_a_batch_within_the_team<F: LedgerFixture + ?Sized>(fx: &F) {
    let s = scene(fx, REMOTE).await;
    let stored = s.send_stored(&s.a, "r1", "stored", t(0)).await;
    let second = s.send_stored(&s.b, "r2", "second", t(1)).await;
    let pending = s.send(&s.a, "r3", "pending", t(2)).await;
    let got = s
        .ledger
        .messages(
            s.team.id,
            &[second.id, Uuid::new_v4(), stored.id, pending.id, second.id],
        )
        .await
        .unwrap();
    let mut expected = Vec::new();
    for id in [second.id, stored.id, pending.id] {
        expected.push(s.message(id).await);
    }
    assert_eq!(got, expected, "as `message` answers, in order, each once");
    assert_eq!(got[2].publication, Publication::PendingPublication);
    assert!(s.ledger.messages(s.team.id, &[]).await.unwrap().is_empty());
    let other = s.other_team().await;
    assert!(
        s.ledger
            .messages(other.id, &[stored.id, second.id])
            .await
            .unwrap()
            .is_empty(),
        "another team's messages are not revealed"
    );
    let many: Vec<Uuid> = (0..crewbus_domain::MAX_PAGE + 1)
        .map(|_| Uuid::new_v4())
        .collect();
    assert!(matches!(
        s.ledger.messages(s.team.id, &many).await,
        Err(BusError::Invalid { .. })
    ));
}
