//! The delivery rules every ledger applies, once: which candidate of a `hand_out` call is
//! handed out, held or refused, and which delivery id of a `confirm` call commits its receipt.
//!
//! Pure functions, facts in and decision out: a ledger loads the facts (the memory ledger from
//! its tables under its lock, Postgres with its set-based reads under the receipts' row locks),
//! calls the rule, and writes what the decision says. The rules are the `Ledger` port's
//! (`crewbus_ports::Ledger::hand_out` and `confirm`); the two ledgers differ only in how they
//! read and write.

use std::collections::{BTreeMap, HashMap, HashSet};

use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::delivery::{
    ConfirmOutcome, DeliveryId, HandOut, HandOutOutcome, HandOutRequest, HandOutSource, InboxAck,
};

/// A hand-out recorded before the call that still holds its message: unconfirmed, with
/// `held_until` after the call's `at` (the latest such hand-out when there are several).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LiveHandOut<H> {
    /// How the ledger names the recorded hand-out (its delivery id, in both ledgers).
    pub holder: H,
    /// Until when it holds the message.
    pub held_until: DateTime<Utc>,
}

/// What a ledger knows, before a `hand_out` call decides, about one candidate message for the
/// call's recipient.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CandidateFacts<H> {
    /// The message is unknown, of another team, not `Stored`, or the recipient holds no receipt
    /// for it.
    Unknown,
    /// The recipient's receipt is delivered.
    Delivered,
    /// A `Stored` message of the team whose receipt for the recipient is not delivered.
    Open {
        /// Its conversation.
        conversation: Uuid,
        /// Its place in the conversation.
        seq: u64,
        /// The live hand-out of it to the recipient recorded before the call, if any.
        live: Option<LiveHandOut<H>>,
        /// Whether any hand-out of it to the recipient was recorded before the call (live,
        /// expired or confirmed): a new one is then a redelivery.
        handed_out_before: bool,
    },
}

/// A hand-out a `hand_out` call records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IssuedHandOut {
    /// The hand-out, as the `Issued` outcome gives it.
    pub hand_out: HandOut,
    /// The inbox ack kept with it: the ack of the last inbox candidate of its message in the
    /// batch (the one that issued it, or a later one it held); `None` when every candidate of
    /// the message came from the ledger.
    pub ack: Option<InboxAck>,
}

/// The decision of one `hand_out` call: what to answer and what to write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HandOutPlan<H> {
    /// One outcome per request, in order: the call's answer.
    pub outcomes: Vec<HandOutOutcome>,
    /// The hand-outs to record, in request order (the same ones as the `Issued` outcomes).
    pub issued: Vec<IssuedHandOut>,
    /// Recorded hand-outs whose ack is replaced: holder → the ack of the last inbox candidate
    /// it held in this batch. Holders that held only ledger candidates are absent.
    pub moved_acks: BTreeMap<H, InboxAck>,
}

/// Who holds a message during one `hand_out` call.
#[derive(Clone, Copy)]
enum Holder<H> {
    /// A hand-out recorded before the call.
    Recorded(H),
    /// The hand-out this call issued, by index into [`HandOutPlan::issued`].
    Issued(usize),
}

