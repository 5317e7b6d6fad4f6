//! `Inbox` behaviours (BUS.md §3): publish, fetch without ack, redelivery, max deliver,
//! overflow, consumers, status, foreign ack subjects, recipient keys.
//!
//! The deduplication behaviours live in [`crate::idempotency`], the ack-after-commit ones in
//! [`crate::ack_after_commit`].

use crewbus_domain::{BusError, InboxRef, InboxStatus, Published};
use crewbus_ports::Inbox;
use uuid::Uuid;

use crate::samples::{envelope, payload, recipient};
use crate::wait::{Deadline, fetch_at_least};
use crate::{InboxFixture, TeamFixture};

/// Publishes `n` references to `who` and returns their event ids in publish order.
pub(crate) async fn publish_refs(inbox: &dyn Inbox, who: &str, n: usize) -> Vec<Uuid> {
    let mut events = Vec::with_capacity(n);
    for _ in 0..n {
        let event = Uuid::new_v4();
        let outcome = inbox
            .publish_reference(who, event, &payload(Uuid::new_v4()))
            .await;
        assert!(
            matches!(
                outcome,
                Published::Confirmed {
                    duplicate: false,
                    ..
                }
            ),
            "{outcome:?}"
        );
        events.push(event);
    }
    events
}

/// Polls `inbox_status` until it equals `want`.
pub(crate) async fn status_becomes<F: InboxFixture + ?Sized>(fx: &F, who: &str, want: InboxStatus) {
    let inbox = fx.inbox();
    let timeout = fx.capabilities().settle_timeout;
    let mut deadline = Deadline::new(timeout, format!("status {want:?} for {who}"));
    loop {
        let status = inbox.inbox_status(who).await.expect("inbox_status failed");
        if status == want {
            return;
        }
        deadline.tick().await;
    }
}

fn events(refs: &[InboxRef]) -> Vec<Uuid> {
    refs.iter().map(|r| r.event_id).collect()
}

/// A first `publish_reference` is `Confirmed { duplicate: false }` with a `<scheme>:<rest>`
/// locator naming the inbox.
pub async fn reference_publish_is_confirmed<F: InboxFixture + ?Sized>(fx: &F) {
    let outcome = fx
        .inbox()
        .publish_reference(&recipient(), Uuid::new_v4(), &payload(Uuid::new_v4()))
        .await;
    let Published::Confirmed { locator, duplicate } = outcome else {
        panic!("expected Confirmed, got {outcome:?}");
    };
    assert!(!duplicate);
    assert!(locator.split().is_ok());
}

/// The locator `publish_reference` confirms with names the inbox stream; the body store
/// refuses it with `Forbidden`.
pub async fn body_fetch_refuses_an_inbox_locator<F: TeamFixture + ?Sized>(fx: &F) {
    let outcome = fx
        .inbox()
        .publish_reference(&recipient(), Uuid::new_v4(), &payload(Uuid::new_v4()))
        .await;
    let locator = outcome.locator().expect("confirmed").clone();
    let env = envelope(fx.team(), "a body");
    crate::bodies::confirmed(&*fx.bodies(), &env).await;
    for id in [env.message_id, Uuid::new_v4()] {
        let got = fx.bodies().fetch(&locator, id).await;
        assert!(matches!(got, Err(BusError::Forbidden { .. })), "{got:?}");
    }
}

/// A fetched reference carries the event id and payload as published, its stream position, and
/// `deliveries == 1`.
pub async fn fetch_returns_the_reference_as_published<F: InboxFixture + ?Sized>(fx: &F) {
    let inbox = fx.inbox();
    let who = recipient();
    let event = Uuid::new_v4();
    let body = payload(Uuid::new_v4());
    inbox.publish_reference(&who, event, &body).await;
    let refs = fetch_at_least(&*inbox, &who, 1, 10, fx.capabilities().settle_timeout).await;
    assert_eq!(refs.len(), 1);
    let r = &refs[0];
    assert_eq!(r.event_id, event);
    assert_eq!(r.payload, body);
    assert_eq!(r.deliveries, 1);
    assert!(!r.redelivered());
    assert!(r.stream_seq >= 1);
    assert!(!r.ack_subject.is_empty());
}

/// Each recipient gets only the references on its own subject.
pub async fn references_reach_only_their_recipient<F: InboxFixture + ?Sized>(fx: &F) {
    let inbox = fx.inbox();
    let (a, b) = (recipient(), recipient());
    let for_a = publish_refs(&*inbox, &a, 2).await;
    let for_b = publish_refs(&*inbox, &b, 1).await;
    let timeout = fx.capabilities().settle_timeout;
    assert_eq!(
        events(&fetch_at_least(&*inbox, &a, 2, 10, timeout).await),
        for_a
    );
    assert_eq!(
        events(&fetch_at_least(&*inbox, &b, 1, 10, timeout).await),
        for_b
    );
    assert!(inbox.fetch_references(&a, 10).await.unwrap().is_empty());
}

