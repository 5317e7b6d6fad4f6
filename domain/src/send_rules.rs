//! The send rules a batch of sends is decided by, once: which request of a
//! `Ledger::send_batch` call creates a message (and with which `seq`), which repeats one, and
//! which is refused.
//!
//! A pure function, facts in and decisions out: a ledger locks the batch's conversations, loads
//! the facts ([`SendFacts`]), calls [`plan_sends`] and writes what the plan says — every
//! request's fate is decided before anything is written, so a refused request never needs a
//! savepoint. The Postgres and SQLite ledgers decide with it; the memory ledger applies the same
//! rules request by request under its one lock.

use std::collections::{HashMap, HashSet};

use uuid::Uuid;

use crate::error::{BusError, BusResult};
use crate::ids::RunId;
use crate::message::{Message, RequestKey, SendRequest, Sent, body_sha256, validate_request_id};

/// One conversation of the batch as its lock holder sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConversationFacts {
    /// The conversation's team (a request naming another team finds nothing: `NotFound`).
    pub team: Uuid,
    /// Its body backend, for life.
    pub backend: String,
    /// The `seq` its next message gets (1 for an empty conversation).
    pub next_seq: u64,
}

/// One run named by the batch, as its lock holder sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunFacts {
    /// The run's team.
    pub team: Uuid,
    /// The agent the run belongs to.
    pub agent: Uuid,
    /// Whether it is sealed (it takes no more records).
    pub sealed: bool,
}

/// What a ledger knows, under the batch's locks, before the batch is decided. Every map holds
/// only what the ledger's tenant holds: what is missing is unknown.
#[derive(Debug, Clone, Default)]
pub struct SendFacts {
    /// The tenant's conversations among the batch's, by id.
    pub conversations: HashMap<Uuid, ConversationFacts>,
    /// `(conversation, agent)` pairs of the batch where the agent is a member of the
    /// conversation, of its team, and not revoked.
    pub active_members: HashSet<(Uuid, Uuid)>,
    /// Messages already recorded under the batch's idempotency keys (`(conversation, sender,
    /// request_id)`), as they stand.
    pub recorded: HashMap<RequestKey, Message>,
    /// The tenant's runs among the batch's, by id.
    pub runs: HashMap<RunId, RunFacts>,
}

/// The fate of one request of a batch.
#[derive(Debug, Clone)]
pub enum SendDecision {
    /// Refused: nothing is written for it.
    Refused(BusError),
    /// A repeat of a message recorded before the batch (`created: false`).
    Recorded(Message),
    /// A repeat of the request at this index of the same batch, which creates the message
    /// (`created: false`, that request's message).
    RepeatOf(usize),
    /// Creates a message.
    Create {
        /// Its place in its conversation.
        seq: u64,
        /// Its conversation's body backend.
        backend: String,
        /// The body's SHA-256 (lowercase hex).
        body_sha256: String,
    },
}

/// Decides every request of a batch, in queue order, by the rules of `Ledger::send`:
///
/// 1. a bad `request_id` → `Invalid`;
/// 2. the conversation unknown or of another team → `NotFound`;
/// 3. the sender not an active member → `Forbidden`;
/// 4. the run unknown or of another team → `NotFound`, another agent's → `Forbidden`;
/// 5. the repeat rule: a message recorded under the request's key ([`RequestKey`]:
///    `(conversation, sender, request_id)`) — before the batch, or created by an earlier request
///    of it (the first in queue order wins) — is answered when the body is the same
///    (`Recorded` / `RepeatOf`), else `Conflict`; another sender's message under the same
///    request id is no repeat;
/// 6. the run sealed → `Conflict`;
/// 7. otherwise `Create`, with the conversation's `next_seq` plus the number of messages the
///    batch creates in it before this one: gap-free in queue order.
///
/// Returns one decision per request, in order.
pub fn plan_sends(requests: &[SendRequest], facts: &SendFacts) -> Vec<SendDecision> {
    let mut created_in: HashMap<Uuid, u64> = HashMap::new();
    let mut first: HashMap<BatchKey<'_>, (usize, String)> = HashMap::new();
    let mut plan = Vec::with_capacity(requests.len());
    for (i, request) in requests.iter().enumerate() {
        let decision = match decide(request, facts, &first) {
            Ok(Decided::Recorded(message)) => SendDecision::Recorded(message),
            Ok(Decided::RepeatOf(j)) => SendDecision::RepeatOf(j),
            Ok(Decided::Create {
                backend,
                next_seq,
                body_sha256,
            }) => {
                let made = created_in.entry(request.conversation).or_default();
                let seq = next_seq + *made;
                *made += 1;
                first.insert(batch_key(request), (i, body_sha256.clone()));
                SendDecision::Create {
                    seq,
                    backend,
                    body_sha256,
                }
            }
            Err(e) => SendDecision::Refused(e),
        };
        plan.push(decision);
    }
    plan
}

