//! Unit tests of the use cases against mockall mocks of the ports: receipt before ack (and no
//! ack when the commit fails), relay fencing and outcomes, and the fetch top-up; the token cache
//! in [`token_cache`].

use std::sync::Arc;
use std::time::Duration;

use chrono::TimeZone;
use crewbus_domain::{
    Agent, BusError, ConfirmOutcome, DateTime, DeliveryId, Envelope, HandOut, HandOutOutcome,
    HandOutSource, InboxAck, InboxRef, LeasedSlot, Locator, Message, Publication, Published,
    ReferencePayload, SettleOutcome, Settlement, SlotOutcome, Team, TokenHash, Utc, Uuid,
};
use crewbus_ports::{
    Clock, Inbox, MessagingBackend, MockBackends, MockInbox, MockLedger, MockMessagingBackend,
};
use mockall::Sequence;
use mockall::predicate::eq;

use crate::usecases::bus::{Bus, BusSettings, Ports};

struct Fixed(DateTime<Utc>);
impl Clock for Fixed {
    fn now(&self) -> DateTime<Utc> {
        self.0
    }
}

fn t0() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 1, 1, 12, 0, 0).unwrap()
}

fn bus(ledger: MockLedger, backends: MockBackends) -> Bus {
    let mut settings = BusSettings {
        topup_after: Duration::from_secs(2),
        ..BusSettings::default()
    };
    settings.backoff.max_attempts = 3;
    Bus::new(
        Ports {
            ledger: Arc::new(ledger),
            backends: Arc::new(backends),
            journal: Arc::new(crewbus_ports::MockJournal::new()),
            clock: Arc::new(Fixed(t0())),
            broker: None,
            wakeups: Arc::new(crewbus_memory::MemoryWakeups::new()),
            operators: Arc::new(crewbus_ports::MockOperators::new()),
            oversight: Arc::new(crewbus_ports::MockOversight::new()),
            leases: Arc::new(crewbus_ports::MockLeases::new()),
            send_allowance: None,
            search: Arc::new(crewbus_ports::MockSearch::new()),
            feed: Arc::new(crewbus_memory::MemoryFeed::new()),
            push_store: Arc::new(crewbus_ports::MockPushStore::new()),
        },
        settings,
    )
}

fn agent(team: Uuid) -> Agent {
    Agent {
        id: Uuid::new_v4(),
        team,
        name: "alice".into(),
        recipient_key: "alice".into(),
        token_hash: TokenHash::of("t"),
        created_at: t0(),
        revoked_at: None,
        kind: crewbus_domain::AgentKind::Agent,
    }
}

fn team(id: Uuid) -> Team {
    Team {
        id,
        name: "t".into(),
        body_backend: "memory".into(),
        inbox: "memory".into(),
        created_at: t0(),
    }
}

fn ack(subject: &str) -> InboxAck {
    InboxAck {
        inbox: "memory".into(),
        ack_subject: subject.into(),
    }
}

// ---- confirm: receipt committed strictly before the ack; no ack when the commit fails ------

#[tokio::test]
async fn confirm_commits_the_receipt_then_acks() {
    let team_id = Uuid::new_v4();
    let a = agent(team_id);
    let d = DeliveryId(Uuid::new_v4());
    let mut seq = Sequence::new();
    let mut ledger = MockLedger::new();
    let message = Uuid::new_v4();
    ledger
        .expect_confirm()
        .times(1)
        .in_sequence(&mut seq)
        .returning(move |_, _, _, _, _| {
            Ok(vec![ConfirmOutcome::Confirmed {
                message,
                ack: Some(ack("ack-1")),
            }])
        });
    let mut inbox = MockInbox::new();
    inbox
        .expect_ack_reference()
        .with(eq("ack-1"))
        .times(1)
        .in_sequence(&mut seq)
        .returning(|_| Ok(()));
    let backends = serving_inbox(MockBackends::new(), inbox);
    let out = bus(ledger, backends).confirm(&a, &[d], None).await.unwrap();
    assert!(matches!(out[0], ConfirmOutcome::Confirmed { .. }));
}

