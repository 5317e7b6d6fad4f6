//! `Oversight` behaviours: agents' last activity and backlog, conversations with their size,
//! each recipient's delivery state, sends and deliveries per time bucket, the bodies a team
//! keeps, and the human members operators post as.
//!
//! One async function per behaviour, generic over the fixture, each on a fresh, empty ledger
//! (oversight reads its store), asserting error variants (never text); instants are the
//! behaviour's own ([`crate::ledger::time`]). [`oversight_behaviours`] lists them for a test
//! target; [`crate::ledger_trials`] registers them with the ledger's. What a human member is to
//! the ledger (no receipts, no token, its messages marked) is in [`crate::ledger::humans`].

use std::time::Duration;

use chrono::{DateTime, Utc};
use crewbus_domain::{
    Agent, AgentKind, BusError, DeliveryState, MAX_PAGE, Message, Operator, OperatorScope,
    RunOutcome, WakeupTarget, human_member_name,
};
use crewbus_ports::Operators;
use uuid::Uuid;

use crate::LedgerFixture;
use crate::ledger::scene::{INBOX, REMOTE, Scene, scene, token};
use crate::ledger::time::t;
use crate::trial::{Behaviour, behaviours};

/// Every oversight behaviour, by name.
pub fn oversight_behaviours() -> Vec<Behaviour<dyn LedgerFixture>> {
    behaviours!["oversight" =>
        touch_agents_never_moves_back_and_ignores_unknowns,
        agent_activity_counts_pending_deliveries,
        set_status_replaces_and_clears_the_line,
        set_status_refuses_revoked_and_strangers,
        agent_activity_names_the_latest_open_run,
        conversation_summaries_count_messages,
        recipient_states_follow_receipts_and_hand_outs,
        recipient_states_keep_the_order_asked_for,
        activity_counts_sends_and_deliveries_per_bucket,
        activity_buckets_align_to_multiples_of_their_length,
        activity_refuses_short_buckets_and_long_ranges,
        storage_use_counts_kept_bodies_per_backend,
        human_member_is_one_per_operator_and_team,
        human_member_joins_a_conversation_once,
        human_member_refuses_revoked_operators_and_members,
        human_member_is_found_only_in_reach,
    ]
}

/// An operator `name` of every team, created at `t(0)`.
pub(crate) async fn operator(ops: &dyn Operators, name: &str) -> Operator {
    ops.create_operator(name, &OperatorScope::Everything, token(), t(0))
        .await
        .expect("create operator")
}

impl Scene {
    /// Hands `message` out to `to` and confirms it, both at `at`.
    pub(crate) async fn deliver(&self, to: &Agent, message: Uuid, at: DateTime<Utc>) {
        let hand_out = self.issue(to, message, at).await;
        self.ledger
            .confirm(self.team.id, to.id, &[hand_out.delivery], None, at)
            .await
            .expect("confirm");
    }

    /// The scene team's human member for `operator`, joined to the scene's conversation at `at`.
    pub(crate) async fn human(&self, operator: &Operator, at: DateTime<Utc>) -> Agent {
        self.oversight
            .human_member(self.team.id, self.conv.id, operator, at)
            .await
            .expect("human member")
    }

    /// Sends `body` as `from` into conversation `conversation` at `at`; expects a new message.
    pub(crate) async fn send_in(
        &self,
        conversation: Uuid,
        from: &Agent,
        request_id: &str,
        body: &str,
        at: DateTime<Utc>,
    ) -> Message {
        let mut request = self.request(from, request_id, body, None);
        request.conversation = conversation;
        let sent = self.ledger.send(request, at).await.expect("send");
        assert!(sent.created, "a new request id creates a message");
        sent.message
    }
}