/// A request's [`RequestKey`] borrowed from it: `(conversation, sender, request_id)`.
type BatchKey<'a> = (Uuid, Uuid, &'a str);

fn batch_key(request: &SendRequest) -> BatchKey<'_> {
    (
        request.conversation,
        request.sender,
        request.request_id.as_str(),
    )
}

enum Decided {
    Recorded(Message),
    RepeatOf(usize),
    Create {
        backend: String,
        next_seq: u64,
        body_sha256: String,
    },
}

fn decide(
    request: &SendRequest,
    facts: &SendFacts,
    first: &HashMap<BatchKey<'_>, (usize, String)>,
) -> BusResult<Decided> {
    validate_request_id(&request.request_id)?;
    let conversation = facts
        .conversations
        .get(&request.conversation)
        .filter(|c| c.team == request.team)
        .ok_or_else(|| BusError::not_found(format!("conversation {}", request.conversation)))?;
    if !facts
        .active_members
        .contains(&(request.conversation, request.sender))
    {
        return Err(BusError::forbidden(
            "the sender is not an active member of the conversation",
        ));
    }
    let sealed = match request.run {
        None => false,
        Some(run) => {
            let r = facts
                .runs
                .get(&run)
                .filter(|r| r.team == request.team)
                .ok_or_else(|| BusError::not_found(format!("run {run}")))?;
            if r.agent != request.sender {
                return Err(BusError::forbidden(format!(
                    "run {run} belongs to another agent"
                )));
            }
            r.sealed
        }
    };
    let sha = body_sha256(&request.body);
    if let Some(message) = facts.recorded.get(&RequestKey::from(request)) {
        if message.body_sha256 != sha {
            return Err(conflict());
        }
        return Ok(Decided::Recorded(message.clone()));
    }
    if let Some((j, first_sha)) = first.get(&batch_key(request)) {
        if *first_sha != sha {
            return Err(conflict());
        }
        return Ok(Decided::RepeatOf(*j));
    }
    if sealed {
        return Err(BusError::conflict(format!(
            "run {} is sealed",
            request.run.map(|r| r.to_string()).unwrap_or_default()
        )));
    }
    Ok(Decided::Create {
        backend: conversation.backend.clone(),
        next_seq: conversation.next_seq,
        body_sha256: sha,
    })
}

fn conflict() -> BusError {
    BusError::conflict("request id was already used with another body")
}