#[tokio::test]
async fn no_ack_when_the_commit_fails() {
    let a = agent(Uuid::new_v4());
    let mut ledger = MockLedger::new();
    ledger
        .expect_confirm()
        .times(1)
        .returning(|_, _, _, _, _| Err(BusError::unavailable("ledger")));
    let mut inbox = MockInbox::new();
    inbox.expect_ack_reference().times(0);
    let backends = serving_inbox(MockBackends::new(), inbox);
    let err = bus(ledger, backends)
        .confirm(&a, &[DeliveryId(Uuid::new_v4())], None)
        .await
        .unwrap_err();
    assert!(matches!(err, BusError::Unavailable { .. }));
}

#[tokio::test]
async fn a_second_confirm_acks_again_and_an_ack_failure_does_not_fail_the_confirm() {
    let a = agent(Uuid::new_v4());
    let mut ledger = MockLedger::new();
    let m = Uuid::new_v4();
    ledger.expect_confirm().returning(move |_, _, ids, _, _| {
        Ok(ids
            .iter()
            .map(|_| ConfirmOutcome::AlreadyConfirmed {
                message: m,
                ack: Some(ack("ack-2")),
            })
            .collect())
    });
    let mut inbox = MockInbox::new();
    inbox
        .expect_ack_reference()
        .times(1)
        .returning(|_| Err(BusError::timeout("ack")));
    let backends = serving_inbox(MockBackends::new(), inbox);
    let b = bus(ledger, backends);
    let out = b
        .confirm(&a, &[DeliveryId(Uuid::new_v4())], None)
        .await
        .unwrap();
    assert!(matches!(out[0], ConfirmOutcome::AlreadyConfirmed { .. }));
    assert_eq!(b.metrics().inbox_ack_failures.get(), 1);
}

#[tokio::test]
async fn confirm_refuses_an_empty_list_without_touching_the_ledger() {
    let ledger = MockLedger::new(); // no expectations: any call panics
    let err = bus(ledger, MockBackends::new())
        .confirm(&agent(Uuid::new_v4()), &[], None)
        .await
        .unwrap_err();
    assert!(matches!(err, BusError::Invalid { .. }));
}

// ---- relay --------------------------------------------------------------------------------

fn slot(team: Uuid, attempts: u32, uncertain: bool) -> LeasedSlot {
    LeasedSlot {
        slot: Uuid::new_v4(),
        generation: 7,
        backend: "memory".into(),
        envelope: Envelope {
            message_id: Uuid::new_v4(),
            conversation_id: Uuid::new_v4(),
            team_id: team,
            body: "hi".into(),
            publish_key: Uuid::new_v4(),
        },
        attempts,
        uncertain,
        leased_until: t0() + chrono::Duration::seconds(30),
    }
}

/// `backends` hands out `inbox` for every team.
fn serving_inbox(mut backends: MockBackends, inbox: MockInbox) -> MockBackends {
    let inbox: Arc<dyn Inbox> = Arc::new(inbox);
    backends
        .expect_inbox()
        .returning(move |_, _| Ok(inbox.clone()));
    backends
}

/// `ledger` leases `slots` on every call.
fn leasing(ledger: &mut MockLedger, slots: Vec<LeasedSlot>) {
    ledger
        .expect_lease_slots()
        .returning(move |_, _, _| Ok(slots.clone()));
}

/// `ledger` expects one settle, of settlements `check` accepts, and applies them all.
fn settles_once(ledger: &mut MockLedger, check: fn(&[Settlement]) -> bool) {
    ledger
        .expect_settle()
        .times(1)
        .withf(move |s, _| check(s))
        .returning(|s, _| Ok(vec![SettleOutcome::Applied; s.len()]));
}

