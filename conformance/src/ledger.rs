//! `Ledger` behaviours (BUS.md §5): teams, agents, conversations, send, relay slots, inbox
//! events, hand-outs, receipts, history, retention and counts.
//!
//! One async function per behaviour, generic over the fixture, each on a fresh, empty ledger,
//! asserting error variants (never text). [`ledger_behaviours`] lists them for a test target.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use crewbus_domain::{
    Absence, BusError, ConfirmOutcome, DeliveryId, HandOut, HandOutOutcome, HandOutRequest,
    HandOutSource, InboxAck, Publication, RecordKind, ReferencePayload, RunOutcome, Seq,
    SettleOutcome, Settlement, SlotOutcome, TokenHash, WakeupTarget, body_sha256,
    recipient_key_for,
};
use tokio::task::JoinSet;
use uuid::Uuid;

use crate::ledger_fixture::ledger_list;
use crate::ledger_scene::{INBOX, LEASE, REMOTE, locator_for, scene, team_name, token};
use crate::ledger_time::t;
use crate::{LedgerBehaviour, LedgerFixture};

/// Every ledger behaviour, by name.
pub fn ledger_behaviours() -> Vec<(&'static str, LedgerBehaviour)> {
    ledger_list![
        teams_are_created_listed_and_unique,
        team_backends_change_only_new_conversations,
        agents_authenticate_by_token_hash_until_revoked,
        agents_are_unique_per_team_and_token,
        conversations_hold_their_members_within_the_team,
        send_records_a_pending_message_with_an_outbox_slot,
        send_follows_the_local_backend,
        send_is_idempotent_on_request_id,
        concurrent_identical_sends_create_one_message,
        concurrent_sends_get_gap_free_seq,
        send_refuses_non_members_and_foreign_conversations,
        send_checks_the_acting_run,
        slot_is_leased_once_until_its_lease_expires,
        backing_off_slot_does_not_block_others,
        stale_generation_writes_nothing,
        expired_lease_writes_nothing,
        settle_confirmed_stores_and_enqueues_inbox_events,
        settle_retryable_backs_off,
        settle_fatal_fails_the_message_and_keeps_the_slot,
        settle_uncertain_marks_the_slot_for_reconcile,
        settle_reports_one_outcome_per_item,
        settle_applies_a_mixed_batch_in_call_order,
        inbox_events_are_leased_until_published,
        hand_out_holds_a_message_for_the_grace_period,
        hand_out_explains_what_it_does_not_issue,
        held_inbox_candidate_takes_over_the_ack,
        hand_out_and_confirm_decide_every_item_of_a_batch,
        concurrent_hand_outs_issue_each_message_once,
        confirm_is_once_per_receipt,
        confirm_checks_the_run_and_journals_delivery,
        top_up_lists_stored_undelivered_without_live_hand_out,
        wakeable_finds_waiters_with_something_to_hand_out_or_revoked,
        acknowledge_only_a_recipient_after_delivery_once,
        runs_of_another_team_are_not_found,
        receipts_are_one_per_recipient,
        messages_are_read_in_a_batch_within_the_team,
        history_stops_at_the_first_pending,
        history_explains_failed_and_retained_without_stopping,
        history_pages_by_limit,
        retention_marks_bodies_past_the_cutoff,
        counts_report_publication_and_delivery,
        limits_and_durations_are_validated,
    ]
}

// ---- teams, agents, conversations ---------------------------------------------------------------

