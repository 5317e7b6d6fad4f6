//! Adapter `publish` vs raw async-nats JetStream publish doing the same broker work.
//!
//! One spawned nats-server (the conformance fixture: `NATS_SERVER_BIN`, else `PATH`), file
//! storage, R1, all in the same run:
//! - `adapter`: `JetStreamBackend::publish` of a 1 KiB body (validation, subject, headers, PubAck).
//! - `raw_same_work`: async-nats `publish_with_headers` of the same bytes, the same four headers
//!   (`Nats-Msg-Id` = publish key, publish key, message id, team), the same subject layout
//!   (`crewbus.<team>.b.<conversation>.<message>`), into a body stream provisioned identically
//!   (one message per subject, discard new per subject, duplicate window), awaiting the PubAck.
//! - `raw_plain_stream`: the same publish into a plain stream (one subject, no per-subject
//!   limit): the cost of the design's own stream settings.
//!
//! Each in two modes: one at a time (await every PubAck) and pipelined (at most 256 in flight).
//! After each mode the bench prints the adapter / raw ratios measured in this run.

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_nats::jetstream;
use bytes::Bytes;
use crewbus_conformance::nats::{self, NatsServer};
use crewbus_domain::{Envelope, Published, Secret, Uuid};
use crewbus_jetstream::{Config, Credential, JetStreamBackend};
use crewbus_ports::MessagingBackend;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use futures_util::StreamExt;
use futures_util::stream::FuturesOrdered;

mod support;
use support::measuring;
use support::rounds::{Order, Tally, rounds};

const BODY_BYTES: usize = 1024;
const WINDOW: usize = 256;

fn config(url: &str, user: &nats::UserPassword) -> Config {
    Config {
        servers: vec![url.to_owned()],
        credential: Credential::UserPassword {
            user: user.user.clone(),
            password: Secret::new(user.password.clone()),
        },
        request_timeout: Duration::from_secs(10),
        ..Config::default()
    }
}

struct Setup {
    _server: NatsServer,
    adapter: JetStreamBackend,
    team: Uuid,
    raw_team: Uuid,
    js: jetstream::Context,
    plain_subject: String,
    body: String,
}

async fn setup() -> Setup {
    let server = NatsServer::start();
    let url = server.url();
    let prov = config(&url, &nats::provisioning_user());
    let rt = config(&url, &nats::runtime_user());
    let (team, raw_team) = (Uuid::new_v4(), Uuid::new_v4());
    for t in [team, raw_team] {
        JetStreamBackend::provision(&prov, t)
            .await
            .expect("provision");
    }
    let adapter = JetStreamBackend::connect(&rt, team).await.expect("connect");
    // The raw side publishes with the runtime credential too (the server checks the same
    // publish permissions); the provisioning one only creates the plain stream.
    let admin = nats::provisioning_user().jetstream(&url).await;
    let js = nats::runtime_user().jetstream(&url).await;
    let plain_subject = format!("crewbus.plain.{}", raw_team.simple());
    admin
        .create_stream(jetstream::stream::Config {
            name: format!("PLAIN_{}", raw_team.simple()),
            subjects: vec![plain_subject.clone()],
            storage: jetstream::stream::StorageType::File,
            num_replicas: 1,
            duplicate_window: prov.duplicate_window,
            max_messages: 1_000_000,
            max_bytes: 1024 * 1024 * 1024,
            discard: jetstream::stream::DiscardPolicy::New,
            ..Default::default()
        })
        .await
        .expect("plain stream");
    eprintln!(
        "nats-server {} at {url}",
        nats::server_version(&nats::server_binary())
    );
    Setup {
        _server: server,
        adapter,
        team,
        raw_team,
        js,
        plain_subject,
        body: "x".repeat(BODY_BYTES),
    }
}

fn envelope(team: Uuid, body: &str) -> Envelope {
    Envelope {
        message_id: Uuid::new_v4(),
        conversation_id: Uuid::new_v4(),
        team_id: team,
        body: body.to_owned(),
        publish_key: Uuid::new_v4(),
    }
}

/// What `raw_same_work` and `raw_plain_stream` send: the adapter's subject and headers.
fn raw_message(team: Uuid, e: &Envelope) -> (String, async_nats::HeaderMap) {
    let mut headers = async_nats::HeaderMap::new();
    let key = e.publish_key.to_string();
    headers.insert(async_nats::header::NATS_MESSAGE_ID, key.as_str());
    headers.insert("Crewbus-Publish-Key", key.as_str());
    headers.insert("Crewbus-Message-Id", e.message_id.to_string().as_str());
    headers.insert("Crewbus-Team", team.to_string().as_str());
    let subject = format!(
        "crewbus.{}.b.{}.{}",
        team.simple(),
        e.conversation_id.simple(),
        e.message_id.simple()
    );
    (subject, headers)
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Target {
    Adapter,
    RawSameWork,
    RawPlain,
}

impl Target {
    fn name(self) -> &'static str {
        match self {
            Target::Adapter => "adapter",
            Target::RawSameWork => "raw_same_work",
            Target::RawPlain => "raw_plain_stream",
        }
    }
}

