//! The delivery worker against a real local HTTP receiver (PUSH.md §6).

use crate::push_support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use crewbus::push::{DeliverySettings, DeliveryWorker, Outbox};
use crewbus_domain::{
    Backoff, PushAttempt, PushConfig, PushRegistration, RunId, RunOutcome, Secret, Seq, StoreError,
    TenantId,
};
use crewbus_memory::{ManualClock, MemoryJournal, MemoryPushStore};
use crewbus_ports::{Journal, PushStore, SystemClock};
use push_support::*;

fn settings() -> DeliverySettings {
    DeliverySettings {
        backoff: Backoff {
            base: Duration::from_secs(1),
            cap: Duration::from_secs(60),
            max_attempts: 3,
        },
        ..DeliverySettings::default()
    }
}

struct Scene {
    store: MemoryPushStore,
    journal: MemoryJournal,
    outbox: Outbox,
    worker: DeliveryWorker,
    /// The time the outbox registers at (the manual clock's start).
    at: DateTime<Utc>,
    /// The clock of the outbox and of the worker's answers: stands still unless a test (or a
    /// `/slow/` receiver) moves it.
    clock: ManualClock,
}

fn scene(destinations: Vec<crewbus::push::Destination>, timeout: Duration) -> Scene {
    let t = tenant("acme");
    let store = MemoryPushStore::new(t.clone());
    let journal = journal(&t);
    let at = Utc::now();
    let clock = ManualClock::new(at);
    let outbox =
        Outbox::new(Arc::new(store.clone()), destinations).with_clock(Arc::new(clock.clone()));
    let worker = DeliveryWorker::new(&outbox, Arc::new(journal.clone()), transport(timeout))
        .with_settings(settings())
        .with_clock(Arc::new(clock.clone()));
    Scene {
        store,
        journal,
        outbox,
        worker,
        at,
        clock,
    }
}

async fn registration(store: &MemoryPushStore, run: RunId, id: &str) -> PushRegistration {
    // The port has no "inspect" call: claim everything due before a far instant, then put each
    // claim back where it was (`defer` to its own `next_attempt_at`); parked rows come from
    // `parked`.
    let far = Utc::now() + chrono::Duration::days(3650);
    let due = store.due(far, 1000, far).await.unwrap();
    let mut found = None;
    for r in due {
        if r.config.run == run && r.config.id == id {
            store.defer(run, id, r.next_attempt_at).await.unwrap();
            found = Some(r);
        } else {
            store
                .defer(r.config.run, &r.config.id, r.next_attempt_at)
                .await
                .unwrap();
        }
    }
    if let Some(r) = found {
        return r;
    }
    store
        .parked(1000)
        .await
        .unwrap()
        .into_iter()
        .find(|r| r.config.run == run && r.config.id == id)
        .expect("the registration exists")
}