/// The answers of a planned batch: `created` holds the message each `Create` decision wrote,
/// by request index. Returns one outcome per decision, in order (`RepeatOf(j)` answers request
/// `j`'s message with `created: false`).
///
/// # Panics
/// When a `Create` (or the target of a `RepeatOf`) has no message in `created`: the caller wrote
/// the plan incompletely.
pub fn answer_sends(
    plan: Vec<SendDecision>,
    created: &HashMap<usize, Message>,
) -> Vec<BusResult<Sent>> {
    plan.into_iter()
        .enumerate()
        .map(|(i, decision)| match decision {
            SendDecision::Refused(e) => Err(e),
            SendDecision::Recorded(message) => Ok(Sent {
                message,
                created: false,
            }),
            SendDecision::RepeatOf(j) => Ok(Sent {
                message: created[&j].clone(),
                created: false,
            }),
            SendDecision::Create { .. } => Ok(Sent {
                message: created[&i].clone(),
                created: true,
            }),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use chrono::{DateTime, TimeZone, Utc};

    use super::*;

    fn at() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2030, 1, 1, 0, 0, 0).unwrap()
    }

    struct World {
        team: Uuid,
        conv: Uuid,
        other: Uuid,
        a: Uuid,
        b: Uuid,
        revoked: Uuid,
        facts: SendFacts,
    }

    fn world() -> World {
        let (team, conv, other, a, b, revoked) = (
            Uuid::new_v4(),
            Uuid::new_v4(),
            Uuid::new_v4(),
            Uuid::new_v4(),
            Uuid::new_v4(),
            Uuid::new_v4(),
        );
        let mut facts = SendFacts::default();
        for (c, next_seq) in [(conv, 4), (other, 1)] {
            facts.conversations.insert(
                c,
                ConversationFacts {
                    team,
                    backend: "remote".into(),
                    next_seq,
                },
            );
            facts.active_members.insert((c, a));
            facts.active_members.insert((c, b));
        }
        World {
            team,
            conv,
            other,
            a,
            b,
            revoked,
            facts,
        }
    }

    fn req(w: &World, conv: Uuid, sender: Uuid, id: &str, body: &str) -> SendRequest {
        SendRequest {
            team: w.team,
            conversation: conv,
            sender,
            request_id: id.into(),
            body: body.into(),
            run: None,
        }
    }

    fn seq_of(d: &SendDecision) -> Option<u64> {
        match d {
            SendDecision::Create { seq, .. } => Some(*seq),
            _ => None,
        }
    }

    #[test]
    fn seqs_are_gap_free_per_conversation_in_queue_order() {
        let w = world();
        let reqs = vec![
            req(&w, w.conv, w.a, "1", "x"),
            req(&w, w.other, w.a, "2", "x"),
            req(&w, w.conv, w.a, "3", "x"),
            req(&w, w.conv, w.revoked, "4", "x"),
            req(&w, w.conv, w.a, "5", "x"),
        ];
        let plan = plan_sends(&reqs, &w.facts);
        let seqs: Vec<Option<u64>> = plan.iter().map(seq_of).collect();
        assert_eq!(seqs, vec![Some(4), Some(1), Some(5), None, Some(6)]);
        assert!(matches!(
            plan[3],
            SendDecision::Refused(BusError::Forbidden { .. })
        ));
    }

    #[test]
    fn the_first_in_queue_order_wins_and_later_ones_repeat_or_conflict() {
        let mut w = world();
        let recorded = Message::pending(
            Uuid::new_v4(),
            &req(&w, w.conv, w.a, "old", "old body"),
            1,
            "remote".into(),
            body_sha256("old body"),
            at(),
        );
        w.facts
            .recorded
            .insert(RequestKey::from(&recorded), recorded.clone());
        let reqs = vec![
            req(&w, w.conv, w.a, "new", "body"),
            req(&w, w.conv, w.a, "new", "body"),
            req(&w, w.conv, w.a, "new", "another"),
            req(&w, w.conv, w.a, "old", "old body"),
            req(&w, w.conv, w.a, "old", "changed"),
            req(&w, w.conv, w.a, "bad id", "body"),
            req(&w, Uuid::new_v4(), w.a, "x", "body"),
        ];
        let plan = plan_sends(&reqs, &w.facts);
        assert_eq!(seq_of(&plan[0]), Some(4));
        assert!(matches!(plan[1], SendDecision::RepeatOf(0)));
        assert!(matches!(
            plan[2],
            SendDecision::Refused(BusError::Conflict { .. })
        ));
        assert!(matches!(&plan[3], SendDecision::Recorded(m) if *m == recorded));
        assert!(matches!(
            plan[4],
            SendDecision::Refused(BusError::Conflict { .. })
        ));
        assert!(matches!(
            plan[5],
            SendDecision::Refused(BusError::Invalid { .. })
        ));
        assert!(matches!(
            plan[6],
            SendDecision::Refused(BusError::NotFound { .. })
        ));
        let mut created = HashMap::new();
        let m = Message::pending(
            Uuid::new_v4(),
            &reqs[0],
            4,
            "remote".into(),
            String::new(),
            at(),
        );
        created.insert(0, m.clone());
        let answers = answer_sends(plan, &created);
        assert!(answers[0].as_ref().unwrap().created);
        let again = answers[1].as_ref().unwrap();
        assert_eq!((again.created, &again.message), (false, &m));
    }

    #[test]
    fn run_rules_come_before_the_repeat_rule_and_the_seal_after_it() {
        let mut w = world();
        let (mine, sealed, theirs) = (RunId::new(), RunId::new(), RunId::new());
        let other_agent = Uuid::new_v4();
        for (run, agent, is_sealed) in [
            (mine, w.a, false),
            (sealed, w.a, true),
            (theirs, other_agent, false),
        ] {
            w.facts.runs.insert(
                run,
                RunFacts {
                    team: w.team,
                    agent,
                    sealed: is_sealed,
                },
            );
        }
        let with = |id: &str, run: RunId| SendRequest {
            run: Some(run),
            ..req(&w, w.conv, w.a, id, "b")
        };
        let reqs = vec![
            with("1", mine),
            with("1", sealed),
            with("2", sealed),
            with("3", theirs),
            with("4", RunId::new()),
        ];
        let plan = plan_sends(&reqs, &w.facts);
        assert_eq!(seq_of(&plan[0]), Some(4));
        assert!(
            matches!(plan[1], SendDecision::RepeatOf(0)),
            "a repeat answers before the seal"
        );
        assert!(matches!(
            plan[2],
            SendDecision::Refused(BusError::Conflict { .. })
        ));
        assert!(matches!(
            plan[3],
            SendDecision::Refused(BusError::Forbidden { .. })
        ));
        assert!(matches!(
            plan[4],
            SendDecision::Refused(BusError::NotFound { .. })
        ));
    }

    #[test]
    fn a_refused_first_request_leaves_its_request_id_free() {
        let w = world();
        let reqs = vec![
            req(&w, w.conv, w.revoked, "same", "b"),
            req(&w, w.conv, w.a, "same", "b"),
        ];
        let plan = plan_sends(&reqs, &w.facts);
        assert!(matches!(
            plan[0],
            SendDecision::Refused(BusError::Forbidden { .. })
        ));
        assert_eq!(seq_of(&plan[1]), Some(4));
        assert!(plan_sends(&[], &w.facts).is_empty());
    }

    #[test]
    fn a_request_id_is_the_senders_own() {
        let mut w = world();
        let alices = Message::pending(
            Uuid::new_v4(),
            &req(&w, w.conv, w.a, "t42-1", "alice's"),
            1,
            "remote".into(),
            body_sha256("alice's"),
            at(),
        );
        w.facts
            .recorded
            .insert(RequestKey::from(&alices), alices.clone());
        let reqs = vec![
            // Bob's first use of the id alice used before the batch: a message of his own, with
            // her body or another.
            req(&w, w.conv, w.b, "t42-1", "alice's"),
            req(&w, w.conv, w.a, "t42-1", "alice's"),
            req(&w, w.conv, w.b, "t42-1", "alice's"),
            req(&w, w.conv, w.b, "t42-1", "another"),
            // Both use a fresh id in the same batch: two messages, each repeat its sender's.
            req(&w, w.conv, w.a, "t42-2", "a"),
            req(&w, w.conv, w.b, "t42-2", "b"),
            req(&w, w.conv, w.b, "t42-2", "b"),
            req(&w, w.conv, w.a, "t42-2", "a"),
            req(&w, w.conv, w.a, "t42-2", "b"),
        ];
        let plan = plan_sends(&reqs, &w.facts);
        assert_eq!(seq_of(&plan[0]), Some(4), "bob's own message");
        assert!(matches!(&plan[1], SendDecision::Recorded(m) if *m == alices));
        assert!(matches!(plan[2], SendDecision::RepeatOf(0)));
        assert!(matches!(
            plan[3],
            SendDecision::Refused(BusError::Conflict { .. })
        ));
        assert_eq!(seq_of(&plan[4]), Some(5));
        assert_eq!(seq_of(&plan[5]), Some(6));
        assert!(matches!(plan[6], SendDecision::RepeatOf(5)));
        assert!(matches!(plan[7], SendDecision::RepeatOf(4)));
        assert!(matches!(
            plan[8],
            SendDecision::Refused(BusError::Conflict { .. })
        ));
    }
}