/// Each touched agent's last activity becomes `max(stored, at)`: an older touch changes nothing;
/// unknown agents, agents named with another team, and repeats are ignored; the count is of
/// rows changed. More than `MAX_PAGE` targets are `Invalid`.
pub async fn touch_agents_never_moves_back_and_ignores_unknowns<F: LedgerFixture + ?Sized>(fx: &F) {
    let s = scene(fx, REMOTE).await;
    let o = &s.oversight;
    let (a, b) = (
        WakeupTarget::new(s.team.id, s.a.id),
        WakeupTarget::new(s.team.id, s.b.id),
    );
    let last = |list: Vec<crewbus_domain::AgentActivity>, id: Uuid| {
        list.into_iter()
            .find(|x| x.agent.id == id)
            .expect("listed")
            .last_active_at
    };
    assert_eq!(
        last(o.agent_activity(s.team.id).await.unwrap(), s.a.id),
        None
    );
    assert_eq!(o.touch_agents(&[a], t(10)).await.unwrap(), 1);
    assert_eq!(o.touch_agents(&[a], t(5)).await.unwrap(), 0);
    assert_eq!(o.touch_agents(&[a], t(10)).await.unwrap(), 0);
    let activity = o.agent_activity(s.team.id).await.unwrap();
    assert_eq!(last(activity.clone(), s.a.id), Some(t(10)));
    assert_eq!(last(activity, s.b.id), None);
    let other = s.other_team().await;
    let stranger = [
        WakeupTarget::new(s.team.id, Uuid::new_v4()),
        WakeupTarget::new(other.id, s.b.id),
    ];
    assert_eq!(o.touch_agents(&stranger, t(20)).await.unwrap(), 0);
    assert_eq!(o.touch_agents(&[a, b, a, b], t(20)).await.unwrap(), 2);
    let activity = o.agent_activity(s.team.id).await.unwrap();
    assert_eq!(last(activity.clone(), s.a.id), Some(t(20)));
    assert_eq!(last(activity, s.b.id), Some(t(20)));
    assert_eq!(o.touch_agents(&[], t(30)).await.unwrap(), 0);
    let too_many = vec![a; MAX_PAGE + 1];
    assert!(matches!(
        o.touch_agents(&too_many, t(30)).await,
        Err(BusError::Invalid { .. })
    ));
}

/// Every agent of the team (revoked ones included), by name, with its pending deliveries —
/// receipts of stored messages not yet confirmed — and when the oldest of those was stored; a
/// confirmed delivery is no longer pending, a message still pending publication not yet.
pub async fn agent_activity_counts_pending_deliveries<F: LedgerFixture + ?Sized>(fx: &F) {
    let s = scene(fx, REMOTE).await;
    let m1 = s.send_stored(&s.a, "r1", "one", t(2)).await;
    s.send_stored(&s.a, "r2", "two", t(4)).await;
    s.send(&s.a, "r3", "not stored yet", t(6)).await;
    s.ledger
        .revoke_agent(s.team.id, s.c.id, t(7))
        .await
        .unwrap();
    let pending = |list: &[crewbus_domain::AgentActivity], id: Uuid| {
        let x = list.iter().find(|x| x.agent.id == id).expect("listed");
        (x.pending, x.oldest_pending_at)
    };
    let activity = s.oversight.agent_activity(s.team.id).await.unwrap();
    let names: Vec<&str> = activity.iter().map(|x| x.agent.name.as_str()).collect();
    assert_eq!(names, ["a", "b", "c"]);
    assert!(activity[2].agent.revoked());
    assert_eq!(activity[0].agent, s.a);
    assert_eq!(pending(&activity, s.a.id), (0, None));
    assert_eq!(pending(&activity, s.b.id), (2, Some(t(2))));
    assert_eq!(pending(&activity, s.c.id), (2, Some(t(2))));
    s.deliver(&s.b, m1.id, t(8)).await;
    let activity = s.oversight.agent_activity(s.team.id).await.unwrap();
    assert_eq!(pending(&activity, s.b.id), (1, Some(t(4))));
    assert_eq!(pending(&activity, s.c.id), (2, Some(t(2))));
    assert!(matches!(
        s.oversight.agent_activity(Uuid::new_v4()).await,
        Err(BusError::NotFound { .. })
    ));
}