#[tokio::test]
async fn events_arrive_signed_in_order_as_cloudevents_verified_independently() {
    let rx = Receiver::start().await;
    let mut d = destination("ops", &rx.url("/ok/ops"));
    d.signing_keys = vec![Secret::new(KEY_OLD), Secret::new(KEY_NEW)];
    let s = scene(vec![d], Duration::from_secs(5));
    let at = s.at;
    let run = run_with_notes(&s.journal, 2, at).await;
    s.outbox.open(run).await.unwrap();

    let sweep = s.worker.run_once(at, 10).await.unwrap();
    assert_eq!((sweep.claimed, sweep.delivered, sweep.advanced), (1, 3, 1));
    let hits = rx.hits("/ok/ops");
    assert_eq!(hits.len(), 3);
    for (i, hit) in hits.iter().enumerate() {
        // Either key verifies (rotation), with the Standard Webhooks reference library.
        for key in [KEY_OLD, KEY_NEW] {
            standardwebhooks::Webhook::new(key)
                .unwrap()
                .verify(&hit.body, &hit.headers)
                .expect("the signature verifies");
        }
        let wrong = standardwebhooks::Webhook::new("whsec_d3Jvbmcta2V5").unwrap();
        assert!(wrong.verify(&hit.body, &hit.headers).is_err());
        assert_eq!(
            hit.header("webhook-signature").unwrap().split(' ').count(),
            2
        );
        assert_eq!(
            hit.header("content-type").as_deref(),
            Some("application/cloudevents+json")
        );
        assert_eq!(
            hit.header("webhook-timestamp"),
            Some(at.timestamp().to_string())
        );
        let event = hit.json();
        assert_eq!(event["specversion"], "1.0");
        assert_eq!(event["id"], format!("{run}/{}", i + 1));
        assert_eq!(event["data"]["seq"], i as u64 + 1);
        assert!(hit.header("authorization").is_none());
    }
    assert_eq!(hits[0].json()["type"], "dev.crewbus.run.run_admitted");
    assert_eq!(hits[1].json()["type"], "dev.crewbus.run.note");
    let reg = registration(&s.store, run, "operator:ops").await;
    assert_eq!(reg.next_seq, Seq(4));
    assert_eq!(reg.attempts, 0);

    // Nothing new: the next sweep defers without a request and without counting an attempt.
    let sweep = s.worker.run_once(at, 10).await.unwrap();
    assert_eq!((sweep.deferred, sweep.delivered), (1, 0));
    assert_eq!(rx.hits("/ok/ops").len(), 3);
    let reg = registration(&s.store, run, "operator:ops").await;
    assert_eq!(reg.attempts, 0);
    assert_eq!(reg.next_attempt_at, at + chrono::Duration::seconds(1));
}

#[tokio::test]
async fn a_redirect_is_a_failure_and_is_not_followed() {
    let rx = Receiver::start().await;
    let s = scene(
        vec![destination("ops", &rx.url("/redirect"))],
        Duration::from_secs(5),
    );
    let at = s.at;
    let run = run_with_notes(&s.journal, 0, at).await;
    s.outbox.open(run).await.unwrap();
    let sweep = s.worker.run_once(at, 10).await.unwrap();
    assert_eq!((sweep.retried, sweep.delivered), (1, 0));
    assert_eq!(rx.hits("/redirect").len(), 1);
    assert!(rx.hits("/page").is_empty(), "the redirect was followed");
    let reg = registration(&s.store, run, "operator:ops").await;
    assert_eq!((reg.next_seq, reg.attempts), (Seq(1), 1));
    assert!(reg.last_error.unwrap().contains("302"));
}

#[tokio::test]
async fn not_found_and_server_errors_retry_with_backoff_then_park_at_the_ceiling() {
    let rx = Receiver::start().await;
    rx.script("/ok/ops", [(404, None), (500, None), (503, None)]);
    let s = scene(
        vec![destination("ops", &rx.url("/ok/ops"))],
        Duration::from_secs(5),
    );
    let mut at = s.at;
    let run = run_with_notes(&s.journal, 0, at).await;
    s.outbox.open(run).await.unwrap();

    for attempt in 1..=2u32 {
        let sweep = s.worker.run_once(at, 10).await.unwrap();
        assert_eq!(sweep.retried, 1, "attempt {attempt}");
        let reg = registration(&s.store, run, "operator:ops").await;
        assert_eq!((reg.attempts, reg.next_seq), (attempt, Seq(1)));
        let delay = reg.next_attempt_at - at;
        // Jittered within [ceiling/2, ceiling] of base 1 s doubling.
        let ceiling = 1000 * (1i64 << (attempt - 1));
        assert!(
            delay.num_milliseconds() >= ceiling / 2 && delay.num_milliseconds() <= ceiling,
            "{delay}"
        );
        // Not due before its time.
        assert_eq!(
            s.worker
                .run_once(reg.next_attempt_at - chrono::Duration::milliseconds(1), 10)
                .await
                .unwrap()
                .claimed,
            0
        );
        at = reg.next_attempt_at;
    }
    // Third failure (503) reaches max_attempts = 3: parked.
    let sweep = s.worker.run_once(at, 10).await.unwrap();
    assert_eq!(sweep.parked, 1);
    let parked = s.store.parked(10).await.unwrap();
    assert_eq!(parked.len(), 1);
    let error = parked[0].last_error.as_deref().unwrap();
    assert!(error.contains("503"));
    // What `push parked` shows agrees with the error and with the POSTs made.
    assert!(error.contains("gave up after 3 attempts"), "{error}");
    assert_eq!(parked[0].attempts, 3);
    assert_eq!(rx.hits("/ok/ops").len(), 3);

    // Un-parked, it delivers (the script is used up: 200).
    assert!(s.store.unpark(run, "operator:ops", at).await.unwrap());
    let sweep = s.worker.run_once(at, 10).await.unwrap();
    assert_eq!(sweep.delivered, 1);
}