/// A team is created with its backends, read back, listed, and its name is unique.
pub async fn teams_are_created_listed_and_unique<F: LedgerFixture + ?Sized>(fx: &F) {
    let ledger = fx.ledger();
    let name = team_name();
    let team = ledger
        .create_team(&name, REMOTE, INBOX, t(0))
        .await
        .unwrap();
    assert_eq!(
        (
            team.name.as_str(),
            team.body_backend.as_str(),
            team.inbox.as_str()
        ),
        (name.as_str(), REMOTE, INBOX)
    );
    assert_eq!(team.created_at, t(0));
    assert_eq!(ledger.team(team.id).await.unwrap(), team);
    let other = ledger
        .create_team(&team_name(), REMOTE, INBOX, t(1))
        .await
        .unwrap();
    let listed: Vec<Uuid> = ledger.teams().await.unwrap().iter().map(|t| t.id).collect();
    assert!(listed.contains(&team.id) && listed.contains(&other.id));
    assert!(matches!(
        ledger.create_team(&name, REMOTE, INBOX, t(2)).await,
        Err(BusError::Conflict { .. })
    ));
    assert!(matches!(
        ledger.create_team("", REMOTE, INBOX, t(2)).await,
        Err(BusError::Invalid { .. })
    ));
    assert!(matches!(
        ledger.create_team(&team_name(), "", INBOX, t(2)).await,
        Err(BusError::Invalid { .. })
    ));
    assert!(matches!(
        ledger.team(Uuid::new_v4()).await,
        Err(BusError::NotFound { .. })
    ));
    assert_eq!(ledger.tenant(), fx.journal().tenant());
}

/// Changing a team's backends affects new conversations only: a conversation keeps its backend.
pub async fn team_backends_change_only_new_conversations<F: LedgerFixture + ?Sized>(fx: &F) {
    let s = scene(fx, REMOTE).await;
    let changed = s
        .ledger
        .set_team_backends(s.team.id, "other-bodies", "other-inbox")
        .await
        .unwrap();
    assert_eq!(changed.body_backend, "other-bodies");
    assert_eq!(changed.inbox, "other-inbox");
    assert_eq!(s.ledger.team(s.team.id).await.unwrap(), changed);
    let old = s.ledger.conversation(s.team.id, s.conv.id).await.unwrap();
    assert_eq!(old.backend, REMOTE);
    let new = s
        .ledger
        .create_conversation(s.team.id, s.a.id, "new", &[s.b.id], t(1))
        .await
        .unwrap();
    assert_eq!(new.backend, "other-bodies");
    let m = s.send(&s.a, "r1", "old conversation", t(2)).await;
    assert_eq!(m.backend, REMOTE);
    assert!(matches!(
        s.ledger.set_team_backends(Uuid::new_v4(), "x", "y").await,
        Err(BusError::NotFound { .. })
    ));
}

/// An agent is found by its token hash until it is revoked; revoking is idempotent.
pub async fn agents_authenticate_by_token_hash_until_revoked<F: LedgerFixture + ?Sized>(fx: &F) {
    let ledger = fx.ledger();
    let team = ledger
        .create_team(&team_name(), REMOTE, INBOX, t(0))
        .await
        .unwrap();
    let hash = TokenHash::of("a secret token");
    let agent = ledger
        .create_agent(team.id, "ana", hash, t(1))
        .await
        .unwrap();
    assert_eq!(agent.team, team.id);
    assert_eq!(agent.recipient_key, recipient_key_for(agent.id));
    assert_eq!(agent.token_hash, hash);
    assert!(!agent.revoked());
    assert_eq!(ledger.agent_by_token(&hash).await.unwrap(), agent);
    assert_eq!(ledger.agent(team.id, agent.id).await.unwrap(), agent);
    assert!(matches!(
        ledger.agent_by_token(&TokenHash::of("unknown")).await,
        Err(BusError::Unauthenticated)
    ));
    let revoked = ledger.revoke_agent(team.id, agent.id, t(2)).await.unwrap();
    assert_eq!(revoked.revoked_at, Some(t(2)));
    let again = ledger.revoke_agent(team.id, agent.id, t(3)).await.unwrap();
    assert_eq!(
        again.revoked_at,
        Some(t(2)),
        "the first revocation time stays"
    );
    assert!(matches!(
        ledger.agent_by_token(&hash).await,
        Err(BusError::Unauthenticated)
    ));
    let listed = ledger.agents(team.id).await.unwrap();
    assert_eq!(listed.len(), 1);
    assert!(listed[0].revoked(), "revoked agents are still listed");
}

