//! `PostgresBackend` (bodies) on a real database.

use std::sync::Arc;
use std::time::Duration;

use crewbus_domain::{BusError, Locator, MAX_BODY_BYTES, Published};
use crewbus_ports::{Backends, MessagingBackend};
use crewbus_postgres::{PostgresBackend, PostgresBackends, PostgresSettings};
use libtest_mimic::Failed;
use uuid::Uuid;

use crate::TestFn;
use crate::support::{ManualClock, database, envelope};

pub(crate) const TESTS: &[(&str, TestFn)] = tests![
    body_publish_is_idempotent_on_publish_key,
    body_same_message_under_another_key_is_conflict,
    body_of_another_team_is_forbidden,
    body_max_is_confirmed_and_max_plus_one_is_too_large,
    body_fetch_checks_locator_team_and_message,
    body_with_nul_round_trips,
    body_retain_removes_bodies_stored_before,
    body_reconcile_finds_or_publishes,
    body_concurrent_duplicates_store_one_row,
    registry_answers_for_postgres_only,
    body_max_is_the_configured_limit_through_the_port,
];

fn backend(pool: &sqlx::PgPool, team: Uuid, clock: Arc<ManualClock>) -> PostgresBackend {
    PostgresBackend::new(pool.clone(), team, clock, &PostgresSettings::default())
}

async fn body_rows(pool: &sqlx::PgPool) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM bodies")
        .fetch_one(pool)
        .await
        .unwrap()
}

async fn body_publish_is_idempotent_on_publish_key() -> Result<(), Failed> {
    let db = database("body_publish_is_idempotent_on_publish_key").await;
    let team = Uuid::new_v4();
    let b = backend(db.pool(), team, ManualClock::new());
    assert_eq!(b.name(), "postgres");
    let env = envelope(team, "hello");
    let Published::Confirmed {
        locator,
        duplicate: false,
    } = b.publish(env.clone()).await
    else {
        panic!("first publish not confirmed as new");
    };
    assert_eq!(locator.as_str(), format!("postgres:{}", env.message_id));
    let again = b.publish(env.clone()).await;
    assert!(
        matches!(&again, Published::Confirmed { locator: l, duplicate: true } if *l == locator),
        "{again:?}"
    );
    assert_eq!(body_rows(db.pool()).await, 1);
    assert_eq!(
        b.fetch(&locator, env.message_id).await?.as_deref(),
        Some("hello")
    );
    db.passed().await;
    Ok(())
}

async fn body_same_message_under_another_key_is_conflict() -> Result<(), Failed> {
    let db = database("body_same_message_under_another_key_is_conflict").await;
    let team = Uuid::new_v4();
    let b = backend(db.pool(), team, ManualClock::new());
    let env = envelope(team, "one");
    assert!(b.publish(env.clone()).await.is_confirmed());
    let other_key = crewbus_domain::Envelope {
        publish_key: Uuid::new_v4(),
        ..env.clone()
    };
    let p = b.publish(other_key).await;
    assert!(
        matches!(p, Published::Fatal(BusError::Conflict { .. })),
        "{p:?}"
    );
    // The key of one message reused for another message is a conflict too.
    let other_message = crewbus_domain::Envelope {
        message_id: Uuid::new_v4(),
        ..env.clone()
    };
    let p = b.publish(other_message).await;
    assert!(
        matches!(p, Published::Fatal(BusError::Conflict { .. })),
        "{p:?}"
    );
    assert_eq!(body_rows(db.pool()).await, 1);
    db.passed().await;
    Ok(())
}

async fn body_of_another_team_is_forbidden() -> Result<(), Failed> {
    let db = database("body_of_another_team_is_forbidden").await;
    let b = backend(db.pool(), Uuid::new_v4(), ManualClock::new());
    let p = b.publish(envelope(Uuid::new_v4(), "x")).await;
    assert!(
        matches!(p, Published::Fatal(BusError::Forbidden { .. })),
        "{p:?}"
    );
    assert_eq!(body_rows(db.pool()).await, 0);
    db.passed().await;
    Ok(())
}