#[tokio::test]
async fn retry_after_is_honoured_within_the_cap() {
    let rx = Receiver::start().await;
    rx.script("/ok/a", [(503, Some(30))]);
    rx.script("/ok/b", [(429, Some(86_400))]);
    let s = scene(
        vec![
            destination("a", &rx.url("/ok/a")),
            destination("b", &rx.url("/ok/b")),
        ],
        Duration::from_secs(5),
    );
    let at = s.at;
    let run = run_with_notes(&s.journal, 0, at).await;
    s.outbox.open(run).await.unwrap();
    let sweep = s.worker.run_once(at, 10).await.unwrap();
    assert_eq!(sweep.retried, 2);
    let a = registration(&s.store, run, "operator:a").await;
    assert_eq!(a.next_attempt_at - at, chrono::Duration::seconds(30));
    let b = registration(&s.store, run, "operator:b").await;
    assert_eq!(b.next_attempt_at - at, chrono::Duration::seconds(60));
}

/// A receiver that takes 1.5 s to answer 503 with `Retry-After: 2` is retried 2 s after its
/// answer (3.5 s after the POST started), not 2 s after the POST started.
#[tokio::test]
async fn retry_after_counts_from_the_answer_of_a_slow_receiver() {
    let rx = Receiver::start().await;
    let s = scene(
        vec![destination("ops", &rx.url("/slow/ops"))],
        Duration::from_secs(5),
    );
    rx.slow(&s.clock, Duration::from_millis(1500));
    rx.script("/slow/ops", [(503, Some(2))]);
    let at = s.at;
    let run = run_with_notes(&s.journal, 0, at).await;
    s.outbox.open(run).await.unwrap();
    let sweep = s.worker.run_once(at, 10).await.unwrap();
    assert_eq!(sweep.retried, 1);
    let reg = registration(&s.store, run, "operator:ops").await;
    assert_eq!(
        reg.next_attempt_at - at,
        chrono::Duration::milliseconds(3500),
        "Retry-After counts from the answer at +1.5 s"
    );
    assert_eq!(
        s.worker
            .run_once(at + chrono::Duration::milliseconds(3499), 10)
            .await
            .unwrap()
            .claimed,
        0
    );
    // The jittered backoff counts from the answer too: a slow 500 without Retry-After.
    rx.script("/slow/ops", [(500, None)]);
    let second = reg.next_attempt_at;
    s.clock.set(second);
    assert_eq!(s.worker.run_once(second, 10).await.unwrap().retried, 1);
    let reg = registration(&s.store, run, "operator:ops").await;
    let answered = second + chrono::Duration::milliseconds(1500);
    let delay = (reg.next_attempt_at - answered).num_milliseconds();
    // Attempt 2 of base 1 s doubling: within [1 s, 2 s] of the answer.
    assert!(
        (1000..=2000).contains(&delay),
        "{delay} ms after the answer"
    );
}