fn backends_with(body: MockMessagingBackend) -> MockBackends {
    let body: Arc<dyn MessagingBackend> = Arc::new(body);
    let mut backends = MockBackends::new();
    backends
        .expect_body_backend()
        .returning(move |_, _| Ok(body.clone()));
    backends
}

#[tokio::test]
async fn relay_settles_with_the_leased_generation_and_counts_stale_settlements() {
    let team = Uuid::new_v4();
    let slots = vec![slot(team, 0, false), slot(team, 0, false)];
    let ids: Vec<Uuid> = slots.iter().map(|s| s.slot).collect();
    let mut ledger = MockLedger::new();
    let leased = slots.clone();
    ledger
        .expect_lease_slots()
        .times(1)
        .returning(move |_, _, _| Ok(leased.clone()));
    let expected = ids.clone();
    ledger
        .expect_settle()
        .times(1)
        .withf(move |s, _| {
            s.len() == 2
                && s.iter()
                    .zip(&expected)
                    .all(|(s, id)| s.slot == *id && s.generation == 7)
                && s.iter()
                    .all(|s| matches!(s.outcome, SlotOutcome::Confirmed { .. }))
        })
        // the second lease expired meanwhile: the ledger fences it
        .returning(|_, _| Ok(vec![SettleOutcome::Applied, SettleOutcome::Stale]));
    let mut body = MockMessagingBackend::new();
    body.expect_publish()
        .times(2)
        .returning(|_| Published::Confirmed {
            locator: Locator::new("memory", "1"),
            duplicate: false,
        });
    let pass = bus(ledger, backends_with(body)).relay_pass().await.unwrap();
    assert_eq!((pass.leased, pass.confirmed, pass.stale), (2, 1, 1));
}

#[tokio::test]
async fn relay_backs_off_on_retryable_and_reconciles_uncertain_slots() {
    let team = Uuid::new_v4();
    let retry = slot(team, 0, false);
    let unsure = slot(team, 1, true);
    let unsure_key = unsure.envelope.publish_key;
    let mut ledger = MockLedger::new();
    leasing(&mut ledger, vec![retry.clone(), unsure.clone()]);
    settles_once(&mut ledger, |s| {
        matches!(&s[0].outcome, SlotOutcome::Retryable { next_attempt_at, .. } if *next_attempt_at > t0())
            && matches!(&s[1].outcome, SlotOutcome::Confirmed { .. })
    });
    let mut body = MockMessagingBackend::new();
    // only the fresh slot is published; the uncertain one is reconciled instead
    body.expect_publish()
        .times(1)
        .returning(|_| Published::Retryable(BusError::unavailable("broker")));
    body.expect_reconcile()
        .times(1)
        .withf(move |e| e.publish_key == unsure_key)
        .returning(|_| Ok(Some(Locator::new("memory", "9"))));
    let pass = bus(ledger, backends_with(body)).relay_pass().await.unwrap();
    assert_eq!((pass.confirmed, pass.retried, pass.failed), (1, 1, 0));
}

#[tokio::test]
async fn relay_reconciles_before_giving_up_and_uncertain_is_never_failed() {
    let team = Uuid::new_v4();
    let last = slot(team, 2, false); // max_attempts = 3: this is the last attempt
    let unanswered = slot(team, 0, false);
    let mut ledger = MockLedger::new();
    leasing(&mut ledger, vec![last.clone(), unanswered.clone()]);
    settles_once(&mut ledger, |s| {
        matches!(
            &s[0].outcome,
            SlotOutcome::Fatal {
                error: BusError::QuotaExceeded { .. }
            }
        ) && matches!(&s[1].outcome, SlotOutcome::Uncertain { .. })
    });
    let last_key = last.envelope.publish_key;
    let mut body = MockMessagingBackend::new();
    body.expect_publish().times(2).returning(move |e| {
        if e.publish_key == last_key {
            Published::Retryable(BusError::quota_exceeded("bodies"))
        } else {
            Published::Uncertain(BusError::timeout("puback"))
        }
    });
    body.expect_reconcile()
        .times(1)
        .withf(move |e| e.publish_key == last_key)
        .returning(|_| Ok(None));
    let pass = bus(ledger, backends_with(body)).relay_pass().await.unwrap();
    assert_eq!((pass.failed, pass.retried), (1, 1));
}