async fn body_max_is_confirmed_and_max_plus_one_is_too_large() -> Result<(), Failed> {
    let db = database("body_max_is_confirmed_and_max_plus_one_is_too_large").await;
    let team = Uuid::new_v4();
    let b = backend(db.pool(), team, ManualClock::new());
    assert_eq!(b.max_body_bytes(), MAX_BODY_BYTES);
    let max = "x".repeat(MAX_BODY_BYTES as usize);
    let env = envelope(team, &max);
    let Published::Confirmed { locator, .. } = b.publish(env.clone()).await else {
        panic!("a body of exactly the maximum was refused");
    };
    assert_eq!(
        b.fetch(&locator, env.message_id).await?.map(|s| s.len()),
        Some(MAX_BODY_BYTES as usize)
    );
    let over = envelope(team, &format!("{max}y"));
    let p = b.publish(over).await;
    assert!(
        matches!(p, Published::Fatal(BusError::TooLarge { size, limit })
            if size == MAX_BODY_BYTES + 1 && limit == MAX_BODY_BYTES),
        "{p:?}"
    );
    assert_eq!(body_rows(db.pool()).await, 1);
    db.passed().await;
    Ok(())
}

async fn body_fetch_checks_locator_team_and_message() -> Result<(), Failed> {
    let db = database("body_fetch_checks_locator_team_and_message").await;
    let clock = ManualClock::new();
    let team = Uuid::new_v4();
    let b = backend(db.pool(), team, clock.clone());
    let other = backend(db.pool(), Uuid::new_v4(), clock);
    let env = envelope(team, "mine");
    let locator = b.publish(env.clone()).await.locator().cloned().unwrap();
    // Another team's backend, holding the right locator and id: the row's team decides.
    let r = other.fetch(&locator, env.message_id).await;
    assert!(matches!(r, Err(BusError::Forbidden { .. })), "{r:?}");
    // The locator of another message than the one asked for.
    let r = b.fetch(&locator, Uuid::new_v4()).await;
    assert!(matches!(r, Err(BusError::Forbidden { .. })), "{r:?}");
    // Unknown message: nothing held.
    let unknown = Uuid::new_v4();
    let r = b
        .fetch(&Locator::new("postgres", &unknown.to_string()), unknown)
        .await;
    assert!(matches!(r, Ok(None)), "{r:?}");
    // Malformed or foreign-scheme locators are invalid; the inbox's locators are forbidden.
    for bad in [
        "postgres:not-a-uuid",
        "jetstream:S:1",
        "nocolon",
        "",
        "postgres:",
    ] {
        let r = b.fetch(&Locator(bad.to_owned()), env.message_id).await;
        assert!(matches!(r, Err(BusError::Invalid { .. })), "{bad}: {r:?}");
    }
    let r = b
        .fetch(&Locator("postgres:inbox:1".to_owned()), env.message_id)
        .await;
    assert!(matches!(r, Err(BusError::Forbidden { .. })), "{r:?}");
    db.passed().await;
    Ok(())
}

async fn body_with_nul_round_trips() -> Result<(), Failed> {
    // Postgres `text` refuses U+0000; bodies are stored as UTF-8 bytes so it is kept as sent,
    // and nothing is left half-written.
    let db = database("body_with_nul_round_trips").await;
    let team = Uuid::new_v4();
    let b = backend(db.pool(), team, ManualClock::new());
    let body = "a\u{0}b\u{0}\u{1F600}\u{FFFF}";
    let env = envelope(team, body);
    let p = b.publish(env.clone()).await;
    let Published::Confirmed {
        locator,
        duplicate: false,
    } = p
    else {
        panic!("{p:?}");
    };
    assert_eq!(
        b.fetch(&locator, env.message_id).await?.as_deref(),
        Some(body)
    );
    assert!(matches!(
        b.publish(env).await,
        Published::Confirmed {
            duplicate: true,
            ..
        }
    ));
    db.passed().await;
    Ok(())
}

async fn body_retain_removes_bodies_stored_before() -> Result<(), Failed> {
    let db = database("body_retain_removes_bodies_stored_before").await;
    let clock = ManualClock::new();
    let team = Uuid::new_v4();
    let b = backend(db.pool(), team, clock.clone());
    let other_team = backend(db.pool(), Uuid::new_v4(), clock.clone());
    let old = envelope(team, "old");
    let old_locator = b.publish(old.clone()).await.locator().cloned().unwrap();
    assert!(
        other_team
            .publish(envelope(other_team.team(), "theirs"))
            .await
            .is_confirmed()
    );
    clock.advance(Duration::from_secs(60));
    let cut = crewbus_ports::Clock::now(&*clock);
    let new = envelope(team, "new");
    let new_locator = b.publish(new.clone()).await.locator().cloned().unwrap();
    assert_eq!(b.retain(cut).await?, 1);
    assert_eq!(b.retain(cut).await?, 0, "retain is idempotent");
    assert_eq!(b.fetch(&old_locator, old.message_id).await?, None);
    assert_eq!(
        b.fetch(&new_locator, new.message_id).await?.as_deref(),
        Some("new")
    );
    // Another team's bodies are not touched.
    assert_eq!(body_rows(db.pool()).await, 2);
    db.passed().await;
    Ok(())
}