/// The running worker reads the answer's time from the clock it runs on.
#[tokio::test]
async fn the_running_worker_counts_retry_after_from_the_answer() {
    let rx = Receiver::start().await;
    let t = tenant("acme");
    let store = Arc::new(CrashBeforeAdvance {
        inner: MemoryPushStore::new(t.clone()),
        crash: AtomicBool::new(false),
        retries: AtomicUsize::new(0),
    });
    let journal = journal(&t);
    let at = Utc::now();
    let clock = ManualClock::new(at);
    let outbox = Outbox::new(
        store.clone(),
        vec![destination("ops", &rx.url("/slow/ops"))],
    )
    .with_clock(Arc::new(clock.clone()));
    // The worker's own clock is another one: `run` must use the clock it is given.
    let worker = DeliveryWorker::new(
        &outbox,
        Arc::new(journal.clone()),
        transport(Duration::from_secs(5)),
    )
    .with_settings(settings())
    .with_clock(Arc::new(SystemClock));
    rx.slow(&clock, Duration::from_millis(1500));
    rx.script("/slow/ops", [(503, Some(2))]);
    let run = run_with_notes(&journal, 0, at).await;
    outbox.open(run).await.unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = Arc::new(clock.clone());
    let task = tokio::spawn(async move {
        worker
            .run(running, Duration::from_millis(5), async {
                let _ = stopped.await;
            })
            .await;
    });
    let recorded = Arc::clone(&store);
    eventually("the 503 is recorded", Duration::from_secs(10), || {
        recorded.retries.load(Ordering::SeqCst) == 1
    })
    .await;
    // Not due again before its time (the clock stands at the answer): the worker leaves it be.
    stop.send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(10), task)
        .await
        .unwrap()
        .unwrap();
    let reg = registration(&store.inner, run, "operator:ops").await;
    assert_eq!(reg.attempts, 1);
    assert_eq!(
        reg.next_attempt_at - at,
        chrono::Duration::milliseconds(3500)
    );
    assert_eq!(rx.hits("/slow/ops").len(), 1);
}

#[tokio::test]
async fn gone_parks_at_once() {
    let rx = Receiver::start().await;
    rx.script("/ok/ops", [(410, None)]);
    let s = scene(
        vec![destination("ops", &rx.url("/ok/ops"))],
        Duration::from_secs(5),
    );
    let at = s.at;
    let run = run_with_notes(&s.journal, 1, at).await;
    s.outbox.open(run).await.unwrap();
    let sweep = s.worker.run_once(at, 10).await.unwrap();
    assert_eq!(sweep.parked, 1);
    let parked = s.store.parked(10).await.unwrap();
    assert_eq!(parked.len(), 1);
    assert_eq!(parked[0].next_seq, Seq(1));
    assert!(parked[0].last_error.as_deref().unwrap().contains("410"));
    // The answered POST counts as an attempt.
    assert_eq!(parked[0].attempts, 1);
    // Parked rows leave `due`.
    assert_eq!(s.worker.run_once(at, 10).await.unwrap().claimed, 0);
    assert_eq!(rx.hits("/ok/ops").len(), 1);
}

#[tokio::test]
async fn the_cursor_advances_only_over_the_acknowledged_prefix() {
    let rx = Receiver::start().await;
    rx.script("/ok/ops", [(200, None), (200, None), (500, None)]);
    let s = scene(
        vec![destination("ops", &rx.url("/ok/ops"))],
        Duration::from_secs(5),
    );
    let at = s.at;
    let run = run_with_notes(&s.journal, 4, at).await; // records 1..=5
    s.outbox.open(run).await.unwrap();
    let sweep = s.worker.run_once(at, 10).await.unwrap();
    assert_eq!((sweep.delivered, sweep.retried), (2, 1));
    assert_eq!(rx.hits("/ok/ops").len(), 3, "stops at the first failure");
    let reg = registration(&s.store, run, "operator:ops").await;
    assert_eq!(reg.next_seq, Seq(3));
    assert_eq!(reg.attempts, 1);

    // The retry starts at seq 3 and finishes the journal.
    let sweep = s.worker.run_once(reg.next_attempt_at, 10).await.unwrap();
    assert_eq!(sweep.delivered, 3);
    let seqs: Vec<u64> = rx
        .hits("/ok/ops")
        .iter()
        .map(|h| h.json()["data"]["seq"].as_u64().unwrap())
        .collect();
    assert_eq!(seqs, vec![1, 2, 3, 3, 4, 5]);
    assert_eq!(
        registration(&s.store, run, "operator:ops").await.next_seq,
        Seq(6)
    );
}

