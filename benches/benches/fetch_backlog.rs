//! A fetch of 20 against the backlog it is taken from (issue 36 item 4: "a fetch costs what it
//! hands out, not what is waiting"): one agent's pending deliveries grow 100 → 1,000 → 10,000 →
//! 100,000, and at each size the same fetch is timed; the baseline is the fetch at 100 pending,
//! in the same run, on the same store. Goal: the median fetch at 100,000 pending ≤ 1.2 × the
//! median at 100, on the embedded store (SQLite) and on Postgres.
//!
//! Through the use cases (`Bus::fetch`, `Bus::confirm`), as the HTTP and MCP handlers call them
//! (no HTTP: the store's cost, not the transport's), on the wall clock, no workers running.
//!
//! Set-up (untimed), per store and path: a fresh store of the test kit (`kit::store::StoreBus`:
//! SQLite as `crewbus serve` opens it; Postgres a fresh database on `DATABASE_URL`, composed by
//! `compose::postgres_with_pool` over a pool of its own; an unreachable server fails the run
//! loudly); a team, a sender and a receiver in one conversation. The backlog is seeded
//! through the ledger's batch send (`Ledger::send_batch`, 1,000 sends a call, 64-byte bodies,
//! sent and stored a minute before the run, so the top-up counts every one as due); on Postgres
//! `ANALYZE` follows each growth (what autovacuum does to a table that grew).
//!
//! Two paths, each on a store of its own:
//! - **inbox**: every message's inbox reference published (`Bus::reference_pass` until no marker
//!   is left, as the reference worker does): the fetch takes its 20 from the inbox.
//! - **top-up**: no reference published (references lost: inbox overflow, expiry, a deleted
//!   consumer): the fetch finds the inbox empty and the ledger's top-up (`Ledger::undelivered`)
//!   hands out the 20 oldest — the query a backlog used to cost (it sorted every undelivered
//!   receipt of the agent).
//!
//! One sample: `Bus::fetch(receiver, 20)` timed (checked: 20 deliveries, none redelivered), then
//! `Bus::confirm` of the 20 timed apart (checked: every one `confirmed`), then, untimed, 20 new
//! sends (and on the inbox path their references published), so the backlog stays at its size.
//! 10 samples per size are run first and not counted. Printed per store, path and size: the
//! fetch's p50 / p99 and the fetch + confirm's p50, and each p50 over the 100-pending one.
//! The sizes run in order on one growing backlog (they cannot alternate): the drift of the box
//! over the run is in the ratios.
//!
//! In bench mode the plans of the fetch's backlog statements at the largest size are printed
//! too (Postgres `EXPLAIN ANALYZE`, SQLite `EXPLAIN QUERY PLAN`).
//!
//! Test mode (`cargo test --bench fetch_backlog`; `scripts/test` runs every bench so): sizes 100
//! and 300, 3 samples each: it checks that every fetch hands out 20 and every confirm confirms,
//! never a speed.
//!
//! Reproduce: `DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres cargo bench -p
//! crewbus-benches --bench fetch_backlog` (`FETCH_BACKLOG_SAMPLES`, default 200 per size;
//! `FETCH_BACKLOG_STORES=sqlite` or `postgres` runs one store). Each size's medians are printed
//! as soon as they are measured.

use std::time::{Duration, Instant};

use chrono::Utc;
use crewbus::config::Config;
use crewbus_benches::kit::store::{STORES, Store, StoreBus};
use crewbus_domain::{Agent, ConfirmOutcome, DeliveryId, SendRequest, Uuid};

mod support;

use support::cpu::load_average;
use support::measuring;

/// A fetch hands out this many.
const FETCH: usize = 20;
/// Backlog sizes under `--bench`, and in test mode.
const SIZES: [usize; 4] = [100, 1_000, 10_000, 100_000];
const TEST_SIZES: [usize; 2] = [100, 300];
/// Samples per size in test mode; warm-up samples per size (not counted).
const TEST_SAMPLES: usize = 3;
const WARM_UP: usize = 10;
/// Sends per seeding call (`crewbus_domain::MAX_PAGE`).
const SEED_BATCH: usize = 1_000;
/// The goal: the median fetch at the largest size ≤ this × the median at the smallest.
const GOAL: f64 = 1.2;

