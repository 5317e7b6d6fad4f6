//! What a fixture holds: one team whose messages are in every state a running store has them,
//! made through the ports exactly as the use cases drive them (the ledger's sends, the relay's
//! leases and settlements, the reference worker's leases, publications and marks, the fetch's
//! hand-outs, the confirm and its inbox ack), at fixed instants of 2026-12-02.
//!
//! The team `upgrade` (default body backend and inbox: the store's own, `postgres` or `sqlite`)
//! has agents `a`, `b` and `c`, whose tokens are [`token`]`(name)`, and two conversations of all
//! three: `local talk` on the store's own body backend and `jetstream talk` on `jetstream`
//! (nothing of it is on a broker: its messages are outbox slots or failed). Each message has two
//! recipients; the states of each (message, recipient) pair are [`Pair::state`]:
//!
//! | message | sender | recipients: state before the upgrade |
//! |---|---|---|
//! | L1 | a | b `confirmed` (reference acknowledged, message acknowledged as read); c `confirmed_reference_unacked` (the crash between commit and ack) |
//! | L2 | b | a and c `handed_out` (from the inbox, unconfirmed; a's hold lapsed) |
//! | L3 | c | a and b `reference_published` (in the inbox queue, never fetched) |
//! | L4 | a | b `handed_out_by_top_up` (from the ledger: its reference was lost); c `reference_lost` (marked published, never in the queue) |
//! | L5 | b | a and c `reference_pending` (inbox events not yet published) |
//! | J1 | a | b and c `failed` (the relay's fatal settlement) |
//! | J2 | b | a and c `slot_retried` (one retryable attempt) |
//! | J3 | c | a and b `slot_uncertain` (one unanswered attempt) |
//! | J4 | a | b and c `slot_pending` (never attempted) |

use std::sync::Mutex;
use std::time::Duration;

use chrono::{DateTime, TimeZone, Utc};
use crewbus_domain::{
    Agent, BusError, ConfirmOutcome, Conversation, DeliveryId, HandOutOutcome, HandOutRequest,
    HandOutSource, InboxAck, Published, ReferencePayload, SendRequest, SettleOutcome, Settlement,
    SlotOutcome, Team, TokenHash, body_sha256,
};
use crewbus_ports::{Backends, Clock, Ledger};
use uuid::Uuid;

/// The team's name.
pub const TEAM: &str = "upgrade";

/// The agents' names, in the order they are made.
pub const AGENTS: [&str; 3] = ["a", "b", "c"];

/// The non-local body backend of the second conversation: one `crewbus serve` serves for any
/// store once `[nats]` is configured, and whose slots its relay publishes after the upgrade.
pub const JETSTREAM: &str = "jetstream";

/// The hand-out grace of the fixture's hand-outs (the server's default, 30 s).
pub const GRACE: Duration = Duration::from_secs(30);

/// The fixture's instant: every time in it is this plus some seconds.
pub fn instant() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 12, 2, 0, 0, 0)
        .single()
        .expect("a valid instant")
}

/// [`instant`] + `secs` seconds.
pub fn t(secs: i64) -> DateTime<Utc> {
    instant() + chrono::Duration::seconds(secs)
}

/// The fixed bearer token of agent `name`: the shape the server issues (`cbt_` and 64 lowercase
/// hex digits), here the SHA-256 of a fixed phrase, so every fixture has the same tokens.
pub fn token(name: &str) -> String {
    format!(
        "cbt_{}",
        body_sha256(&format!("crewbus upgrade fixture: agent {name}"))
    )
}

/// A clock that says what it was last set to: the inbox and body adapters take their time from
/// it, and the scenario moves it with the instants it passes the ledger.
#[derive(Debug)]
pub struct FixedClock(Mutex<DateTime<Utc>>);

impl FixedClock {
    /// A clock at [`instant`].
    pub fn new() -> Self {
        FixedClock(Mutex::new(instant()))
    }

    fn set(&self, at: DateTime<Utc>) {
        *self.0.lock().expect("clock") = at;
    }
}

