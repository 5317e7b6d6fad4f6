//! Random interleavings of sends, leases, settlements (current and stale), hand-outs and
//! confirmations against the memory ledger, checking the bus invariants after every step:
//! - every conversation's seqs are exactly 1..=n and one request id of one sender is one message
//!   (the senders draw their ids from one small set, so they often share one);
//! - a repeat with the same body returns the original message, another body is `Conflict`;
//! - a message leaves `PendingPublication` once, to `Stored` or `Failed`, and never changes again;
//! - a stale or expired settlement writes nothing;
//! - a receipt's `delivered_at` is set once, by the only `Confirmed` outcome of its pair;
//! - the counts agree with the messages.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use chrono::{DateTime, TimeZone, Utc};
use crewbus_domain::{
    Agent, BusError, ConfirmOutcome, Conversation, DeliveryId, HandOutOutcome, HandOutRequest,
    HandOutSource, LeasedSlot, Locator, Publication, SendRequest, SettleOutcome, Settlement,
    SlotOutcome, Team, TenantId, TokenHash,
};
use crewbus_memory::MemoryLedger;
use crewbus_ports::Ledger;
use proptest::prelude::*;
use uuid::Uuid;

const LEASE: Duration = Duration::from_secs(20);
const GRACE: Duration = Duration::from_secs(15);

#[derive(Debug, Clone)]
enum Op {
    Send {
        sender: usize,
        request: u8,
        body: u8,
    },
    Lease,
    Settle {
        pick: usize,
        kind: u8,
        stale: bool,
    },
    HandOut {
        recipient: usize,
        pick: usize,
    },
    Confirm {
        recipient: usize,
        pick: usize,
    },
    Advance {
        secs: u8,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0..3usize, 0..6u8, 0..2u8).prop_map(|(sender, request, body)| Op::Send { sender, request, body }),
        2 => Just(Op::Lease),
        3 => (any::<usize>(), 0..4u8, any::<bool>()).prop_map(|(pick, kind, stale)| Op::Settle { pick, kind, stale }),
        2 => (0..3usize, any::<usize>()).prop_map(|(recipient, pick)| Op::HandOut { recipient, pick }),
        2 => (0..3usize, any::<usize>()).prop_map(|(recipient, pick)| Op::Confirm { recipient, pick }),
        1 => (1..30u8).prop_map(|secs| Op::Advance { secs }),
    ]
}

struct World {
    ledger: MemoryLedger,
    team: Team,
    agents: Vec<Agent>,
    conv: Conversation,
    now: DateTime<Utc>,
    /// (sender, request id) → (message id, body): the idempotency key is the sender's.
    requests: HashMap<(Uuid, String), (Uuid, String)>,
    /// message → last publication seen.
    publication: HashMap<Uuid, Publication>,
    leased: Vec<LeasedSlot>,
    deliveries: Vec<(usize, DeliveryId)>,
    /// (message, recipient) → delivered_at once confirmed.
    delivered: HashMap<(Uuid, Uuid), DateTime<Utc>>,
}

impl World {
    async fn new() -> World {
        let ledger = MemoryLedger::new(TenantId::default());
        let now = Utc.with_ymd_and_hms(2030, 1, 1, 0, 0, 0).unwrap();
        let team = ledger
            .create_team("model", "memory", "memory", now)
            .await
            .unwrap();
        let mut agents = Vec::new();
        for name in ["a", "b", "c"] {
            let hash = TokenHash::of(name);
            agents.push(ledger.create_agent(team.id, name, hash, now).await.unwrap());
        }
        let conv = ledger
            .create_conversation(
                team.id,
                agents[0].id,
                "c",
                &[agents[1].id, agents[2].id],
                now,
            )
            .await
            .unwrap();
        World {
            ledger,
            team,
            agents,
            conv,
            now,
            requests: HashMap::new(),
            publication: HashMap::new(),
            leased: Vec::new(),
            deliveries: Vec::new(),
            delivered: HashMap::new(),
        }
    }