/// Agent names are unique per team, token hashes unique everywhere; another team's agent is not
/// found.
pub async fn agents_are_unique_per_team_and_token<F: LedgerFixture + ?Sized>(fx: &F) {
    let ledger = fx.ledger();
    let one = ledger
        .create_team(&team_name(), REMOTE, INBOX, t(0))
        .await
        .unwrap();
    let two = ledger
        .create_team(&team_name(), REMOTE, INBOX, t(0))
        .await
        .unwrap();
    let hash = token();
    let ana = ledger
        .create_agent(one.id, "ana", hash, t(0))
        .await
        .unwrap();
    assert!(matches!(
        ledger.create_agent(one.id, "ana", token(), t(0)).await,
        Err(BusError::Conflict { .. })
    ));
    assert!(matches!(
        ledger.create_agent(two.id, "bo", hash, t(0)).await,
        Err(BusError::Conflict { .. })
    ));
    let ana_two = ledger
        .create_agent(two.id, "ana", token(), t(0))
        .await
        .unwrap();
    assert_ne!(
        ana.id, ana_two.id,
        "the same name in another team is another agent"
    );
    assert!(matches!(
        ledger.agent(two.id, ana.id).await,
        Err(BusError::NotFound { .. })
    ));
    assert!(matches!(
        ledger
            .create_agent(Uuid::new_v4(), "x", token(), t(0))
            .await,
        Err(BusError::NotFound { .. })
    ));
    assert!(matches!(
        ledger.create_agent(one.id, " ", token(), t(0)).await,
        Err(BusError::Invalid { .. })
    ));
}

/// A conversation holds its creator and members (deduplicated), is listed for its members only,
/// takes only active agents of its team, and is not found from another team.
pub async fn conversations_hold_their_members_within_the_team<F: LedgerFixture + ?Sized>(fx: &F) {
    let s = scene(fx, REMOTE).await;
    assert_eq!(s.conv.team, s.team.id);
    assert_eq!(s.conv.backend, REMOTE);
    assert_eq!(s.conv.created_at, t(0));
    let members: HashSet<Uuid> = s.conv.members.iter().map(|m| m.agent).collect();
    assert_eq!(members, HashSet::from([s.a.id, s.b.id, s.c.id]));
    for m in &s.conv.members {
        assert_eq!(m.recipient_key, recipient_key_for(m.agent));
    }
    let pair = s
        .ledger
        .create_conversation(s.team.id, s.a.id, "pair", &[s.b.id, s.b.id, s.a.id], t(1))
        .await
        .unwrap();
    assert_eq!(
        pair.members.len(),
        2,
        "duplicates and the creator are listed once"
    );
    assert_eq!(
        s.ledger.conversation(s.team.id, pair.id).await.unwrap(),
        pair
    );
    let for_c: Vec<Uuid> = s
        .ledger
        .conversations_for(s.team.id, s.c.id)
        .await
        .unwrap()
        .iter()
        .map(|c| c.id)
        .collect();
    assert_eq!(for_c, vec![s.conv.id]);
    let for_a: Vec<Uuid> = s
        .ledger
        .conversations_for(s.team.id, s.a.id)
        .await
        .unwrap()
        .iter()
        .map(|c| c.id)
        .collect();
    assert_eq!(for_a, vec![s.conv.id, pair.id], "oldest first");
    let all: Vec<Uuid> = s
        .ledger
        .conversations(s.team.id)
        .await
        .unwrap()
        .iter()
        .map(|c| c.id)
        .collect();
    assert_eq!(all, vec![s.conv.id, pair.id]);
    assert!(matches!(
        s.ledger.conversations(Uuid::new_v4()).await,
        Err(BusError::NotFound { .. })
    ));

    let other = s
        .ledger
        .create_team(&team_name(), REMOTE, INBOX, t(0))
        .await
        .unwrap();
    let stranger = s
        .ledger
        .create_agent(other.id, "stranger", token(), t(0))
        .await
        .unwrap();
    assert!(matches!(
        s.ledger
            .create_conversation(s.team.id, s.a.id, "x", &[stranger.id], t(1))
            .await,
        Err(BusError::Invalid { .. })
    ));
    assert!(matches!(
        s.ledger.conversation(other.id, s.conv.id).await,
        Err(BusError::NotFound { .. })
    ));
    s.ledger
        .revoke_agent(s.team.id, s.c.id, t(2))
        .await
        .unwrap();
    assert!(matches!(
        s.ledger
            .create_conversation(s.team.id, s.a.id, "x", &[s.c.id], t(3))
            .await,
        Err(BusError::Invalid { .. })
    ));
    assert!(matches!(
        s.ledger
            .create_conversation(s.team.id, s.a.id, "", &[s.b.id], t(3))
            .await,
        Err(BusError::Invalid { .. })
    ));
}

