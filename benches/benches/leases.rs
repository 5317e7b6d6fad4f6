//! Leases (issue 21) against their baselines in the same run, on the embedded store (SQLite)
//! and Postgres, through the use cases (`Bus::acquire_lease`, `Bus::release_lease`) as the HTTP
//! and MCP handlers call them (no HTTP: the ledger's cost, not the transport's).
//!
//! Set-up (untimed), per store: a fresh store (SQLite: the test kit's `sqlite_bus`, its group
//! commit on one write connection; Postgres: a fresh database on `DATABASE_URL`, composed by
//! `compose::postgres_with_pool`, pool of the production default size; an unreachable server
//! fails the run loudly), one team of 32 agents, one conversation.
//!
//! - **Round trip**: one agent takes an exclusive lease on its own pattern and releases it
//!   (two write transactions), sample after sample; the baseline is the same agent's send of a
//!   16-byte message into the conversation (one write transaction, the bus's simplest), the two
//!   alternating sample by sample. Printed: p50 and p99 of each and their ratio (nearest-rank,
//!   from `support::latency`'s histogram: 3 significant digits; before it, the sample at index
//!   round((n − 1) × p) of the sorted list, one rank off at most).
//! - **Contended acquires**: 32 agents, each in a task of its own, loop for a window: acquire
//!   (no wait) one of 8 patterns that overlap in pairs (`src/m{k}/**` and `src/m{k}/*.rs`, four
//!   agents per pattern), and release at once when granted. Baseline: the same loop with 32
//!   disjoint patterns (nothing conflicts). Printed: acquires answered per second (granted or
//!   conflicting) and grants per second, and contended ÷ disjoint.
//!
//! Test mode (`cargo test --bench leases`; `scripts/test` runs every bench so): a handful of
//! samples and a 0.3 s window, checked to run, not measured. Bench mode: `cargo bench -p
//! crewbus-benches --bench leases` (2 000 round trips per target, 10 s windows).

use std::time::{Duration, Instant};

use crewbus::bus::Bus;
use crewbus::config::Config;
use crewbus_conformance::postgres::TestDatabase;
use crewbus_domain::{Acquired, Agent, LeaseClaim, LeaseMode};

mod support;

use crewbus_benches::kit::postgres::database;
use crewbus_benches::kit::store::{STORES, Store, postgres_bus, sqlite_bus};
use support::cpu::load_average;
use support::latency::{Latencies, ms};
use support::measuring;
use support::rounds::{Order, rounds};

const AGENTS: usize = 32;

fn claim(pattern: &str) -> LeaseClaim {
    LeaseClaim {
        pattern: pattern.parse().expect("a valid pattern"),
        mode: LeaseMode::Exclusive,
    }
}

struct Figures {
    store: Store,
    lease: (Duration, Duration),
    send: (Duration, Duration),
    contended: (f64, f64),
    disjoint: (f64, f64),
}

/// One acquire + release of `pattern` by `agent`; panics unless granted.
async fn round_trip(bus: &Bus, agent: &Agent, pattern: &LeaseClaim) {
    let Acquired::Granted(lease) = bus
        .acquire_lease(agent, pattern, None, None, Duration::ZERO)
        .await
        .expect("acquire")
    else {
        panic!("an uncontended acquire is granted");
    };
    bus.release_lease(agent, lease.id).await.expect("release");
}

/// `agents` loop for `window`, agent `i` on `patterns[i % patterns.len()]`: (acquires answered
/// per second, grants per second).
async fn contend(bus: &Bus, agents: &[Agent], patterns: &[String], window: Duration) -> (f64, f64) {
    let start = Instant::now();
    let mut tasks = Vec::new();
    for (i, agent) in agents.iter().enumerate() {
        let (bus, agent) = (bus.clone(), agent.clone());
        let c = claim(&patterns[i % patterns.len()]);
        tasks.push(tokio::spawn(async move {
            let (mut answered, mut granted) = (0u64, 0u64);
            while start.elapsed() < window {
                match bus
                    .acquire_lease(&agent, &c, None, None, Duration::ZERO)
                    .await
                    .expect("acquire")
                {
                    Acquired::Granted(l) => {
                        granted += 1;
                        bus.release_lease(&agent, l.id).await.expect("release");
                    }
                    Acquired::Conflict(c) => assert!(!c.is_empty()),
                }
                answered += 1;
            }
            (answered, granted)
        }));
    }
    let (mut answered, mut granted) = (0, 0);
    for t in tasks {
        let (a, g) = t.await.expect("task");
        answered += a;
        granted += g;
    }
    let secs = start.elapsed().as_secs_f64();
    (answered as f64 / secs, granted as f64 / secs)
}