// ---- fetch: hand-outs and top-up ----------------------------------------------------------

fn message(team: Uuid, id: Uuid) -> Message {
    Message {
        id,
        team,
        conversation: Uuid::new_v4(),
        seq: 1,
        sender: Uuid::new_v4(),
        request_id: "r".into(),
        body_sha256: String::new(),
        body_len: 2,
        backend: "memory".into(),
        locator: Some(Locator::new("memory", "1")),
        publication: Publication::Stored,
        sent_at: t0(),
        stored_at: Some(t0()),
        retained_at: None,
        failure: None,
        sender_kind: crewbus_domain::AgentKind::Agent,
    }
}

fn hand_out(recipient: Uuid, message: Uuid) -> HandOut {
    HandOut {
        delivery: DeliveryId(Uuid::new_v4()),
        message,
        conversation: Uuid::new_v4(),
        seq: 1,
        recipient,
        redelivered: false,
        issued_at: t0(),
        held_until: t0() + chrono::Duration::seconds(30),
    }
}

fn reference(message: Uuid, subject: &str) -> InboxRef {
    InboxRef {
        event_id: Uuid::new_v4(),
        payload: ReferencePayload {
            message,
            conversation: Uuid::new_v4(),
            seq: 1,
        }
        .to_json(),
        ack_subject: subject.into(),
        stream_seq: 1,
        deliveries: 1,
    }
}

#[tokio::test]
async fn fetch_tops_up_from_the_ledger_and_acks_recognised_redeliveries() {
    let team_id = Uuid::new_v4();
    let a = agent(team_id);
    let fresh = Uuid::new_v4();
    let delivered = Uuid::new_v4();
    let lost = Uuid::new_v4();
    let mut ledger = MockLedger::new();
    ledger.expect_team().returning(move |_| Ok(team(team_id)));
    let recipient = a.id;
    let mut seq = Sequence::new();
    ledger
        .expect_hand_out()
        .times(1)
        .in_sequence(&mut seq)
        .withf(|_, _, r, _, _| {
            r.len() == 2
                && r.iter()
                    .all(|r| matches!(r.source, HandOutSource::Inbox { .. }))
        })
        .returning(move |_, _, _, _, _| {
            Ok(vec![
                HandOutOutcome::Issued(hand_out(recipient, fresh)),
                HandOutOutcome::AlreadyDelivered { message: delivered },
            ])
        });
    // top-up asks for what is left of the limit, stored before now − topup_after
    ledger
        .expect_undelivered()
        .times(1)
        .in_sequence(&mut seq)
        .withf(|_, _, before, at, limit| {
            *limit == 3 && *at == t0() && *before == t0() - chrono::Duration::seconds(2)
        })
        .returning(move |_, _, _, _, _| Ok(vec![lost]));
    ledger
        .expect_hand_out()
        .times(1)
        .in_sequence(&mut seq)
        .withf(|_, _, r, _, _| r.len() == 1 && r[0].source == HandOutSource::Ledger)
        .returning(move |_, _, _, _, _| {
            Ok(vec![HandOutOutcome::Issued(hand_out(recipient, lost))])
        });
    ledger
        .expect_messages()
        .returning(move |_, ids| Ok(ids.iter().map(|id| message(team_id, *id)).collect()));
    let mut inbox = MockInbox::new();
    inbox.expect_fetch_references().returning(move |_, _| {
        Ok(vec![
            reference(fresh, "a-fresh"),
            reference(delivered, "a-done"),
        ])
    });
    // only the recognised redelivery is acked at fetch time
    inbox
        .expect_ack_reference()
        .with(eq("a-done"))
        .times(1)
        .returning(|_| Ok(()));
    let mut body = MockMessagingBackend::new();
    body.expect_fetch().returning(|_, _| Ok(Some("hi".into())));
    let backends = serving_inbox(backends_with(body), inbox);
    let out = bus(ledger, backends).fetch(&a, 4).await.unwrap();
    let got: Vec<Uuid> = out.iter().map(|d| d.message.id).collect();
    assert_eq!(got, vec![fresh, lost]);
    assert!(out.iter().all(|d| d.body == "hi"));
}