// ---- send ----------------------------------------------------------------------------------------

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
    assert!(
        events.is_empty(),
        "no inbox event before the body is stored"
    );
}

/// With the ledger's co-located backend the message is stored in the send itself (no slot, inbox
/// events at once); with any other backend it goes through the outbox.
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
/// writes nothing; with another body it is `Conflict`. Request ids are per conversation.
pub async fn send_is_idempotent_on_request_id<F: LedgerFixture + ?Sized>(fx: &F) {
    let s = scene(fx, REMOTE).await;
    let first = s.send(&s.a, "same", "body", t(1)).await;
    let again = s
        .ledger
        .send(s.request(&s.a, "same", "body", None), t(2))
        .await
        .unwrap();
    assert!(!again.created);
    assert_eq!(again.message, first);
    let slots = s.lease_all(t(3)).await;
    assert_eq!(slots.len(), 1, "a repeat enqueues no second slot");
    s.confirm_slot(&slots[&first.id], t(3)).await;
    let later = s
        .ledger
        .send(s.request(&s.a, "same", "body", None), t(4))
        .await
        .unwrap();
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
    let page = s
        .ledger
        .history(s.team.id, s.conv.id, 0, 100)
        .await
        .unwrap();
    assert_eq!(page.items.len(), 1);
    assert!(matches!(
        s.ledger
            .send(s.request(&s.a, "bad id", "body", None), t(7))
            .await,
        Err(BusError::Invalid { .. })
    ));
}

/// Concurrent identical requests create one message.
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
    let page = s
        .ledger
        .history(s.team.id, s.conv.id, 0, 100)
        .await
        .unwrap();
    assert_eq!(page.items.len(), 1);
    assert_eq!(s.lease_all(t(2)).await.len(), 1);
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
    let other = s
        .ledger
        .create_team(&team_name(), REMOTE, INBOX, t(0))
        .await
        .unwrap();
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
    let page = s
        .ledger
        .history(s.team.id, s.conv.id, 0, 100)
        .await
        .unwrap();
    assert_eq!(page.items.len(), 1);
}

