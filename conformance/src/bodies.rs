//! `MessagingBackend` behaviours (BUS.md §2): publish, limits, quota, fetch, retain, reconcile.
//!
//! Each function is one behaviour, generic over the fixture, starting from a fresh namespace.
//! The idempotency behaviours live in [`crate::idempotency`].

use std::time::Duration;

use crewbus_domain::{BusError, Locator, Published};
use uuid::Uuid;

use crate::BodyFixture;
use crate::samples::{body_of, envelope};

/// Publishes and expects `Confirmed`, returning the locator and the duplicate flag.
pub(crate) async fn confirmed(
    bodies: &dyn crewbus_ports::MessagingBackend,
    env: &crewbus_domain::Envelope,
) -> (Locator, bool) {
    match bodies.publish(env.clone()).await {
        Published::Confirmed { locator, duplicate } => (locator, duplicate),
        other => panic!("expected Confirmed, got {other:?}"),
    }
}

/// `name()` is the backend name the fixture declared, the same for every team.
pub async fn name_is_the_recorded_backend_name<F: BodyFixture + ?Sized>(fx: &F) {
    let caps = fx.capabilities();
    assert_eq!(fx.bodies().name(), caps.backend_name);
    assert_eq!(fx.other_bodies().name(), caps.backend_name);
}

/// A first publish is `Confirmed { duplicate: false }` and the body is fetchable at once (no
/// polling: "once confirmed, fetch returns the body at once").
pub async fn confirmed_body_is_fetchable_at_once<F: BodyFixture + ?Sized>(fx: &F) {
    let bodies = fx.bodies();
    let env = envelope(fx.team(), "hello, team");
    let (locator, duplicate) = confirmed(&*bodies, &env).await;
    assert!(!duplicate, "a first publish is not a duplicate");
    assert!(locator.split().is_ok(), "locator is <scheme>:<rest>");
    let body = bodies.fetch(&locator, env.message_id).await.unwrap();
    assert_eq!(body.as_deref(), Some("hello, team"));
}

/// Distinct messages get distinct locators, and each fetches its own body.
pub async fn distinct_messages_get_distinct_locators<F: BodyFixture + ?Sized>(fx: &F) {
    let bodies = fx.bodies();
    let mut seen = Vec::new();
    for i in 0..3 {
        let env = envelope(fx.team(), format!("body {i}"));
        let (locator, duplicate) = confirmed(&*bodies, &env).await;
        assert!(!duplicate);
        assert!(!seen.iter().any(|(l, _)| *l == locator), "locator reused");
        seen.push((locator, env));
    }
    for (locator, env) in &seen {
        let body = bodies.fetch(locator, env.message_id).await.unwrap();
        assert_eq!(body.as_deref(), Some(env.body.as_str()));
    }
}

/// An envelope of another team is `Fatal(Forbidden)` and stores nothing: the other team's own
/// backend then stores it as new.
pub async fn envelope_of_another_team_is_forbidden<F: BodyFixture + ?Sized>(fx: &F) {
    let env = envelope(fx.other_team(), "not yours");
    let outcome = fx.bodies().publish(env.clone()).await;
    assert!(
        matches!(outcome, Published::Fatal(BusError::Forbidden { .. })),
        "{outcome:?}"
    );
    let (_, duplicate) = confirmed(&*fx.other_bodies(), &env).await;
    assert!(
        !duplicate,
        "the refused publish must not have stored the body"
    );
}

/// A body of exactly the effective maximum is confirmed and read back whole.
pub async fn body_at_the_limit_is_confirmed<F: BodyFixture + ?Sized>(fx: &F) {
    let limit = fx.capabilities().body_limit_bytes;
    let bodies = fx.bodies();
    let env = envelope(fx.team(), body_of(limit));
    let (locator, _) = confirmed(&*bodies, &env).await;
    let body = bodies.fetch(&locator, env.message_id).await.unwrap();
    assert_eq!(body.map(|b| b.len() as u64), Some(limit));
}