#[derive(Clone, Copy, PartialEq)]
enum Path {
    /// References published: the fetch takes from the inbox.
    Inbox,
    /// No reference published: the ledger's top-up hands out.
    TopUp,
}

impl Path {
    fn name(self) -> &'static str {
        match self {
            Path::Inbox => "inbox",
            Path::TopUp => "top-up",
        }
    }
}

/// One store with its receiver's growing backlog.
struct Scene {
    /// The bus on its fresh store.
    store: StoreBus,
    team: Uuid,
    sender: Agent,
    receiver: Agent,
    conversation: Uuid,
    path: Path,
    /// Messages sent so far (request ids).
    sent: usize,
    /// Of them, not confirmed yet: the receiver's backlog.
    pending: usize,
}

impl Scene {
    async fn new(store: Store, path: Path) -> Scene {
        let mut config = Config::default();
        let store = StoreBus::open(store, &mut config, "fetch backlog bench").await;
        let bus = &store.bus;
        let team = bus.add_team("backlog", None, None).await.expect("team");
        let sender = bus
            .add_agent(team.id, "sender")
            .await
            .expect("sender")
            .agent;
        let receiver = bus
            .add_agent(team.id, "receiver")
            .await
            .expect("receiver")
            .agent;
        let conversation = bus
            .create_conversation(&sender, "backlog", &[receiver.id.to_string()])
            .await
            .expect("conversation")
            .id;
        Scene {
            team: team.id,
            sender,
            receiver,
            conversation,
            path,
            sent: 0,
            pending: 0,
            store,
        }
    }

    /// Sends `n` messages to the receiver through the ledger's batch send, sent and stored a
    /// minute ago; on the inbox path their references are published. Untimed.
    async fn send(&mut self, n: usize) {
        let at = Utc::now() - chrono::Duration::minutes(1);
        let mut left = n;
        while left > 0 {
            let k = left.min(SEED_BATCH);
            let requests: Vec<SendRequest> = (self.sent..self.sent + k)
                .map(|i| SendRequest {
                    team: self.team,
                    conversation: self.conversation,
                    sender: self.sender.id,
                    request_id: format!("b{i}"),
                    body: format!("{i:0>64}"),
                    run: None,
                })
                .collect();
            let answers = self
                .store
                .bus
                .ports()
                .ledger
                .send_batch(&requests, at)
                .await
                .expect("send batch");
            assert!(
                answers.iter().all(|a| a.as_ref().is_ok_and(|s| s.created)),
                "every seeded send creates its message"
            );
            self.sent += k;
            self.pending += k;
            left -= k;
        }
        if self.path == Path::Inbox {
            loop {
                let pass = self
                    .store
                    .bus
                    .reference_pass()
                    .await
                    .expect("reference pass");
                assert_eq!(pass.deferred + pass.refused, 0, "{pass:?}");
                if pass.messages == 0 {
                    break;
                }
            }
        }
    }

    /// `ANALYZE` on Postgres (what autovacuum does to tables that grew); nothing on SQLite.
    async fn analyze(&self) {
        if let Some(db) = &self.store.db {
            sqlx::query("ANALYZE")
                .execute(db.pool())
                .await
                .expect("analyze");
        }
    }