/// The status line an agent sets is listed with its time; a later one replaces it (whatever its
/// time), the empty line clears it (`None`); another agent's line is its own.
pub async fn set_status_replaces_and_clears_the_line<F: LedgerFixture + ?Sized>(fx: &F) {
    let s = scene(fx, REMOTE).await;
    let o = &s.oversight;
    let status = |list: &[crewbus_domain::AgentActivity], id: Uuid| {
        list.iter()
            .find(|x| x.agent.id == id)
            .expect("listed")
            .status
            .clone()
            .map(|l| (l.text, l.set_at))
    };
    let listed = o.agent_activity(s.team.id).await.unwrap();
    assert_eq!(status(&listed, s.a.id), None);
    o.set_status(&s.a, "reviewing PR 12", t(3)).await.unwrap();
    o.set_status(&s.b, "idle — waiting for « a »", t(4))
        .await
        .unwrap();
    let listed = o.agent_activity(s.team.id).await.unwrap();
    assert_eq!(
        status(&listed, s.a.id),
        Some(("reviewing PR 12".to_owned(), t(3)))
    );
    assert_eq!(
        status(&listed, s.b.id),
        Some(("idle — waiting for « a »".to_owned(), t(4)))
    );
    o.set_status(&s.a, "merging", t(2)).await.unwrap();
    let listed = o.agent_activity(s.team.id).await.unwrap();
    assert_eq!(status(&listed, s.a.id), Some(("merging".to_owned(), t(2))));
    o.set_status(&s.a, "", t(5)).await.unwrap();
    let listed = o.agent_activity(s.team.id).await.unwrap();
    assert_eq!(status(&listed, s.a.id), None);
    assert_eq!(
        status(&listed, s.b.id),
        Some(("idle — waiting for « a »".to_owned(), t(4)))
    );
}

/// A revoked agent's line cannot be set (`Forbidden`) and stays as it was; an agent unknown in
/// the team it names, or named with another team, is `NotFound`.
pub async fn set_status_refuses_revoked_and_strangers<F: LedgerFixture + ?Sized>(fx: &F) {
    let s = scene(fx, REMOTE).await;
    let o = &s.oversight;
    o.set_status(&s.c, "before", t(1)).await.unwrap();
    s.ledger
        .revoke_agent(s.team.id, s.c.id, t(2))
        .await
        .unwrap();
    assert!(matches!(
        o.set_status(&s.c, "after", t(3)).await,
        Err(BusError::Forbidden { .. })
    ));
    let listed = o.agent_activity(s.team.id).await.unwrap();
    let c = listed.iter().find(|x| x.agent.id == s.c.id).unwrap();
    assert_eq!(c.status.as_ref().map(|l| l.text.as_str()), Some("before"));
    let mut stranger = s.a.clone();
    stranger.id = Uuid::new_v4();
    assert!(matches!(
        o.set_status(&stranger, "x", t(3)).await,
        Err(BusError::NotFound { .. })
    ));
    let other = s.other_team().await;
    let mut elsewhere = s.a.clone();
    elsewhere.team = other.id;
    assert!(matches!(
        o.set_status(&elsewhere, "x", t(3)).await,
        Err(BusError::NotFound { .. })
    ));
}