/// One byte above the maximum is `Fatal(TooLarge)` naming size and limit, and stores nothing:
/// the same message and key with a body that fits is then stored as new.
pub async fn body_above_the_limit_is_too_large<F: BodyFixture + ?Sized>(fx: &F) {
    let limit = fx.capabilities().body_limit_bytes;
    let bodies = fx.bodies();
    let mut env = envelope(fx.team(), body_of(limit + 1));
    let outcome = bodies.publish(env.clone()).await;
    assert!(
        matches!(&outcome, Published::Fatal(BusError::TooLarge { size, limit: l })
            if *size == limit + 1 && *l == limit),
        "{outcome:?}"
    );
    env.body = body_of(limit);
    let (_, duplicate) = confirmed(&*bodies, &env).await;
    assert!(!duplicate, "the refused body must not have been stored");
}

/// A full discard-new message quota refuses the next body with `Retryable(QuotaExceeded)`,
/// while the bodies already stored stay readable.
pub async fn full_message_quota_is_retryable_quota_exceeded<F: BodyFixture + ?Sized>(fx: &F) {
    let quota = fx.capabilities().quota();
    let bodies = fx.bodies();
    let mut stored = Vec::new();
    for i in 0..quota.max_messages {
        let env = envelope(fx.team(), format!("q{i}"));
        stored.push((confirmed(&*bodies, &env).await.0, env));
    }
    let outcome = bodies.publish(envelope(fx.team(), "one too many")).await;
    assert!(
        matches!(
            outcome,
            Published::Retryable(BusError::QuotaExceeded { .. })
        ),
        "{outcome:?}"
    );
    for (locator, env) in &stored {
        let body = bodies.fetch(locator, env.message_id).await.unwrap();
        assert_eq!(body.as_deref(), Some(env.body.as_str()));
    }
}

/// A full discard-new byte quota refuses the next body with `Retryable(QuotaExceeded)`; what was
/// confirmed before never exceeds the quota's bytes.
pub async fn full_byte_quota_is_retryable_quota_exceeded<F: BodyFixture + ?Sized>(fx: &F) {
    let caps = fx.capabilities();
    let quota = caps.quota();
    let size = caps.body_limit_bytes.min(quota.max_bytes);
    let bodies = fx.bodies();
    let most = quota.max_bytes / size + 1;
    let mut confirmed_bytes = 0;
    for i in 0..=most {
        match bodies.publish(envelope(fx.team(), body_of(size))).await {
            Published::Confirmed { .. } => confirmed_bytes += size,
            Published::Retryable(BusError::QuotaExceeded { .. }) => {
                assert!(confirmed_bytes <= quota.max_bytes);
                return;
            }
            other => panic!("publish {i}: expected Confirmed or QuotaExceeded, got {other:?}"),
        }
    }
    panic!(
        "{most} bodies of {size} bytes fit a {} byte quota",
        quota.max_bytes
    );
}

/// `fetch` with a locator of this team but another message's id is `Forbidden`.
pub async fn fetch_refuses_another_message<F: BodyFixture + ?Sized>(fx: &F) {
    let bodies = fx.bodies();
    let env = envelope(fx.team(), "mine");
    let other = envelope(fx.team(), "also mine");
    let (locator, _) = confirmed(&*bodies, &env).await;
    confirmed(&*bodies, &other).await;
    for wrong in [other.message_id, Uuid::new_v4()] {
        let got = bodies.fetch(&locator, wrong).await;
        assert!(matches!(got, Err(BusError::Forbidden { .. })), "{got:?}");
    }
}

/// Another team's locator is `Forbidden` on this team's backend, even with the right message id,
/// in both directions.
pub async fn fetch_refuses_another_teams_locator<F: BodyFixture + ?Sized>(fx: &F) {
    let ours = envelope(fx.team(), "ours");
    let theirs = envelope(fx.other_team(), "theirs");
    let (our_locator, _) = confirmed(&*fx.bodies(), &ours).await;
    let (their_locator, _) = confirmed(&*fx.other_bodies(), &theirs).await;
    let got = fx.bodies().fetch(&their_locator, theirs.message_id).await;
    assert!(matches!(got, Err(BusError::Forbidden { .. })), "{got:?}");
    let got = fx.other_bodies().fetch(&our_locator, ours.message_id).await;
    assert!(matches!(got, Err(BusError::Forbidden { .. })), "{got:?}");
}