impl Clock for FixedClock {
    fn now(&self) -> DateTime<Utc> {
        *self.0.lock().expect("clock")
    }
}

/// One message of the fixture.
#[derive(Debug, Clone)]
pub struct MadeMessage {
    /// `L1`…`L5` (local talk) or `J1`…`J4` (jetstream talk).
    pub name: &'static str,
    /// The message id.
    pub id: Uuid,
    /// Its conversation.
    pub conversation: Uuid,
    /// Its position in the conversation.
    pub seq: u64,
    /// The sender's index in [`AGENTS`].
    pub sender: usize,
    /// The body.
    pub body: String,
    /// `stored`, `pending_publication` or `failed`, as the ledger holds it.
    pub publication: &'static str,
}

/// One (message, recipient) pair of the fixture and what the upgraded store must do with it.
#[derive(Debug, Clone)]
pub struct Pair {
    /// The message's index in [`Made::messages`].
    pub message: usize,
    /// The recipient's index in [`AGENTS`].
    pub recipient: usize,
    /// The state before the upgrade (see the module docs).
    pub state: &'static str,
    /// `deliver` (to be confirmed exactly once after the upgrade), `delivered` (confirmed
    /// before it: never handed out again) or `failed` (never handed out).
    pub outcome: &'static str,
    /// The unconfirmed hand-out's delivery id (states `handed_out`, `handed_out_by_top_up`).
    pub delivery: Option<DeliveryId>,
    /// How the upgrade test confirms that old delivery id: `before_fetch` (before the recipient
    /// fetches anything) or `after_redelivery` (once the message was handed out again).
    pub confirm_old: Option<&'static str>,
    /// When the receipt was confirmed (outcome `delivered`).
    pub delivered_at: Option<DateTime<Utc>>,
    /// When the recipient acknowledged reading it.
    pub acknowledged_at: Option<DateTime<Utc>>,
}

/// Everything the scenario made, with every id the ports returned, in the order made.
#[derive(Debug)]
pub struct Made {
    /// The team.
    pub team: Team,
    /// Agents `a`, `b`, `c`.
    pub agents: Vec<Agent>,
    /// `local talk`, then `jetstream talk`.
    pub conversations: Vec<Conversation>,
    /// L1…L5, then J1…J4.
    pub messages: Vec<MadeMessage>,
    /// Every (message, recipient) pair.
    pub pairs: Vec<Pair>,
    /// Every hand-out's delivery id, in the order issued (confirmed ones too).
    pub deliveries: Vec<DeliveryId>,
}

/// The ports of one fresh store.
pub struct Ports<'a> {
    /// The ledger.
    pub ledger: &'a dyn Ledger,
    /// The store's registry (its body backend and inbox).
    pub backends: &'a dyn Backends,
    /// The clock the registry was made with.
    pub clock: &'a FixedClock,
}

fn body_of(name: &str, sender: &str, what: &str) -> String {
    // Non-ASCII on purpose: the dumps must carry UTF-8 faithfully.
    format!("{name} from {sender}: {what} — grüße, 🚌")
}

