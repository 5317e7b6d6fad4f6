//! `Ledger` behaviours of the inbox watch's read (`inbox_news`: pending, news, what a cursor
//! reported, lapsed hand-outs, never a delivered message, never a write) and of the safety
//! sweep's `stored_after` (a watcher is not woken for what it was told of).

use chrono::{DateTime, Utc};
use crewbus_domain::{
    AgentKind, BusError, ConfirmOutcome, InboxNews, MAX_PAGE, Reported, SweepTarget, WakeupTarget,
};
use uuid::Uuid;

use super::super::scene::{REMOTE, Scene, scene};
use super::super::time::t;
use super::{any_message, from_ledger, issued};
use crate::LedgerFixture;

impl Scene {
    /// `inbox_news` for `to` at `at`, up to 20 news, expecting an answer.
    async fn news_for(
        &self,
        to: &crewbus_domain::Agent,
        reported: &Reported,
        at: DateTime<Utc>,
    ) -> InboxNews {
        self.ledger
            .inbox_news(self.team.id, to.id, reported, at, 20)
            .await
            .expect("inbox news")
    }
}

/// The ids of the news, in order.
fn ids(news: &InboxNews) -> Vec<Uuid> {
    news.news.iter().map(|n| n.message.id).collect()
}

/// What a cursor reports: everything stored at or before `floor`, and `ids`.
fn reported(floor: Option<DateTime<Utc>>, ids: &[Uuid]) -> Reported {
    Reported {
        floor,
        ids: ids.to_vec(),
    }
}

/// Every stored, undelivered, unheld message of the recipient is pending and, with nothing
/// reported, news: oldest stored first, at most `limit`, each with its conversation's title and
/// its sender's name and kind; a message not stored yet is neither; each recipient has its own;
/// and the read writes nothing (a hand-out after it is not `redelivered`, receipts unchanged).
pub async fn inbox_news_lists_pending_messages_oldest_first<F: LedgerFixture + ?Sized>(fx: &F) {
    let s = scene(fx, REMOTE).await;
    let nothing = Reported::default();
    let empty = s.news_for(&s.b, &nothing, t(0)).await;
    assert_eq!(empty, InboxNews::default(), "nothing sent: nothing pending");
    let m1 = s.send_stored(&s.a, "r1", "one", t(1)).await;
    let m2 = s.send_stored(&s.c, "r2", "two", t(2)).await;
    let m3 = s.send_stored(&s.a, "r3", "three", t(3)).await;
    s.send(&s.a, "r4", "not stored yet", t(4)).await;

    let news = s.news_for(&s.b, &nothing, t(10)).await;
    assert_eq!(news.pending, 3, "the message not stored yet is not pending");
    assert_eq!(ids(&news), vec![m1.id, m2.id, m3.id], "oldest stored first");
    assert_eq!((news.next_lapse, news.oldest_held), (None, None));
    let first = &news.news[0];
    assert_eq!(first.message, m1, "the message as it stands");
    assert_eq!(first.conversation_title, "general");
    assert_eq!(first.sender_name, "a");
    assert_eq!(first.message.sender_kind, AgentKind::Agent);
    assert_eq!(news.news[1].sender_name, "c");
    assert_eq!(news.news[0].message.stored_at, Some(t(1)));

    let limited = s
        .ledger
        .inbox_news(s.team.id, s.b.id, &nothing, t(10), 2)
        .await
        .unwrap();
    assert_eq!(limited.pending, 3, "the count is not limited");
    assert_eq!(ids(&limited), vec![m1.id, m2.id]);

    let for_c = s.news_for(&s.c, &nothing, t(10)).await;
    assert_eq!(ids(&for_c), vec![m1.id, m3.id], "c's own: not what it sent");
    let for_a = s.news_for(&s.a, &nothing, t(10)).await;
    assert_eq!(ids(&for_a), vec![m2.id]);

    // Nothing was written: the first hand-out is not a redelivery, the receipt undelivered.
    let handed = s.issue(&s.b, m1.id, t(11)).await;
    assert!(!handed.redelivered, "the watch handed nothing out");
    let receipts = s.ledger.receipts(s.team.id, m1.id).await.unwrap();
    assert!(receipts.iter().all(|r| r.delivered_at.is_none()));
}

