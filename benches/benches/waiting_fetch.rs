//! The waiting fetch (`POST /v1/inbox/fetch {wait_ms}`) against its baselines in the same run
//! (issue 10): how soon a waiting fetch answers after a send, against a client polling every
//! 2 ms, per store; and what 1,000 idle waiters cost in CPU, against none.
//!
//! Set-up (untimed), per store, one `crewbus` [`Server`] (HTTP API and workers, the
//! configuration's defaults: `bus.idle_poll_ms` 50, `bus.topup_after_ms` 2 000,
//! `bus.max_wait_ms` 50 000) on 127.0.0.1 in this process, on the wall clock:
//! - **memory**: the embedded store (`compose::memory_with_wakeups`, in-process wake-ups);
//! - **postgres**: a fresh database on the server of `DATABASE_URL`
//!   (`crewbus_conformance::postgres::TestDatabase`, dropped at the end, kept and named if the
//!   run fails; unset or unreachable fails the run loudly), composed by
//!   `compose::postgres_with_pool` over a pool of the production default size (10), wake-ups by
//!   `LISTEN/NOTIFY` on the listener's own connection;
//! - **postgres+jetstream**: the same with a private nats-server (the conformance fixture:
//!   `NATS_SERVER_BIN`, else `PATH`) and a team whose bodies and inbox are `jetstream`, its
//!   streams provisioned with the provisioning credential, the bus on the runtime one;
//! - **sqlite**: the embedded store in a fresh temporary directory (`compose::compose_as` as the
//!   server: group commit on its one write connection, in-process wake-ups);
//! - **postgres, cross-server** and **postgres+jetstream, cross-server**: two servers on one
//!   database (each its own pool of the default size and its own listener), as a deployment
//!   behind a load balancer runs them: the sender sends through the first, the receivers (the
//!   waiter and the poller alike) fetch from the second, so the waiter is woken by the
//!   `NOTIFY` the first server's commit sends across;
//! - **postgres, async commit** (a diagnostic, no goal): as **postgres**, but the bus's sessions
//!   run at `synchronous_commit = off`, so no commit waits for its WAL flush: how much of each
//!   target's time is the commits' flushes (and which target waits for more of them).
//!
//! **Latency** (per store): one sender and two receivers, each receiver in a conversation of its
//! own with the sender, every agent with its own HTTP client (keep-alive connections). One
//! sample: the instant before the sender's `POST /v1/conversations/{id}/messages` to the
//! instant the receiver's fetch answer holding that message arrives; the receiver then confirms
//! it (untimed) before the next sample. Checked on every sample: the answer holds exactly the
//! message sent (its id), and the confirm is `confirmed`.
//! - `waiting`: the receiver's `POST /v1/inbox/fetch {wait_ms: 20000}` is already waiting (the
//!   bus counts it in `Bus::waiting_fetches`) when the send starts.
//! - `poll 2ms` (the baseline): the receiver sends `POST /v1/inbox/fetch` (no wait) every 2 ms
//!   (a tokio interval; a poll that takes longer delays the next), and has had at least one
//!   empty answer when the send starts.
//!
//! The two targets alternate sample by sample (the order flips every sample), so drift and the
//! neighbours' load hit both alike. Printed: p50, p99 and max of each (nearest-rank, from
//! `support::latency`'s histogram: 3 significant digits), and against the goal (waiting p99 ≤
//! 1.2 × the poll's p99 and ≤ the poll's p99 + 5 ms) the ratio and the difference.
//! Diagnostics: on the Postgres stores an observer session of the bench `LISTEN`s on the bus's
//! wake-up channel and reports send → the waiter's `NOTIFY` seen (an upper bound of when the
//! server's own listener got it: the observer's task is scheduled like any other, and a sample
//! whose notification it had not recorded by the answer is left out); and in how many samples the
//! waiter was woken more than once.
//!
//! **Idle cost** (postgres+jetstream only): CPU seconds over a window (30 s) with no waiter,
//! then over a window with `WAITERS` agents each holding a waiting fetch of `bus.max_wait_ms`
//! (50 s, so none ends or is issued again inside the window; all of them counted by
//! `Bus::waiting_fetches` before the window opens, and still at its end). CPU seconds are
//! utime + stime from `/proc/<pid>/stat` of: this process (the crewbus server, its workers and
//! its listener — and the bench's own idle client tasks and their connections, which run in the
//! same process), every process whose `/proc/<pid>/comm` is `postgres` (the whole shared
//! server, sampled every 500 ms so sessions that come and go inside the window count up to
//! their last sample: other databases' sessions count too, and the table shows how much they
//! took), and the private nats-server. Goal: (with − without) / window ≤ 0.02 of a core. After the window, one
//! message is sent to every waiter, and every waiting fetch must answer with it.
//!
//! The bench raises `RLIMIT_NOFILE` to its hard limit first (each waiter holds a client and a
//! server socket in this process) and fails when that is below 4 096.
//!
//! Test mode (`cargo test --bench waiting_fetch`; `scripts/test` runs every bench so): a
//! handful of latency samples per target and store, 1 s windows and 50 waiters — it checks that
//! every waiting fetch returns its message, never a speed.
//!
//! Reproduce: `DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres
//! NATS_SERVER_BIN=/usr/sbin/nats-server cargo bench -p crewbus-benches --bench waiting_fetch`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crewbus::bus::Bus;
use crewbus::client::ApiClient;
use crewbus::compose;
use crewbus::config::{Config, NatsConfig};
use crewbus::server::Server;
use crewbus::shutdown::Shutdown;
use crewbus_conformance::nats::NatsServer;
use crewbus_conformance::postgres::TestDatabase;
use crewbus_domain::{Team, Uuid, WakeupTarget};
use crewbus_memory::MemoryWakeups;
use crewbus_ports::SystemClock;
use serde_json::Value;
use sqlx::PgPool;
use sqlx::postgres::PgListener;