    async fn step(&mut self, op: &Op) {
        match *op {
            Op::Send {
                sender,
                request,
                body,
            } => {
                let request_id = format!("r{request}");
                let body = format!("body {body}");
                let result = self
                    .ledger
                    .send(
                        SendRequest {
                            team: self.team.id,
                            conversation: self.conv.id,
                            sender: self.agents[sender].id,
                            request_id: request_id.clone(),
                            body: body.clone(),
                            run: None,
                        },
                        self.now,
                    )
                    .await;
                let key = (self.agents[sender].id, request_id);
                match self.requests.get(&key) {
                    Some((id, original)) if *original == body => {
                        let sent = result.expect("a repeat with the same body succeeds");
                        assert!(!sent.created);
                        assert_eq!(sent.message.id, *id);
                    }
                    Some(_) => assert!(matches!(result, Err(BusError::Conflict { .. }))),
                    None => {
                        let sent = result.expect("a new request succeeds");
                        assert!(sent.created);
                        assert_eq!(sent.message.sender, key.0, "the sender's own message");
                        self.requests.insert(key, (sent.message.id, body));
                        self.publication
                            .insert(sent.message.id, Publication::PendingPublication);
                    }
                }
            }
            Op::Lease => {
                let slots = self.ledger.lease_slots(self.now, LEASE, 10).await.unwrap();
                for s in &slots {
                    assert_eq!(
                        self.publication[&s.envelope.message_id],
                        Publication::PendingPublication,
                        "only pending messages have leasable slots"
                    );
                }
                self.leased.extend(slots);
            }
            Op::Settle { pick, kind, stale } => {
                if self.leased.is_empty() {
                    return;
                }
                let slot = self.leased[pick % self.leased.len()].clone();
                let generation = if stale {
                    slot.generation.saturating_sub(1)
                } else {
                    slot.generation
                };
                let message = slot.envelope.message_id;
                let outcome = match kind {
                    0 => SlotOutcome::Confirmed {
                        locator: Locator::new("memory", &message.to_string()),
                    },
                    1 => SlotOutcome::Retryable {
                        error: BusError::unavailable("x"),
                        next_attempt_at: self.now,
                    },
                    2 => SlotOutcome::Fatal {
                        error: BusError::forbidden("x"),
                    },
                    _ => SlotOutcome::Uncertain {
                        error: BusError::timeout("x"),
                        next_attempt_at: self.now,
                    },
                };
                let before = self.ledger.message(self.team.id, message).await.unwrap();
                let outcomes = self
                    .ledger
                    .settle(
                        &[Settlement {
                            slot: slot.slot,
                            generation,
                            outcome,
                        }],
                        self.now,
                    )
                    .await
                    .unwrap();
                let after = self.ledger.message(self.team.id, message).await.unwrap();
                if outcomes[0] == SettleOutcome::Stale {
                    assert_eq!(before, after, "a stale settlement writes nothing");
                } else {
                    assert_eq!(before.publication, Publication::PendingPublication);
                    assert!(
                        generation == slot.generation,
                        "an older generation is never applied"
                    );
                    assert!(
                        self.now < slot.leased_until,
                        "an expired lease is never applied"
                    );
                }
            }
            Op::HandOut { recipient, pick } => {
                let ids: Vec<Uuid> = {
                    let mut v: Vec<Uuid> = self.requests.values().map(|(id, _)| *id).collect();
                    v.sort();
                    v
                };
                if ids.is_empty() {
                    return;
                }
                let message = ids[pick % ids.len()];
                let out = self
                    .ledger
                    .hand_out(
                        self.team.id,
                        self.agents[recipient].id,
                        &[HandOutRequest {
                            message,
                            source: HandOutSource::Ledger,
                        }],
                        GRACE,
                        self.now,
                    )
                    .await
                    .unwrap();
                match &out[0] {
                    HandOutOutcome::Issued(h) => {
                        assert!(
                            !self
                                .delivered
                                .contains_key(&(message, self.agents[recipient].id))
                        );
                        self.deliveries.push((recipient, h.delivery));
                    }
                    HandOutOutcome::AlreadyDelivered { .. } => {
                        assert!(
                            self.delivered
                                .contains_key(&(message, self.agents[recipient].id))
                        );
                    }
                    HandOutOutcome::Held { until, .. } => assert!(*until > self.now),
                    HandOutOutcome::Unknown { .. } => {}
                }
            }
            Op::Confirm { recipient, pick } => {
                if self.deliveries.is_empty() {
                    return;
                }
                let (owner, delivery) = self.deliveries[pick % self.deliveries.len()];
                let agent = self.agents[recipient].id;
                let out = self
                    .ledger
                    .confirm(self.team.id, agent, &[delivery], None, self.now)
                    .await
                    .unwrap();
                match &out[0] {
                    ConfirmOutcome::Confirmed { message, .. } => {
                        assert_eq!(owner, recipient);
                        let first = self.delivered.insert((*message, agent), self.now);
                        assert!(first.is_none(), "Confirmed is returned once per receipt");
                    }
                    ConfirmOutcome::AlreadyConfirmed { message, .. } => {
                        assert_eq!(owner, recipient);
                        assert!(self.delivered.contains_key(&(*message, agent)));
                    }
                    ConfirmOutcome::Unknown => assert_ne!(owner, recipient),
                }
            }
            Op::Advance { secs } => self.now += chrono::Duration::seconds(i64::from(secs)),
        }
    }