/// An agent's current run is its latest admitted run not sealed: none before its first run,
/// the newer of two open runs, the older once the newer is sealed, none once both are.
pub async fn agent_activity_names_the_latest_open_run<F: LedgerFixture + ?Sized>(fx: &F) {
    let s = scene(fx, REMOTE).await;
    let current = |list: Vec<crewbus_domain::AgentActivity>, id: Uuid| {
        list.into_iter()
            .find(|x| x.agent.id == id)
            .expect("listed")
            .current_run
    };
    let team = s.team.id;
    assert_eq!(
        current(s.oversight.agent_activity(team).await.unwrap(), s.a.id),
        None
    );
    let older = s.journal.admit(team, s.a.id, t(1)).await.unwrap();
    let newer = s.journal.admit(team, s.a.id, t(2)).await.unwrap();
    let theirs = s.journal.admit(team, s.b.id, t(3)).await.unwrap();
    let listed = s.oversight.agent_activity(team).await.unwrap();
    assert_eq!(current(listed.clone(), s.a.id), Some(newer.0));
    assert_eq!(current(listed, s.b.id), Some(theirs.0));
    s.journal
        .seal(newer, RunOutcome::Succeeded, "done", t(4))
        .await
        .unwrap();
    let listed = s.oversight.agent_activity(team).await.unwrap();
    assert_eq!(current(listed, s.a.id), Some(older.0));
    s.journal
        .seal(older, RunOutcome::Failed, "crashed", t(5))
        .await
        .unwrap();
    let listed = s.oversight.agent_activity(team).await.unwrap();
    assert_eq!(current(listed.clone(), s.a.id), None);
    assert_eq!(current(listed, s.b.id), Some(theirs.0));
}

/// Every conversation of the team, oldest first, with its members, how many messages it holds
/// (every publication state) and when the latest was sent.
pub async fn conversation_summaries_count_messages<F: LedgerFixture + ?Sized>(fx: &F) {
    let s = scene(fx, REMOTE).await;
    let quiet = s
        .ledger
        .create_conversation(s.team.id, s.a.id, "quiet", &[s.b.id], t(1))
        .await
        .unwrap();
    s.send_stored(&s.a, "r1", "one", t(2)).await;
    s.send(&s.b, "r2", "two", t(3)).await;
    s.send(&s.c, "r3", "three", t(5)).await;
    let summaries = s.oversight.conversation_summaries(s.team.id).await.unwrap();
    assert_eq!(summaries.len(), 2);
    assert_eq!(summaries[0].conversation, s.conv);
    assert_eq!(
        (summaries[0].messages, summaries[0].last_sent_at),
        (3, Some(t(5)))
    );
    assert_eq!(summaries[1].conversation, quiet);
    assert_eq!(
        (summaries[1].messages, summaries[1].last_sent_at),
        (0, None)
    );
    let other = s.other_team().await;
    assert!(
        s.oversight
            .conversation_summaries(other.id)
            .await
            .unwrap()
            .is_empty()
    );
    assert!(matches!(
        s.oversight.conversation_summaries(Uuid::new_v4()).await,
        Err(BusError::NotFound { .. })
    ));
}

/// Each recipient's receipt with its hand-outs: pending before the body is stored, stored,
/// handed out (counting every hand-out, with the latest's time), confirmed, acknowledged.
pub async fn recipient_states_follow_receipts_and_hand_outs<F: LedgerFixture + ?Sized>(fx: &F) {
    let s = scene(fx, REMOTE).await;
    let pending = s.send(&s.a, "r0", "waits", t(0)).await;
    let states = s
        .oversight
        .recipient_states(s.team.id, &[pending.id])
        .await
        .unwrap();
    assert_eq!(states.len(), 2);
    assert!(states.iter().all(|x| x.state() == DeliveryState::Pending));
    assert!(states.iter().all(|x| x.hand_outs == 0));
    let m = s.send_stored(&s.a, "r1", "hello", t(1)).await;
    let state_of = |list: &[crewbus_domain::RecipientState], who: Uuid| {
        let x = list
            .iter()
            .find(|x| x.receipt.message == m.id && x.receipt.recipient == who)
            .expect("a receipt per recipient");
        (x.state(), x.hand_outs, x.last_handed_out_at)
    };
    let read = || async {
        s.oversight
            .recipient_states(s.team.id, &[m.id])
            .await
            .unwrap()
    };
    let states = read().await;
    assert_eq!(state_of(&states, s.b.id), (DeliveryState::Stored, 0, None));
    s.issue(&s.b, m.id, t(10)).await;
    // Held for the grace period (60 s); handed out again after it ran out.
    let again = s.issue(&s.b, m.id, t(100)).await;
    let states = read().await;
    assert_eq!(
        state_of(&states, s.b.id),
        (DeliveryState::HandedOut, 2, Some(t(100)))
    );
    assert_eq!(state_of(&states, s.c.id), (DeliveryState::Stored, 0, None));
    s.ledger
        .confirm(s.team.id, s.b.id, &[again.delivery], None, t(101))
        .await
        .unwrap();
    let states = read().await;
    assert_eq!(
        state_of(&states, s.b.id),
        (DeliveryState::Confirmed, 2, Some(t(100)))
    );
    s.ledger
        .acknowledge(s.team.id, s.b.id, m.id, None, t(102))
        .await
        .unwrap();
    let states = read().await;
    assert_eq!(state_of(&states, s.b.id).0, DeliveryState::Acknowledged);
    let b = states
        .iter()
        .find(|x| x.receipt.recipient == s.b.id)
        .unwrap();
    assert_eq!(b.receipt.delivered_at, Some(t(101)));
    assert_eq!(b.receipt.acknowledged_at, Some(t(102)));
}