#[tokio::test]
async fn the_page_bounds_one_turn_and_the_terminal_record_deletes_the_registration() {
    let rx = Receiver::start().await;
    let s = scene(
        vec![destination("ops", &rx.url("/ok/ops"))],
        Duration::from_secs(5),
    );
    let worker = s.worker.clone().with_settings(DeliverySettings {
        page: 2,
        ..settings()
    });
    let at = s.at;
    let run = run_with_notes(&s.journal, 2, at).await;
    s.journal
        .seal(run, RunOutcome::Succeeded, "done", at)
        .await
        .unwrap(); // records 1..=4, 4 terminal
    s.outbox.open(run).await.unwrap();
    let sweep = worker.run_once(at, 10).await.unwrap();
    assert_eq!((sweep.delivered, sweep.advanced), (2, 1));
    assert_eq!(
        registration(&s.store, run, "operator:ops").await.next_seq,
        Seq(3)
    );
    let sweep = worker.run_once(at, 10).await.unwrap();
    assert_eq!((sweep.delivered, sweep.deleted), (2, 1));
    assert!(s.store.get(run, "operator:ops").await.unwrap().is_none());
    let hits = rx.hits("/ok/ops");
    assert_eq!(hits.len(), 4);
    assert_eq!(hits[3].json()["type"], "dev.crewbus.run.run_sealed");
}

/// A push store whose `advance` fails while `crash` is set: the POST happened, the cursor was not
/// saved — the state a crash between the two leaves behind. It also counts `retry` calls, so a
/// test can wait for a turn's failure to be recorded without reading the store under the worker.
struct CrashBeforeAdvance {
    inner: MemoryPushStore,
    crash: AtomicBool,
    retries: AtomicUsize,
}

#[async_trait]
impl PushStore for CrashBeforeAdvance {
    fn tenant(&self) -> &TenantId {
        self.inner.tenant()
    }
    async fn put(&self, c: &PushConfig, s: Seq, at: DateTime<Utc>) -> Result<(), StoreError> {
        self.inner.put(c, s, at).await
    }
    async fn get(&self, r: RunId, id: &str) -> Result<Option<PushConfig>, StoreError> {
        self.inner.get(r, id).await
    }
    async fn list(&self, r: RunId) -> Result<Vec<PushConfig>, StoreError> {
        self.inner.list(r).await
    }
    async fn due(
        &self,
        at: DateTime<Utc>,
        limit: usize,
        lease: DateTime<Utc>,
    ) -> Result<Vec<PushRegistration>, StoreError> {
        self.inner.due(at, limit, lease).await
    }
    async fn advance(
        &self,
        r: RunId,
        id: &str,
        s: Seq,
        at: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        if self.crash.load(Ordering::SeqCst) {
            return Err(StoreError::unavailable("crashed"));
        }
        self.inner.advance(r, id, s, at).await
    }
    async fn defer(&self, r: RunId, id: &str, u: DateTime<Utc>) -> Result<(), StoreError> {
        self.inner.defer(r, id, u).await
    }
    async fn retry(&self, r: RunId, id: &str, n: DateTime<Utc>, e: &str) -> Result<(), StoreError> {
        let done = self.inner.retry(r, id, n, e).await;
        self.retries.fetch_add(1, Ordering::SeqCst);
        done
    }
    async fn park(&self, r: RunId, id: &str, e: &str) -> Result<(), StoreError> {
        self.inner.park(r, id, e).await
    }
    async fn parked(&self, l: usize) -> Result<Vec<PushRegistration>, StoreError> {
        self.inner.parked(l).await
    }
    async fn unpark(&self, r: RunId, id: &str, at: DateTime<Utc>) -> Result<bool, StoreError> {
        self.inner.unpark(r, id, at).await
    }
    async fn delete(&self, r: RunId, id: &str) -> Result<(), StoreError> {
        self.inner.delete(r, id).await
    }
    async fn registrations(&self, r: RunId) -> Result<Vec<PushRegistration>, StoreError> {
        self.inner.registrations(r).await
    }
    async fn record_attempt(
        &self,
        r: RunId,
        id: &str,
        a: &PushAttempt,
        keep: usize,
    ) -> Result<(), StoreError> {
        self.inner.record_attempt(r, id, a, keep).await
    }
    async fn attempts(&self, r: RunId, id: &str, l: usize) -> Result<Vec<PushAttempt>, StoreError> {
        self.inner.attempts(r, id, l).await
    }
    async fn prune_attempts(&self, before: DateTime<Utc>) -> Result<u64, StoreError> {
        self.inner.prune_attempts(before).await
    }
}