mod support;
use crewbus_benches::kit::nats::nats_config;
use crewbus_benches::kit::open_files::raise_open_files;
use crewbus_benches::kit::store::{StoreBus, pool_on};
use support::cpu::{PostgresWindow, cpu_ticks, load_average, tick_seconds};
use support::latency::{Figures, Latencies, ms};
use support::measuring;
use support::rounds::{Order, rounds};

/// Latency samples per target and store under `--bench`, and in test mode.
const SAMPLES: usize = 1_000;
const TEST_SAMPLES: usize = 5;
/// Samples per target and store run first and not counted (connections, caches, plans).
const WARM_UP: usize = 20;
/// The baseline's poll interval.
const POLL_EVERY: Duration = Duration::from_millis(2);
/// `wait_ms` of a latency sample's waiting fetch (far above any latency: it never expires).
const SAMPLE_WAIT_MS: u64 = 20_000;
/// Idle waiters and the window under `--bench`, and in test mode.
const WAITERS: usize = 1_000;
const TEST_WAITERS: usize = 50;
const WINDOW: Duration = Duration::from_secs(30);
const TEST_WINDOW: Duration = Duration::from_secs(1);
/// Waiters started at a time (each opens a connection).
const WAITER_CHUNK: usize = 100;
/// Recipients per conversation of the idle phase (a conversation holds at most 1 000 members).
const MEMBERS_PER_CONVERSATION: usize = 500;
/// Fewest open files the bench runs with.
const MIN_NOFILE: u64 = 4_096;
/// The goals: waiting p99 ≤ `P99_RATIO` × poll p99 and ≤ poll p99 + `P99_MARGIN`; idle cost ≤
/// `IDLE_CORES` of a core.
const P99_RATIO: f64 = 1.2;
const P99_MARGIN: Duration = Duration::from_millis(5);
const IDLE_CORES: f64 = 0.02;

// --- set-up -----------------------------------------------------------------------------------

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Store {
    Memory,
    Sqlite,
    Postgres,
    /// Two servers on one database: sends through the first, fetches from the second.
    PostgresCrossServer,
    /// Diagnostic, not a goal: Postgres with the bus's sessions at `synchronous_commit = off`
    /// (no commit waits for its WAL flush), to show what the commits' flushes cost each target.
    PostgresAsyncCommit,
    PostgresJetStream,
    /// Two servers on one database and one nats-server, as [`Store::PostgresCrossServer`].
    PostgresJetStreamCrossServer,
}

impl Store {
    fn name(self) -> &'static str {
        match self {
            Store::Memory => "memory",
            Store::Sqlite => "sqlite",
            Store::Postgres => "postgres",
            Store::PostgresCrossServer => "postgres, cross-server",
            Store::PostgresAsyncCommit => "postgres, async commit",
            Store::PostgresJetStream => "postgres+jetstream",
            Store::PostgresJetStreamCrossServer => "postgres+js, cross-srv",
        }
    }

    /// Whether the store is a diagnostic (no goal applies).
    fn diagnostic(self) -> bool {
        self == Store::PostgresAsyncCommit
    }

    /// Whether the bodies and inbox are JetStream's (a private nats-server).
    fn jetstream(self) -> bool {
        matches!(
            self,
            Store::PostgresJetStream | Store::PostgresJetStreamCrossServer
        )
    }

    /// Whether the receivers fetch from a second server on the same database.
    fn cross_server(self) -> bool {
        matches!(
            self,
            Store::PostgresCrossServer | Store::PostgresJetStreamCrossServer
        )
    }
}