/// The states come in the order of the ids asked for (each once), each message's recipients by
/// recipient key; unknown ids and other teams' messages are left out; more than `MAX_PAGE` ids
/// are `Invalid`.
pub async fn recipient_states_keep_the_order_asked_for<F: LedgerFixture + ?Sized>(fx: &F) {
    let s = scene(fx, REMOTE).await;
    let one = s.send_stored(&s.a, "r1", "one", t(1)).await;
    let two = s.send(&s.b, "r2", "two", t(2)).await;
    let other = s.other_team().await;
    let x = s.agent_of(&other, "x").await;
    let y = s.agent_of(&other, "y").await;
    let theirs = s
        .ledger
        .create_conversation(other.id, x.id, "theirs", &[y.id], t(0))
        .await
        .unwrap();
    let foreign = s
        .ledger
        .send(
            crewbus_domain::SendRequest {
                team: other.id,
                conversation: theirs.id,
                sender: x.id,
                request_id: "f".into(),
                body: "foreign".into(),
                run: None,
            },
            t(3),
        )
        .await
        .unwrap()
        .message;
    let asked = [two.id, Uuid::new_v4(), one.id, foreign.id, two.id];
    let states = s
        .oversight
        .recipient_states(s.team.id, &asked)
        .await
        .unwrap();
    let got: Vec<(Uuid, String)> = states
        .iter()
        .map(|x| (x.receipt.message, x.receipt.recipient_key.clone()))
        .collect();
    let keys = |mut agents: Vec<&Agent>| {
        agents.sort_by(|p, q| p.recipient_key.cmp(&q.recipient_key));
        agents
            .into_iter()
            .map(|a| a.recipient_key.clone())
            .collect::<Vec<_>>()
    };
    let mut want: Vec<(Uuid, String)> = keys(vec![&s.a, &s.c])
        .into_iter()
        .map(|k| (two.id, k))
        .collect();
    want.extend(keys(vec![&s.b, &s.c]).into_iter().map(|k| (one.id, k)));
    assert_eq!(got, want);
    assert!(
        s.oversight
            .recipient_states(s.team.id, &[])
            .await
            .unwrap()
            .is_empty()
    );
    let too_many = vec![one.id; MAX_PAGE + 1];
    assert!(matches!(
        s.oversight.recipient_states(s.team.id, &too_many).await,
        Err(BusError::Invalid { .. })
    ));
}