/// Makes the fixture's team, agents, conversations and messages in a fresh store (see the
/// module docs). Panics when a port answers anything but what today's code answers: the
/// fixture is then not what it says.
///
/// `None`, right after the team and its agents are made, when the agents' random ids do not
/// sort as `a < b < c`: the stores write a message's receipts and inbox events in the order of
/// its recipients' ids, so the fixture would depend on the draw. The caller deletes the team
/// (its agents go with it: the store is as fresh as before) and calls again.
pub async fn make(ports: &Ports<'_>) -> Option<Made> {
    let ledger = ports.ledger;
    let local = ledger
        .local_backend()
        .expect("the store keeps bodies itself");
    let team = ledger
        .create_team(TEAM, local, local, t(0))
        .await
        .expect("team");
    let mut agents = Vec::new();
    for name in AGENTS {
        agents.push(
            ledger
                .create_agent(team.id, name, TokenHash::of(&token(name)), t(0))
                .await
                .expect("agent"),
        );
    }
    if !agents.windows(2).all(|w| w[0].id < w[1].id) {
        return None;
    }
    let [a, b, c] = [0, 1, 2].map(|i| agents[i].id);
    let local_talk = ledger
        .create_conversation(team.id, a, "local talk", &[b, c], t(1))
        .await
        .expect("local conversation");
    // A conversation's backend is the team's default when it is created.
    ledger
        .set_team_backends(team.id, JETSTREAM, local)
        .await
        .expect("team on jetstream");
    let remote_talk = ledger
        .create_conversation(team.id, a, "jetstream talk", &[b, c], t(2))
        .await
        .expect("jetstream conversation");
    let team = ledger
        .set_team_backends(team.id, local, local)
        .await
        .expect("team back on its store");
    let mut made = Made {
        team,
        agents,
        conversations: vec![local_talk, remote_talk],
        messages: Vec::new(),
        pairs: Vec::new(),
        deliveries: Vec::new(),
    };
    let inbox = ports
        .backends
        .inbox(made.team.id, local)
        .await
        .expect("the store's inbox");

    // Local talk: L1..L4 stored with their inbox events.
    let l1 = send(&mut made, ledger, "L1", 0, 0, "confirmed by b and c", t(10)).await;
    let l2 = send(
        &mut made,
        ledger,
        "L2",
        0,
        1,
        "handed out to a and c",
        t(11),
    )
    .await;
    let l3 = send(
        &mut made,
        ledger,
        "L3",
        0,
        2,
        "published, never fetched",
        t(12),
    )
    .await;
    let l4 = send(&mut made, ledger, "L4", 0, 0, "its references lost", t(13)).await;

    // The reference worker's pass: every event published but L4's (refused for good, as the
    // worker marks a fatal refusal: the ledger's top-up delivers it), then all marked.
    ports.clock.set(t(20));
    let events = ledger
        .lease_inbox_events(t(20), Duration::from_secs(60), 100)
        .await
        .expect("lease events");
    assert_eq!(events.len(), 8, "two recipients for each of L1..L4");
    let l4_id = made.messages[l4].id;
    for e in events.iter().filter(|e| e.message != l4_id) {
        match inbox
            .publish_reference(&e.recipient_key, e.id, &e.payload)
            .await
        {
            Published::Confirmed {
                duplicate: false, ..
            } => {}
            other => panic!("publishing event {} answered {other:?}", e.id),
        }
    }
    let mut messages: Vec<Uuid> = events.iter().map(|e| e.message).collect();
    messages.dedup();
    ports.clock.set(t(21));
    assert_eq!(
        ledger
            .mark_references_published(&messages, t(21))
            .await
            .expect("mark"),
        4,
        "one reference marker per message"
    );

    // Fetches: a takes L2, b takes L1, c takes L1 and L2 (stream order); each handed out.
    ports.clock.set(t(30));
    let (only_l1, only_l2, both) = ([l1], [l2], [l1, l2]);
    let handed: [(usize, usize, &[usize]); 3] = [(0, 1, &only_l2), (1, 1, &only_l1), (2, 2, &both)];
    let mut issued = Vec::new();
    for (recipient, limit, expected) in handed {
        let agent = &made.agents[recipient];
        let refs = inbox
            .fetch_references(&agent.recipient_key, limit)
            .await
            .expect("fetch references");
        let mut requests = Vec::new();
        for r in refs {
            let payload = ReferencePayload::from_json(&r.payload).expect("a bus reference");
            requests.push(HandOutRequest {
                message: payload.message,
                source: HandOutSource::Inbox {
                    event_id: r.event_id,
                    ack: InboxAck {
                        inbox: local.to_owned(),
                        ack_subject: r.ack_subject,
                    },
                    deliveries: r.deliveries,
                },
            });
        }
        let wanted: Vec<Uuid> = expected.iter().map(|&m| made.messages[m].id).collect();
        let got: Vec<Uuid> = requests.iter().map(|r| r.message).collect();
        assert_eq!(got, wanted, "{}'s references", AGENTS[recipient]);
        for (m, delivery) in expected
            .iter()
            .zip(hand_out(&mut made, ledger, recipient, &requests, t(30)).await)
        {
            issued.push((*m, recipient, delivery));
        }
    }
    // b's top-up: L4, whose reference never reached the inbox, from the ledger.
    ports.clock.set(t(31));
    let top_up = [HandOutRequest {
        message: l4_id,
        source: HandOutSource::Ledger,
    }];
    let l4_b = hand_out(&mut made, ledger, 1, &top_up, t(31)).await[0];
    let delivery = |m: usize, r: usize| {
        issued
            .iter()
            .find(|(im, ir, _)| *im == m && *ir == r)
            .map(|(_, _, d)| *d)
            .expect("handed out")
    };

    // b confirms L1 and its reference is acknowledged; b reads it. c confirms L1, and its
    // process dies before the ack (the reference stays in the queue).
    ports.clock.set(t(40));
    match &ledger
        .confirm(made.team.id, b, &[delivery(l1, 1)], None, t(40))
        .await
        .expect("confirm")[..]
    {
        [ConfirmOutcome::Confirmed { ack: Some(ack), .. }] => {
            inbox.ack_reference(&ack.ack_subject).await.expect("ack")
        }
        other => panic!("b's confirm answered {other:?}"),
    }
    ports.clock.set(t(41));
    ledger
        .acknowledge(made.team.id, b, made.messages[l1].id, None, t(41))
        .await
        .expect("acknowledge");
    ports.clock.set(t(42));
    let outcomes = ledger
        .confirm(made.team.id, c, &[delivery(l1, 2)], None, t(42))
        .await
        .expect("confirm");
    assert!(
        matches!(outcomes[..], [ConfirmOutcome::Confirmed { .. }]),
        "{outcomes:?}"
    );

    // L5: stored, its inbox events not yet leased.
    ports.clock.set(t(50));
    let l5 = send(&mut made, ledger, "L5", 0, 1, "references pending", t(50)).await;

    // Jetstream talk: outbox slots, settled by hand as the relay settles its attempts.
    ports.clock.set(t(60));
    let j1 = send(&mut made, ledger, "J1", 1, 0, "failed for good", t(60)).await;
    settle_the_one_due(
        ledger,
        t(61),
        SlotOutcome::Fatal {
            error: BusError::NotProvisioned {
                what: "jetstream body stream".into(),
                remedy: "crewbus stream provision".into(),
            },
        },
    )
    .await;
    let j2 = send(&mut made, ledger, "J2", 1, 1, "retried once", t(70)).await;
    settle_the_one_due(
        ledger,
        t(71),
        SlotOutcome::Retryable {
            error: BusError::unavailable("jetstream"),
            next_attempt_at: t(120),
        },
    )
    .await;
    let j3 = send(
        &mut made,
        ledger,
        "J3",
        1,
        2,
        "its attempt unanswered",
        t(80),
    )
    .await;
    settle_the_one_due(
        ledger,
        t(81),
        SlotOutcome::Uncertain {
            error: BusError::timeout("jetstream"),
            next_attempt_at: t(130),
        },
    )
    .await;
    let j4 = send(&mut made, ledger, "J4", 1, 0, "never attempted", t(90)).await;

    let plain = |message, recipient, state, outcome| Pair {
        message,
        recipient,
        state,
        outcome,
        delivery: None,
        confirm_old: None,
        delivered_at: None,
        acknowledged_at: None,
    };
    let old = |message, recipient, state, delivery, confirm_old| Pair {
        delivery: Some(delivery),
        confirm_old: Some(confirm_old),
        ..plain(message, recipient, state, "deliver")
    };
    made.pairs = vec![
        Pair {
            delivered_at: Some(t(40)),
            acknowledged_at: Some(t(41)),
            ..plain(l1, 1, "confirmed", "delivered")
        },
        Pair {
            delivered_at: Some(t(42)),
            ..plain(l1, 2, "confirmed_reference_unacked", "delivered")
        },
        old(l2, 0, "handed_out", delivery(l2, 0), "after_redelivery"),
        old(l2, 2, "handed_out", delivery(l2, 2), "before_fetch"),
        plain(l3, 0, "reference_published", "deliver"),
        plain(l3, 1, "reference_published", "deliver"),
        old(l4, 1, "handed_out_by_top_up", l4_b, "after_redelivery"),
        plain(l4, 2, "reference_lost", "deliver"),
        plain(l5, 0, "reference_pending", "deliver"),
        plain(l5, 2, "reference_pending", "deliver"),
        plain(j1, 1, "failed", "failed"),
        plain(j1, 2, "failed", "failed"),
        plain(j2, 0, "slot_retried", "deliver"),
        plain(j2, 2, "slot_retried", "deliver"),
        plain(j3, 0, "slot_uncertain", "deliver"),
        plain(j3, 1, "slot_uncertain", "deliver"),
        plain(j4, 1, "slot_pending", "deliver"),
        plain(j4, 2, "slot_pending", "deliver"),
    ];
    made.messages[j1].publication = "failed";
    Some(made)
}