#[tokio::test]
async fn fetch_tops_up_everything_at_once_when_the_inbox_is_down() {
    let team_id = Uuid::new_v4();
    let a = agent(team_id);
    let mut ledger = MockLedger::new();
    ledger.expect_team().returning(move |_| Ok(team(team_id)));
    ledger
        .expect_undelivered()
        .times(1)
        .withf(|_, _, before, at, limit| *before == t0() && *at == t0() && *limit == 5)
        .returning(|_, _, _, _, _| Ok(vec![]));
    ledger.expect_hand_out().times(0);
    let mut inbox = MockInbox::new();
    inbox
        .expect_fetch_references()
        .returning(|_, _| Err(BusError::unavailable("broker")));
    inbox.expect_ack_reference().times(0);
    let backends = serving_inbox(MockBackends::new(), inbox);
    let out = bus(ledger, backends).fetch(&a, 5).await.unwrap();
    assert!(out.is_empty());
}

/// A clock the test moves.
struct Stepped(std::sync::Mutex<DateTime<Utc>>);
impl Clock for Stepped {
    fn now(&self) -> DateTime<Utc> {
        *self.0.lock().unwrap()
    }
}

#[tokio::test]
async fn a_healthy_inbox_tops_up_once_per_interval_a_failed_one_every_time() {
    let team_id = Uuid::new_v4();
    let a = agent(team_id);
    let mut ledger = MockLedger::new();
    ledger.expect_team().returning(move |_| Ok(team(team_id)));
    let topups = Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = topups.clone();
    ledger
        .expect_undelivered()
        .returning(move |_, _, _, at, _| {
            seen.lock().unwrap().push(at);
            Ok(vec![])
        });
    ledger.expect_hand_out().times(0);
    let fetches = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = fetches.clone();
    let mut inbox = MockInbox::new();
    // the fifth fetch finds the inbox down
    inbox.expect_fetch_references().returning(move |_, _| {
        match counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst) {
            4 => Err(BusError::unavailable("broker")),
            _ => Ok(vec![]),
        }
    });
    let backends = serving_inbox(MockBackends::new(), inbox);
    let clock = Arc::new(Stepped(std::sync::Mutex::new(t0())));
    let mut b = bus(ledger, backends);
    b.ports.clock = clock.clone();
    let ms = chrono::Duration::milliseconds;
    // topup_after 2 s: the interval is 1 s
    for offset in [0, 500, 999, 1_000, 1_000] {
        *clock.0.lock().unwrap() = t0() + ms(offset);
        assert!(b.fetch(&a, 5).await.unwrap().is_empty());
    }
    assert_eq!(
        *topups.lock().unwrap(),
        vec![t0(), t0() + ms(1_000), t0() + ms(1_000)],
        "healthy: at t0 and again one interval later; the failed inbox tops up at once"
    );
}