const STORES: [Store; 7] = [
    Store::Memory,
    Store::Sqlite,
    Store::Postgres,
    Store::PostgresCrossServer,
    Store::PostgresJetStream,
    Store::PostgresJetStreamCrossServer,
    Store::PostgresAsyncCommit,
];

/// One agent: its id and a client of its own presenting its token.
struct Member {
    id: Uuid,
    client: ApiClient,
}

/// One server on one store.
struct Scene {
    store: Store,
    server: Server,
    bus: Bus,
    team: Team,
    /// Cross-server: the second server the receivers fetch from, its bus and its pool.
    reader: Option<(Server, Bus, PgPool)>,
    /// The SQLite or Postgres store under the bus (none for memory).
    backing: Option<StoreBus>,
    nats: Option<NatsServer>,
}

/// The defaults of `crewbus serve`, listening on a free loopback port.
fn base_config() -> Config {
    Config {
        listen: "127.0.0.1:0".parse().expect("loopback address"),
        ..Config::default()
    }
}

fn jetstream_config(server: &NatsServer) -> Config {
    let mut config = base_config();
    config.nats = Some(NatsConfig {
        body_max_bytes: 256 << 20,
        inbox_max_bytes: 64 << 20,
        ..nats_config(server)
    });
    config
}

impl Scene {
    async fn start(store: Store) -> Scene {
        let (mut config, nats) = match store {
            Store::PostgresJetStream | Store::PostgresJetStreamCrossServer => {
                let server = NatsServer::start();
                eprintln!(
                    "waiting_fetch bench: nats-server {} at {}",
                    server.version(),
                    server.url()
                );
                (jetstream_config(&server), Some(server))
            }
            _ => (base_config(), None),
        };
        let backing = match store {
            Store::Memory => None,
            Store::Sqlite => Some(StoreBus::sqlite(&mut config).await),
            Store::Postgres
            | Store::PostgresCrossServer
            | Store::PostgresAsyncCommit
            | Store::PostgresJetStream
            | Store::PostgresJetStreamCrossServer => {
                let label = format!("waiting_fetch bench: {}", store.name());
                let backing = StoreBus::postgres(&config, &label, |options| {
                    if store == Store::PostgresAsyncCommit {
                        // The pool's sessions and the listener's (it connects with these options).
                        options.options([("synchronous_commit", "off")])
                    } else {
                        options
                    }
                })
                .await;
                let pool = backing.pool.as_ref().expect("the bus's pool");
                let commit: String = sqlx::query_scalar("SHOW synchronous_commit")
                    .fetch_one(pool)
                    .await
                    .expect("SHOW synchronous_commit");
                assert_eq!(
                    commit == "off",
                    store == Store::PostgresAsyncCommit,
                    "synchronous_commit = {commit}"
                );
                Some(backing)
            }
        };
        let bus = match &backing {
            Some(backing) => backing.bus.clone(),
            None => {
                let (composed, _) = compose::memory_with_wakeups(
                    &config,
                    Arc::new(SystemClock),
                    compose::memory_config(&config),
                    Arc::new(MemoryWakeups::new()),
                )
                .expect("compose memory");
                composed.bus
            }
        };
        let backend = store.jetstream().then_some("jetstream");
        let team = bus
            .add_team("wait-bench", backend, backend)
            .await
            .expect("create team");
        if backend.is_some() {
            let admin = compose::stream_admin(&config).expect("stream admin");
            admin.provision(team.id).await.expect("provision bodies");
            admin
                .provision_inbox(team.id)
                .await
                .expect("provision inbox");
        }
        let server = Server::start(bus.clone(), config.listen, Shutdown::new())
            .await
            .expect("start server");
        let db = backing.as_ref().and_then(|b| b.db.as_ref());
        let reader = match (db, store.cross_server()) {
            (Some(db), true) => {
                let pool = pool_on(db, |options| options).await;
                let composed =
                    compose::postgres_with_pool(&config, pool.clone(), Arc::new(SystemClock))
                        .await
                        .expect("compose the second server");
                let server = Server::start(composed.bus.clone(), config.listen, Shutdown::new())
                    .await
                    .expect("start the second server");
                Some((server, composed.bus, pool))
            }
            _ => None,
        };
        Scene {
            store,
            server,
            bus,
            team,
            reader,
            backing,
            nats,
        }
    }