/// News leaves out what the cursor reported — every message stored at or before its floor,
/// and its ids — while the pending count keeps them.
pub async fn inbox_news_leaves_out_what_was_reported<F: LedgerFixture + ?Sized>(fx: &F) {
    let s = scene(fx, REMOTE).await;
    let m1 = s.send_stored(&s.a, "r1", "one", t(1)).await;
    let m2 = s.send_stored(&s.a, "r2", "two", t(2)).await;
    let m3 = s.send_stored(&s.a, "r3", "three", t(3)).await;
    let cases: [(Reported, Vec<Uuid>); 5] = [
        (reported(Some(t(0)), &[]), vec![m1.id, m2.id, m3.id]),
        (reported(Some(t(2)), &[]), vec![m3.id]),
        (reported(Some(t(1)), &[m3.id]), vec![m2.id]),
        (reported(None, &[m2.id, Uuid::new_v4()]), vec![m1.id, m3.id]),
        (reported(Some(t(3)), &[]), vec![]),
    ];
    for (told, expected) in cases {
        let news = s.news_for(&s.b, &told, t(10)).await;
        assert_eq!(news.pending, 3, "reported or not, pending: {told:?}");
        assert_eq!(ids(&news), expected, "{told:?}");
    }
}

/// A message held by a live hand-out is neither pending nor news; the watch learns when the
/// earliest hold of a message it was not told of lapses (and that message's `stored_at`); once
/// lapsed the message is pending again, and news only if it was never reported.
pub async fn inbox_news_a_lapsed_hand_out_is_news_only_if_never_reported<
    F: LedgerFixture + ?Sized,
>(
    fx: &F,
) {
    let s = scene(fx, REMOTE).await;
    let m1 = s.send_stored(&s.a, "r1", "one", t(1)).await;
    let m2 = s.send_stored(&s.a, "r2", "two", t(2)).await;
    // Held until t(70) (the grace is 60 s); m2 from t(15) until t(75).
    let h1 = s.issue(&s.b, m1.id, t(10)).await;
    s.issue(&s.b, m2.id, t(15)).await;
    let nothing = Reported::default();
    let held = s.news_for(&s.b, &nothing, t(20)).await;
    assert_eq!((held.pending, ids(&held)), (0, vec![]), "held: not pending");
    assert_eq!(held.next_lapse, Some(h1.held_until), "the earliest hold");
    assert_eq!(held.oldest_held, Some(t(1)), "m1's stored_at");

    let told_m1 = reported(None, &[m1.id]);
    let partly = s.news_for(&s.b, &told_m1, t(20)).await;
    assert_eq!(
        partly.next_lapse,
        Some(t(75)),
        "m1 was reported: only m2's hold counts"
    );
    assert_eq!(partly.oldest_held, Some(t(2)));

    let lapsed = s.news_for(&s.b, &nothing, t(70)).await;
    assert_eq!(lapsed.pending, 1, "a hold lapses at held_until");
    assert_eq!(ids(&lapsed), vec![m1.id], "never reported: news again");
    assert_eq!(lapsed.next_lapse, Some(t(75)));

    let lapsed_told = s.news_for(&s.b, &told_m1, t(70)).await;
    assert_eq!(lapsed_told.pending, 1);
    assert!(
        lapsed_told.news.is_empty(),
        "reported before: pending, not news"
    );

    let all = s.news_for(&s.b, &nothing, t(80)).await;
    assert_eq!(
        (all.pending, all.next_lapse, all.oldest_held),
        (2, None, None)
    );
}

/// A message handed out and confirmed is never pending nor news, whatever the cursor says, and
/// its hold no longer counts.
pub async fn inbox_news_never_lists_a_confirmed_message<F: LedgerFixture + ?Sized>(fx: &F) {
    let s = scene(fx, REMOTE).await;
    let m1 = s.send_stored(&s.a, "r1", "one", t(1)).await;
    let m2 = s.send_stored(&s.a, "r2", "two", t(2)).await;
    let h = issued(&s.hand_out_to(&s.b, &[from_ledger(m1.id)], t(5)).await[0]);
    let outcomes = s
        .ledger
        .confirm(s.team.id, s.b.id, &[h.delivery], None, t(6))
        .await
        .unwrap();
    assert!(matches!(outcomes[0], ConfirmOutcome::Confirmed { .. }));
    for at in [t(7), t(1000)] {
        let news = s.news_for(&s.b, &Reported::default(), at).await;
        assert_eq!(news.pending, 1);
        assert_eq!(ids(&news), vec![m2.id], "confirmed: never news");
        assert_eq!((news.next_lapse, news.oldest_held), (None, None));
    }
}