#[tokio::test]
async fn a_full_top_up_page_is_followed_by_another_top_up_at_once() {
    let team_id = Uuid::new_v4();
    let a = agent(team_id);
    let mut ledger = MockLedger::new();
    ledger.expect_team().returning(move |_| Ok(team(team_id)));
    let pages = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = pages.clone();
    // a backlog: the first top-up fills the page, the second finds the rest, then none is due
    ledger
        .expect_undelivered()
        .times(2)
        .returning(move |_, _, _, _, limit| {
            let n = match counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst) {
                0 => limit,
                _ => 1,
            };
            Ok((0..n).map(|_| Uuid::new_v4()).collect())
        });
    ledger
        .expect_messages()
        .returning(move |_, ids| Ok(ids.iter().map(|id| message(team_id, *id)).collect()));
    let recipient = a.id;
    ledger.expect_hand_out().returning(move |_, _, r, _, _| {
        Ok(r.iter()
            .map(|r| HandOutOutcome::Issued(hand_out(recipient, r.message)))
            .collect())
    });
    let mut inbox = MockInbox::new();
    inbox.expect_fetch_references().returning(|_, _| Ok(vec![]));
    let mut body = MockMessagingBackend::new();
    body.expect_fetch().returning(|_, _| Ok(Some("hi".into())));
    let backends = serving_inbox(backends_with(body), inbox);
    let b = bus(ledger, backends);
    // same instant each time: only the backlog rule lets the second top-up run
    assert_eq!(b.fetch(&a, 3).await.unwrap().len(), 3);
    assert_eq!(b.fetch(&a, 3).await.unwrap().len(), 1);
    assert!(b.fetch(&a, 3).await.unwrap().is_empty());
}

#[tokio::test]
async fn fetch_refuses_a_bad_limit() {
    let b = bus(MockLedger::new(), MockBackends::new());
    for limit in [0, 10_000] {
        assert!(matches!(
            b.fetch(&agent(Uuid::new_v4()), limit).await,
            Err(BusError::Invalid { .. })
        ));
    }
}

// ---- retention ----------------------------------------------------------------------------

#[tokio::test]
async fn retention_removes_bodies_then_marks_the_ledger_and_isolates_failures() {
    let team_ok = Uuid::new_v4();
    let team_down = Uuid::new_v4();
    let keep = Duration::from_secs(86_400);
    let cutoff = t0() - chrono::Duration::days(1);
    let mut ledger = MockLedger::new();
    ledger
        .expect_retention_due()
        .withf(move |before, _| *before == cutoff)
        .returning(move |_, _| {
            Ok(vec![
                crewbus_domain::RetentionTarget {
                    team: team_down,
                    backend: "memory".into(),
                    messages: 1,
                },
                crewbus_domain::RetentionTarget {
                    team: team_ok,
                    backend: "memory".into(),
                    messages: 3,
                },
            ])
        });
    let mut seq = Sequence::new();
    let mut body = MockMessagingBackend::new();
    body.expect_retain()
        .with(eq(cutoff))
        .times(1)
        .in_sequence(&mut seq)
        .returning(|_| Ok(3));
    ledger
        .expect_mark_retained()
        .withf(move |team, backend, before, _| {
            *team == team_ok && backend == "memory" && *before == cutoff
        })
        .times(1)
        .in_sequence(&mut seq)
        .returning(|_, _, _, _| Ok(3));
    let body: Arc<dyn MessagingBackend> = Arc::new(body);
    let mut backends = MockBackends::new();
    backends.expect_body_backend().returning(move |team, _| {
        if team == team_down {
            Err(BusError::unavailable("broker"))
        } else {
            Ok(body.clone())
        }
    });
    let mut b = bus(ledger, backends);
    Arc::get_mut(&mut b.settings).unwrap().retention = Some(keep);
    let run = b.retention_run().await.unwrap();
    assert_eq!((run.removed, run.marked, run.failed), (3, 3, 1));
}