/// Sends (by `sent_at`) and confirmed deliveries (by `delivered_at`) from `since` (inclusive) to
/// `until` (exclusive), counted per bucket; only buckets with something in them, ascending, each
/// starting at its aligned boundary (the first may start before `since`).
pub async fn activity_counts_sends_and_deliveries_per_bucket<F: LedgerFixture + ?Sized>(fx: &F) {
    let s = scene(fx, REMOTE).await;
    let minute = Duration::from_secs(60);
    // t(0) is a whole minute (2030-01-01T00:00:00Z).
    s.send_stored(&s.a, "r1", "before since", t(10)).await;
    let m2 = s.send_stored(&s.a, "r2", "first bucket", t(50)).await;
    let m3 = s.send_stored(&s.b, "r3", "second bucket", t(70)).await;
    s.deliver(&s.b, m2.id, t(75)).await;
    s.deliver(&s.c, m2.id, t(130)).await;
    s.deliver(&s.a, m3.id, t(200)).await;
    s.send(&s.c, "r4", "at until", t(200)).await;
    let buckets = s
        .oversight
        .activity(s.team.id, t(30), t(200), minute)
        .await
        .unwrap();
    let got: Vec<(DateTime<Utc>, u64, u64)> = buckets
        .iter()
        .map(|b| (b.start, b.sent, b.delivered))
        .collect();
    assert_eq!(got, vec![(t(0), 1, 0), (t(60), 1, 1), (t(120), 0, 1)]);
    let all = s
        .oversight
        .activity(s.team.id, t(0), t(300), minute)
        .await
        .unwrap();
    let got: Vec<(DateTime<Utc>, u64, u64)> =
        all.iter().map(|b| (b.start, b.sent, b.delivered)).collect();
    assert_eq!(
        got,
        vec![(t(0), 2, 0), (t(60), 1, 1), (t(120), 0, 1), (t(180), 1, 1)]
    );
    assert!(
        s.oversight
            .activity(s.team.id, t(300), t(900), minute)
            .await
            .unwrap()
            .is_empty()
    );
    let other = s.other_team().await;
    assert!(
        s.oversight
            .activity(other.id, t(0), t(300), minute)
            .await
            .unwrap()
            .is_empty()
    );
}

/// Bucket boundaries are multiples of the bucket length since the Unix epoch, whatever `since`
/// is, as [`crewbus_domain::bucket_start`] computes them.
pub async fn activity_buckets_align_to_multiples_of_their_length<F: LedgerFixture + ?Sized>(
    fx: &F,
) {
    let s = scene(fx, REMOTE).await;
    let bucket = Duration::from_secs(7);
    for (i, at) in [3, 9, 10, 11, 40].into_iter().enumerate() {
        s.send(&s.a, &format!("r{i}"), "x", t(at)).await;
    }
    let buckets = s
        .oversight
        .activity(s.team.id, t(1), t(41), bucket)
        .await
        .unwrap();
    assert!(!buckets.is_empty());
    for b in &buckets {
        assert_eq!(b.start.timestamp_micros() % 7_000_000, 0, "{b:?}");
    }
    let expected = |at: i64| crewbus_domain::bucket_start(t(at), bucket);
    let mut want: Vec<(i64, u64)> = Vec::new();
    for at in [3, 9, 10, 11, 40] {
        match want.last_mut() {
            Some((start, n)) if *start == expected(at) => *n += 1,
            _ => want.push((expected(at), 1)),
        }
    }
    let got: Vec<(i64, u64)> = buckets
        .iter()
        .map(|b| (b.start.timestamp_micros(), b.sent))
        .collect();
    assert_eq!(got, want);
    assert_eq!(buckets.iter().map(|b| b.sent).sum::<u64>(), 5);
}

/// A bucket under one second, or a range of more than 10 000 buckets, is `Invalid`; exactly
/// 10 000 is fine; an unknown team is `NotFound`.
pub async fn activity_refuses_short_buckets_and_long_ranges<F: LedgerFixture + ?Sized>(fx: &F) {
    let s = scene(fx, REMOTE).await;
    let o = &s.oversight;
    let second = Duration::from_secs(1);
    assert!(matches!(
        o.activity(s.team.id, t(0), t(10), Duration::from_millis(999))
            .await,
        Err(BusError::Invalid { .. })
    ));
    assert!(matches!(
        o.activity(s.team.id, t(0), t(10), Duration::ZERO).await,
        Err(BusError::Invalid { .. })
    ));
    assert!(matches!(
        o.activity(s.team.id, t(0), t(10_001), second).await,
        Err(BusError::Invalid { .. })
    ));
    assert!(
        o.activity(s.team.id, t(0), t(10_000), second)
            .await
            .unwrap()
            .is_empty()
    );
    assert!(matches!(
        o.activity(Uuid::new_v4(), t(0), t(10), second).await,
        Err(BusError::NotFound { .. })
    ));
}

