//! The whole relay pass — Postgres lease, JetStream publish of every body, Postgres settle —
//! against raw async-nats JetStream publishes doing the same broker work, in the same run, on
//! the same nats-server, over the same number of 1 KiB bodies (issue 7: "relay ≥ 5 000
//! bodies/s").
//!
//! Set-up (untimed): one spawned nats-server (the conformance fixture: `NATS_SERVER_BIN`, else
//! `PATH`; the fixture's provisioning and runtime users), one fresh Postgres database
//! (`crewbus_conformance::postgres::TestDatabase` on the server of `DATABASE_URL`, migrated;
//! dropped at the end, kept and named if the run fails; an unset or unreachable `DATABASE_URL`
//! fails the run loudly), and per relay batch size one `crewbus` [`Bus`] composed by the
//! composition root (`compose::postgres_with_pool`: Postgres ledger over a pool of the
//! production default size, `[nats]` with the runtime credential, `bus.relay_batch` set). One
//! team with body backend and inbox `jetstream`, its streams provisioned through
//! `compose::stream_admin` (provisioning credential), as `crewbus-load` creates its teams, with
//! `CONVERSATIONS` conversations of two agents each. No worker runs: the bench drives
//! `Bus::relay_pass` itself.
//!
//! Each iteration moves `slots` bodies (1 024 under `--bench`, 128 in test mode), the same
//! number for every target:
//! - `relay_pass`: `slots` pending outbox slots are made first, outside the timed section, by
//!   `Bus::send` of 1 KiB bodies into the team's conversations (one concurrent sender per
//!   conversation), then `ANALYZE` (steady-state planner statistics, as the `relay` bench).
//!   Timed: `Bus::relay_pass()` repeated until every slot is settled; each pass leases up to
//!   `relay_batch` due slots in one transaction, publishes their bodies concurrently through the
//!   JetStream adapter (awaiting every PubAck) and settles them in one transaction. Checked
//!   (untimed): every pass confirms everything it leased (nothing retried, failed or stale),
//!   nothing is left due, the last message of every conversation is `Stored` with a `jetstream`
//!   locator, and the body stream holds exactly the bodies relayed so far.
//! - `raw_publish`: the baseline, the broker work alone: async-nats `publish_with_headers` of
//!   `slots` 1 KiB bodies with the adapter's four headers (`Nats-Msg-Id` = publish key, publish
//!   key, message id, team) and subject layout (`crewbus.<team>.b.<conversation>.<message>`,
//!   the same number of conversations), at most `relay_batch` in flight (a sliding window),
//!   awaiting every PubAck, with the runtime credential, into a body stream provisioned by the
//!   same `StreamAdmin` as the team's (one message per subject, discard new per subject,
//!   duplicate window, quotas). As `jetstream_publish`'s `raw_same_work`.
//!
//! - `ledger_only` (diagnostic, not a baseline): the relay's two ledger transactions alone, on
//!   the same team and pool: populate as for `relay_pass` (untimed), then `Ledger::lease_slots`
//!   (`relay_batch` at a time) and `Ledger::settle` of every leased slot as `Confirmed` with a
//!   placeholder locator, no body published (the `relay` bench's `ledger_lease_settle`). Its
//!   rate, printed beside the ratio, says how much of a pass the ledger takes.
//!
//! The ratio `relay ÷ raw` (bodies/s over bodies/s) is what the relay's own work costs on top of
//! the broker's: the two ledger transactions per pass, the adapter, and the pass being a batch
//! (publishes of one pass overlap, passes do not) rather than a sliding window. 1.00 would be a
//! relay as fast as the broker alone allows at that window.
//!
//! After criterion's groups (`relay_jetstream/batch_64`, `relay_jetstream/batch_128`), an
//! interleaved phase alternates rounds of every target per batch size (so drift and neighbours'
//! load hit all alike) and prints the ratio of the summed rates with both absolute rates and
//! the `ledger_only` rate:
//! `--bench` runs `ROUNDS` rounds, test mode (`cargo test --benches`) one.
//!
//! Reproduce: `DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres
//! NATS_SERVER_BIN=/usr/sbin/nats-server cargo bench -p crewbus-benches --bench
//! relay_jetstream` (test mode: `cargo test -p crewbus-benches --all-features --bench
//! relay_jetstream` with the same variables).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use async_nats::jetstream;
use bytes::Bytes;
use crewbus::bus::Bus;
use crewbus::compose;
use crewbus::config::{BusConfig, Config, NatsConfig};
use crewbus_conformance::nats::{self, NatsServer};
use crewbus_conformance::postgres::TestDatabase;
use crewbus_domain::{Agent, Locator, Publication, StreamKind, Uuid};
use crewbus_ports::SystemClock;
use criterion::{Criterion, SamplingMode, Throughput, criterion_group, criterion_main};
use futures_util::StreamExt;
use futures_util::stream::FuturesOrdered;
use sqlx::PgPool;
use sqlx::postgres::PgPoolOptions;