async fn run(store: Store, bench: bool) -> Figures {
    let (samples, window) = if bench {
        (2_000, Duration::from_secs(10))
    } else {
        (10, Duration::from_millis(300))
    };
    let mut config = Config::default();
    let mut _keep: (Option<TestDatabase>, Option<tempfile::TempDir>) = (None, None);
    let bus = match store {
        Store::Sqlite => {
            let (bus, dir) = sqlite_bus(&mut config).await;
            _keep.1 = Some(dir);
            bus
        }
        Store::Postgres => {
            let db = database("leases bench").await;
            let bus = postgres_bus(&config, db.pool().clone()).await;
            _keep.0 = Some(db);
            bus
        }
    };
    let team = bus.add_team("lease-bench", None, None).await.expect("team");
    let mut agents = Vec::new();
    for i in 0..AGENTS {
        agents.push(
            bus.add_agent(team.id, &format!("agent-{i}"))
                .await
                .expect("agent")
                .agent,
        );
    }
    let solo = &agents[0];
    let conv = bus
        .create_conversation(solo, "bench", &[agents[1].id.to_string()])
        .await
        .expect("conversation");
    let mine = claim("bench/solo/**");
    let (mut lease, mut send) = (Latencies::new(), Latencies::new());
    for (i, leasing) in rounds(samples, [true, false], Order::Turning) {
        let t = Instant::now();
        if leasing {
            round_trip(&bus, solo, &mine).await;
            lease.record(t.elapsed());
        } else {
            bus.send(
                solo,
                conv.id,
                format!("r{i}"),
                "sixteen bytes!!!".into(),
                None,
            )
            .await
            .expect("send");
            send.record(t.elapsed());
        }
    }
    let overlapping: Vec<String> = (0..4)
        .flat_map(|k| [format!("src/m{k}/**"), format!("src/m{k}/*.rs")])
        .collect();
    let disjoint: Vec<String> = (0..AGENTS).map(|k| format!("own/{k}/**")).collect();
    let contended = contend(&bus, &agents, &overlapping, window).await;
    let free = contend(&bus, &agents, &disjoint, window).await;
    let _ = bus.lease_sweep().await;
    if let Some(db) = _keep.0.take() {
        db.passed().await;
    }
    Figures {
        store,
        lease: (lease.p50(), lease.p99()),
        send: (send.p50(), send.p99()),
        contended,
        disjoint: free,
    }
}

fn main() {
    let bench = measuring();
    eprintln!(
        "leases bench ({}): load average {}",
        if bench { "bench mode" } else { "test mode" },
        load_average()
    );
    let runtime = support::runtime();
    runtime.block_on(async {
        let mut all = Vec::new();
        for store in STORES {
            all.push(run(store, bench).await);
        }
        eprintln!();
        eprintln!(
            "| store | acquire+release p50 / p99 (ms) | send p50 / p99 (ms) | ratio p50 / p99 | \
             contended: answered/s, granted/s | disjoint: answered/s, granted/s | contended ÷ disjoint (answered) |"
        );
        eprintln!("|---|---:|---:|---:|---:|---:|---:|");
        for f in &all {
            eprintln!(
                "| {} | {:.2} / {:.2} | {:.2} / {:.2} | {:.2} / {:.2} | {:.0}, {:.0} | {:.0}, {:.0} | {:.2} |",
                f.store.name(),
                ms(f.lease.0),
                ms(f.lease.1),
                ms(f.send.0),
                ms(f.send.1),
                ms(f.lease.0) / ms(f.send.0),
                ms(f.lease.1) / ms(f.send.1),
                f.contended.0,
                f.contended.1,
                f.disjoint.0,
                f.disjoint.1,
                f.contended.0 / f.disjoint.0,
            );
        }
    });
}