/// A locator of another scheme is `Invalid`.
pub async fn fetch_refuses_another_scheme<F: BodyFixture + ?Sized>(fx: &F) {
    let bodies = fx.bodies();
    let env = envelope(fx.team(), "x");
    let (locator, _) = confirmed(&*bodies, &env).await;
    let (scheme, rest) = locator.split().unwrap();
    let other_scheme = if scheme == "other" {
        "elsewhere"
    } else {
        "other"
    };
    for forged in [
        format!("{other_scheme}:{rest}"),
        "nosuchscheme:1".to_owned(),
    ] {
        let got = bodies.fetch(&Locator(forged.clone()), env.message_id).await;
        assert!(
            matches!(got, Err(BusError::Invalid { .. })),
            "{forged}: {got:?}"
        );
    }
}

/// A malformed locator (no scheme, or this scheme with an unparsable rest) is `Invalid`.
pub async fn fetch_refuses_a_malformed_locator<F: BodyFixture + ?Sized>(fx: &F) {
    let bodies = fx.bodies();
    let env = envelope(fx.team(), "x");
    let (locator, _) = confirmed(&*bodies, &env).await;
    let (scheme, _) = locator.split().unwrap();
    for forged in [
        String::new(),
        "no-colon".to_owned(),
        ":1".to_owned(),
        format!("{scheme}:"),
        format!("{scheme}:not a locator"),
        format!("{scheme}:::"),
    ] {
        let got = bodies.fetch(&Locator(forged.clone()), env.message_id).await;
        assert!(
            matches!(got, Err(BusError::Invalid { .. })),
            "{forged:?}: {got:?}"
        );
    }
}

/// Forged variations of a real locator never yield a body for a message that is not there:
/// each answers `Ok(None)`, `Invalid` or `Forbidden`, and none panics.
pub async fn forged_locators_never_yield_a_body<F: BodyFixture + ?Sized>(fx: &F) {
    let bodies = fx.bodies();
    let env = envelope(fx.team(), "x");
    let (locator, _) = confirmed(&*bodies, &env).await;
    let s = locator.as_str();
    let forged = [
        format!("{s}0"),
        format!("{s}9999999"),
        format!("{s}:1"),
        format!("{s}-"),
        s.replace('1', "2"),
        s.to_uppercase(),
        format!("{s}{}", "9".repeat(40)),
        s[..s.len() - 1].to_owned(),
    ];
    for f in forged {
        let got = bodies.fetch(&Locator(f.clone()), Uuid::new_v4()).await;
        assert!(
            matches!(
                got,
                Ok(None) | Err(BusError::Invalid { .. } | BusError::Forbidden { .. })
            ),
            "{f}: {got:?}"
        );
    }
}

/// `retain(before)` removes exactly the bodies stored before `before` and keeps the later ones.
pub async fn retain_removes_bodies_stored_before<F: BodyFixture + ?Sized>(fx: &F) {
    let bodies = fx.bodies();
    let old = [envelope(fx.team(), "old 1"), envelope(fx.team(), "old 2")];
    let mut old_locators = Vec::new();
    for env in &old {
        old_locators.push(confirmed(&*bodies, env).await.0);
    }
    fx.advance(Duration::from_secs(1)).await;
    let cut = fx.now().await;
    fx.advance(Duration::from_secs(1)).await;
    let new = envelope(fx.team(), "new");
    let (new_locator, _) = confirmed(&*bodies, &new).await;
    assert_eq!(bodies.retain(cut).await.unwrap(), 2);
    for (locator, env) in old_locators.iter().zip(&old) {
        assert_eq!(bodies.fetch(locator, env.message_id).await.unwrap(), None);
    }
    let kept = bodies.fetch(&new_locator, new.message_id).await.unwrap();
    assert_eq!(kept.as_deref(), Some("new"));
}