// ---- relay: slots ---------------------------------------------------------------------------------

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
/// slot and enqueues one inbox event per recipient; a second settlement of it is stale.
pub async fn settle_confirmed_stores_and_enqueues_inbox_events<F: LedgerFixture + ?Sized>(fx: &F) {
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

// ---- reference worker ----------------------------------------------------------------------------

/// Inbox events are leased (hidden until the lease ends), offered again after it, and never again
/// once marked published.
pub async fn inbox_events_are_leased_until_published<F: LedgerFixture + ?Sized>(fx: &F) {
    let s = scene(fx, REMOTE).await;
    let m = s.send_stored(&s.a, "r1", "hi", t(0)).await;
    let events = s.ledger.lease_inbox_events(t(1), LEASE, 100).await.unwrap();
    assert_eq!(events.len(), 2);
    assert!(events.iter().all(|e| e.message == m.id));
    assert!(
        s.ledger
            .lease_inbox_events(t(2), LEASE, 100)
            .await
            .unwrap()
            .is_empty()
    );
    let again = s.ledger.lease_inbox_events(t(31), LEASE, 1).await.unwrap();
    assert_eq!(again.len(), 1, "limit respected");
    let ids: Vec<Uuid> = events.iter().map(|e| e.id).collect();
    assert!(ids.contains(&again[0].id), "the same event, same id");
    let changed = s
        .ledger
        .mark_published(&[ids[0], ids[1], ids[0], Uuid::new_v4()], t(32))
        .await
        .unwrap();
    assert_eq!(changed, 2);
    assert_eq!(s.ledger.mark_published(&ids, t(33)).await.unwrap(), 0);
    assert!(
        s.ledger
            .lease_inbox_events(t(1000), LEASE, 100)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        s.ledger.counts(t(1000)).await.unwrap().pending_inbox_events,
        0
    );
}

// ---- delivery --------------------------------------------------------------------------------------

fn from_ledger(message: Uuid) -> HandOutRequest {
    HandOutRequest {
        message,
        source: HandOutSource::Ledger,
    }
}

fn from_inbox(message: Uuid, ack_subject: &str, deliveries: u64) -> HandOutRequest {
    HandOutRequest {
        message,
        source: HandOutSource::Inbox {
            event_id: Uuid::new_v4(),
            ack: InboxAck {
                inbox: INBOX.to_owned(),
                ack_subject: ack_subject.to_owned(),
            },
            deliveries,
        },
    }
}

fn issued(outcome: &HandOutOutcome) -> HandOut {
    match outcome {
        HandOutOutcome::Issued(h) => h.clone(),
        other => panic!("expected Issued, got {other:?}"),
    }
}

const GRACE: Duration = Duration::from_secs(60);

/// A message handed out and not confirmed is held for the grace period (also within one batch),
/// then handed out again marked redelivered.
pub async fn hand_out_holds_a_message_for_the_grace_period<F: LedgerFixture + ?Sized>(fx: &F) {
    let s = scene(fx, REMOTE).await;
    let m = s.send_stored(&s.a, "r1", "hi", t(0)).await;
    let out = s
        .ledger
        .hand_out(
            s.team.id,
            s.b.id,
            &[from_ledger(m.id), from_ledger(m.id)],
            GRACE,
            t(10),
        )
        .await
        .unwrap();
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
    let held = s
        .ledger
        .hand_out(s.team.id, s.b.id, &[from_ledger(m.id)], GRACE, t(69))
        .await
        .unwrap();
    assert!(matches!(held[0], HandOutOutcome::Held { .. }));
    let c_out = s
        .ledger
        .hand_out(s.team.id, s.c.id, &[from_ledger(m.id)], GRACE, t(69))
        .await
        .unwrap();
    assert!(!issued(&c_out[0]).redelivered, "hold is per recipient");
    let later = s
        .ledger
        .hand_out(s.team.id, s.b.id, &[from_ledger(m.id)], GRACE, t(70))
        .await
        .unwrap();
    let second = issued(&later[0]);
    assert!(second.redelivered);
    assert_ne!(second.delivery, first.delivery);
    let counted = s
        .ledger
        .hand_out(
            s.team.id,
            s.c.id,
            &[from_inbox(m.id, "ack-x", 2)],
            GRACE,
            t(1000),
        )
        .await
        .unwrap();
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
        .ledger
        .hand_out(
            s.team.id,
            s.b.id,
            &[
                from_ledger(Uuid::new_v4()),
                from_ledger(pending.id),
                from_ledger(stored.id),
            ],
            GRACE,
            t(2),
        )
        .await
        .unwrap();
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
    let own = s
        .ledger
        .hand_out(s.team.id, s.a.id, &[from_ledger(stored.id)], GRACE, t(2))
        .await
        .unwrap();
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
        .ledger
        .hand_out(
            s.team.id,
            s.b.id,
            &[from_inbox(stored.id, "ack-1", 2)],
            GRACE,
            t(4),
        )
        .await
        .unwrap();
    assert_eq!(
        after[0],
        HandOutOutcome::AlreadyDelivered { message: stored.id }
    );
    let other = s
        .ledger
        .create_team(&team_name(), REMOTE, INBOX, t(0))
        .await
        .unwrap();
    let stranger = s
        .ledger
        .create_agent(other.id, "x", token(), t(0))
        .await
        .unwrap();
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

fn out_id(outcome: &HandOutOutcome) -> Uuid {
    match outcome {
        HandOutOutcome::Unknown { message }
        | HandOutOutcome::AlreadyDelivered { message }
        | HandOutOutcome::Held { message, .. } => *message,
        HandOutOutcome::Issued(h) => h.message,
    }
}

/// A held inbox candidate hands its (newer) ack subject to the live hand-out, which the confirm
/// then returns.
pub async fn held_inbox_candidate_takes_over_the_ack<F: LedgerFixture + ?Sized>(fx: &F) {
    let s = scene(fx, REMOTE).await;
    let m = s.send_stored(&s.a, "r1", "hi", t(0)).await;
    let out = s
        .ledger
        .hand_out(
            s.team.id,
            s.b.id,
            &[from_inbox(m.id, "ack-1", 1)],
            GRACE,
            t(1),
        )
        .await
        .unwrap();
    let h = issued(&out[0]);
    let held = s
        .ledger
        .hand_out(
            s.team.id,
            s.b.id,
            &[from_inbox(m.id, "ack-2", 2)],
            GRACE,
            t(2),
        )
        .await
        .unwrap();
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
        .ledger
        .hand_out(
            s.team.id,
            s.b.id,
            &[from_ledger(m[1]), from_ledger(m[2])],
            GRACE,
            t(1),
        )
        .await
        .unwrap();
    let held_m0 = s
        .ledger
        .hand_out(
            s.team.id,
            s.b.id,
            &[from_inbox(m[0], "ack-0a", 1)],
            GRACE,
            t(90),
        )
        .await
        .unwrap();
    let live = issued(&held_m0[0]);
    s.ledger
        .confirm(s.team.id, s.b.id, &[issued(&first[0]).delivery], None, t(2))
        .await
        .unwrap();
    let unknown = Uuid::new_v4();
    let out = s
        .ledger
        .hand_out(
            s.team.id,
            s.b.id,
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
            GRACE,
            t(100),
        )
        .await
        .unwrap();
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
    let second = issued(
        &s.ledger
            .hand_out(s.team.id, s.b.id, &[from_ledger(m.id)], GRACE, t(100))
            .await
            .unwrap()[0],
    );
    let c_hand_out = issued(
        &s.ledger
            .hand_out(s.team.id, s.c.id, &[from_ledger(m.id)], GRACE, t(100))
            .await
            .unwrap()[0],
    );
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
    let h = issued(
        &s.ledger
            .hand_out(s.team.id, s.b.id, &[from_ledger(m.id)], GRACE, t(1))
            .await
            .unwrap()[0],
    );
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
    let h1 = issued(
        &s.ledger
            .hand_out(s.team.id, s.b.id, &[from_ledger(m1.id)], GRACE, t(10))
            .await
            .unwrap()[0],
    );
    let h2 = issued(
        &s.ledger
            .hand_out(s.team.id, s.b.id, &[from_ledger(m2.id)], GRACE, t(10))
            .await
            .unwrap()[0],
    );
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
        async move { sorted(ledger.wakeable(&targets, before, at).await.unwrap()) }
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
        .ledger
        .hand_out(
            s.team.id,
            s.b.id,
            &[from_ledger(first.id), from_ledger(m.id)],
            GRACE,
            t(10),
        )
        .await
        .unwrap()
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
            .wakeable(&vec![b; crewbus_domain::MAX_PAGE + 1], t(1), t(1))
            .await,
        Err(BusError::Invalid { .. })
    ));
}