    /// The Postgres store's database.
    fn db(&self) -> Option<&TestDatabase> {
        self.backing.as_ref().and_then(|b| b.db.as_ref())
    }

    /// The bus the receivers fetch from: the second server's when cross-server, else the one.
    fn reader_bus(&self) -> &Bus {
        self.reader.as_ref().map_or(&self.bus, |(_, bus, _)| bus)
    }

    /// A receiver: an agent whose client fetches from the second server when cross-server.
    async fn receiver(&self, name: &str) -> Member {
        let url = self
            .reader
            .as_ref()
            .map_or_else(|| self.server.url(), |(server, _, _)| server.url());
        self.member_at(name, url).await
    }

    async fn member(&self, name: &str) -> Member {
        self.member_at(name, self.server.url()).await
    }

    /// An agent whose client talks to the server at `url`.
    async fn member_at(&self, name: &str, url: String) -> Member {
        let new = self
            .bus
            .add_agent(self.team.id, name)
            .await
            .expect("create agent");
        Member {
            id: new.agent.id,
            client: ApiClient::new(url, Some(new.token)),
        }
    }

    async fn conversation(&self, creator: &Member, members: &[Uuid]) -> Uuid {
        let creator = self
            .bus
            .ports()
            .ledger
            .agent(self.team.id, creator.id)
            .await
            .expect("creator");
        let conversation = self
            .bus
            .create_conversation(
                &creator,
                "waits",
                &members.iter().map(Uuid::to_string).collect::<Vec<_>>(),
            )
            .await
            .expect("create conversation");
        assert_eq!(conversation.backend, self.team.body_backend);
        conversation.id
    }

    /// Waits until at least `n` fetches wait on the server (they found nothing and parked).
    async fn until_waiting(&self, n: usize, within: Duration) {
        let deadline = Instant::now() + within;
        while self.reader_bus().waiting_fetches() < n {
            assert!(
                Instant::now() < deadline,
                "{}: only {} of {n} fetches waited within {within:?}",
                self.store.name(),
                self.reader_bus().waiting_fetches()
            );
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    async fn stop(self) {
        // The team's streams go with the private nats-server (killed, its store removed).
        if let Some((server, bus, pool)) = self.reader {
            server.stop().await;
            drop(bus);
            pool.close().await;
        }
        self.server.stop().await;
        drop(self.bus);
        if let Some(backing) = self.backing {
            backing.close().await;
        }
        drop(self.nats);
    }
}

fn deliveries(body: &Value) -> Vec<Value> {
    body["deliveries"].as_array().cloned().unwrap_or_default()
}

fn uuid(v: &Value) -> Uuid {
    v.as_str()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("not a uuid: {v}"))
}

/// Checks that `got` is exactly the message `sent` (the send's answer) and confirms it.
async fn check_and_confirm(who: &str, receiver: &ApiClient, got: &[Value], sent: &Value) {
    assert_eq!(
        got.len(),
        1,
        "{who}: expected the one message sent: {got:?}"
    );
    assert_eq!(
        got[0]["message"]["id"], sent["message"]["id"],
        "{who}: another message"
    );
    let delivery = uuid(&got[0]["delivery_id"]);
    let results = receiver.confirm(&[delivery]).await.expect("confirm");
    assert_eq!(results.len(), 1, "{results:?}");
    assert_eq!(results[0]["outcome"], "confirmed", "{who}: {results:?}");
}

// --- latency ----------------------------------------------------------------------------------

#[derive(Clone, Copy, PartialEq, Eq)]
enum Target {
    Waiting,
    Poll,
}

/// The latency phase's agents.
struct Latency {
    sender: Member,
    waiter: Member,
    waiter_conversation: Uuid,
    poller: Member,
    poller_conversation: Uuid,
    sent: usize,
    /// Postgres stores: wake-up payloads an observer session saw on the bus's channel, with
    /// the instant each arrived (a diagnostic: where a waiting sample's time goes).
    seen: Option<Seen>,
    /// Per waiting sample: send → the observer saw the waiter's wake-up.
    notified: Latencies,
    /// Per waiting sample: how many times the waiter was woken.
    wakeups: Vec<u64>,
}

/// Wake-up payloads seen by the observer session, with their arrival instants.
type Seen = Arc<Mutex<Vec<(Instant, String)>>>;

/// An observer session `LISTEN`ing on the bus's wake-up channel, recording every payload with
/// its arrival instant until the task is aborted.
async fn observe_wakeups(db: &TestDatabase) -> (Seen, tokio::task::JoinHandle<()>) {
    let mut listener = PgListener::connect_with(db.pool())
        .await
        .expect("observer listener");
    listener
        .listen(crewbus_postgres::WAKEUP_CHANNEL)
        .await
        .expect("observer LISTEN");
    let seen = Seen::default();
    let record = Arc::clone(&seen);
    let task = tokio::spawn(async move {
        while let Ok(n) = listener.recv().await {
            let at = Instant::now();
            record
                .lock()
                .expect("seen")
                .push((at, n.payload().to_owned()));
        }
    });
    (seen, task)
}

impl Latency {
    async fn new(s: &Scene, seen: Option<Seen>) -> Latency {
        let sender = s.member("sender").await;
        let waiter = s.receiver("waiter").await;
        let poller = s.receiver("poller").await;
        let waiter_conversation = s.conversation(&sender, &[waiter.id]).await;
        let poller_conversation = s.conversation(&sender, &[poller.id]).await;
        Latency {
            sender,
            waiter,
            waiter_conversation,
            poller,
            poller_conversation,
            sent: 0,
            seen,
            notified: Latencies::new(),
            wakeups: Vec::new(),
        }
    }