mod support;
use crewbus_benches::kit::nats::nats_config;
use support::rounds::{Order, Tally, rounds};
use support::{lease_and_settle_all, measuring};

/// Relay batch sizes (`bus.relay_batch`: slots per lease; the raw baseline's window).
const BATCHES: [usize; 2] = [64, 128];
/// Bodies per iteration under `--bench` and in test mode.
const SLOTS: usize = 1024;
const TEST_SLOTS: usize = 128;
/// Body bytes per message.
const BODY_BYTES: usize = 1024;
/// Conversations the pending slots are sent into, one concurrent sender each (a conversation
/// serialises its senders); the raw baseline spreads its subjects over as many.
const CONVERSATIONS: usize = 8;
/// Interleaved rounds per batch size under `--bench`.
const ROUNDS: usize = 10;
/// Pooled connections of the bus: the production default (`database.max_connections`).
const MAX_CONNECTIONS: u32 = 10;

/// The configuration of a bus with relay batch `relay_batch` on `server` (no `[database]`: the
/// pool is handed to the composition root).
fn config(server: &NatsServer, relay_batch: usize) -> Config {
    Config {
        nats: Some(NatsConfig {
            // Room for every body of a `--bench` run (tens of thousands of 1 KiB bodies).
            body_max_messages: 10_000_000,
            body_max_bytes: 8 << 30,
            ..nats_config(server)
        }),
        bus: BusConfig {
            relay_batch,
            ..BusConfig::default()
        },
        ..Config::default()
    }
}

struct Scene {
    _server: NatsServer,
    /// The bus's pool (closed before the database is dropped).
    pool: PgPool,
    /// One bus per entry of `BATCHES`, over the same database and server.
    buses: Vec<(usize, Bus)>,
    /// The JetStream team.
    team: Uuid,
    /// (conversation, sender) pairs.
    conversations: Vec<(Uuid, Agent)>,
    /// The team's body stream, read with the provisioning credential to check the bodies.
    body_stream: String,
    admin_js: jetstream::Context,
    /// Bodies the relay has published so far.
    relayed: AtomicU64,
    /// The baseline: runtime-credential context, its own team id's body stream.
    raw_js: jetstream::Context,
    raw_team: Uuid,
    raw_conversations: Vec<Uuid>,
    body: String,
}

impl Scene {
    fn bus(&self, batch: usize) -> &Bus {
        &self
            .buses
            .iter()
            .find(|(b, _)| *b == batch)
            .expect("a bus per batch size")
            .1
    }
}

async fn scene(db: &TestDatabase) -> Scene {
    let server = NatsServer::start();
    eprintln!(
        "relay_jetstream bench: nats-server {} at {}, fresh database {}",
        nats::server_version(&nats::server_binary()),
        server.url(),
        db.name()
    );
    let pool = PgPoolOptions::new()
        .max_connections(MAX_CONNECTIONS)
        .connect_with((*db.pool().connect_options()).clone())
        .await
        .expect("bus pool");
    let mut buses = Vec::new();
    for batch in BATCHES {
        let composed = compose::postgres_with_pool(
            &config(&server, batch),
            pool.clone(),
            Arc::new(SystemClock),
        )
        .await
        .expect("compose");
        assert_eq!(composed.bus.settings().relay_batch, batch);
        buses.push((batch, composed.bus));
    }
    let bus = &buses[0].1;
    let operator = config(&server, BATCHES[0]);
    let admin = compose::stream_admin(&operator).expect("stream admin");
    let team = bus
        .add_team("relay-js-bench", Some("jetstream"), Some("jetstream"))
        .await
        .expect("create team");
    admin.provision(team.id).await.expect("provision bodies");
    admin
        .provision_inbox(team.id)
        .await
        .expect("provision inbox");
    let mut conversations = Vec::new();
    for i in 0..CONVERSATIONS {
        let sender = bus
            .add_agent(team.id, &format!("sender-{i}"))
            .await
            .expect("create agent")
            .agent;
        let recipient = bus
            .add_agent(team.id, &format!("recipient-{i}"))
            .await
            .expect("create agent")
            .agent;
        let conversation = bus
            .create_conversation(&sender, "bench", &[recipient.id.to_string()])
            .await
            .expect("create conversation");
        assert_eq!(conversation.backend, "jetstream");
        conversations.push((conversation.id, sender));
    }
    // The baseline's stream: provisioned by the same admin, for a team id of its own.
    let raw_team = Uuid::new_v4();
    admin
        .provision(raw_team)
        .await
        .expect("provision raw stream");
    let admin_js = nats::provisioning_user().jetstream(&server.url()).await;
    let raw_js = nats::runtime_user().jetstream(&server.url()).await;
    let nats_config = operator.nats.as_ref().expect("[nats]");
    let body_stream = compose::jetstream_config(
        nats_config,
        &nats_config.provisioning,
        &operator,
        bus.settings(),
    )
    .stream_name(team.id, StreamKind::Bodies);
    Scene {
        _server: server,
        pool,
        buses,
        team: team.id,
        conversations,
        body_stream,
        admin_js,
        relayed: AtomicU64::new(0),
        raw_js,
        raw_team,
        raw_conversations: (0..CONVERSATIONS).map(|_| Uuid::new_v4()).collect(),
        body: "x".repeat(BODY_BYTES),
    }
}