/// A fetch hands out at most `limit` references, in stream order, and successive fetches hand
/// out the rest without repeating any.
pub async fn fetch_respects_the_limit_and_stream_order<F: InboxFixture + ?Sized>(fx: &F) {
    let caps = fx.capabilities();
    let n = caps.inbox_overflow_limit.map_or(5, |limit| limit.min(5)) as usize;
    let inbox = fx.inbox();
    let who = recipient();
    let published = publish_refs(&*inbox, &who, n).await;
    let mut got: Vec<InboxRef> = Vec::new();
    let mut deadline = Deadline::new(
        caps.settle_timeout,
        format!("{n} references in batches of two"),
    );
    while got.len() < n {
        let batch = inbox
            .fetch_references(&who, 2)
            .await
            .expect("fetch_references failed");
        assert!(batch.len() <= 2, "fetch returned {} > limit 2", batch.len());
        if batch.is_empty() {
            deadline.tick().await;
        }
        got.extend(batch);
    }
    assert_eq!(events(&got), published);
    assert!(got.windows(2).all(|w| w[0].stream_seq < w[1].stream_seq));
    assert!(got.iter().all(|r| r.deliveries == 1));
}

/// Fetching acknowledges nothing: the reference awaits its ack.
pub async fn fetch_does_not_acknowledge<F: InboxFixture + ?Sized>(fx: &F) {
    let inbox = fx.inbox();
    let who = recipient();
    publish_refs(&*inbox, &who, 1).await;
    fetch_at_least(&*inbox, &who, 1, 10, fx.capabilities().settle_timeout).await;
    let want = InboxStatus {
        present: true,
        pending: 0,
        awaiting_ack: 1,
        redelivered: 0,
    };
    status_becomes(fx, &who, want).await;
}

/// Within the ack wait a handed-out reference is not handed out again.
pub async fn reference_is_not_handed_out_again_within_the_ack_wait<F: InboxFixture + ?Sized>(
    fx: &F,
) {
    let inbox = fx.inbox();
    let who = recipient();
    publish_refs(&*inbox, &who, 1).await;
    fetch_at_least(&*inbox, &who, 1, 10, fx.capabilities().settle_timeout).await;
    assert!(inbox.fetch_references(&who, 10).await.unwrap().is_empty());
}

/// A reference not acked is handed out again after each ack wait, with `deliveries`
/// incremented, until it is acked; then never again.
pub async fn reference_is_redelivered_until_acked<F: InboxFixture + ?Sized>(fx: &F) {
    let caps = fx.capabilities().clone();
    let inbox = fx.inbox();
    let who = recipient();
    let event = publish_refs(&*inbox, &who, 1).await[0];
    let rounds = caps.max_deliver.unwrap_or(3).min(3);
    let mut last = None;
    for round in 1..=rounds {
        if round > 1 {
            fx.advance(caps.ack_wait).await;
        }
        let refs = fetch_at_least(&*inbox, &who, 1, 10, caps.settle_timeout).await;
        assert_eq!(events(&refs), vec![event]);
        assert_eq!(refs[0].deliveries, round, "delivery count of round {round}");
        last = refs.into_iter().next();
    }
    let last = last.expect("at least one round");
    inbox.ack_reference(&last.ack_subject).await.unwrap();
    fx.advance(caps.ack_wait).await;
    assert!(inbox.fetch_references(&who, 10).await.unwrap().is_empty());
}

/// Acking one reference leaves the others awaiting theirs: only the unacked one comes back.
pub async fn ack_of_one_reference_leaves_the_others<F: InboxFixture + ?Sized>(fx: &F) {
    let caps = fx.capabilities().clone();
    let inbox = fx.inbox();
    let who = recipient();
    let published = publish_refs(&*inbox, &who, 2).await;
    let refs = fetch_at_least(&*inbox, &who, 2, 10, caps.settle_timeout).await;
    inbox.ack_reference(&refs[0].ack_subject).await.unwrap();
    fx.advance(caps.ack_wait).await;
    let again = fetch_at_least(&*inbox, &who, 1, 10, caps.settle_timeout).await;
    assert_eq!(events(&again), vec![published[1]]);
    assert!(again[0].redelivered());
}

