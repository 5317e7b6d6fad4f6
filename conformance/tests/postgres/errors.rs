//! Database errors reach callers as semantic, retryable-or-not `BusError`s.

use crewbus_domain::{BusError, Published};
use crewbus_ports::{Inbox, MessagingBackend};
use crewbus_postgres::{PostgresBackend, PostgresInbox, PostgresSettings};
use libtest_mimic::Failed;
use uuid::Uuid;

use crate::TestFn;
use crate::support::{ManualClock, database, envelope};

pub(crate) const TESTS: &[(&str, TestFn)] = tests![
    terminated_connections_are_retryable_and_recover,
    missing_schema_is_not_provisioned,
];

async fn terminated_connections_are_retryable_and_recover() -> Result<(), Failed> {
    // An administrator terminating every connection (SQLSTATE 57P01 on the session) mid-use:
    // the next operation fails retryably or is served by a fresh connection; it never reports a
    // fatal refusal, and the adapter recovers without help.
    let db = database("terminated_connections_are_retryable_and_recover").await;
    let team = Uuid::new_v4();
    let clock = ManualClock::new();
    let b = PostgresBackend::new(
        db.pool().clone(),
        team,
        clock.clone(),
        &PostgresSettings::default(),
    );
    let i = PostgresInbox::new(db.pool().clone(), team, clock, &PostgresSettings::default());
    assert!(b.publish(envelope(team, "warm")).await.is_confirmed());
    let terminate = format!(
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
         WHERE datname = '{}' AND pid <> pg_backend_pid()",
        db.name()
    );
    let admin = crewbus_conformance::postgres::database_url_options();
    let mut conn = sqlx::ConnectOptions::connect(&admin).await?;
    let killed: i64 = sqlx::query_scalar(&terminate).fetch_one(&mut conn).await?;
    assert!(killed >= 1);
    let p = b.publish(envelope(team, "after")).await;
    match &p {
        Published::Confirmed { .. } => {}
        Published::Retryable(e) | Published::Uncertain(e) => {
            assert!(matches!(e, BusError::Unavailable { .. }), "{e:?}")
        }
        Published::Fatal(e) => panic!("terminated connection reported as fatal: {e:?}"),
    }
    let r = i.inbox_status("x").await;
    assert!(
        r.is_ok() || r.as_ref().is_err_and(BusError::is_retryable),
        "{r:?}"
    );
    // Recovered: the pool replaces dead connections.
    let env = envelope(team, "recovered");
    assert!(b.publish(env.clone()).await.is_confirmed());
    let loc = b.reconcile(&env).await?.unwrap();
    assert_eq!(
        b.fetch(&loc, env.message_id).await?.as_deref(),
        Some("recovered")
    );
    db.passed().await;
    Ok(())
}

async fn missing_schema_is_not_provisioned() -> Result<(), Failed> {
    // A database the migrations never ran on: SQLSTATE 42P01 (undefined table).
    let db = crewbus_conformance::postgres::TestDatabase::create(
        "missing_schema_is_not_provisioned",
        |_| async { Ok::<(), ()>(()) },
    )
    .await;
    let team = Uuid::new_v4();
    let b = PostgresBackend::new(
        db.pool().clone(),
        team,
        ManualClock::new(),
        &PostgresSettings::default(),
    );
    let p = b.publish(envelope(team, "x")).await;
    assert!(
        matches!(p, Published::Fatal(BusError::NotProvisioned { .. })),
        "{p:?}"
    );
    crewbus_postgres::migrate(db.pool()).await?;
    crewbus_postgres::migrate(db.pool()).await?;
    assert!(b.publish(envelope(team, "x")).await.is_confirmed());
    db.passed().await;
    Ok(())
}