/// Per body backend, by name: the messages whose body is stored and not removed by retention,
/// their bytes, and the messages still pending publication; failed and retained ones are not
/// counted.
pub async fn storage_use_counts_kept_bodies_per_backend<F: LedgerFixture + ?Sized>(fx: &F) {
    let s = scene(fx, REMOTE).await;
    assert!(s.oversight.storage_use(s.team.id).await.unwrap().is_empty());
    s.send_stored(&s.a, "r1", "hello", t(1)).await;
    s.send_stored(&s.a, "r2", "abc", t(5)).await;
    s.send_stored(&s.a, "r3", "four", t(6)).await;
    let retained = s
        .ledger
        .mark_retained(s.team.id, REMOTE, t(3), t(10))
        .await
        .unwrap();
    assert_eq!(retained, 1, "the body stored at 1");
    s.send(&s.a, "r4", "pending", t(11)).await;
    let other = "conformance-other";
    s.ledger
        .set_team_backends(s.team.id, other, INBOX)
        .await
        .unwrap();
    let conv = s
        .ledger
        .create_conversation(s.team.id, s.a.id, "elsewhere", &[s.b.id], t(12))
        .await
        .unwrap();
    s.send_in(conv.id, &s.a, "r5", "queued", t(13)).await;
    let usage = s.oversight.storage_use(s.team.id).await.unwrap();
    let got: Vec<(&str, u64, u64, u64)> = usage
        .iter()
        .map(|u| (u.backend.as_str(), u.messages, u.bytes, u.pending))
        .collect();
    assert_eq!(got, vec![(other, 0, 0, 1), (REMOTE, 2, 7, 1)]);
    assert!(matches!(
        s.oversight.storage_use(Uuid::new_v4()).await,
        Err(BusError::NotFound { .. })
    ));
}

/// The first call creates the operator's human member of the team — kind `human`, named
/// `<operator> (human)`, joined at `at` — and every later one finds it again, in any
/// conversation of the team; another operator, or another team, gets its own.
pub async fn human_member_is_one_per_operator_and_team<F: LedgerFixture + ?Sized>(fx: &F) {
    let s = scene(fx, REMOTE).await;
    let ana = operator(&*s.operators, "ana").await;
    let bo = operator(&*s.operators, "bo").await;
    let h = s.human(&ana, t(5)).await;
    assert_eq!(h.kind, AgentKind::Human);
    assert!(h.is_human());
    assert_eq!(h.name, human_member_name("ana"));
    assert_eq!(
        (h.team, h.created_at, h.revoked_at),
        (s.team.id, t(5), None)
    );
    assert_eq!(s.ledger.agent(s.team.id, h.id).await.unwrap(), h);
    let second = s
        .ledger
        .create_conversation(s.team.id, s.a.id, "second", &[s.b.id], t(6))
        .await
        .unwrap();
    let again = s
        .oversight
        .human_member(s.team.id, second.id, &ana, t(7))
        .await
        .unwrap();
    assert_eq!(again, h);
    let hb = s.human(&bo, t(8)).await;
    assert_ne!(hb.id, h.id);
    assert_eq!(hb.name, human_member_name("bo"));
    let other = s.other_team().await;
    let x = s.agent_of(&other, "x").await;
    let theirs = s
        .ledger
        .create_conversation(other.id, x.id, "theirs", &[], t(0))
        .await
        .unwrap();
    let ho = s
        .oversight
        .human_member(other.id, theirs.id, &ana, t(9))
        .await
        .unwrap();
    assert_ne!(ho.id, h.id);
    assert_eq!(ho.team, other.id);
    let humans: Vec<Uuid> = s
        .ledger
        .agents(s.team.id)
        .await
        .unwrap()
        .into_iter()
        .filter(Agent::is_human)
        .map(|a| a.id)
        .collect();
    assert_eq!(humans.len(), 2);
    assert!(humans.contains(&h.id) && humans.contains(&hb.id));
}