/// `retain` is idempotent: the same instant again removes 0.
pub async fn retain_is_idempotent<F: BodyFixture + ?Sized>(fx: &F) {
    let bodies = fx.bodies();
    confirmed(&*bodies, &envelope(fx.team(), "x")).await;
    fx.advance(Duration::from_secs(1)).await;
    let cut = fx.now().await;
    assert_eq!(bodies.retain(cut).await.unwrap(), 1);
    assert_eq!(bodies.retain(cut).await.unwrap(), 0);
}

/// A retained body's locator is an unknown position: `Ok(None)`, not an error.
pub async fn retained_body_fetches_as_none<F: BodyFixture + ?Sized>(fx: &F) {
    let bodies = fx.bodies();
    let env = envelope(fx.team(), "gone soon");
    let (locator, _) = confirmed(&*bodies, &env).await;
    fx.advance(Duration::from_secs(1)).await;
    let cut = fx.now().await;
    bodies.retain(cut).await.unwrap();
    assert_eq!(bodies.fetch(&locator, env.message_id).await.unwrap(), None);
}

/// Space freed by retention lets a refused body in: `QuotaExceeded` is retryable for a reason.
pub async fn retain_frees_quota<F: BodyFixture + ?Sized>(fx: &F) {
    let quota = fx.capabilities().quota();
    let bodies = fx.bodies();
    for i in 0..quota.max_messages {
        confirmed(&*bodies, &envelope(fx.team(), format!("q{i}"))).await;
    }
    let waiting = envelope(fx.team(), "waiting");
    let outcome = bodies.publish(waiting.clone()).await;
    assert!(
        matches!(
            outcome,
            Published::Retryable(BusError::QuotaExceeded { .. })
        ),
        "{outcome:?}"
    );
    fx.advance(Duration::from_secs(1)).await;
    let cut = fx.now().await;
    assert_eq!(bodies.retain(cut).await.unwrap(), quota.max_messages);
    let (locator, duplicate) = confirmed(&*bodies, &waiting).await;
    assert!(!duplicate);
    let body = bodies.fetch(&locator, waiting.message_id).await.unwrap();
    assert_eq!(body.as_deref(), Some("waiting"));
}

/// `reconcile` of an envelope whose body is held returns the locator it was confirmed with.
pub async fn reconcile_returns_the_locator_of_a_held_body<F: BodyFixture + ?Sized>(fx: &F) {
    let bodies = fx.bodies();
    let env = envelope(fx.team(), "held");
    let (locator, _) = confirmed(&*bodies, &env).await;
    assert_eq!(bodies.reconcile(&env).await.unwrap(), Some(locator));
}

/// `reconcile` of an envelope that is not held publishes the real body under its key: the body
/// is then fetchable, and a later publish of the envelope is a duplicate at the same locator.
pub async fn reconcile_publishes_a_missing_body_under_its_key<F: BodyFixture + ?Sized>(fx: &F) {
    let bodies = fx.bodies();
    let env = envelope(fx.team(), "never answered");
    let locator = bodies
        .reconcile(&env)
        .await
        .unwrap()
        .expect("reconcile stores the real body");
    let body = bodies.fetch(&locator, env.message_id).await.unwrap();
    assert_eq!(body.as_deref(), Some("never answered"));
    let (again, duplicate) = confirmed(&*bodies, &env).await;
    assert!(duplicate, "reconcile used the envelope's publish key");
    assert_eq!(again, locator);
}

/// `reconcile` of another team's envelope is `Err(Forbidden)`.
pub async fn reconcile_refuses_another_teams_envelope<F: BodyFixture + ?Sized>(fx: &F) {
    let got = fx
        .bodies()
        .reconcile(&envelope(fx.other_team(), "not yours"))
        .await;
    assert!(matches!(got, Err(BusError::Forbidden { .. })), "{got:?}");
}

/// `reconcile` of a message already held under another key is `Err(Conflict)`.
pub async fn reconcile_of_a_message_held_under_another_key_is_conflict<F: BodyFixture + ?Sized>(
    fx: &F,
) {
    let bodies = fx.bodies();
    let env = envelope(fx.team(), "first");
    confirmed(&*bodies, &env).await;
    let rekeyed = crewbus_domain::Envelope {
        publish_key: Uuid::new_v4(),
        ..env
    };
    let got = bodies.reconcile(&rekeyed).await;
    assert!(matches!(got, Err(BusError::Conflict { .. })), "{got:?}");
}