/// The hand-out ladder, request by request in order:
///
/// 1. [`CandidateFacts::Unknown`] → `Unknown`;
/// 2. [`CandidateFacts::Delivered`] → `AlreadyDelivered`;
/// 3. held by the live hand-out recorded before the call, or by the one this call issued for
///    the same message earlier in the batch → `Held` with that hand-out's `held_until`; an inbox
///    candidate's ack moves to the holder;
/// 4. otherwise → `Issued`: a new hand-out with the id `new_delivery` gives, `issued_at = at`,
///    `held_until`, `redelivered` when a hand-out was recorded before or the inbox's delivery
///    count is above 1; an inbox candidate's ack is kept with it.
///
/// `facts` is asked once per request, with the request's message id; it must answer the same
/// for the same id within one call (the facts are read before the call decides). `held_until`
/// is the caller's `at + grace`; `new_delivery` is called once per issued hand-out.
pub fn plan_hand_outs<H: Copy + Ord>(
    recipient: Uuid,
    requests: &[HandOutRequest],
    mut facts: impl FnMut(Uuid) -> CandidateFacts<H>,
    at: DateTime<Utc>,
    held_until: DateTime<Utc>,
    mut new_delivery: impl FnMut() -> DeliveryId,
) -> HandOutPlan<H> {
    let mut plan = HandOutPlan {
        outcomes: Vec::with_capacity(requests.len()),
        issued: Vec::new(),
        moved_acks: BTreeMap::new(),
    };
    // The messages this call issued a hand-out of: message → index into `plan.issued`.
    let mut issued_in_batch: HashMap<Uuid, usize> = HashMap::new();
    for request in requests {
        let message = request.message;
        let (conversation, seq, live, handed_out_before) = match facts(message) {
            CandidateFacts::Unknown => {
                plan.outcomes.push(HandOutOutcome::Unknown { message });
                continue;
            }
            CandidateFacts::Delivered => {
                plan.outcomes
                    .push(HandOutOutcome::AlreadyDelivered { message });
                continue;
            }
            CandidateFacts::Open {
                conversation,
                seq,
                live,
                handed_out_before,
            } => (conversation, seq, live, handed_out_before),
        };
        let ack = match &request.source {
            HandOutSource::Inbox { ack, .. } => Some(ack),
            HandOutSource::Ledger => None,
        };
        let holding = issued_in_batch
            .get(&message)
            .map(|i| (Holder::Issued(*i), plan.issued[*i].hand_out.held_until))
            .or_else(|| live.map(|l| (Holder::Recorded(l.holder), l.held_until)));
        if let Some((holder, until)) = holding {
            // Held: an inbox candidate's ack replaces the holding hand-out's.
            if let Some(ack) = ack {
                match holder {
                    Holder::Recorded(h) => {
                        plan.moved_acks.insert(h, ack.clone());
                    }
                    Holder::Issued(i) => plan.issued[i].ack = Some(ack.clone()),
                }
            }
            plan.outcomes.push(HandOutOutcome::Held { message, until });
            continue;
        }
        let deliveries = match &request.source {
            HandOutSource::Inbox { deliveries, .. } => *deliveries,
            HandOutSource::Ledger => 1,
        };
        let hand_out = HandOut {
            delivery: new_delivery(),
            message,
            conversation,
            seq,
            recipient,
            redelivered: handed_out_before || deliveries > 1,
            issued_at: at,
            held_until,
        };
        issued_in_batch.insert(message, plan.issued.len());
        plan.outcomes.push(HandOutOutcome::Issued(hand_out.clone()));
        plan.issued.push(IssuedHandOut {
            hand_out,
            ack: ack.cloned(),
        });
    }
    plan
}

/// What a ledger knows, before a `confirm` call decides, about one delivery id issued to the
/// call's recipient (a delivery id not issued to it has no facts).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfirmFacts {
    /// The message the hand-out gave.
    pub message: Uuid,
    /// The inbox ack kept with the hand-out (`None` for a ledger top-up).
    pub ack: Option<InboxAck>,
    /// Whether the recipient's receipt of the message was delivered before the call.
    pub delivered: bool,
}