#[tokio::test]
async fn a_crash_between_post_and_advance_redelivers_with_the_same_webhook_id() {
    let rx = Receiver::start().await;
    let t = tenant("acme");
    let store = Arc::new(CrashBeforeAdvance {
        inner: MemoryPushStore::new(t.clone()),
        crash: AtomicBool::new(true),
        retries: AtomicUsize::new(0),
    });
    let journal = journal(&t);
    let at = Utc::now();
    let outbox = Outbox::new(store.clone(), vec![destination("ops", &rx.url("/ok/ops"))])
        .with_clock(Arc::new(ManualClock::new(at)));
    let worker = DeliveryWorker::new(
        &outbox,
        Arc::new(journal.clone()),
        transport(Duration::from_secs(5)),
    )
    .with_settings(settings());
    let run = run_with_notes(&journal, 1, at).await;
    outbox.open(run).await.unwrap();

    let sweep = worker.run_once(at, 10).await.unwrap();
    assert_eq!((sweep.delivered, sweep.failed), (2, 1));
    // Claimed until the lease runs out: nobody serves it before.
    assert_eq!(worker.run_once(at, 10).await.unwrap().claimed, 0);

    store.crash.store(false, Ordering::SeqCst);
    let after_lease = at + chrono::Duration::from_std(settings().lease).unwrap();
    let sweep = worker.run_once(after_lease, 10).await.unwrap();
    assert_eq!(sweep.delivered, 2);
    let hits = rx.hits("/ok/ops");
    assert_eq!(hits.len(), 4);
    let ids: Vec<String> = hits
        .iter()
        .map(|h| h.header("webhook-id").unwrap())
        .collect();
    assert_eq!(ids[0], ids[2]);
    assert_eq!(ids[1], ids[3]);
    assert_ne!(ids[0], ids[1]);
    // The redelivery is signed afresh (new timestamp) and still verifies.
    for hit in &hits[2..] {
        assert_eq!(
            hit.header("webhook-timestamp"),
            Some(after_lease.timestamp().to_string())
        );
    }
}

#[tokio::test]
async fn a_hanging_destination_times_out_without_holding_the_others_in_a_sweep() {
    let rx = Receiver::start().await;
    let s = scene(
        vec![
            destination("slow", &rx.url("/hang/slow")),
            destination("fast", &rx.url("/ok/fast")),
        ],
        Duration::from_millis(300),
    );
    let at = s.at;
    let run = run_with_notes(&s.journal, 3, at).await;
    s.outbox.open(run).await.unwrap();
    let sweep = s.worker.run_once(at, 10).await.unwrap();
    assert_eq!((sweep.delivered, sweep.retried), (4, 1));
    assert_eq!(rx.hits("/ok/fast").len(), 4);
    let slow = registration(&s.store, run, "operator:slow").await;
    assert_eq!((slow.next_seq, slow.attempts), (Seq(1), 1));
    assert!(slow.last_error.unwrap().contains("in time"));
}

#[tokio::test]
async fn a_hanging_destination_holds_one_slot_of_the_running_worker() {
    let rx = Receiver::start().await;
    // A transport that never gives up within the test: the hang really hangs.
    let s = scene(
        vec![
            destination("slow", &rx.url("/hang/slow")),
            destination("fast", &rx.url("/ok/fast")),
        ],
        Duration::from_secs(600),
    );
    let worker = s.worker.clone().with_settings(DeliverySettings {
        concurrency: 2,
        idle: Duration::from_millis(20),
        ..settings()
    });
    let at = s.at;
    let run = run_with_notes(&s.journal, 0, at).await;
    s.outbox.open(run).await.unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        worker
            .run(Arc::new(SystemClock), Duration::from_millis(10), async {
                let _ = stopped.await;
            })
            .await;
    });
    eventually(
        "the slow destination is being served",
        Duration::from_secs(10),
        || !rx.hits("/hang/slow").is_empty(),
    )
    .await;
    // While the slow POST hangs, records keep flowing to the fast destination.
    for n in 1..=3 {
        s.journal
            .note(run, &format!("late {n}"), Utc::now())
            .await
            .unwrap();
        eventually(
            "the fast destination gets the new record",
            Duration::from_secs(10),
            || rx.hits("/ok/fast").len() == 1 + n,
        )
        .await;
    }
    assert_eq!(rx.hits("/hang/slow").len(), 1);
    stop.send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(10), task)
        .await
        .expect("the worker stops on shutdown")
        .unwrap();
}