/// `reconcile` of a body above the maximum is a fatal refusal: `Err(TooLarge)`.
pub async fn reconcile_of_a_too_large_body_is_too_large<F: BodyFixture + ?Sized>(fx: &F) {
    let limit = fx.capabilities().body_limit_bytes;
    let got = fx
        .bodies()
        .reconcile(&envelope(fx.team(), body_of(limit + 1)))
        .await;
    assert!(matches!(got, Err(BusError::TooLarge { .. })), "{got:?}");
}

/// `reconcile` of a body that is not held while the quota is full is `Ok(None)`: known not
/// stored, a retry is safe.
pub async fn reconcile_when_the_quota_is_full_is_none<F: BodyFixture + ?Sized>(fx: &F) {
    let quota = fx.capabilities().quota();
    let bodies = fx.bodies();
    for i in 0..quota.max_messages {
        confirmed(&*bodies, &envelope(fx.team(), format!("q{i}"))).await;
    }
    let env = envelope(fx.team(), "no room");
    assert_eq!(bodies.reconcile(&env).await.unwrap(), None);
}

/// A body removed by `retain` and published again under the same publish key (within a broker's
/// duplicate window, where one applies) is stored anew: `Confirmed { duplicate: false }` at a
/// locator where it is fetchable — never a confirmation of the removed copy. A further repeat
/// is then a duplicate at that new locator.
pub async fn republish_after_retain_stores_the_body_again<F: BodyFixture + ?Sized>(fx: &F) {
    let bodies = fx.bodies();
    let env = envelope(fx.team(), "stored, retained, stored again");
    let (old, _) = confirmed(&*bodies, &env).await;
    // The shortest step that puts the body strictly before the cut; on a real-time store it
    // stays well inside the duplicate window, which is the case under test.
    fx.advance(Duration::from_millis(10)).await;
    let cut = fx.now().await;
    assert_eq!(bodies.retain(cut).await.unwrap(), 1);
    assert_eq!(bodies.fetch(&old, env.message_id).await.unwrap(), None);
    let (locator, duplicate) = confirmed(&*bodies, &env).await;
    let body = bodies.fetch(&locator, env.message_id).await.unwrap();
    assert_eq!(
        body.as_deref(),
        Some(env.body.as_str()),
        "confirmed at {locator:?}, which holds nothing"
    );
    assert!(!duplicate, "the retained body was stored anew");
    let (again, duplicate) = confirmed(&*bodies, &env).await;
    assert!(duplicate, "a repeat of the re-stored body is a duplicate");
    assert_eq!(again, locator);
    assert_eq!(bodies.reconcile(&env).await.unwrap(), Some(locator));
}

/// `reconcile` after `retain` removed the body never answers the removed copy's locator: it
/// stores the real body again (`Some` locator where it is fetchable), or answers `None`.
pub async fn reconcile_after_retain_does_not_claim_a_removed_body<F: BodyFixture + ?Sized>(fx: &F) {
    let bodies = fx.bodies();
    let env = envelope(fx.team(), "reconciled after retention");
    let (old, _) = confirmed(&*bodies, &env).await;
    fx.advance(Duration::from_millis(10)).await;
    let cut = fx.now().await;
    assert_eq!(bodies.retain(cut).await.unwrap(), 1);
    let Some(locator) = bodies.reconcile(&env).await.unwrap() else {
        return;
    };
    let body = bodies.fetch(&locator, env.message_id).await.unwrap();
    assert_eq!(
        body.as_deref(),
        Some(env.body.as_str()),
        "reconcile answered {locator:?} (removed: {old:?}), which holds nothing"
    );
    let (again, duplicate) = confirmed(&*bodies, &env).await;
    assert!(
        duplicate,
        "reconcile stored the body under the envelope's key"
    );
    assert_eq!(again, locator);
}