/// The status counts what JetStream consumer info reports: `pending` (stored, not yet handed
/// out), `awaiting_ack` (handed out, not acked) and `redelivered` (of those, handed out more
/// than once).
pub async fn status_counts_pending_awaiting_and_redelivered<F: InboxFixture + ?Sized>(fx: &F) {
    let caps = fx.capabilities().clone();
    let inbox = fx.inbox();
    let who = recipient();
    publish_refs(&*inbox, &who, 3).await;
    let first = fetch_at_least(&*inbox, &who, 1, 1, caps.settle_timeout).await;
    let status = |pending, awaiting_ack, redelivered| InboxStatus {
        present: true,
        pending,
        awaiting_ack,
        redelivered,
    };
    status_becomes(fx, &who, status(2, 1, 0)).await;
    fx.advance(caps.ack_wait).await;
    let again = fetch_at_least(&*inbox, &who, 1, 1, caps.settle_timeout).await;
    assert_eq!(
        again[0].event_id, first[0].event_id,
        "redelivery comes first"
    );
    assert_eq!(again[0].deliveries, 2);
    status_becomes(fx, &who, status(2, 1, 1)).await;
    inbox.ack_reference(&again[0].ack_subject).await.unwrap();
    status_becomes(fx, &who, status(2, 0, 0)).await;
}

/// Before its first fetch a recipient has no consumer: `present: false`. The first fetch (even
/// of an empty inbox) creates it: `present: true` with nothing counted.
pub async fn consumer_is_created_on_first_fetch<F: InboxFixture + ?Sized>(fx: &F) {
    let inbox = fx.inbox();
    let who = recipient();
    assert!(!inbox.inbox_status(&who).await.unwrap().present);
    assert!(inbox.fetch_references(&who, 10).await.unwrap().is_empty());
    let want = InboxStatus {
        present: true,
        ..InboxStatus::default()
    };
    status_becomes(fx, &who, want).await;
}

/// References stored for a recipient whose consumer does not exist yet are reported as
/// `present: false` — a fact, not an empty inbox — and the first fetch hands them all out.
pub async fn missing_consumer_is_not_an_empty_inbox<F: InboxFixture + ?Sized>(fx: &F) {
    let inbox = fx.inbox();
    let who = recipient();
    let published = publish_refs(&*inbox, &who, 2).await;
    let status = inbox.inbox_status(&who).await.unwrap();
    assert!(!status.present, "{status:?}");
    let refs = fetch_at_least(&*inbox, &who, 2, 10, fx.capabilities().settle_timeout).await;
    assert_eq!(events(&refs), published);
}

/// A deleted consumer is reported `present: false` (not an empty inbox).
pub async fn deleted_consumer_is_reported_not_present<F: InboxFixture + ?Sized>(fx: &F) {
    let inbox = fx.inbox();
    let who = recipient();
    publish_refs(&*inbox, &who, 1).await;
    fetch_at_least(&*inbox, &who, 1, 10, fx.capabilities().settle_timeout).await;
    assert!(inbox.inbox_status(&who).await.unwrap().present);
    fx.delete_consumer(&who).await.unwrap();
    let status = inbox.inbox_status(&who).await.unwrap();
    assert!(!status.present, "{status:?}");
}

/// After its consumer was deleted, the next fetch recreates it and hands out every reference
/// still stored (acked ones are gone).
pub async fn deleted_consumer_is_recreated_with_what_is_still_stored<F: InboxFixture + ?Sized>(
    fx: &F,
) {
    let inbox = fx.inbox();
    let who = recipient();
    let timeout = fx.capabilities().settle_timeout;
    let published = publish_refs(&*inbox, &who, 3).await;
    let refs = fetch_at_least(&*inbox, &who, 2, 2, timeout).await;
    inbox.ack_reference(&refs[0].ack_subject).await.unwrap();
    fx.delete_consumer(&who).await.unwrap();
    let again = fetch_at_least(&*inbox, &who, 2, 10, timeout).await;
    assert_eq!(events(&again), published[1..].to_vec());
    assert!(inbox.inbox_status(&who).await.unwrap().present);
}