    async fn send(&mut self, conversation: Uuid) -> Value {
        self.sent += 1;
        self.sender
            .client
            .send(conversation, &format!("r{}", self.sent), "ping")
            .await
            .expect("send")
    }

    /// One sample of `target`: send → the receiver's answer holding the message.
    async fn sample(&mut self, s: &Scene, target: Target) -> Duration {
        match target {
            Target::Waiting => {
                let client = self.waiter.client.clone();
                let wait = tokio::spawn(async move {
                    let answer = client.fetch_waiting(10, SAMPLE_WAIT_MS).await;
                    (answer, Instant::now())
                });
                s.until_waiting(1, Duration::from_secs(10)).await;
                let woken = s.reader_bus().metrics().fetch_wakeups.get();
                let start = Instant::now();
                let sent = self.send(self.waiter_conversation).await;
                let (answer, arrived) = wait.await.expect("waiting fetch task");
                let took = arrived - start;
                let (status, body) = answer.expect("waiting fetch");
                assert_eq!(status, 200, "{body}");
                self.wakeups
                    .push(s.reader_bus().metrics().fetch_wakeups.get() - woken);
                if let Some(seen) = &self.seen {
                    let payload = WakeupTarget::new(s.team.id, self.waiter.id).to_payload();
                    let at = seen
                        .lock()
                        .expect("seen")
                        .iter()
                        .find(|(at, p)| *at >= start && *p == payload)
                        .map(|(at, _)| *at - start);
                    if let Some(at) = at {
                        self.notified.record(at);
                    }
                }
                check_and_confirm("waiting", &self.waiter.client, &deliveries(&body), &sent).await;
                took
            }
            Target::Poll => {
                let client = self.poller.client.clone();
                let (ready, polled) = tokio::sync::oneshot::channel::<()>();
                let poll = tokio::spawn(async move {
                    let mut ready = Some(ready);
                    let mut ticks = tokio::time::interval(POLL_EVERY);
                    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                    loop {
                        ticks.tick().await;
                        let got = client.fetch(10).await.expect("poll");
                        if !got.is_empty() {
                            return (got, Instant::now());
                        }
                        if let Some(r) = ready.take() {
                            let _ = r.send(());
                        }
                    }
                });
                polled.await.expect("the poller polled once");
                let start = Instant::now();
                let sent = self.send(self.poller_conversation).await;
                let (got, arrived) = poll.await.expect("poll task");
                check_and_confirm("poll", &self.poller.client, &got, &sent).await;
                arrived - start
            }
        }
    }
}

/// Where the waiting samples' time went (diagnostic).
struct WaitDiagnostics {
    /// Send → an observer session saw the waiter's wake-up (Postgres stores only).
    notified: Option<Figures>,
    /// Counted samples, and those whose waiter was woken more than once.
    samples: usize,
    woken_more_than_once: usize,
}

/// One store's latency figures.
struct LatencyFigures {
    store: Store,
    waiting: Figures,
    poll: Figures,
    diagnostics: WaitDiagnostics,
}

/// The latency phase on one store: warm-up, then `samples` per target, alternating.
async fn latency(s: &Scene, samples: usize, warm_up: usize) -> LatencyFigures {
    let observer = match s.db() {
        Some(db) => Some(observe_wakeups(db).await),
        None => None,
    };
    let mut l = Latency::new(s, observer.as_ref().map(|(seen, _)| Arc::clone(seen))).await;
    let (mut waiting, mut poll) = (Latencies::new(), Latencies::new());
    let targets = [Target::Waiting, Target::Poll];
    for (i, target) in rounds(warm_up + samples, targets, Order::Turning) {
        let took = l.sample(s, target).await;
        if i < warm_up && target == Target::Waiting {
            l.notified = Latencies::new();
            l.wakeups.clear();
        }
        if i >= warm_up {
            match target {
                Target::Waiting => waiting.record(took),
                Target::Poll => poll.record(took),
            }
        }
    }
    if let Some((_, task)) = observer {
        task.abort();
        let _ = task.await;
    }
    let diagnostics = WaitDiagnostics {
        notified: (!l.notified.is_empty()).then(|| l.notified.figures()),
        samples: l.wakeups.len(),
        woken_more_than_once: l.wakeups.iter().filter(|w| **w > 1).count(),
    };
    LatencyFigures {
        store: s.store,
        waiting: waiting.figures(),
        poll: poll.figures(),
        diagnostics,
    }
}

// --- idle cost --------------------------------------------------------------------------------

/// How often a window samples the postgres processes (so one that exits inside the window is
/// counted up to its last sample, and other databases' short sessions are recognised).
const PROCESS_SAMPLE: Duration = Duration::from_millis(500);

/// CPU seconds spent in one window, per process group.
#[derive(Clone, Copy, Default)]
struct WindowCpu {
    seconds: f64,
    crewbus: f64,
    postgres: f64,
    /// The part of `postgres` in sessions of the bench's database (the bus's pool, its
    /// listener, the observer pool).
    postgres_ours: f64,
    /// The part of `postgres` in sessions of other databases than the bench's (other users of
    /// the shared server).
    postgres_others: f64,
    nats: f64,
}

impl WindowCpu {
    fn total(&self) -> f64 {
        self.crewbus + self.postgres + self.nats
    }
}

/// Process ids of the sessions on a database (background processes have none), each with
/// whether the database is `ours`.
async fn sessions(observer: &PgPool, ours: &str) -> Vec<(u32, bool)> {
    let pids: Vec<(i32, bool)> =
        sqlx::query_as("SELECT pid, datname = $1 FROM pg_stat_activity WHERE datname IS NOT NULL")
            .bind(ours)
            .fetch_all(observer)
            .await
            .expect("pg_stat_activity");
    pids.into_iter().map(|(p, o)| (p as u32, o)).collect()
}

/// One measured window of `length`: CPU seconds spent meanwhile. The postgres processes are
/// sampled every [`PROCESS_SAMPLE`]: each counts from its first sample (0 when it started
/// inside the window) to its last; what a process spends after its last sample before it exits
/// is lost.
async fn measure_window(s: &Scene, length: Duration) -> WindowCpu {
    let nats_pid = s
        .nats
        .as_ref()
        .and_then(NatsServer::pid)
        .expect("a running nats-server")
        .to_string();
    let db = s.db().expect("a database");
    let mut owners: HashMap<u32, bool> = sessions(db.pool(), db.name()).await.into_iter().collect();
    let mut postgres = PostgresWindow::open();
    let start = Instant::now();
    let crewbus = cpu_ticks("self").expect("/proc/self/stat");
    let nats = cpu_ticks(&nats_pid).expect("the nats-server process");
    let end = start + length;
    // The window is the measurement: nothing to wait for but time, sampled as it passes.
    loop {
        let now = Instant::now();
        if now >= end {
            break;
        }
        tokio::time::sleep((end - now).min(PROCESS_SAMPLE)).await;
        postgres.sample();
        owners.extend(sessions(db.pool(), db.name()).await);
    }
    let crewbus = cpu_ticks("self").expect("/proc/self/stat") - crewbus;
    let nats = cpu_ticks(&nats_pid).expect("the nats-server process") - nats;
    let seconds = start.elapsed().as_secs_f64();
    let tick = tick_seconds();
    let all = postgres.spent(|_| true);
    let of = |ours: bool| postgres.spent(|pid| owners.get(&pid) == Some(&ours));
    WindowCpu {
        seconds,
        crewbus: crewbus as f64 * tick,
        postgres: all as f64 * tick,
        postgres_ours: of(true) as f64 * tick,
        postgres_others: of(false) as f64 * tick,
        nats: nats as f64 * tick,
    }
}

/// The idle phase: a window with no waiter, then one with `waiters` waiting fetches; then one
/// message to every waiter, each of which must answer with it.
async fn idle_cost(s: &Scene, waiters: usize, window: Duration) -> (WindowCpu, WindowCpu) {
    let sender = s.member("idle-sender").await;
    let mut members = Vec::with_capacity(waiters);
    for k in 0..waiters {
        members.push(s.member(&format!("idle-{k}")).await);
    }
    let mut conversations = Vec::new();
    for chunk in members.chunks(MEMBERS_PER_CONVERSATION) {
        let ids: Vec<Uuid> = chunk.iter().map(|m| m.id).collect();
        conversations.push(s.conversation(&sender, &ids).await);
    }
    assert_eq!(
        s.bus.waiting_fetches(),
        0,
        "a fetch waits before the waiters"
    );

    let without = measure_window(s, window).await;

    let wait_ms = s.bus.settings().max_wait.as_millis() as u64;
    let issued = Instant::now();
    let mut waits = Vec::with_capacity(waiters);
    for chunk in members.chunks(WAITER_CHUNK) {
        for m in chunk {
            let client = m.client.clone();
            waits.push(tokio::spawn(async move {
                client.fetch_waiting(10, wait_ms).await
            }));
        }
        s.until_waiting(waits.len(), Duration::from_secs(30)).await;
    }
    let ready = issued.elapsed();
    // Every wait must outlast the window (and the sends after it) by a margin.
    assert!(
        ready + window + Duration::from_secs(10) < Duration::from_millis(wait_ms),
        "{waiters} waiters took {ready:?} to start: their {wait_ms} ms waits would end inside \
         the window"
    );
    let with = measure_window(s, window).await;
    assert_eq!(
        s.bus.waiting_fetches(),
        waiters,
        "a waiting fetch ended inside the window"
    );
    assert!(
        waits.iter().all(|w| !w.is_finished()),
        "a waiting fetch answered inside the window"
    );

    let mut sent = Vec::new();
    for (i, conversation) in conversations.iter().enumerate() {
        sent.push(
            sender
                .client
                .send(*conversation, &format!("idle-{i}"), "wake up")
                .await
                .expect("send"),
        );
    }
    for (k, (wait, member)) in waits.into_iter().zip(&members).enumerate() {
        let (status, body) = wait.await.expect("waiter task").expect("waiting fetch");
        assert_eq!(status, 200, "waiter {k}: {body}");
        check_and_confirm(
            &format!("idle waiter {k}"),
            &member.client,
            &deliveries(&body),
            &sent[k / MEMBERS_PER_CONVERSATION],
        )
        .await;
    }
    (without, with)
}

// --- the run ----------------------------------------------------------------------------------

fn met(ok: bool) -> &'static str {
    if ok { "met" } else { "NOT met" }
}

