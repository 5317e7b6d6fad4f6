//! The push attempts log (every POST of the delivery worker, the newest `push.attempts_kept`
//! kept, a finished registration's log pruned after `push.attempts_kept_days`) and the console
//! feed event the worker makes when it parks a registration.

use crate::push_support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crewbus::push::{DeliverySettings, DeliveryWorker, Outbox, PushRuntime};
use crewbus_domain::{AttemptOutcome, FeedEvent, FeedKind, RunOutcome, Seq};
use crewbus_memory::{ManualClock, MemoryPushStore};
use crewbus_ports::{Clock, Journal, PushStore};
use push_support::*;

const ID: &str = "operator:ops";

fn worker(
    store: &MemoryPushStore,
    journal: &crewbus_memory::MemoryJournal,
    url: &str,
    clock: &ManualClock,
    kept: usize,
) -> (Outbox, DeliveryWorker) {
    let outbox = Outbox::new(Arc::new(store.clone()), vec![destination("ops", url)])
        .with_clock(Arc::new(clock.clone()));
    let worker = DeliveryWorker::new(
        &outbox,
        Arc::new(journal.clone()),
        transport(Duration::from_secs(5)),
    )
    .with_settings(DeliverySettings {
        attempts_kept: kept,
        ..DeliverySettings::default()
    })
    .with_clock(Arc::new(clock.clone()));
    (outbox, worker)
}

#[tokio::test]
async fn every_post_is_logged_newest_first_and_the_log_keeps_the_newest_attempts_kept() {
    let rx = Receiver::start().await;
    rx.script("/ok/ops", [(500, None)]);
    let t = tenant("acme");
    let (store, journal) = (MemoryPushStore::new(t.clone()), journal(&t));
    let clock = ManualClock::new(chrono::Utc::now());
    let (outbox, worker) = worker(&store, &journal, &rx.url("/ok/ops"), &clock, 3);
    let at = clock.now();
    let run = run_with_notes(&journal, 4, at).await; // records 1..=5
    outbox.open(run).await.unwrap();

    // The first POST is answered 500: one attempt, not acknowledged, the cursor stays.
    assert_eq!(worker.run_once(at, 10).await.unwrap().retried, 1);
    let log = store.attempts(run, ID, 10).await.unwrap();
    assert_eq!(log.len(), 1, "{log:?}");
    assert_eq!(log[0].seq, Seq(1));
    assert_eq!(log[0].outcome, AttemptOutcome::Status { status: 500 });
    assert!(!log[0].outcome.acknowledged());
    assert_eq!(log[0].at, at, "the POST's start on the worker's clock");

    // Then five 2xx POSTs: the log keeps the newest three, newest first.
    let later = at + chrono::Duration::seconds(120);
    clock.set(later);
    let sweep = worker.run_once(later, 10).await.unwrap();
    assert_eq!(sweep.delivered, 5);
    let log = store.attempts(run, ID, 10).await.unwrap();
    let seqs: Vec<u64> = log.iter().map(|a| a.seq.0).collect();
    assert_eq!(seqs, [5, 4, 3]);
    for a in &log {
        assert_eq!(a.outcome, AttemptOutcome::Status { status: 200 });
        assert!(a.outcome.acknowledged());
        assert_eq!(a.at, later);
        assert!(a.duration_ms < 5_000, "{a:?}");
    }
}

#[tokio::test]
async fn an_attempt_without_an_answer_logs_the_error_without_the_url_or_its_query() {
    // A port nobody listens on: bind, note the port, drop the listener.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!(
        "http://{}/hook?sig=query-secret",
        listener.local_addr().unwrap()
    );
    drop(listener);
    let t = tenant("acme");
    let (store, journal) = (MemoryPushStore::new(t.clone()), journal(&t));
    let clock = ManualClock::new(chrono::Utc::now());
    let (outbox, worker) = worker(&store, &journal, &url, &clock, 20);
    let at = clock.now();
    let run = run_with_notes(&journal, 0, at).await;
    outbox.open(run).await.unwrap();
    assert_eq!(worker.run_once(at, 10).await.unwrap().retried, 1);
    let log = store.attempts(run, ID, 10).await.unwrap();
    assert_eq!(log.len(), 1);
    match &log[0].outcome {
        AttemptOutcome::Error { error } => {
            assert!(error.contains("connect"), "{error}");
            for leak in ["query-secret", "127.0.0.1", "/hook"] {
                assert!(!error.contains(leak), "{error} holds {leak}");
            }
        }
        other => panic!("expected an error, got {other:?}"),
    }
}

