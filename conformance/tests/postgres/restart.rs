//! Postgres restarted under load, on a private cluster: operations fail retryably while it is
//! down, recover on their own, and nothing that was confirmed is lost.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::Utc;
use crewbus_conformance::postgres::PgCluster;
use crewbus_domain::{Envelope, Published};
use crewbus_ports::{Inbox, Ledger, MessagingBackend, SystemClock};
use crewbus_postgres::{PostgresBackend, PostgresInbox, PostgresSettings};
use libtest_mimic::Failed;
use sqlx::postgres::PgPoolOptions;
use uuid::Uuid;

use crate::TestFn;
use crate::support::envelope;
use crewbus_conformance::wait::until;

pub(crate) const TESTS: &[(&str, TestFn)] =
    tests![postgres_restart_under_load_loses_nothing_confirmed];

#[derive(Default)]
struct Observed {
    /// Request ids the ledger answered `Ok` for, and those it failed (retryably) and must be
    /// retried after the restart.
    sent: Mutex<Vec<String>>,
    unsent: Mutex<Vec<String>>,
    confirmed: Mutex<Vec<Envelope>>,
    uncertain: Mutex<Vec<Envelope>>,
    references: Mutex<Vec<Uuid>>,
    retryable: AtomicUsize,
}

async fn postgres_restart_under_load_loses_nothing_confirmed() -> Result<(), Failed> {
    for immediate in [false, true] {
        restart_once(immediate).await;
    }
    Ok(())
}

async fn restart_once(immediate: bool) {
    let mut cluster = PgCluster::start().await;
    let pool = PgPoolOptions::new()
        .max_connections(6)
        .acquire_timeout(Duration::from_millis(500))
        .connect_with(cluster.options())
        .await
        .expect("connect to the private cluster");
    crewbus_postgres::migrate(&pool).await.expect("migrate");
    let team = Uuid::new_v4();
    let clock = Arc::new(SystemClock);
    let settings = PostgresSettings::default();
    let body = Arc::new(PostgresBackend::new(
        pool.clone(),
        team,
        clock.clone(),
        &settings,
    ));
    let inbox = Arc::new(PostgresInbox::new(pool.clone(), team, clock, &settings));
    let world = Arc::new(crate::ledger::world(&pool, "postgres", 2).await);
    let seen = Arc::new(Observed::default());
    let stop = Arc::new(AtomicBool::new(false));

    let writers: Vec<_> = (0..4)
        .map(|_| {
            let (body, inbox, seen, stop) =
                (body.clone(), inbox.clone(), seen.clone(), stop.clone());
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    let env = envelope(team, "under load");
                    match body.publish(env.clone()).await {
                        Published::Confirmed { .. } => seen.confirmed.lock().unwrap().push(env),
                        Published::Uncertain(e) => {
                            assert!(e.is_retryable(), "{e:?}");
                            seen.uncertain.lock().unwrap().push(env);
                            seen.retryable.fetch_add(1, Ordering::Relaxed);
                        }
                        Published::Retryable(e) => {
                            assert!(e.is_retryable());
                            seen.retryable.fetch_add(1, Ordering::Relaxed);
                        }
                        Published::Fatal(e) => panic!("fatal during restart: {e:?}"),
                    }
                    let event = Uuid::new_v4();
                    match inbox.publish_reference("rx", event, "{}").await {
                        Published::Confirmed { .. } => seen.references.lock().unwrap().push(event),
                        Published::Fatal(e) => panic!("fatal during restart: {e:?}"),
                        _ => {
                            seen.retryable.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    tokio::task::yield_now().await;
                }
            })
        })
        .collect();

    let confirmed = || seen.confirmed.lock().unwrap().len();
    until(
        Duration::from_secs(30),
        "load before the restart",
        || async { (confirmed() >= 20).then_some(()) },
    )
    .await;
    cluster.stop(immediate).await;
    until(
        Duration::from_secs(30),
        "retryable errors while down",
        || async { (seen.retryable.load(Ordering::Relaxed) >= 4).then_some(()) },
    )
    .await;
    let before_restart = confirmed();
    cluster.restart().await;
    until(
        Duration::from_secs(60),
        "progress after the restart",
        || async { (confirmed() >= before_restart + 20).then_some(()) },
    )
    .await;
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        w.await.expect("writer");
    }

    // Every confirmed body is there, as sent; every unanswered one settles by reconcile.
    let all = seen.confirmed.lock().unwrap().clone();
    for env in &all {
        let loc = crewbus_domain::Locator::new("postgres", &env.message_id.to_string());
        let got = body
            .fetch(&loc, env.message_id)
            .await
            .expect("fetch after restart");
        assert_eq!(got.as_deref(), Some("under load"), "confirmed body lost");
    }
    let uncertain = seen.uncertain.lock().unwrap().clone();
    for env in uncertain {
        assert!(body.reconcile(&env).await.expect("reconcile").is_some());
    }
    // Sends that failed retryably are retried with the same request id: each lands once,
    // whether or not the failed attempt had committed; the conversation stays gap-free.
    let unsent = seen.unsent.lock().unwrap().clone();
    for id in &unsent {
        let req = crate::ledger::request(&world, 0, id, "sent under load");
        let retried = world
            .ledger
            .send(req, Utc::now())
            .await
            .expect("retry after restart");
        assert_eq!(retried.message.request_id, *id);
    }
    let sent = seen.sent.lock().unwrap().clone();
    let mut seqs = Vec::new();
    let mut after = 0;
    loop {
        let page = world
            .ledger
            .history(world.team.id, world.conv.id, after, 1000)
            .await
            .expect("history");
        if page.items.is_empty() {
            break;
        }
        for item in &page.items {
            assert!(item.absence.is_none(), "every message is stored");
            seqs.push((item.message.seq, item.message.request_id.clone()));
        }
        after = page.next_after_seq;
    }
    let total = sent.len() + unsent.len();
    assert_eq!(
        seqs.iter().map(|s| s.0).collect::<Vec<_>>(),
        (1..=total as u64).collect::<Vec<_>>(),
        "gap-free, one message per request"
    );
    let ids: std::collections::HashSet<_> = seqs.iter().map(|s| s.1.clone()).collect();
    assert!(
        sent.iter().all(|id| ids.contains(id)),
        "a committed send was lost"
    );
    let refs = seen.references.lock().unwrap().clone();
    let held: i64 = sqlx::query_scalar("SELECT count(*) FROM inbox_queue WHERE event_id = ANY($1)")
        .bind(&refs)
        .fetch_one(&pool)
        .await
        .expect("count references");
    assert_eq!(held as usize, refs.len(), "confirmed inbox references lost");
    pool.close().await;
}