/// A revoked recipient → `Unauthenticated`; an unknown one, or another team's agent asked under
/// this team → `NotFound`; a limit out of range or more than `MAX_PAGE` reported ids →
/// `Invalid`. The other team's agent under its own team has nothing pending.
pub async fn inbox_news_refuses_revoked_unknown_and_other_teams_agents<
    F: LedgerFixture + ?Sized,
>(
    fx: &F,
) {
    let s = scene(fx, REMOTE).await;
    s.send_stored(&s.a, "r1", "one", t(1)).await;
    let nothing = Reported::default();
    let other = s.other_team().await;
    let stranger = s.agent_of(&other, "stranger").await;
    let ask = |team: Uuid, agent: Uuid, reported: Reported, limit: usize| {
        let ledger = std::sync::Arc::clone(&s.ledger);
        async move {
            ledger
                .inbox_news(team, agent, &reported, t(10), limit)
                .await
        }
    };
    assert!(matches!(
        ask(s.team.id, Uuid::new_v4(), nothing.clone(), 20).await,
        Err(BusError::NotFound { .. })
    ));
    assert!(matches!(
        ask(s.team.id, stranger.id, nothing.clone(), 20).await,
        Err(BusError::NotFound { .. })
    ));
    let own = ask(other.id, stranger.id, nothing.clone(), 20)
        .await
        .unwrap();
    assert_eq!(own, InboxNews::default());
    for limit in [0, MAX_PAGE + 1] {
        assert!(matches!(
            ask(s.team.id, s.b.id, nothing.clone(), limit).await,
            Err(BusError::Invalid { .. })
        ));
    }
    let too_many = reported(None, &vec![Uuid::new_v4(); MAX_PAGE + 1]);
    assert!(matches!(
        ask(s.team.id, s.b.id, too_many, 20).await,
        Err(BusError::Invalid { .. })
    ));
    s.ledger
        .revoke_agent(s.team.id, s.b.id, t(5))
        .await
        .expect("revoke");
    assert!(matches!(
        ask(s.team.id, s.b.id, nothing.clone(), 20).await,
        Err(BusError::Unauthenticated)
    ));
    assert_eq!(
        ask(s.team.id, s.c.id, nothing, 20).await.unwrap().pending,
        1,
        "another recipient is unaffected"
    );
}

/// The sweep with `stored_after`: a waiter is woken only for a message stored after it (a
/// watcher is not woken again and again for what it was told of); of one agent's entries, any
/// that finds something wakes it; a revoked agent is woken whatever its mark.
pub async fn wakeable_skips_messages_stored_before_a_watchers_mark<F: LedgerFixture + ?Sized>(
    fx: &F,
) {
    let s = scene(fx, REMOTE).await;
    let b = WakeupTarget::new(s.team.id, s.b.id);
    let after = |at: DateTime<Utc>| SweepTarget {
        target: b,
        stored_after: Some(at),
    };
    let wakeable = |targets: Vec<SweepTarget>| {
        let ledger = std::sync::Arc::clone(&s.ledger);
        async move { ledger.wakeable(&targets, t(100), t(100)).await.unwrap() }
    };
    s.send_stored(&s.a, "r1", "one", t(5)).await;
    assert_eq!(wakeable(vec![any_message(b)]).await, vec![b]);
    assert!(
        wakeable(vec![after(t(5))]).await.is_empty(),
        "stored at the mark: not after it"
    );
    assert_eq!(wakeable(vec![after(t(4))]).await, vec![b]);
    assert_eq!(
        wakeable(vec![after(t(5)), any_message(b)]).await,
        vec![b],
        "the least restrictive entry wakes it, once"
    );
    s.send_stored(&s.a, "r2", "two", t(6)).await;
    assert_eq!(
        wakeable(vec![after(t(5))]).await,
        vec![b],
        "a newer message"
    );
    s.ledger
        .revoke_agent(s.team.id, s.b.id, t(7))
        .await
        .expect("revoke");
    assert_eq!(
        wakeable(vec![after(t(50))]).await,
        vec![b],
        "revoked: woken whatever its mark"
    );
}