fn print_latency(results: &[LatencyFigures]) {
    eprintln!();
    eprintln!(
        "send → fetch answer holding the message, ms (nearest-rank percentiles, hdrhistogram, 3 \
         significant digits):"
    );
    eprintln!(
        "{:<22} {:<10} {:>7} {:>8} {:>8} {:>8}",
        "store", "target", "samples", "p50", "p99", "max"
    );
    for r in results {
        for (name, f) in [("waiting", &r.waiting), ("poll 2ms", &r.poll)] {
            eprintln!(
                "{:<22} {:<10} {:>7} {:>8.2} {:>8.2} {:>8.2}",
                r.store.name(),
                name,
                f.samples,
                ms(f.p50),
                ms(f.p99),
                ms(f.max)
            );
        }
    }
    eprintln!();
    eprintln!(
        "goal: waiting p99 ≤ {P99_RATIO} × poll p99 and ≤ poll p99 + {} ms",
        ms(P99_MARGIN)
    );
    for r in results {
        let ratio = r.waiting.p99.as_secs_f64() / r.poll.p99.as_secs_f64();
        let diff = ms(r.waiting.p99) - ms(r.poll.p99);
        let ok = ratio <= P99_RATIO && diff <= ms(P99_MARGIN);
        eprintln!(
            "{:<22} p99 waiting/poll = {ratio:.2}, difference {diff:+.2} ms, p50 waiting/poll \
             = {:.2}: {}",
            r.store.name(),
            r.waiting.p50.as_secs_f64() / r.poll.p50.as_secs_f64(),
            if r.store.diagnostic() {
                "(diagnostic, no goal)"
            } else {
                met(ok)
            }
        );
    }
    eprintln!();
    eprintln!("diagnostic, waiting samples:");
    for r in results {
        let d = &r.diagnostics;
        let notified = d.notified.map_or_else(
            || "no NOTIFY (in-process wake-ups)".to_owned(),
            |n| {
                format!(
                    "send → NOTIFY seen by an observer session p50 {:.2} p99 {:.2} ms ({} \
                     samples)",
                    ms(n.p50),
                    ms(n.p99),
                    n.samples
                )
            },
        );
        eprintln!(
            "{:<22} {notified}; woken more than once in {} of {} samples",
            r.store.name(),
            d.woken_more_than_once,
            d.samples
        );
    }
}