/// A run of another team is `NotFound` on send, confirm and acknowledge — the same answer as a
/// run id that never existed, so another team's ids are never confirmed to exist — also when
/// that run was admitted for the acting agent's own id. Another agent of the same team stays
/// `Forbidden`. Refused calls write nothing, to either run.
pub async fn runs_of_another_team_are_not_found<F: LedgerFixture + ?Sized>(fx: &F) {
    let s = scene(fx, REMOTE).await;
    let other = s
        .ledger
        .create_team(&team_name(), REMOTE, INBOX, t(0))
        .await
        .unwrap();
    let x = s
        .ledger
        .create_agent(other.id, "x", token(), t(0))
        .await
        .unwrap();
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
    let h = issued(
        &s.ledger
            .hand_out(s.team.id, s.b.id, &[from_ledger(m.id)], GRACE, t(3))
            .await
            .unwrap()[0],
    );
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
    let h = issued(
        &s.ledger
            .hand_out(s.team.id, s.b.id, &[from_ledger(m.id)], GRACE, t(2))
            .await
            .unwrap()[0],
    );
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
    let hc = issued(
        &s.ledger
            .hand_out(s.team.id, s.c.id, &[from_ledger(m.id)], GRACE, t(7))
            .await
            .unwrap()[0],
    );
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
    let other = s
        .ledger
        .create_team(&team_name(), REMOTE, INBOX, t(0))
        .await
        .unwrap();
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
    let other = s
        .ledger
        .create_team(&team_name(), REMOTE, INBOX, t(0))
        .await
        .unwrap();
    assert!(matches!(
        s.ledger.receipts(other.id, m.id).await,
        Err(BusError::NotFound { .. })
    ));
    assert!(matches!(
        s.ledger.message(other.id, m.id).await,
        Err(BusError::NotFound { .. })
    ));
}

