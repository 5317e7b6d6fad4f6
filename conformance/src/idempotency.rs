//! Idempotency behaviours of both ports: bodies on `publish_key` for the life of the body,
//! references on `event_id`.

use std::sync::Arc;
use std::time::Duration;

use crewbus_domain::{BusError, Envelope, Published};
use crewbus_ports::{Inbox, MessagingBackend};
use uuid::Uuid;

use crate::bodies::confirmed;
use crate::samples::{envelope, payload, recipient};
use crate::wait::fetch_at_least;
use crate::{BodyFixture, InboxFixture};

/// The same envelope twice: the second answer is `Confirmed { duplicate: true }` with the first
/// locator, and the body reads back unchanged.
pub async fn publish_is_idempotent_on_publish_key<F: BodyFixture + ?Sized>(fx: &F) {
    let bodies = fx.bodies();
    let env = envelope(fx.team(), "once");
    let (first, duplicate) = confirmed(&*bodies, &env).await;
    assert!(!duplicate);
    let (second, duplicate) = confirmed(&*bodies, &env).await;
    assert!(duplicate, "a repeat is reported as a duplicate");
    assert_eq!(first, second);
    let body = bodies.fetch(&first, env.message_id).await.unwrap();
    assert_eq!(body.as_deref(), Some("once"));
}

/// A repeat stores nothing new: retaining everything afterwards removes exactly one body.
pub async fn duplicate_publish_stores_nothing_new<F: BodyFixture + ?Sized>(fx: &F) {
    let bodies = fx.bodies();
    let env = envelope(fx.team(), "once");
    for _ in 0..3 {
        confirmed(&*bodies, &env).await;
    }
    fx.advance(std::time::Duration::from_secs(1)).await;
    let cut = fx.now().await;
    assert_eq!(bodies.retain(cut).await.unwrap(), 1);
}

/// Idempotency holds for the life of the body, not only a broker's duplicate window: after the
/// window, a repeat is still `Confirmed { duplicate: true }` at the same locator.
pub async fn publish_is_idempotent_after_the_duplicate_window<F: BodyFixture + ?Sized>(fx: &F) {
    let bodies = fx.bodies();
    let env = envelope(fx.team(), "long-lived");
    let (first, _) = confirmed(&*bodies, &env).await;
    fx.advance(fx.capabilities().past_body_window()).await;
    let (second, duplicate) = confirmed(&*bodies, &env).await;
    assert!(duplicate, "a repeat after the window is still a duplicate");
    assert_eq!(first, second);
}

/// The same message id under another publish key is `Fatal(Conflict)`; the first body stays.
pub async fn same_message_under_another_key_is_conflict<F: BodyFixture + ?Sized>(fx: &F) {
    let bodies = fx.bodies();
    let env = envelope(fx.team(), "first");
    let (locator, _) = confirmed(&*bodies, &env).await;
    let rekeyed = Envelope {
        publish_key: Uuid::new_v4(),
        body: "second".into(),
        ..env.clone()
    };
    let outcome = bodies.publish(rekeyed).await;
    assert!(
        matches!(outcome, Published::Fatal(BusError::Conflict { .. })),
        "{outcome:?}"
    );
    let body = bodies.fetch(&locator, env.message_id).await.unwrap();
    assert_eq!(body.as_deref(), Some("first"));
}

/// The conflict holds after the duplicate window too (found stored, not only deduplicated).
pub async fn same_message_under_another_key_is_conflict_after_the_window<
    F: BodyFixture + ?Sized,
>(
    fx: &F,
) {
    let bodies = fx.bodies();
    let env = envelope(fx.team(), "first");
    confirmed(&*bodies, &env).await;
    fx.advance(fx.capabilities().past_body_window()).await;
    let rekeyed = Envelope {
        publish_key: Uuid::new_v4(),
        ..env
    };
    let outcome = bodies.publish(rekeyed).await;
    assert!(
        matches!(outcome, Published::Fatal(BusError::Conflict { .. })),
        "{outcome:?}"
    );
}

/// Asserts `outcome` is `Confirmed { duplicate: true }`.
fn assert_duplicate(outcome: &Published) {
    assert!(
        matches!(
            outcome,
            Published::Confirmed {
                duplicate: true,
                ..
            }
        ),
        "{outcome:?}"
    );
}

/// Publishes `env` eight times at once; every answer must be `Confirmed`. Returns how many said
/// `duplicate: false`, and the locators in task order.
async fn race_publishes(
    bodies: &Arc<dyn MessagingBackend>,
    env: &Envelope,
) -> (usize, Vec<crewbus_domain::Locator>) {
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let bodies = Arc::clone(bodies);
            let env = env.clone();
            tokio::spawn(async move { bodies.publish(env).await })
        })
        .collect();
    let mut locators = Vec::new();
    let mut firsts = 0;
    for task in tasks {
        match task.await.expect("publish task panicked") {
            Published::Confirmed { locator, duplicate } => {
                firsts += usize::from(!duplicate);
                locators.push(locator);
            }
            other => panic!("expected Confirmed, got {other:?}"),
        }
    }
    (firsts, locators)
}

/// Concurrent publishes of one envelope store it once: all are confirmed at one locator and
/// exactly one says `duplicate: false`.
pub async fn concurrent_publishes_of_one_key_store_once<F: BodyFixture + ?Sized>(fx: &F) {
    let bodies = fx.bodies();
    let env = envelope(fx.team(), "raced");
    let (firsts, locators) = race_publishes(&bodies, &env).await;
    assert_eq!(firsts, 1, "exactly one publish stored the body");
    assert!(locators.windows(2).all(|w| w[0] == w[1]), "{locators:?}");
}