async fn body_reconcile_finds_or_publishes() -> Result<(), Failed> {
    let db = database("body_reconcile_finds_or_publishes").await;
    let team = Uuid::new_v4();
    let b = backend(db.pool(), team, ManualClock::new());
    let held = envelope(team, "held");
    let locator = b.publish(held.clone()).await.locator().cloned().unwrap();
    assert_eq!(b.reconcile(&held).await?, Some(locator));
    assert_eq!(body_rows(db.pool()).await, 1);
    // Not held: reconcile stores the real body under the same key.
    let lost = envelope(team, "lost");
    let found = b
        .reconcile(&lost)
        .await?
        .expect("reconcile publishes the body");
    assert_eq!(
        b.fetch(&found, lost.message_id).await?.as_deref(),
        Some("lost")
    );
    assert!(matches!(
        b.publish(lost).await,
        Published::Confirmed {
            duplicate: true,
            ..
        }
    ));
    let r = b.reconcile(&envelope(Uuid::new_v4(), "x")).await;
    assert!(matches!(r, Err(BusError::Forbidden { .. })), "{r:?}");
    db.passed().await;
    Ok(())
}

async fn body_concurrent_duplicates_store_one_row() -> Result<(), Failed> {
    let db = database("body_concurrent_duplicates_store_one_row").await;
    let team = Uuid::new_v4();
    let b = Arc::new(backend(db.pool(), team, ManualClock::new()));
    let env = envelope(team, "racing");
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let (b, env) = (b.clone(), env.clone());
            tokio::spawn(async move { b.publish(env).await })
        })
        .collect();
    let mut fresh = 0;
    for t in tasks {
        match t.await? {
            Published::Confirmed { duplicate, .. } => fresh += usize::from(!duplicate),
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(fresh, 1, "exactly one publish stored the body");
    assert_eq!(body_rows(db.pool()).await, 1);
    db.passed().await;
    Ok(())
}

async fn registry_answers_for_postgres_only() -> Result<(), Failed> {
    let db = database("registry_answers_for_postgres_only").await;
    let reg = PostgresBackends::new(
        db.pool().clone(),
        ManualClock::new(),
        PostgresSettings::default(),
    );
    assert_eq!(reg.name(), "postgres");
    let team = Uuid::new_v4();
    let body = reg.body_backend(team, "postgres").await?;
    assert_eq!(body.name(), "postgres");
    assert!(
        body.publish(envelope(team, "via registry"))
            .await
            .is_confirmed()
    );
    let r = reg.body_backend(team, "jetstream").await;
    assert!(matches!(r, Err(BusError::NotFound { .. })));
    let r = reg.inbox(team, "memory").await;
    assert!(matches!(r, Err(BusError::NotFound { .. })));
    let inbox = reg.inbox(team, "postgres").await?;
    assert!(
        inbox
            .publish_reference("a", Uuid::new_v4(), "{}")
            .await
            .is_confirmed()
    );
    // One adapter per team, cached.
    assert!(Arc::ptr_eq(
        &body,
        &reg.body_backend(team, "postgres").await?
    ));
    db.passed().await;
    Ok(())
}

/// A lower configured limit is what the port's `max_body_bytes` answers (the application refuses
/// larger bodies with it before they reach the outbox), not the bus's 1 MiB, and what `publish`
/// refuses above.
async fn body_max_is_the_configured_limit_through_the_port() -> Result<(), Failed> {
    let db = database("body_max_is_the_configured_limit_through_the_port").await;
    let limit = 64 * 1024;
    let reg = PostgresBackends::new(
        db.pool().clone(),
        ManualClock::new(),
        PostgresSettings {
            max_body_bytes: limit,
            ..PostgresSettings::default()
        },
    );
    let team = Uuid::new_v4();
    let body: Arc<dyn MessagingBackend> = reg.body_backend(team, "postgres").await?;
    assert_eq!(body.max_body_bytes(), limit);
    let p = body
        .publish(envelope(team, &"x".repeat(limit as usize + 1)))
        .await;
    assert!(
        matches!(p, Published::Fatal(BusError::TooLarge { size, limit: l })
            if size == limit + 1 && l == limit),
        "{p:?}"
    );
    assert!(
        body.publish(envelope(team, &"x".repeat(limit as usize)))
            .await
            .is_confirmed()
    );
    db.passed().await;
    Ok(())
}