// ---- history ---------------------------------------------------------------------------------------

/// A page ends with the first pending message (an explained absence), and the next cursor is its
/// `seq − 1`, so it is read again once stored.
pub async fn history_stops_at_the_first_pending<F: LedgerFixture + ?Sized>(fx: &F) {
    let s = scene(fx, REMOTE).await;
    let m1 = s.send_stored(&s.a, "r1", "one", t(0)).await;
    let m2 = s.send(&s.a, "r2", "two", t(1)).await;
    let held = s.lease_all(t(1)).await.remove(&m2.id).unwrap();
    let m3 = s.send(&s.a, "r3", "three", t(2)).await;
    let s3 = s.lease_all(t(2)).await.remove(&m3.id).unwrap();
    s.confirm_slot(&s3, t(2)).await;

    let page = s
        .ledger
        .history(s.team.id, s.conv.id, 0, 100)
        .await
        .unwrap();
    let seqs: Vec<u64> = page.items.iter().map(|i| i.message.seq).collect();
    assert_eq!(seqs, vec![1, 2]);
    assert_eq!(page.items[0].absence, None);
    assert_eq!(page.items[0].message.id, m1.id);
    assert_eq!(page.items[1].absence, Some(Absence::Pending));
    assert_eq!(page.next_after_seq, 1);

    s.confirm_slot(&held, t(3)).await;
    let next = s
        .ledger
        .history(s.team.id, s.conv.id, page.next_after_seq, 100)
        .await
        .unwrap();
    let seqs: Vec<u64> = next.items.iter().map(|i| i.message.seq).collect();
    assert_eq!(seqs, vec![2, 3]);
    assert!(next.items.iter().all(|i| i.absence.is_none()));
    assert_eq!(next.next_after_seq, 3);
    let empty = s
        .ledger
        .history(s.team.id, s.conv.id, 3, 100)
        .await
        .unwrap();
    assert!(empty.items.is_empty());
    assert_eq!(empty.next_after_seq, 3);
}

/// Failed and retained messages are explained absences that do not stop the cursor.
pub async fn history_explains_failed_and_retained_without_stopping<F: LedgerFixture + ?Sized>(
    fx: &F,
) {
    let s = scene(fx, REMOTE).await;
    let m1 = s.send(&s.a, "r1", "fails", t(0)).await;
    let slot = s.lease_all(t(0)).await.remove(&m1.id).unwrap();
    s.settle(
        &slot,
        SlotOutcome::Fatal {
            error: BusError::TooLarge { size: 2, limit: 1 },
        },
        t(0),
    )
    .await;
    s.send_stored(&s.a, "r2", "retained", t(1)).await;
    s.ledger
        .mark_retained(s.team.id, REMOTE, t(2), t(5))
        .await
        .unwrap();
    s.send_stored(&s.a, "r3", "kept", t(10)).await;
    let page = s
        .ledger
        .history(s.team.id, s.conv.id, 0, 100)
        .await
        .unwrap();
    let absences: Vec<Option<Absence>> = page.items.iter().map(|i| i.absence).collect();
    assert_eq!(
        absences,
        vec![Some(Absence::Failed), Some(Absence::Retained), None]
    );
    assert_eq!(page.next_after_seq, 3);
}

/// Pages hold at most `limit` items; a bad limit is `Invalid`; another team's conversation is
/// `NotFound`.
pub async fn history_pages_by_limit<F: LedgerFixture + ?Sized>(fx: &F) {
    let s = scene(fx, REMOTE).await;
    for i in 1..=5 {
        s.send(&s.a, &format!("r{i}"), "x", t(i)).await;
    }
    s.store_all(t(10)).await;
    let mut cursor = 0;
    let mut seen = Vec::new();
    loop {
        let page = s
            .ledger
            .history(s.team.id, s.conv.id, cursor, 2)
            .await
            .unwrap();
        if page.items.is_empty() {
            break;
        }
        assert!(page.items.len() <= 2);
        seen.extend(page.items.iter().map(|i| i.message.seq));
        cursor = page.next_after_seq;
    }
    assert_eq!(seen, vec![1, 2, 3, 4, 5]);
    for bad in [0, crewbus_domain::MAX_PAGE + 1] {
        assert!(matches!(
            s.ledger.history(s.team.id, s.conv.id, 0, bad).await,
            Err(BusError::Invalid { .. })
        ));
    }
    let other = s
        .ledger
        .create_team(&team_name(), REMOTE, INBOX, t(0))
        .await
        .unwrap();
    assert!(matches!(
        s.ledger.history(other.id, s.conv.id, 0, 10).await,
        Err(BusError::NotFound { .. })
    ));
}