#[tokio::test]
async fn a_body_that_cannot_be_read_is_not_handed_out() {
    let team_id = Uuid::new_v4();
    let a = agent(team_id);
    let m = Uuid::new_v4();
    let mut ledger = MockLedger::new();
    ledger.expect_team().returning(move |_| Ok(team(team_id)));
    ledger
        .expect_messages()
        .returning(move |_, ids| Ok(ids.iter().map(|id| message(team_id, *id)).collect()));
    ledger.expect_hand_out().times(0); // nothing readable: no hand-out recorded
    ledger
        .expect_undelivered()
        .returning(|_, _, _, _, _| Ok(vec![]));
    let mut inbox = MockInbox::new();
    inbox
        .expect_fetch_references()
        .returning(move |_, _| Ok(vec![reference(m, "a-1")]));
    inbox.expect_ack_reference().times(0); // the reference comes back after its ack wait
    let mut body = MockMessagingBackend::new();
    body.expect_fetch()
        .returning(|_, _| Err(BusError::timeout("broker")));
    let backends = serving_inbox(backends_with(body), inbox);
    let out = bus(ledger, backends).fetch(&a, 5).await.unwrap();
    assert!(out.is_empty());
}

#[tokio::test]
async fn relay_settles_each_team_on_its_own() {
    let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
    let slots = vec![slot(a, 0, false), slot(b, 0, false), slot(a, 0, false)];
    let mut ledger = MockLedger::new();
    leasing(&mut ledger, slots.clone());
    // team a's two slots in one transaction, team b's in another; b's settle fails
    ledger
        .expect_settle()
        .withf(move |s, _| s.len() == 2)
        .times(1)
        .returning(|s, _| Ok(vec![SettleOutcome::Applied; s.len()]));
    ledger
        .expect_settle()
        .withf(move |s, _| s.len() == 1)
        .times(1)
        .returning(|_, _| Err(BusError::unavailable("ledger")));
    let mut body = MockMessagingBackend::new();
    body.expect_publish()
        .times(3)
        .returning(|_| Published::Confirmed {
            locator: Locator::new("memory", "1"),
            duplicate: false,
        });
    let pass = bus(ledger, backends_with(body)).relay_pass().await.unwrap();
    assert_eq!((pass.leased, pass.confirmed), (3, 2));
}

fn not_provisioned() -> BusError {
    BusError::NotProvisioned {
        what: "body stream CREWBUS_B_x".into(),
        remedy: "crewbus stream provision --team x".into(),
    }
}

#[tokio::test]
async fn relay_keeps_a_team_without_streams_pending_until_the_attempts_run_out() {
    let team = Uuid::new_v4();
    // max_attempts = 3: a first attempt, and a last one.
    let (first, last) = (slot(team, 0, false), slot(team, 2, false));
    let mut ledger = MockLedger::new();
    leasing(&mut ledger, vec![first.clone(), last.clone()]);
    settles_once(&mut ledger, |s| {
        matches!(
            &s[0].outcome,
            SlotOutcome::Retryable { next_attempt_at, error: BusError::NotProvisioned { .. } }
                if *next_attempt_at > t0()
        ) && matches!(
            &s[1].outcome,
            SlotOutcome::Fatal {
                error: BusError::NotProvisioned { .. }
            }
        )
    });
    let mut backends = MockBackends::new();
    backends
        .expect_body_backend()
        .times(2)
        .returning(|_, _| Err(not_provisioned()));
    let pass = bus(ledger, backends).relay_pass().await.unwrap();
    assert_eq!((pass.retried, pass.failed), (1, 1));
}

#[tokio::test]
async fn relay_backs_off_when_the_body_stream_vanished_before_the_publish() {
    let team = Uuid::new_v4();
    let mut ledger = MockLedger::new();
    leasing(&mut ledger, vec![slot(team, 0, false)]);
    settles_once(&mut ledger, |s| {
        matches!(
            &s[0].outcome,
            SlotOutcome::Retryable {
                error: BusError::NotProvisioned { .. },
                ..
            }
        )
    });
    let mut body = MockMessagingBackend::new();
    body.expect_publish()
        .times(1)
        .returning(|_| Published::Fatal(not_provisioned()));
    let pass = bus(ledger, backends_with(body)).relay_pass().await.unwrap();
    assert_eq!((pass.retried, pass.failed), (1, 0));
}

mod leases;
mod listeners;
mod search;
mod token_cache;
mod watch;