async fn publish_one(s: &Setup, target: Target) {
    match target {
        Target::Adapter => {
            let p = s.adapter.publish(envelope(s.team, &s.body)).await;
            assert!(
                matches!(
                    p,
                    Published::Confirmed {
                        duplicate: false,
                        ..
                    }
                ),
                "{p:?}"
            );
        }
        Target::RawSameWork | Target::RawPlain => {
            let e = envelope(s.raw_team, &s.body);
            let (mut subject, headers) = raw_message(s.raw_team, &e);
            if target == Target::RawPlain {
                subject = s.plain_subject.clone();
            }
            let ack =
                s.js.publish_with_headers(subject, headers, Bytes::from(e.body))
                    .await
                    .expect("send")
                    .await
                    .expect("PubAck");
            assert!(!ack.duplicate);
        }
    }
}

async fn run_sequential(s: &Setup, target: Target, n: u64) -> Duration {
    let start = Instant::now();
    for _ in 0..n {
        publish_one(s, target).await;
    }
    start.elapsed()
}

async fn run_pipelined(s: &Setup, target: Target, n: u64) -> Duration {
    let start = Instant::now();
    match target {
        Target::Adapter => {
            let adapter = &s.adapter;
            let mut outcomes = futures_util::stream::iter(0..n)
                .map(|_| adapter.publish(envelope(s.team, &s.body)))
                .buffer_unordered(WINDOW);
            while let Some(p) = outcomes.next().await {
                assert!(p.is_confirmed(), "{p:?}");
            }
        }
        Target::RawSameWork | Target::RawPlain => {
            let mut in_flight = FuturesOrdered::new();
            for _ in 0..n {
                let e = envelope(s.raw_team, &s.body);
                let (mut subject, headers) = raw_message(s.raw_team, &e);
                if target == Target::RawPlain {
                    subject = s.plain_subject.clone();
                }
                let ack =
                    s.js.publish_with_headers(subject, headers, Bytes::from(e.body))
                        .await
                        .expect("send");
                in_flight.push_back(ack.into_future());
                if in_flight.len() >= WINDOW {
                    in_flight.next().await.expect("one").expect("PubAck");
                }
            }
            while let Some(ack) = in_flight.next().await {
                ack.expect("PubAck");
            }
        }
    }
    start.elapsed()
}

/// Σ time and Σ messages per (mode, target), for the ratios printed after each group.
type Totals = Tally<(&'static str, Target)>;

/// Every target, in the order each group and round runs them.
const TARGETS: [Target; 3] = [Target::RawSameWork, Target::Adapter, Target::RawPlain];

fn print_ratios(mode: &'static str, totals: &Totals) {
    let rate = |target: Target| totals.rate(&(mode, target));
    if let (Some(a), Some(raw), Some(plain)) = (
        rate(Target::Adapter),
        rate(Target::RawSameWork),
        rate(Target::RawPlain),
    ) {
        eprintln!(
            "{mode}: adapter {a:.0} msg/s, raw same work {raw:.0} msg/s, raw plain stream \
             {plain:.0} msg/s; adapter/raw same work = {:.2}, raw same work/raw plain = {:.2}",
            a / raw,
            raw / plain
        );
    }
}

fn bench(c: &mut Criterion) {
    let runtime = support::runtime();
    let setup = Arc::new(runtime.block_on(setup()));
    let totals = Totals::new();
    for (mode, pipelined) in [("one_at_a_time", false), ("pipelined_256", true)] {
        let mut group = c.benchmark_group(format!("jetstream_publish/{mode}"));
        group.throughput(Throughput::Elements(1));
        if pipelined {
            // Pipelined iterations are cheap; give criterion enough per sample.
            group.sample_size(20);
        }
        for target in TARGETS {
            let (setup, totals) = (setup.clone(), totals.clone());
            group.bench_function(target.name(), |b| {
                b.to_async(&runtime).iter_custom(|iters| {
                    let (setup, totals) = (setup.clone(), totals.clone());
                    async move {
                        let took = if pipelined {
                            run_pipelined(&setup, target, iters).await
                        } else {
                            run_sequential(&setup, target, iters).await
                        };
                        totals.add((mode, target), iters, took);
                        took
                    }
                })
            });
        }
        group.finish();
        print_ratios(mode, &totals);
    }
}

/// Alternates short rounds of every target so drift and neighbours' load hit all alike, and
/// prints the ratios of the summed rates. `--bench` runs 20 rounds per target and mode (1 000
/// messages one at a time, 5 000 pipelined per round); test mode (`cargo test --benches`) one
/// short round.
fn interleaved_ratios(_c: &mut Criterion) {
    let full = measuring();
    // Rounds long enough (≈ 0.15 s) that scheduling jitter does not dominate one round.
    let (count, sequential, pipelined_n) = if full {
        (20, 1_000, 5_000)
    } else {
        (1, 20, 50)
    };
    let runtime = support::runtime();
    runtime.block_on(async {
        let s = setup().await;
        let totals = Totals::new();
        for (mode, pipelined) in [("one_at_a_time", false), ("pipelined_256", true)] {
            let per_round = if pipelined { pipelined_n } else { sequential };
            for (_, target) in rounds(count, TARGETS, Order::Same) {
                let took = if pipelined {
                    run_pipelined(&s, target, per_round).await
                } else {
                    run_sequential(&s, target, per_round).await
                };
                totals.add((mode, target), per_round, took);
            }
            eprint!("interleaved ");
            print_ratios(mode, &totals);
        }
    });
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(5));
    targets = bench, interleaved_ratios
}
criterion_main!(benches);