    async fn check(&mut self) {
        let page = self
            .ledger
            .history(self.team.id, self.conv.id, 0, 1000)
            .await
            .unwrap();
        // The page stops at the first pending message; read every message directly instead.
        let mut seqs = Vec::new();
        let mut pending = 0;
        let mut request_keys = HashSet::new();
        for ((sender, request_id), (id, _)) in &self.requests {
            let m = self.ledger.message(self.team.id, *id).await.unwrap();
            seqs.push(m.seq);
            assert_eq!((&m.sender, &m.request_id), (sender, request_id));
            assert!(request_keys.insert((m.sender, m.request_id.clone())));
            let was = self.publication[id];
            if was != Publication::PendingPublication {
                assert_eq!(m.publication, was, "a settled publication never changes");
            }
            assert_eq!(m.locator.is_some(), m.publication == Publication::Stored);
            if m.publication == Publication::PendingPublication {
                pending += 1;
            }
            self.publication.insert(*id, m.publication);
            for r in self.ledger.receipts(self.team.id, *id).await.unwrap() {
                assert_eq!(
                    r.delivered_at,
                    self.delivered.get(&(*id, r.recipient)).copied()
                );
            }
        }
        seqs.sort_unstable();
        assert_eq!(
            seqs,
            (1..=self.requests.len() as u64).collect::<Vec<_>>(),
            "gap-free seqs"
        );
        if let Some(last) = page.items.last() {
            let first_pending = page
                .items
                .iter()
                .position(|i| i.message.publication == Publication::PendingPublication);
            match first_pending {
                Some(p) => {
                    assert_eq!(
                        p,
                        page.items.len() - 1,
                        "the page ends at the first pending"
                    );
                    assert_eq!(page.next_after_seq, last.message.seq - 1);
                }
                None => assert_eq!(page.next_after_seq, last.message.seq),
            }
        }
        let counts = self.ledger.counts(self.now).await.unwrap();
        assert_eq!(counts.pending_publications, pending);
        assert_eq!(counts.deliveries, self.delivered.len() as u64);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn ledger_invariants_hold_under_random_interleavings(ops in prop::collection::vec(op(), 1..60)) {
        tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
            let mut world = World::new().await;
            for op in &ops {
                world.step(op).await;
                world.check().await;
            }
        });
    }
}
