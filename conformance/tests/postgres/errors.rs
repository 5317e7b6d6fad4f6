//! Database errors reach callers as semantic, retryable-or-not `BusError`s.

use crewbus_conformance::wait::until;
use crewbus_domain::{BusError, Published};
use crewbus_ports::{Inbox, MessagingBackend};
use crewbus_postgres::{PostgresBackend, PostgresInbox, PostgresSettings};
use libtest_mimic::Failed;
use uuid::Uuid;

use crate::TestFn;
use crate::support::{ManualClock, database, envelope};

pub(crate) const TESTS: &[(&str, TestFn)] = tests![
    terminated_connections_are_retryable_and_recover,
    admin_shutdown_of_the_session_is_retryable_unavailable,
    ledger_and_journal_errors_are_typed,
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

/// Terminates (as an administrator: SQLSTATE 57P01) the one session of this database that is
/// waiting on a lock, once there is one.
async fn terminate_the_waiting_session(db: &crewbus_conformance::postgres::TestDatabase) {
    let pid: i32 = until(
        std::time::Duration::from_secs(20),
        "a session waiting on a lock",
        || async {
            sqlx::query_scalar(
                "SELECT pid FROM pg_stat_activity
                 WHERE datname = current_database() AND wait_event_type = 'Lock'",
            )
            .fetch_optional(db.pool())
            .await
            .unwrap()
        },
    )
    .await;
    let killed: bool = sqlx::query_scalar("SELECT pg_terminate_backend($1)")
        .bind(pid)
        .fetch_one(db.pool())
        .await
        .unwrap();
    assert!(killed);
}

async fn admin_shutdown_of_the_session_is_retryable_unavailable() -> Result<(), Failed> {
    // The adapter's statement is made to wait on a row lock (another session holds a
    // conflicting uncommitted insert), and its session is terminated mid-statement: the
    // publish must come back retryable (Unavailable), never fatal; the inbox call likewise.
    // Once the blocker is gone, both work again on fresh connections.
    let db = database("admin_shutdown_of_the_session_is_retryable_unavailable").await;
    let team = Uuid::new_v4();
    let clock = ManualClock::new();
    let settings = PostgresSettings::default();
    let b = PostgresBackend::new(db.pool().clone(), team, clock.clone(), &settings);
    let i = PostgresInbox::new(db.pool().clone(), team, clock.clone(), &settings);
    let env = envelope(team, "contended");

    let mut blocker = db.pool().begin().await?;
    sqlx::query(
        "INSERT INTO bodies (message_id, team_id, conversation_id, publish_key, body, stored_at)
         VALUES ($1, $2, $3, $4, 'x', $5)",
    )
    .bind(env.message_id)
    .bind(team)
    .bind(env.conversation_id)
    .bind(env.publish_key)
    .bind(crewbus_ports::Clock::now(&*clock))
    .execute(&mut *blocker)
    .await?;
    let publish = {
        let (b, env) = (b.clone(), env.clone());
        tokio::spawn(async move { b.publish(env).await })
    };
    terminate_the_waiting_session(&db).await;
    match publish.await? {
        Published::Retryable(e) | Published::Uncertain(e) => {
            assert!(matches!(e, BusError::Unavailable { .. }), "{e:?}")
        }
        other => panic!("expected a retryable failure, got {other:?}"),
    }
    blocker.rollback().await?;

    let mut blocker = db.pool().begin().await?;
    sqlx::query(
        "INSERT INTO inbox_consumers (team_id, recipient_key, created_at) VALUES ($1, 'x', $2)",
    )
    .bind(team)
    .bind(crewbus_ports::Clock::now(&*clock))
    .execute(&mut *blocker)
    .await?;
    let fetch = {
        let i = i.clone();
        tokio::spawn(async move { i.fetch_references("x", 1).await })
    };
    terminate_the_waiting_session(&db).await;
    let r = fetch.await?;
    assert!(matches!(r, Err(BusError::Unavailable { .. })), "{r:?}");
    blocker.rollback().await?;

    assert!(matches!(
        b.publish(env).await,
        Published::Confirmed {
            duplicate: false,
            ..
        }
    ));
    assert!(i.fetch_references("x", 1).await?.is_empty());
    assert!(i.inbox_status("x").await?.present);
    db.passed().await;
    Ok(())
}

async fn ledger_and_journal_errors_are_typed() -> Result<(), Failed> {
    // SQLSTATE mapping seen through the ports: a unique violation is Conflict (team name,
    // token hash), an unknown run NotFound, a sealed run Conflict — never a backend error.
    use crewbus_domain::{RunId, RunOutcome, StoreError, TenantId, TokenHash};
    use crewbus_ports::{Journal, Ledger};
    let db = database("ledger_and_journal_errors_are_typed").await;
    let ledger = crewbus_postgres::PostgresLedger::new(db.pool().clone(), TenantId::default());
    let at = chrono::Utc::now();
    let team = ledger
        .create_team("ops", "postgres", "postgres", at)
        .await?;
    let r = ledger.create_team("ops", "postgres", "postgres", at).await;
    assert!(matches!(r, Err(BusError::Conflict { .. })), "{r:?}");
    let token = TokenHash::of("t");
    let agent = ledger.create_agent(team.id, "a", token, at).await?;
    let r = ledger.create_agent(team.id, "b", token, at).await;
    assert!(matches!(r, Err(BusError::Conflict { .. })), "{r:?}");
    let r = ledger
        .create_agent(Uuid::new_v4(), "c", TokenHash::of("u"), at)
        .await;
    assert!(matches!(r, Err(BusError::NotFound { .. })), "{r:?}");
    // Another tenant sees nothing of this one.
    let other = crewbus_postgres::PostgresLedger::new(db.pool().clone(), TenantId::new("other")?);
    assert!(matches!(
        other.team(team.id).await,
        Err(BusError::NotFound { .. })
    ));
    assert!(matches!(
        other.agent_by_token(&token).await,
        Err(BusError::Unauthenticated)
    ));
    let journal = ledger.journal();
    let r = journal.note(RunId::new(), "x", at).await;
    assert!(matches!(r, Err(StoreError::NotFound { .. })), "{r:?}");
    let run = journal.admit(team.id, agent.id, at).await?;
    journal.seal(run, RunOutcome::Cancelled, "bye", at).await?;
    let r = journal.resume(run, at).await;
    assert!(matches!(r, Err(StoreError::Conflict { .. })), "{r:?}");
    assert!(matches!(
        other.journal().run(run).await,
        Err(StoreError::NotFound { .. })
    ));
    db.passed().await;
    Ok(())
}