/// The confirm rule, delivery id by delivery id in order: no facts → `Unknown`; the receipt
/// delivered before the call, or confirmed earlier in this call (by the same or another
/// delivery id of the message) → `AlreadyConfirmed`; otherwise → `Confirmed`, which the ledger
/// writes (`delivered_at`, the hand-out's `confirmed_at`, the run's `MessageDelivered`). Both
/// confirmed outcomes carry the hand-out's ack.
///
/// `facts` is asked once per delivery id; it must answer the same for the same id within one
/// call. Every `Confirmed` names a distinct message.
pub fn decide_confirms(
    deliveries: &[DeliveryId],
    mut facts: impl FnMut(DeliveryId) -> Option<ConfirmFacts>,
) -> Vec<ConfirmOutcome> {
    let mut confirmed: HashSet<Uuid> = HashSet::new();
    deliveries
        .iter()
        .map(|delivery| {
            let Some(ConfirmFacts {
                message,
                ack,
                delivered,
            }) = facts(*delivery)
            else {
                return ConfirmOutcome::Unknown;
            };
            // Once per receipt: delivered before, or earlier in this call.
            if delivered || !confirmed.insert(message) {
                ConfirmOutcome::AlreadyConfirmed { message, ack }
            } else {
                ConfirmOutcome::Confirmed { message, ack }
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;
    use proptest::prelude::*;
    use proptest::{collection, option};

    fn t(secs: i64) -> DateTime<Utc> {
        Utc.timestamp_opt(1_900_000_000 + secs, 0).unwrap()
    }

    fn id(n: u128) -> Uuid {
        Uuid::from_u128(n)
    }

    fn inbox(subject: &str, deliveries: u64) -> HandOutSource {
        HandOutSource::Inbox {
            event_id: id(1000),
            ack: InboxAck {
                inbox: "memory".into(),
                ack_subject: subject.into(),
            },
            deliveries,
        }
    }

    fn ack_of(source: &HandOutSource) -> Option<InboxAck> {
        match source {
            HandOutSource::Inbox { ack, .. } => Some(ack.clone()),
            HandOutSource::Ledger => None,
        }
    }

    fn open(live: Option<LiveHandOut<u8>>, handed_out_before: bool) -> CandidateFacts<u8> {
        CandidateFacts::Open {
            conversation: id(500),
            seq: 7,
            live,
            handed_out_before,
        }
    }

    /// Delivery ids 9000, 9001, … in the order asked.
    fn counter() -> impl FnMut() -> DeliveryId {
        let mut n = 9000;
        move || {
            n += 1;
            DeliveryId(id(n - 1))
        }
    }

    #[test]
    fn the_ladder_in_one_batch() {
        let (unknown, delivered, held, fresh) = (id(1), id(2), id(3), id(4));
        let requests = [unknown, delivered, held, fresh, fresh, held]
            .iter()
            .zip([
                inbox("a", 1),
                inbox("b", 1),
                inbox("c", 1),
                HandOutSource::Ledger,
                inbox("e", 2),
                HandOutSource::Ledger,
            ])
            .map(|(message, source)| HandOutRequest {
                message: *message,
                source,
            })
            .collect::<Vec<_>>();
        let live = LiveHandOut {
            holder: 42u8,
            held_until: t(30),
        };
        let plan = plan_hand_outs(
            id(77),
            &requests,
            |m| match m {
                m if m == delivered => CandidateFacts::Delivered,
                m if m == held => open(Some(live), true),
                m if m == fresh => open(None, true),
                _ => CandidateFacts::Unknown,
            },
            t(0),
            t(60),
            counter(),
        );
        let hand_out = HandOut {
            delivery: DeliveryId(id(9000)),
            message: fresh,
            conversation: id(500),
            seq: 7,
            recipient: id(77),
            redelivered: true,
            issued_at: t(0),
            held_until: t(60),
        };
        assert_eq!(
            plan.outcomes,
            vec![
                HandOutOutcome::Unknown { message: unknown },
                HandOutOutcome::AlreadyDelivered { message: delivered },
                HandOutOutcome::Held {
                    message: held,
                    until: t(30)
                },
                HandOutOutcome::Issued(hand_out.clone()),
                HandOutOutcome::Held {
                    message: fresh,
                    until: t(60)
                },
                HandOutOutcome::Held {
                    message: held,
                    until: t(30)
                },
            ]
        );
        // The later inbox candidate's ack moved to the hand-out issued in this batch; the
        // ledger candidate after "c" moved nothing.
        assert_eq!(
            plan.issued,
            vec![IssuedHandOut {
                hand_out,
                ack: ack_of(&inbox("e", 1)),
            }]
        );
        assert_eq!(
            plan.moved_acks,
            BTreeMap::from([(42u8, ack_of(&inbox("c", 1)).unwrap())])
        );
    }

    #[test]
    fn redelivered_only_after_an_earlier_hand_out_or_a_second_inbox_delivery() {
        let redelivered = |before: bool, source: HandOutSource| {
            let plan = plan_hand_outs(
                id(77),
                &[HandOutRequest {
                    message: id(1),
                    source,
                }],
                |_| open(None, before),
                t(0),
                t(60),
                counter(),
            );
            plan.issued[0].hand_out.redelivered
        };
        assert!(!redelivered(false, HandOutSource::Ledger));
        assert!(!redelivered(false, inbox("a", 1)));
        assert!(redelivered(false, inbox("a", 2)));
        assert!(redelivered(true, HandOutSource::Ledger));
    }

    #[test]
    fn confirm_once_per_receipt() {
        let (d1, d2, d3, d4) = (
            DeliveryId(id(1)),
            DeliveryId(id(2)),
            DeliveryId(id(3)),
            DeliveryId(id(4)),
        );
        let ack = ack_of(&inbox("a", 1));
        let facts = |d: DeliveryId| match d {
            // Two hand-outs of one open message, one of a message delivered before.
            d if d == d1 || d == d2 => Some(ConfirmFacts {
                message: id(10),
                ack: ack.clone(),
                delivered: false,
            }),
            d if d == d3 => Some(ConfirmFacts {
                message: id(11),
                ack: None,
                delivered: true,
            }),
            _ => None,
        };
        assert_eq!(
            decide_confirms(&[d4, d2, d1, d3, d2], facts),
            vec![
                ConfirmOutcome::Unknown,
                ConfirmOutcome::Confirmed {
                    message: id(10),
                    ack: ack.clone()
                },
                ConfirmOutcome::AlreadyConfirmed {
                    message: id(10),
                    ack: ack.clone()
                },
                ConfirmOutcome::AlreadyConfirmed {
                    message: id(11),
                    ack: None
                },
                ConfirmOutcome::AlreadyConfirmed {
                    message: id(10),
                    ack
                },
            ]
        );
        assert!(decide_confirms(&[], |_| None).is_empty());
    }

    /// Facts for messages 0..4: unknown, delivered, or open with a live holder (named by the
    /// message's own number, so no two messages share one) and an earlier hand-out or not.
    fn candidate_facts() -> impl Strategy<Value = CandidateFacts<u8>> {
        prop_oneof![
            Just(CandidateFacts::Unknown),
            Just(CandidateFacts::Delivered),
            (any::<bool>(), option::of(1i64..120)).prop_map(|(before, live)| {
                CandidateFacts::Open {
                    conversation: id(500),
                    seq: 0,
                    live: live.map(|s| LiveHandOut {
                        holder: 0,
                        held_until: t(s),
                    }),
                    handed_out_before: before,
                }
            }),
        ]
    }

    fn source() -> impl Strategy<Value = HandOutSource> {
        prop_oneof![
            Just(HandOutSource::Ledger),
            (0u32..1000, 1u64..4).prop_map(|(n, deliveries)| inbox(&format!("s{n}"), deliveries)),
        ]
    }

    /// The facts of message `m` as the ledger would report them (`seq` and holder named by `m`).
    fn facts_of(all: &[CandidateFacts<u8>], m: Uuid) -> CandidateFacts<u8> {
        let n = m.as_u128() as usize;
        match all[n].clone() {
            CandidateFacts::Open {
                conversation,
                live,
                handed_out_before,
                ..
            } => CandidateFacts::Open {
                conversation,
                seq: n as u64,
                live: live.map(|l| LiveHandOut {
                    holder: n as u8,
                    ..l
                }),
                handed_out_before,
            },
            other => other,
        }
    }

    proptest! {
        #[test]
        fn hand_outs_follow_the_ladder(
            all in collection::vec(candidate_facts(), 4),
            batch in collection::vec((0u128..4, source()), 0..16),
        ) {
            check_the_ladder(&all, &batch)?;
        }

        #[test]
        fn confirms_commit_each_receipt_once(
            delivered in collection::vec(any::<bool>(), 3),
            issued in collection::vec(option::of((0usize..3, any::<bool>())), 6),
            batch in collection::vec(0usize..6, 0..16),
        ) {
            check_confirms(&delivered, &issued, &batch)?;
        }
    }

    /// Every outcome of a random batch over random facts against the ladder, and the acks each
    /// holder ends with.
    fn check_the_ladder(
        all: &[CandidateFacts<u8>],
        batch: &[(u128, HandOutSource)],
    ) -> Result<(), TestCaseError> {
        let requests: Vec<HandOutRequest> = batch
            .iter()
            .map(|(m, source)| HandOutRequest {
                message: id(*m),
                source: source.clone(),
            })
            .collect();
        let (at, held_until) = (t(0), t(60));
        let plan = plan_hand_outs(
            id(77),
            &requests,
            |m| facts_of(all, m),
            at,
            held_until,
            counter(),
        );
        prop_assert_eq!(plan.outcomes.len(), requests.len());

        let mut seen: HashSet<Uuid> = HashSet::new();
        let mut issued = plan.issued.iter();
        for (request, outcome) in requests.iter().zip(&plan.outcomes) {
            let m = request.message;
            let first = seen.insert(m);
            match (facts_of(all, m), outcome) {
                (CandidateFacts::Unknown, HandOutOutcome::Unknown { message })
                | (CandidateFacts::Delivered, HandOutOutcome::AlreadyDelivered { message }) => {
                    prop_assert_eq!(*message, m);
                }
                (
                    CandidateFacts::Open {
                        live: Some(live), ..
                    },
                    HandOutOutcome::Held { message, until },
                ) => {
                    prop_assert_eq!(*message, m);
                    prop_assert_eq!(*until, live.held_until);
                }
                (
                    CandidateFacts::Open { live: None, .. },
                    HandOutOutcome::Held { message, until },
                ) => {
                    // Held only by the hand-out this call issued for an earlier request.
                    prop_assert!(!first);
                    prop_assert_eq!(*message, m);
                    prop_assert_eq!(*until, held_until);
                }
                (
                    CandidateFacts::Open {
                        live: None,
                        conversation,
                        seq,
                        handed_out_before,
                    },
                    HandOutOutcome::Issued(h),
                ) => {
                    prop_assert!(first);
                    let deliveries = match &request.source {
                        HandOutSource::Inbox { deliveries, .. } => *deliveries,
                        HandOutSource::Ledger => 1,
                    };
                    prop_assert_eq!(h.message, m);
                    prop_assert_eq!((h.conversation, h.seq), (conversation, seq));
                    prop_assert_eq!(
                        (h.recipient, h.issued_at, h.held_until),
                        (id(77), at, held_until)
                    );
                    prop_assert_eq!(h.redelivered, handed_out_before || deliveries > 1);
                    // The recorded hand-outs are the issued outcomes, in order.
                    prop_assert_eq!(Some(h), issued.next().map(|i| &i.hand_out));
                }
                (facts, outcome) => prop_assert!(false, "{facts:?} gave {outcome:?}"),
            }
        }
        prop_assert!(issued.next().is_none());
        let ids: HashSet<DeliveryId> = plan.issued.iter().map(|i| i.hand_out.delivery).collect();
        prop_assert_eq!(ids.len(), plan.issued.len());

        // Acks: each holder keeps the ack of the last inbox candidate of its message.
        let last_ack = |m: Uuid| {
            requests
                .iter()
                .rev()
                .filter(|r| r.message == m)
                .find_map(|r| ack_of(&r.source))
        };
        for i in &plan.issued {
            prop_assert_eq!(&i.ack, &last_ack(i.hand_out.message));
        }
        let mut expected_moves = BTreeMap::new();
        for m in seen {
            if let CandidateFacts::Open {
                live: Some(live), ..
            } = facts_of(all, m)
                && let Some(ack) = last_ack(m)
            {
                expected_moves.insert(live.holder, ack);
            }
        }
        prop_assert_eq!(plan.moved_acks, expected_moves);
        Ok(())
    }

    /// Every outcome of a random confirm batch: delivery id `d` was issued for message
    /// `issued[d].0` with an ack or not (or never issued to this recipient); `delivered[m]` is
    /// the receipt of message `m` before the call.
    fn check_confirms(
        delivered: &[bool],
        issued: &[Option<(usize, bool)>],
        batch: &[usize],
    ) -> Result<(), TestCaseError> {
        let facts = |d: DeliveryId| {
            let n = d.0.as_u128() as usize;
            issued[n].map(|(m, with_ack)| ConfirmFacts {
                message: id(m as u128),
                ack: with_ack.then(|| ack_of(&inbox(&format!("s{n}"), 1)).unwrap()),
                delivered: delivered[m],
            })
        };
        let deliveries: Vec<DeliveryId> =
            batch.iter().map(|d| DeliveryId(id(*d as u128))).collect();
        let outcomes = decide_confirms(&deliveries, facts);
        prop_assert_eq!(outcomes.len(), deliveries.len());
        let mut confirmed: HashSet<Uuid> = HashSet::new();
        for (d, outcome) in deliveries.iter().zip(&outcomes) {
            match (facts(*d), outcome) {
                (None, ConfirmOutcome::Unknown) => {}
                (Some(f), ConfirmOutcome::Confirmed { message, ack }) => {
                    prop_assert!(!f.delivered);
                    prop_assert!(confirmed.insert(*message), "confirmed twice");
                    prop_assert_eq!((*message, ack), (f.message, &f.ack));
                }
                (Some(f), ConfirmOutcome::AlreadyConfirmed { message, ack }) => {
                    prop_assert!(f.delivered || confirmed.contains(message));
                    prop_assert_eq!((*message, ack), (f.message, &f.ack));
                }
                (facts, outcome) => prop_assert!(false, "{facts:?} gave {outcome:?}"),
            }
        }
        Ok(())
    }
}