fn print_idle(waiters: usize, without: &WindowCpu, with: &WindowCpu) {
    eprintln!();
    eprintln!(
        "idle cost on postgres+jetstream, CPU seconds over {:.1} s / {:.1} s windows \
         (crewbus = this process: server, workers and the bench's idle client tasks):",
        without.seconds, with.seconds
    );
    eprintln!(
        "{:<40} {:>10} {:>14} {:>10} {:>12}",
        "process",
        "no waiter",
        format!("{waiters} waiters"),
        "Δ",
        "Δ cores"
    );
    type Row = (&'static str, fn(&WindowCpu) -> f64);
    let rows: [Row; 6] = [
        ("crewbus (this process)", |w| w.crewbus),
        ("postgres (every process)", |w| w.postgres),
        ("  of which the bench database's sessions", |w| {
            w.postgres_ours
        }),
        ("  of which other databases' sessions", |w| {
            w.postgres_others
        }),
        ("nats-server", |w| w.nats),
        ("total", WindowCpu::total),
    ];
    for (name, get) in rows {
        let (a, b) = (get(without), get(with));
        // Each window's rate, so two windows of slightly different lengths compare.
        let cores = b / with.seconds - a / without.seconds;
        eprintln!(
            "{name:<40} {a:>10.2} {b:>14.2} {:>10.2} {cores:>12.4}",
            b - a
        );
    }
    let cores = with.total() / with.seconds - without.total() / without.seconds;
    let cores_ours = (with.total() - with.postgres_others) / with.seconds
        - (without.total() - without.postgres_others) / without.seconds;
    eprintln!(
        "goal ≤ {IDLE_CORES} of a core: (with − without) / window = {cores:.4} cores: {} \
         (without other databases' sessions: {cores_ours:.4})",
        met(cores <= IDLE_CORES)
    );
}

fn main() {
    let bench = measuring();
    let open_files = raise_open_files(
        MIN_NOFILE,
        &format!("{WAITERS} idle waiters hold a client and a server socket each in this process"),
    );
    let (samples, warm_up, waiters, window) = if bench {
        (SAMPLES, WARM_UP, WAITERS, WINDOW)
    } else {
        (TEST_SAMPLES, 1, TEST_WAITERS, TEST_WINDOW)
    };
    eprintln!(
        "waiting_fetch bench ({}): RLIMIT_NOFILE {open_files}, {samples} samples per target and \
         store, {waiters} idle waiters, {window:?} windows; load average {}",
        if bench { "bench mode" } else { "test mode" },
        load_average()
    );
    let runtime = support::runtime();
    runtime.block_on(async {
        let mut results = Vec::new();
        for store in STORES {
            let scene = Scene::start(store).await;
            let figures = latency(&scene, samples, warm_up).await;
            eprintln!(
                "{}: waiting p50 {:.2} p99 {:.2} ms; poll 2ms p50 {:.2} p99 {:.2} ms \
                 (load average {})",
                store.name(),
                ms(figures.waiting.p50),
                ms(figures.waiting.p99),
                ms(figures.poll.p50),
                ms(figures.poll.p99),
                load_average()
            );
            results.push(figures);
            if store == Store::PostgresJetStream {
                let (without, with) = idle_cost(&scene, waiters, window).await;
                eprintln!("idle phase done (load average {})", load_average());
                print_idle(waiters, &without, &with);
            }
            scene.stop().await;
        }
        print_latency(&results);
        if !bench {
            eprintln!(
                "\ntest mode: every waiting fetch returned its message; the figures above are \
                 not speed measurements"
            );
        }
    });
}