#[tokio::test]
async fn parking_says_so_on_the_feed_for_the_runs_team() {
    let rx = Receiver::start().await;
    rx.script("/ok/ops", [(410, None)]);
    let t = tenant("acme");
    let (store, journal) = (MemoryPushStore::new(t.clone()), journal(&t));
    let clock = ManualClock::new(chrono::Utc::now());
    let (outbox, worker) = worker(&store, &journal, &rx.url("/ok/ops"), &clock, 20);
    let heard: Arc<Mutex<Vec<FeedEvent>>> = Arc::default();
    let sink = {
        let heard = Arc::clone(&heard);
        Arc::new(move |e: FeedEvent| heard.lock().unwrap().push(e))
    };
    let worker = worker.with_events(sink);
    let at = clock.now();
    let run = run_with_notes(&journal, 1, at).await;
    outbox.open(run).await.unwrap();
    // Before anything parks, nothing is said.
    assert!(heard.lock().unwrap().is_empty());
    assert_eq!(worker.run_once(at, 10).await.unwrap().parked, 1);
    let team = journal.run(run).await.unwrap().team;
    let heard = heard.lock().unwrap().clone();
    assert_eq!(heard.len(), 1, "{heard:?}");
    assert_eq!(heard[0].kind, FeedKind::RegistrationParked);
    assert_eq!(heard[0].team, team);
    assert_eq!(heard[0].run, Some(run.0));
    // The 410 is in the log too.
    let log = store.attempts(run, ID, 10).await.unwrap();
    assert_eq!(log[0].outcome, AttemptOutcome::Status { status: 410 });
}

#[tokio::test]
async fn a_finished_registrations_log_is_pruned_after_the_days_kept() {
    let rx = Receiver::start().await;
    let t = tenant("acme");
    let (store, journal) = (MemoryPushStore::new(t.clone()), journal(&t));
    let start = chrono::Utc::now();
    let clock = ManualClock::new(start);
    let (outbox, worker) = worker(&store, &journal, &rx.url("/ok/ops"), &clock, 20);
    // A finished run: its terminal record acknowledged deletes the registration, the log stays.
    let run = run_with_notes(&journal, 0, start).await;
    journal
        .seal(run, RunOutcome::Succeeded, "done", start)
        .await
        .unwrap();
    outbox.open(run).await.unwrap();
    assert_eq!(worker.run_once(start, 10).await.unwrap().deleted, 1);
    assert!(store.get(run, ID).await.unwrap().is_none());
    assert_eq!(store.attempts(run, ID, 10).await.unwrap().len(), 2);
    // A live registration of another run, with its own log.
    let live = run_with_notes(&journal, 0, start).await;
    outbox.open(live).await.unwrap();
    worker.run_once(start, 10).await.unwrap();
    assert_eq!(store.attempts(live, ID, 10).await.unwrap().len(), 1);

    let runtime = PushRuntime {
        attempts_kept_for: Duration::from_secs(7 * 86_400),
        prune_every: Duration::from_millis(10),
        ..PushRuntime::new(outbox, worker, Duration::from_millis(10))
    };
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn({
        let clock: Arc<dyn Clock> = Arc::new(clock.clone());
        async move {
            runtime
                .run(clock, async move {
                    let _ = stopped.await;
                })
                .await;
        }
    });
    // Past seven days the finished log goes; the live one stays (the same pruning saw both).
    clock.set(start + chrono::Duration::days(7) + chrono::Duration::seconds(1));
    let end = tokio::time::Instant::now() + Duration::from_secs(10);
    while !store.attempts(run, ID, 10).await.unwrap().is_empty() {
        assert!(tokio::time::Instant::now() < end, "never pruned");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(!store.attempts(live, ID, 10).await.unwrap().is_empty());
    stop.send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(10), task)
        .await
        .expect("the runtime stops on shutdown")
        .unwrap();
}