/// After `max_deliver` deliveries the reference is no longer handed out nor counted as awaiting
/// an ack; the recipient's consumer keeps handing out new references.
pub async fn max_deliver_stops_redelivery<F: InboxFixture + ?Sized>(fx: &F) {
    let caps = fx.capabilities().clone();
    let max = caps.max_deliver.expect("needs max_deliver");
    let inbox = fx.inbox();
    let who = recipient();
    let event = publish_refs(&*inbox, &who, 1).await[0];
    for round in 1..=max {
        let refs = fetch_at_least(&*inbox, &who, 1, 10, caps.settle_timeout).await;
        assert_eq!(events(&refs), vec![event]);
        assert_eq!(refs[0].deliveries, round);
        fx.advance(caps.ack_wait).await;
    }
    // A broker that retires lazily (JetStream) drops the reference from its ack-pending count
    // at the first pull after its last ack wait lapsed on the server's own timer, which may
    // fire a moment after `advance`: so every poll pulls (and must get nothing). `redelivered`
    // is not asserted: nats-server 2.9.10 keeps counting a reference retired by max deliver in
    // `num_redelivered`.
    let mut deadline = Deadline::new(caps.settle_timeout, "nothing awaiting an ack");
    loop {
        assert!(inbox.fetch_references(&who, 10).await.unwrap().is_empty());
        let status = inbox.inbox_status(&who).await.unwrap();
        if status.present && status.pending == 0 && status.awaiting_ack == 0 {
            break;
        }
        deadline.tick().await;
    }
    let fresh = publish_refs(&*inbox, &who, 1).await;
    let refs = fetch_at_least(&*inbox, &who, 1, 10, caps.settle_timeout).await;
    assert_eq!(events(&refs), fresh);
}

/// Past its overflow limit the inbox discards its oldest references (discard-old) and keeps
/// the newest.
pub async fn overflow_discards_the_oldest<F: InboxFixture + ?Sized>(fx: &F) {
    let caps = fx.capabilities().clone();
    let limit = usize::try_from(caps.inbox_overflow_limit.expect("needs overflow limit"))
        .expect("limit fits");
    let inbox = fx.inbox();
    let (who, other) = (recipient(), recipient());
    // limit + 2 references in all: the two oldest of the team's inbox go, whoever they were for.
    publish_refs(&*inbox, &other, 1).await;
    let published = publish_refs(&*inbox, &who, limit + 1).await;
    let refs = fetch_at_least(&*inbox, &who, limit, limit + 1, caps.settle_timeout).await;
    assert_eq!(events(&refs), published[1..].to_vec());
    assert!(inbox.fetch_references(&who, 10).await.unwrap().is_empty());
    assert!(inbox.fetch_references(&other, 10).await.unwrap().is_empty());
}

/// An ack subject issued by another team's inbox is `Forbidden`, and acks nothing there.
pub async fn ack_refuses_another_teams_subject<F: InboxFixture + ?Sized>(fx: &F) {
    let caps = fx.capabilities().clone();
    let theirs = fx.other_inbox();
    let who = recipient();
    let event = publish_refs(&*theirs, &who, 1).await[0];
    let refs = fetch_at_least(&*theirs, &who, 1, 10, caps.settle_timeout).await;
    let got = fx.inbox().ack_reference(&refs[0].ack_subject).await;
    assert!(matches!(got, Err(BusError::Forbidden { .. })), "{got:?}");
    fx.advance(caps.ack_wait).await;
    let again = fetch_at_least(&*theirs, &who, 1, 10, caps.settle_timeout).await;
    assert_eq!(
        events(&again),
        vec![event],
        "still unacked in the other team"
    );
}

/// Anything that is not an ack subject of this team's inbox is `Forbidden`.
pub async fn ack_refuses_a_garbage_subject<F: InboxFixture + ?Sized>(fx: &F) {
    let inbox = fx.inbox();
    for garbage in [
        "",
        "garbage",
        "a b",
        "_INBOX.abc.def",
        "$JS.ACK.SOMEONE_ELSES_STREAM.consumer.1.1.1.1.0",
        "$JS.API.STREAM.DELETE.X",
    ] {
        let got = inbox.ack_reference(garbage).await;
        assert!(
            matches!(got, Err(BusError::Forbidden { .. })),
            "{garbage:?}: {got:?}"
        );
    }
}

/// An invalid recipient key is `Invalid` on every method (`Fatal(Invalid)` for publish).
pub async fn invalid_recipient_key_is_refused<F: InboxFixture + ?Sized>(fx: &F) {
    let inbox = fx.inbox();
    for key in ["", "a.b", "a*", ">", "a b", "tab\t", "é"] {
        let published = inbox
            .publish_reference(key, Uuid::new_v4(), &payload(Uuid::new_v4()))
            .await;
        assert!(
            matches!(published, Published::Fatal(BusError::Invalid { .. })),
            "{key:?}: {published:?}"
        );
        let fetched = inbox.fetch_references(key, 10).await;
        assert!(matches!(fetched, Err(BusError::Invalid { .. })), "{key:?}");
        let status = inbox.inbox_status(key).await;
        assert!(matches!(status, Err(BusError::Invalid { .. })), "{key:?}");
    }
}