// ---- retention, counts, validation ----------------------------------------------------------------

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

/// Counts: pending (and the oldest's age), uncertain, failed, pending inbox events, deliveries,
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
    let h = issued(
        &s.ledger
            .hand_out(s.team.id, s.b.id, &[from_ledger(stored.id)], GRACE, t(26))
            .await
            .unwrap()[0],
    );
    s.ledger
        .confirm(s.team.id, s.b.id, &[h.delivery], None, t(27))
        .await
        .unwrap();
    let counts = s.ledger.counts(t(28)).await.unwrap();
    assert_eq!((counts.deliveries, counts.undelivered), (1, 1));
}

/// Limits out of range, batches above `MAX_PAGE` and zero leases are `Invalid`; empty batches
/// are answered with empty results.
pub async fn limits_and_durations_are_validated<F: LedgerFixture + ?Sized>(fx: &F) {
    let s = scene(fx, REMOTE).await;
    let ledger = Arc::clone(&s.ledger);
    let too_many = crewbus_domain::MAX_PAGE + 1;
    let settlements: Vec<Settlement> = (0..too_many)
        .map(|_| Settlement {
            slot: Uuid::new_v4(),
            generation: 1,
            outcome: SlotOutcome::Fatal {
                error: BusError::forbidden("x"),
            },
        })
        .collect();
    assert!(matches!(
        ledger.settle(&settlements, t(0)).await,
        Err(BusError::Invalid { .. })
    ));
    let ids: Vec<Uuid> = (0..too_many).map(|_| Uuid::new_v4()).collect();
    assert!(matches!(
        ledger.mark_published(&ids, t(0)).await,
        Err(BusError::Invalid { .. })
    ));
    let requests: Vec<HandOutRequest> = ids.iter().map(|id| from_ledger(*id)).collect();
    assert!(matches!(
        ledger
            .hand_out(s.team.id, s.b.id, &requests, GRACE, t(0))
            .await,
        Err(BusError::Invalid { .. })
    ));
    let deliveries: Vec<DeliveryId> = ids.iter().map(|id| DeliveryId(*id)).collect();
    assert!(matches!(
        ledger
            .confirm(s.team.id, s.b.id, &deliveries, None, t(0))
            .await,
        Err(BusError::Invalid { .. })
    ));
    assert!(ledger.settle(&[], t(0)).await.unwrap().is_empty());
    assert_eq!(ledger.mark_published(&[], t(0)).await.unwrap(), 0);
    assert!(
        ledger
            .hand_out(s.team.id, s.b.id, &[], GRACE, t(0))
            .await
            .unwrap()
            .is_empty()
    );
    assert!(
        ledger
            .confirm(s.team.id, s.b.id, &[], None, t(0))
            .await
            .unwrap()
            .is_empty()
    );
    for limit in [0, crewbus_domain::MAX_PAGE + 1] {
        assert!(matches!(
            ledger.lease_slots(t(0), LEASE, limit).await,
            Err(BusError::Invalid { .. })
        ));
        assert!(matches!(
            ledger.lease_inbox_events(t(0), LEASE, limit).await,
            Err(BusError::Invalid { .. })
        ));
        assert!(matches!(
            ledger.retention_due(t(0), limit).await,
            Err(BusError::Invalid { .. })
        ));
    }
    assert!(matches!(
        ledger.lease_slots(t(0), Duration::ZERO, 10).await,
        Err(BusError::Invalid { .. })
    ));
    assert!(matches!(
        ledger.lease_inbox_events(t(0), Duration::ZERO, 10).await,
        Err(BusError::Invalid { .. })
    ));
}