/// Sends message `name` from agent `sender` in conversation `conversation` (an index of
/// [`Made::conversations`]) at `at`; returns its index in [`Made::messages`].
async fn send(
    made: &mut Made,
    ledger: &dyn Ledger,
    name: &'static str,
    conversation: usize,
    sender: usize,
    what: &str,
    at: DateTime<Utc>,
) -> usize {
    let body = body_of(name, AGENTS[sender], what);
    assert_ne!(
        body.len(),
        16,
        "a 16-byte body would read as an id in the dump"
    );
    let sent = ledger
        .send(
            SendRequest {
                team: made.team.id,
                conversation: made.conversations[conversation].id,
                sender: made.agents[sender].id,
                request_id: format!("fixture-{name}"),
                body: body.clone(),
                run: None,
            },
            at,
        )
        .await
        .expect("send");
    assert!(sent.created);
    let local = conversation == 0;
    made.messages.push(MadeMessage {
        name,
        id: sent.message.id,
        conversation: sent.message.conversation,
        seq: sent.message.seq,
        sender,
        body,
        publication: if local {
            "stored"
        } else {
            "pending_publication"
        },
    });
    made.messages.len() - 1
}

/// Hands out `requests` to agent `recipient` at `at`; every one must be issued. Returns the
/// delivery ids, in order.
async fn hand_out(
    made: &mut Made,
    ledger: &dyn Ledger,
    recipient: usize,
    requests: &[HandOutRequest],
    at: DateTime<Utc>,
) -> Vec<DeliveryId> {
    let outcomes = ledger
        .hand_out(made.team.id, made.agents[recipient].id, requests, GRACE, at)
        .await
        .expect("hand out");
    let ids: Vec<DeliveryId> = outcomes
        .into_iter()
        .map(|o| match o {
            HandOutOutcome::Issued(h) => h.delivery,
            other => panic!("hand-out to {} answered {other:?}", AGENTS[recipient]),
        })
        .collect();
    made.deliveries.extend(&ids);
    ids
}

/// Leases the due slots at `at` (exactly one must be due) and settles it with `outcome` a
/// second later.
async fn settle_the_one_due(ledger: &dyn Ledger, at: DateTime<Utc>, outcome: SlotOutcome) {
    let leased = ledger
        .lease_slots(at, Duration::from_secs(30), 100)
        .await
        .expect("lease slots");
    assert_eq!(leased.len(), 1, "one slot due at {at}");
    let settled = ledger
        .settle(
            &[Settlement {
                slot: leased[0].slot,
                generation: leased[0].generation,
                outcome,
            }],
            at + chrono::Duration::seconds(1),
        )
        .await
        .expect("settle");
    assert_eq!(settled, [SettleOutcome::Applied]);
}