/// Sends `slots` messages through the bus (one concurrent sender per conversation); each leaves
/// a pending outbox slot. Then refreshes the planner's statistics (`ANALYZE`). Returns the last
/// message of each conversation.
async fn populate(s: &Scene, bus: &Bus, slots: usize) -> Vec<Uuid> {
    let sends = s
        .conversations
        .iter()
        .enumerate()
        .map(|(i, (conversation, sender))| {
            let count = slots / CONVERSATIONS + usize::from(i < slots % CONVERSATIONS);
            async move {
                let mut last = None;
                for _ in 0..count {
                    let sent = bus
                        .send(
                            sender,
                            *conversation,
                            Uuid::new_v4().to_string(),
                            s.body.clone(),
                            None,
                        )
                        .await
                        .expect("send");
                    assert_eq!(sent.message.publication, Publication::PendingPublication);
                    last = Some(sent.message.id);
                }
                last
            }
        });
    let last = futures_util::future::join_all(sends)
        .await
        .into_iter()
        .flatten()
        .collect();
    // As the `relay` bench: statistics as autovacuum keeps them in steady state.
    sqlx::query("ANALYZE")
        .execute(&s.pool)
        .await
        .expect("analyze");
    last
}

/// One relay iteration: populate (untimed), `relay_pass` until every slot is settled (timed),
/// then check the work (untimed).
async fn relay_iteration(s: &Scene, batch: usize, slots: usize) -> Duration {
    let bus = s.bus(batch);
    let last = populate(s, bus, slots).await;
    let start = Instant::now();
    let mut settled = 0;
    while settled < slots {
        let pass = bus.relay_pass().await.expect("relay pass");
        assert!(
            pass.leased > 0,
            "{settled} of {slots} slots settled, none due"
        );
        assert!(pass.leased <= batch, "{pass:?}");
        assert_eq!(pass.confirmed, pass.leased, "{pass:?}");
        settled += pass.confirmed;
    }
    let took = start.elapsed();
    assert_eq!(settled, slots);
    let left = bus.relay_pass().await.expect("relay pass");
    assert_eq!(left.leased, 0, "a slot is still due: {left:?}");
    let ledger = &bus.ports().ledger;
    for message in last {
        let m = ledger.message(s.team, message).await.expect("message");
        assert_eq!(m.publication, Publication::Stored);
        let locator = m.locator.expect("a stored message has a locator");
        assert!(locator.as_str().starts_with("jetstream:"), "{locator:?}");
    }
    let relayed = s.relayed.fetch_add(slots as u64, Ordering::Relaxed) + slots as u64;
    let info = s
        .admin_js
        .get_stream(&s.body_stream)
        .await
        .expect("body stream")
        .info()
        .await
        .expect("body stream info")
        .clone();
    assert_eq!(info.state.messages, relayed, "bodies in {}", s.body_stream);
    took
}

/// One diagnostic iteration: populate (untimed), then the relay's ledger work alone (timed):
/// `Ledger::lease_slots(now, relay_lease, batch)` and `Ledger::settle` of the leased slots, all
/// `Confirmed` with a placeholder locator (no body is published), until every slot is settled
/// (as the `relay` bench's `ledger_lease_settle`, on this bench's team and pool).
async fn ledger_iteration(s: &Scene, batch: usize, slots: usize) -> Duration {
    let bus = s.bus(batch);
    populate(s, bus, slots).await;
    let ledger = &bus.ports().ledger;
    let lease = bus.settings().relay_lease;
    lease_and_settle_all(ledger.as_ref(), lease, batch, slots, |_| {
        Locator::new("jetstream", "not-published:0")
    })
    .await
}

/// The adapter's subject and headers for one body of the baseline.
fn raw_message(s: &Scene, i: usize) -> (String, async_nats::HeaderMap) {
    let (message, key) = (Uuid::new_v4(), Uuid::new_v4().to_string());
    let mut headers = async_nats::HeaderMap::new();
    headers.insert(async_nats::header::NATS_MESSAGE_ID, key.as_str());
    headers.insert("Crewbus-Publish-Key", key.as_str());
    headers.insert("Crewbus-Message-Id", message.to_string().as_str());
    headers.insert("Crewbus-Team", s.raw_team.to_string().as_str());
    let subject = format!(
        "crewbus.{}.b.{}.{}",
        s.raw_team.simple(),
        s.raw_conversations[i % CONVERSATIONS].simple(),
        message.simple()
    );
    (subject, headers)
}