/// A repeat is confirmed even when the quota is full: the body is already stored, so nothing
/// needs room.
pub async fn duplicate_is_confirmed_when_the_quota_is_full<F: BodyFixture + ?Sized>(fx: &F) {
    let quota = fx.capabilities().quota();
    let bodies = fx.bodies();
    let first = envelope(fx.team(), "first");
    let (locator, _) = confirmed(&*bodies, &first).await;
    for i in 1..quota.max_messages {
        confirmed(&*bodies, &envelope(fx.team(), format!("q{i}"))).await;
    }
    let outcome = bodies.publish(envelope(fx.team(), "no room")).await;
    assert!(
        matches!(
            outcome,
            Published::Retryable(BusError::QuotaExceeded { .. })
        ),
        "{outcome:?}"
    );
    let (again, duplicate) = confirmed(&*bodies, &first).await;
    assert!(duplicate);
    assert_eq!(again, locator);
}

/// A reference published twice under one event id is stored once: the repeat is
/// `Confirmed { duplicate: true }` at the same locator and the recipient gets it once.
pub async fn reference_is_deduplicated_on_event_id<F: InboxFixture + ?Sized>(fx: &F) {
    let inbox = fx.inbox();
    let who = recipient();
    let event = Uuid::new_v4();
    let body = payload(Uuid::new_v4());
    let first = inbox.publish_reference(&who, event, &body).await;
    let second = inbox.publish_reference(&who, event, &body).await;
    let (
        Published::Confirmed {
            locator: l1,
            duplicate: false,
        },
        Published::Confirmed {
            locator: l2,
            duplicate: true,
        },
    ) = (&first, &second)
    else {
        panic!("expected a first and a duplicate confirmation, got {first:?} / {second:?}");
    };
    assert_eq!(l1, l2);
    let timeout = fx.capabilities().settle_timeout;
    let (events, marker) = fetched_up_to_a_marker(&*inbox, &who, 2, timeout).await;
    assert_eq!(events, vec![event, marker], "the event is handed out once");
}

/// Deduplication outlives the reference: after it was acked, the same event id is still a
/// duplicate and nothing new is handed out.
pub async fn reference_dedup_survives_ack<F: InboxFixture + ?Sized>(fx: &F) {
    let inbox = fx.inbox();
    let who = recipient();
    let event = Uuid::new_v4();
    inbox.publish_reference(&who, event, &payload(event)).await;
    let timeout = fx.capabilities().settle_timeout;
    let refs = fetch_at_least(&*inbox, &who, 1, 10, timeout).await;
    inbox.ack_reference(&refs[0].ack_subject).await.unwrap();
    let again = inbox.publish_reference(&who, event, &payload(event)).await;
    assert_duplicate(&again);
    let (events, marker) = fetched_up_to_a_marker(&*inbox, &who, 1, timeout).await;
    assert_eq!(events, vec![marker]);
}

/// Deduplication for the life of the inbox: a repeat long after any duplicate window is still a
/// duplicate (memory, Postgres; JetStream only dedups within its window).
pub async fn reference_dedup_outlives_the_duplicate_window<F: InboxFixture + ?Sized>(fx: &F) {
    let inbox = fx.inbox();
    let who = recipient();
    let event = Uuid::new_v4();
    inbox.publish_reference(&who, event, &payload(event)).await;
    fx.advance(fx.capabilities().past_inbox_window()).await;
    let again = inbox.publish_reference(&who, event, &payload(event)).await;
    assert_duplicate(&again);
    let timeout = fx.capabilities().settle_timeout;
    let (events, marker) = fetched_up_to_a_marker(&*inbox, &who, 2, timeout).await;
    assert_eq!(events, vec![event, marker], "the event is handed out once");
}

/// Concurrent re-publishes of one envelope after `retain` removed its body store it once:
/// exactly one is `duplicate: false`, all are confirmed at one locator, and the body is
/// fetchable there (on JetStream each of them sees the broker's duplicate answer for the
/// removed copy first).
pub async fn concurrent_republishes_after_retain_store_once<F: BodyFixture + ?Sized>(fx: &F) {
    let bodies = fx.bodies();
    let env = envelope(fx.team(), "retained, then raced");
    confirmed(&*bodies, &env).await;
    fx.advance(Duration::from_millis(10)).await;
    let cut = fx.now().await;
    assert_eq!(bodies.retain(cut).await.unwrap(), 1);
    let (firsts, locators) = race_publishes(&bodies, &env).await;
    assert_eq!(firsts, 1, "exactly one publish stored the body again");
    assert!(locators.windows(2).all(|w| w[0] == w[1]), "{locators:?}");
    let body = bodies.fetch(&locators[0], env.message_id).await.unwrap();
    assert_eq!(body.as_deref(), Some(env.body.as_str()));
    fx.advance(Duration::from_millis(10)).await;
    let cut = fx.now().await;
    assert_eq!(bodies.retain(cut).await.unwrap(), 1, "one copy was stored");
}

/// Publishes a fresh marker reference for `who`, then fetches until `n` references arrived:
/// their event ids in order, and the marker's (what was handed out up to the marker).
async fn fetched_up_to_a_marker(
    inbox: &dyn Inbox,
    who: &str,
    n: usize,
    timeout: Duration,
) -> (Vec<Uuid>, Uuid) {
    let marker = Uuid::new_v4();
    inbox.publish_reference(who, marker, &payload(marker)).await;
    let refs = fetch_at_least(inbox, who, n, 10, timeout).await;
    (refs.iter().map(|r| r.event_id).collect(), marker)
}