#[tokio::test]
async fn a_refused_connection_retries() {
    // A port nobody listens on: bind, note the port, drop the listener.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/x", listener.local_addr().unwrap());
    drop(listener);
    let s = scene(vec![destination("ops", &url)], Duration::from_secs(5));
    let at = s.at;
    let run = run_with_notes(&s.journal, 0, at).await;
    s.outbox.open(run).await.unwrap();
    let sweep = s.worker.run_once(at, 10).await.unwrap();
    assert_eq!(sweep.retried, 1);
    let reg = registration(&s.store, run, "operator:ops").await;
    assert!(reg.last_error.unwrap().contains("connect"));
}

#[tokio::test]
async fn registrations_of_a_removed_destination_or_a_missing_run_park() {
    let rx = Receiver::start().await;
    let s = scene(
        vec![destination("ops", &rx.url("/ok/ops"))],
        Duration::from_secs(5),
    );
    let at = s.at;
    // A run the journal does not know.
    let ghost = RunId::new();
    s.outbox.open(ghost).await.unwrap();
    // A registration no configured destination has.
    let run = run_with_notes(&s.journal, 0, at).await;
    s.store
        .put(
            &PushConfig {
                id: "operator:removed".into(),
                run,
                url: rx.url("/ok/removed"),
                authentication: None,
            },
            Seq(1),
            at,
        )
        .await
        .unwrap();
    let sweep = s.worker.run_once(at, 10).await.unwrap();
    assert_eq!(sweep.parked, 2);
    assert!(rx.all_hits().is_empty());
}

/// `Outbox::open` on a resume replaces the registration and makes it due at once, even while its
/// turn is in flight: the running worker must not start a second turn of the same registration
/// (that would send the same events concurrently, out of order).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_re_registration_while_its_turn_is_in_flight_does_not_start_a_second_turn() {
    let rx = Receiver::start().await;
    // The first POST hangs until the transport's 1 s timeout; one failure parks the row, so
    // nothing is retried and the receiver's count is exactly the number of turns started.
    let s = scene(
        vec![destination("slow", &rx.url("/hang/slow"))],
        Duration::from_secs(1),
    );
    let worker = s.worker.clone().with_settings(DeliverySettings {
        backoff: Backoff {
            base: Duration::from_secs(3600),
            cap: Duration::from_secs(3600),
            max_attempts: 1,
        },
        ..settings()
    });
    let run = run_with_notes(&s.journal, 1, s.at).await;
    s.outbox.open(run).await.unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let clock = Arc::new(ManualClock::new(s.at));
    let task = tokio::spawn(async move {
        worker
            .run(clock, Duration::from_millis(5), async {
                let _ = stopped.await;
            })
            .await;
    });
    eventually(
        "the first turn is in flight",
        Duration::from_secs(10),
        || rx.hits("/hang/slow").len() == 1,
    )
    .await;
    // A resume re-registers: the row is due again now, its turn still hanging.
    s.outbox.open(run).await.unwrap();
    let end = tokio::time::Instant::now() + Duration::from_secs(10);
    while s.store.parked(10).await.unwrap().is_empty() {
        assert!(
            tokio::time::Instant::now() < end,
            "the hanging turn never ended"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        rx.hits("/hang/slow").len(),
        1,
        "a second turn of the same registration was started while the first was in flight"
    );
    stop.send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(10), task)
        .await
        .unwrap()
        .unwrap();
}