/// One raw iteration: `slots` publishes, at most `window` in flight, every PubAck awaited
/// (timed).
async fn raw_iteration(s: &Scene, window: usize, slots: usize) -> Duration {
    let start = Instant::now();
    let mut in_flight = FuturesOrdered::new();
    let mut acked = 0;
    for i in 0..slots {
        let (subject, headers) = raw_message(s, i);
        let ack = s
            .raw_js
            .publish_with_headers(subject, headers, Bytes::from(s.body.clone()))
            .await
            .expect("send");
        in_flight.push_back(ack.into_future());
        if in_flight.len() >= window {
            let ack = in_flight.next().await.expect("one").expect("PubAck");
            assert!(!ack.duplicate);
            acked += 1;
        }
    }
    while let Some(ack) = in_flight.next().await {
        assert!(!ack.expect("PubAck").duplicate);
        acked += 1;
    }
    let took = start.elapsed();
    assert_eq!(acked, slots);
    took
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Target {
    Raw,
    Relay,
    /// Diagnostic: the relay's ledger transactions without the publishes.
    Ledger,
}

impl Target {
    fn name(self) -> &'static str {
        match self {
            Target::Raw => "raw_publish",
            Target::Relay => "relay_pass",
            Target::Ledger => "ledger_only",
        }
    }

    async fn pass(self, s: &Scene, batch: usize, slots: usize) -> Duration {
        match self {
            Target::Raw => raw_iteration(s, batch, slots).await,
            Target::Relay => relay_iteration(s, batch, slots).await,
            Target::Ledger => ledger_iteration(s, batch, slots).await,
        }
    }
}

/// Every target, in the order each round runs them.
const TARGETS: [Target; 3] = [Target::Raw, Target::Relay, Target::Ledger];

/// Σ bodies and Σ time per (batch, target).
type Totals = Tally<(usize, Target)>;

fn print_ratio(label: &str, batch: usize, totals: &Totals) {
    let rate = |target: Target| totals.rate(&(batch, target));
    if let (Some(relay), Some(raw)) = (rate(Target::Relay), rate(Target::Raw)) {
        let ledger = rate(Target::Ledger).map_or_else(String::new, |l| {
            format!(" (ledger lease+settle alone {l:.0} slots/s)")
        });
        eprintln!(
            "{label}relay_batch {batch}: relay_pass {relay:.0} bodies/s, raw publish ({batch} in \
             flight) {raw:.0} bodies/s; relay/raw = {:.2}{ledger}",
            relay / raw
        );
    }
}

fn relay_jetstream(c: &mut Criterion) {
    let runtime = support::runtime();
    let db = runtime.block_on(crewbus_benches::kit::postgres::database(
        "relay_jetstream bench",
    ));
    let scene = Arc::new(runtime.block_on(scene(&db)));
    let totals = Totals::new();
    let slots = if measuring() { SLOTS } else { TEST_SLOTS };

    for batch in BATCHES {
        let mut group = c.benchmark_group(format!("relay_jetstream/batch_{batch}"));
        group.throughput(Throughput::Elements(slots as u64));
        group.sampling_mode(SamplingMode::Flat);
        group.sample_size(10);
        for target in TARGETS {
            group.bench_function(target.name(), |b| {
                b.to_async(&runtime).iter_custom(|iters| {
                    let (scene, totals) = (scene.clone(), totals.clone());
                    async move {
                        let mut took = Duration::ZERO;
                        for _ in 0..iters {
                            took += target.pass(&scene, batch, slots).await;
                        }
                        totals.add((batch, target), iters * slots as u64, took);
                        took
                    }
                })
            });
        }
        group.finish();
        print_ratio("", batch, &totals);
    }

    // Interleaved rounds: the targets alternate, so drift and load hit all alike.
    let count = if measuring() { ROUNDS } else { 1 };
    let interleaved = Totals::new();
    runtime.block_on(async {
        for batch in BATCHES {
            for (_, target) in rounds(count, TARGETS, Order::Same) {
                let took = target.pass(&scene, batch, slots).await;
                interleaved.add((batch, target), slots as u64, took);
            }
            print_ratio("interleaved ", batch, &interleaved);
        }
    });
    let scene = Arc::into_inner(scene).expect("the only reference to the scene");
    let pool = scene.pool.clone();
    drop(scene);
    runtime.block_on(pool.close());
    runtime.block_on(db.passed());
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(5));
    targets = relay_jetstream
}
criterion_main!(benches);