    /// One sample: the fetch's time and the confirm's.
    async fn sample(&mut self) -> (Duration, Duration) {
        let start = Instant::now();
        let fetched = self
            .store
            .bus
            .fetch(&self.receiver, FETCH)
            .await
            .expect("fetch");
        let fetch = start.elapsed();
        assert_eq!(fetched.len(), FETCH, "a fetch from a backlog hands out 20");
        assert!(fetched.iter().all(|d| !d.hand_out.redelivered));
        let ids: Vec<DeliveryId> = fetched.iter().map(|d| d.hand_out.delivery).collect();
        let start = Instant::now();
        let outcomes = self
            .store
            .bus
            .confirm(&self.receiver, &ids, None)
            .await
            .expect("confirm");
        let confirm = start.elapsed();
        self.pending -= FETCH;
        assert!(
            outcomes
                .iter()
                .all(|o| matches!(o, ConfirmOutcome::Confirmed { .. })),
            "{outcomes:?}"
        );
        self.send(FETCH).await;
        (fetch, confirm)
    }

    async fn finish(self) {
        self.store.close().await;
    }
}

/// The figures of one size.
struct Figures {
    size: usize,
    fetch: Vec<Duration>,
    both: Vec<Duration>,
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// The plans of the fetch's backlog statements for the receiver of `scene` (bench mode, at
/// the largest size): the top-up query and the inbox pick's select, as the stores run them.
async fn print_plans(scene: &Scene) {
    let topup = |join: &str, p: [&str; 5]| {
        format!(
            "SELECT m.id FROM receipts r {join} messages m ON m.id = r.message_id
             WHERE r.recipient_id = {0} AND r.delivered_at IS NULL AND r.stored_at < {2}
               AND m.team_id = {1} AND m.publication = 'stored'
               AND NOT EXISTS (SELECT 1 FROM hand_outs h WHERE h.message_id = m.id
                   AND h.recipient_id = {0} AND h.held_until > {3})
             ORDER BY r.stored_at, r.conversation_id, r.seq LIMIT {4}",
            p[0], p[1], p[2], p[3], p[4]
        )
    };
    let pick = |p: [&str; 5]| {
        format!(
            "SELECT seq FROM inbox_queue WHERE team_id = {0} AND recipient_key = 'receiver'
               AND acked_at IS NULL AND visible_at <= {1} AND deliveries < {2}
             ORDER BY seq LIMIT {3}",
            p[0], p[1], p[2], p[4]
        )
    };
    let (receiver, team) = (scene.receiver.id, scene.team);
    if let Some(db) = &scene.store.db {
        let (r, t) = (format!("'{receiver}'::uuid"), format!("'{team}'::uuid"));
        let p = [r.as_str(), &t, "now()", "now()", "20"];
        for (name, sql) in [("top-up", topup("JOIN", p)), ("inbox pick", pick(p))] {
            let lines: Vec<(String,)> = sqlx::query_as(&format!("EXPLAIN ANALYZE {sql}"))
                .fetch_all(db.pool())
                .await
                .expect("explain");
            eprintln!("postgres, {name}:");
            for (l,) in lines {
                eprintln!("    {l}");
            }
        }
    }
    if let Some(dir) = &scene.store.dir {
        use sqlx::ConnectOptions;
        let mut conn = sqlx::sqlite::SqliteConnectOptions::new()
            .filename(dir.path().join("crewbus.db"))
            .read_only(true)
            .connect()
            .await
            .expect("open the store");
        let hex = |u: Uuid| format!("x'{}'", u.simple());
        let (r, t) = (hex(receiver), hex(team));
        let p = [r.as_str(), &t, "9e18", "0", "20"];
        for (name, sql) in [("top-up", topup("CROSS JOIN", p)), ("inbox pick", pick(p))] {
            let lines: Vec<(i64, i64, i64, String)> =
                sqlx::query_as(&format!("EXPLAIN QUERY PLAN {sql}"))
                    .fetch_all(&mut conn)
                    .await
                    .expect("explain");
            eprintln!("sqlite, {name}:");
            for (_, _, _, l) in lines {
                eprintln!("    {l}");
            }
        }
    }
}

/// Grows one receiver's backlog on `store` through `sizes`, timing `samples` fetches at each.
async fn run(
    store: Store,
    path: Path,
    sizes: &[usize],
    samples: usize,
    bench: bool,
) -> Vec<Figures> {
    let mut scene = Scene::new(store, path).await;
    let mut figures = Vec::new();
    for &size in sizes {
        let started = Instant::now();
        scene.send(size - scene.pending).await;
        scene.analyze().await;
        eprintln!(
            "fetch backlog: {} {} grown to {size} pending in {:.1} s",
            store.name(),
            path.name(),
            started.elapsed().as_secs_f64()
        );
        for _ in 0..WARM_UP.min(samples) {
            scene.sample().await;
        }
        let (mut fetch, mut both) = (Vec::new(), Vec::new());
        for _ in 0..samples {
            let (f, c) = scene.sample().await;
            fetch.push(f);
            both.push(f + c);
        }
        fetch.sort();
        both.sort();
        eprintln!(
            "fetch backlog: {} {} at {size} pending: fetch p50 {:.2} ms, fetch + confirm p50 {:.2} ms",
            store.name(),
            path.name(),
            ms(percentile(&fetch, 0.5)),
            ms(percentile(&both, 0.5))
        );
        figures.push(Figures { size, fetch, both });
        if bench && size == sizes[sizes.len() - 1] {
            print_plans(&scene).await;
        }
    }
    scene.finish().await;
    figures
}

fn main() {
    let bench = measuring();
    let (sizes, samples): (&[usize], usize) = if bench {
        let samples = std::env::var("FETCH_BACKLOG_SAMPLES")
            .ok()
            .map(|v| v.parse().expect("FETCH_BACKLOG_SAMPLES: a count"))
            .unwrap_or(200);
        (&SIZES, samples)
    } else {
        (&TEST_SIZES, TEST_SAMPLES)
    };
    eprintln!(
        "fetch backlog bench ({}): load average {}",
        if bench { "bench mode" } else { "test mode" },
        load_average()
    );
    let runtime = support::runtime();
    runtime.block_on(async {
        let mut all = Vec::new();
        // `FETCH_BACKLOG_STORES`: the stores to run, by name, comma-separated (default both).
        let only = std::env::var("FETCH_BACKLOG_STORES").unwrap_or_default();
        let stores = STORES
            .into_iter()
            .filter(|s| only.is_empty() || only.split(',').any(|o| o.trim() == s.name()));
        for store in stores {
            for path in [Path::Inbox, Path::TopUp] {
                all.push((store, path, run(store, path, sizes, samples, bench).await));
            }
        }
        eprintln!();
        eprintln!(
            "| store | path | pending | fetch p50 (ms) | fetch p99 (ms) | fetch + confirm p50 (ms) | fetch p50 ÷ at {} | fetch + confirm p50 ÷ at {} |",
            sizes[0], sizes[0]
        );
        eprintln!("|---|---|---:|---:|---:|---:|---:|---:|");
        let mut met = true;
        for (store, path, figures) in &all {
            let base = &figures[0];
            let (b_fetch, b_both) = (percentile(&base.fetch, 0.5), percentile(&base.both, 0.5));
            for f in figures {
                let ratio = ms(percentile(&f.fetch, 0.5)) / ms(b_fetch);
                let ratio_both = ms(percentile(&f.both, 0.5)) / ms(b_both);
                if f.size == sizes[sizes.len() - 1] && ratio > GOAL {
                    met = false;
                }
                eprintln!(
                    "| {} | {} | {} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} |",
                    store.name(),
                    path.name(),
                    f.size,
                    ms(percentile(&f.fetch, 0.5)),
                    ms(percentile(&f.fetch, 0.99)),
                    ms(percentile(&f.both, 0.5)),
                    ratio,
                    ratio_both
                );
            }
        }
        eprintln!();
        eprintln!(
            "goal (fetch p50 at {} ≤ {GOAL} × at {}): {}{}",
            sizes[sizes.len() - 1],
            sizes[0],
            if met { "met" } else { "NOT met" },
            if bench { "" } else { " (test mode: not a measurement)" }
        );
        eprintln!("fetch backlog bench: load average {} at the end", load_average());
    });
}