/// The human member joins the conversation it is asked for once, at the first `at`; the
/// conversation's other members stay.
pub async fn human_member_joins_a_conversation_once<F: LedgerFixture + ?Sized>(fx: &F) {
    let s = scene(fx, REMOTE).await;
    let ana = operator(&*s.operators, "ana").await;
    let h = s.human(&ana, t(5)).await;
    s.human(&ana, t(9)).await;
    let conv = s.ledger.conversation(s.team.id, s.conv.id).await.unwrap();
    let joined: Vec<_> = conv.members.iter().filter(|m| m.agent == h.id).collect();
    assert_eq!(joined.len(), 1, "one membership");
    assert_eq!(joined[0].joined_at, t(5));
    assert_eq!(joined[0].recipient_key, h.recipient_key);
    assert_eq!(conv.members.len(), 4);
    for agent in [&s.a, &s.b, &s.c] {
        assert!(conv.has_member(agent.id));
    }
    let listed = s.ledger.conversations_for(s.team.id, h.id).await.unwrap();
    assert_eq!(listed, vec![conv]);
}

/// A revoked operator, and an operator whose human member was revoked, are `Forbidden`.
pub async fn human_member_refuses_revoked_operators_and_members<F: LedgerFixture + ?Sized>(fx: &F) {
    let s = scene(fx, REMOTE).await;
    let ana = operator(&*s.operators, "ana").await;
    let bo = operator(&*s.operators, "bo").await;
    let h = s.human(&ana, t(1)).await;
    s.ledger.revoke_agent(s.team.id, h.id, t(2)).await.unwrap();
    assert!(matches!(
        s.oversight
            .human_member(s.team.id, s.conv.id, &ana, t(3))
            .await,
        Err(BusError::Forbidden { .. })
    ));
    let revoked = s.operators.revoke_operator(bo.id, t(4)).await.unwrap();
    for who in [&bo, &revoked] {
        assert!(matches!(
            s.oversight
                .human_member(s.team.id, s.conv.id, who, t(5))
                .await,
            Err(BusError::Forbidden { .. })
        ));
    }
    let humans = s
        .ledger
        .agents(s.team.id)
        .await
        .unwrap()
        .into_iter()
        .filter(Agent::is_human)
        .count();
    assert_eq!(humans, 1, "none created for the revoked operator");
}

/// An unknown team, a conversation unknown or of another team, or a team outside the operator's
/// scope is `NotFound`.
pub async fn human_member_is_found_only_in_reach<F: LedgerFixture + ?Sized>(fx: &F) {
    let s = scene(fx, REMOTE).await;
    let ana = operator(&*s.operators, "ana").await;
    let other = s.other_team().await;
    let x = s.agent_of(&other, "x").await;
    let theirs = s
        .ledger
        .create_conversation(other.id, x.id, "theirs", &[], t(0))
        .await
        .unwrap();
    for (team, conversation) in [
        (Uuid::new_v4(), s.conv.id),
        (s.team.id, Uuid::new_v4()),
        (s.team.id, theirs.id),
    ] {
        assert!(matches!(
            s.oversight
                .human_member(team, conversation, &ana, t(1))
                .await,
            Err(BusError::NotFound { .. })
        ));
    }
    let scoped = s
        .operators
        .create_operator(
            "scoped",
            &OperatorScope::teams([other.id]).unwrap(),
            token(),
            t(0),
        )
        .await
        .unwrap();
    assert!(matches!(
        s.oversight
            .human_member(s.team.id, s.conv.id, &scoped, t(1))
            .await,
        Err(BusError::NotFound { .. })
    ));
    assert!(
        s.oversight
            .human_member(other.id, theirs.id, &scoped, t(1))
            .await
            .is_ok()
    );
}
