//! Wake on delivery (issue 32 item 8) against the waiting fetch in the same run: how soon a
//! Claude Code Stop hook returns and a channel event arrives after a send, beside how soon a
//! waiting fetch answers; and what armed Stop hooks cost while nothing happens.
//!
//! Set-up (untimed), per store, one `crewbus` [`Server`](crewbus::server::Server) (HTTP API
//! and workers, the configuration's defaults: `bus.max_wait_ms` 50 000, `bus.topup_after_ms`
//! 2 000, `bus.idle_poll_ms` 50) on 127.0.0.1 in this process, on the wall clock:
//! - **sqlite**: the embedded store in a fresh temporary directory (`compose::compose_as` as the
//!   server);
//! - **postgres**: a fresh database on the server of `DATABASE_URL`
//!   (`crewbus_conformance::postgres::TestDatabase`, dropped at the end, kept and named if the
//!   run fails; unset or unreachable fails the run loudly), a pool of the production default
//!   size (10), wake-ups by `LISTEN/NOTIFY`.
//!
//! The hook and the bridge are the **real processes**: the `crewbus` binary
//! ([`processes::crewbus_bin`]: `$CREWBUS_BIN`, else `target/<profile>/crewbus`, which must be
//! built first), with an empty environment but `HOME` and `XDG_STATE_HOME` in a temporary
//! directory; every agent's token in a 0600 file (`--token-file`).
//!
//! **Latency** (per store): one sender; three receivers, each in a conversation of its own with
//! the sender. One sample: the instant before the sender's `POST /v1/conversations/{id}/messages`
//! to the instant the receiver has the news. Checked on every sample; then the receiver fetches
//! and confirms the message (untimed), so nothing is left waiting.
//! - `fetch` (the baseline, as `waiting_fetch`'s `waiting`): the receiver's `POST
//!   /v1/inbox/fetch {wait_ms: 20000}` is parked (`Bus::waiting_fetches`) when the send starts;
//!   timed to its answer holding that message.
//! - `hook`: `crewbus hook claude-code --headless --wait 20`, fed a `Stop` event of one session
//!   on stdin, its watch parked (`Bus::waiting_watches`) when the send starts; timed to the
//!   process's exit (what the host waits for), its stdout `{"decision":"block","reason":…}`
//!   naming one new message. Diagnostic: send → the decision line.
//! - `channel`: one `crewbus mcp --channel` for the whole phase, past its handshake (its
//!   `initialize` answer declares `experimental["claude/channel"]`), its watch parked when the
//!   send starts; timed to the instant its `notifications/claude/channel` line is read, whose
//!   `meta.message` is that message.
//!
//! The three alternate: each round runs them in one of the six orders, in turn, so drift and
//! the neighbours' load hit all alike. Printed: p50, p99 and max of each (nearest-rank, from
//! `support::latency`'s histogram: 3 significant digits), and the goal: hook and channel p50
//! and p99 each ≤ 1.2 × the fetch's.
//!
//! **Idle cost** (per store, run before the latency phase, so no watch of it lingers): `HOOKS`
//! agents, the first half each holding one message (sent to them all in one conversation) that
//! a `UserPromptSubmit` check of its session already reported (checked: its
//! `additionalContext` names it) and nobody fetches. CPU seconds over a window with no hook,
//! then over a window with a `crewbus hook claude-code --headless --wait 3600` Stop hook armed
//! for every agent (same session as the check; all parked before the window opens, the old
//! message by then older than `bus.topup_after_ms`), of: this process (the crewbus server and
//! its workers; the bench's main task sleeps; utime + stime of `/proc/self/stat`), the Postgres
//! sessions of the bench's database (their pids from `pg_stat_activity`, read through a
//! connection to another database, sampled every 5 s), and — stated apart — the hook processes
//! (each must run throughout); the last two by their threads' `se.sum_exec_runtime`
//! (`/proc/<pid>/task/*/sched`, ns), as a hook's few hundred µs a window are below the 10 ms
//! step of utime + stime. Goal: crewbus and its store,
//! (with − without) / window ≤ 0.02 of a core. After the window one message goes to every
//! agent, and every hook must block with exactly that one as news (the old one: "2 waiting in
//! all", not news again).
//!
//! Test mode (`cargo test --bench wake`; `scripts/test` runs every bench so): a handful of
//! latency samples, 10 hooks, 1 s windows — it checks every path, never a speed.
//!
//! Reproduce: `cargo build --release -p crewbus --bin crewbus &&
//! DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres cargo bench -p crewbus-benches
//! --bench wake`.

use std::time::Duration;

mod idle;
mod latency;
mod processes;
mod scene;
#[path = "../support/mod.rs"]
mod support;

use crewbus_benches::kit::open_files::raise_open_files;
use crewbus_benches::kit::store::STORES;
use idle::IdleFigures;
use latency::LatencyFigures;
use scene::Scene;
use support::cpu::load_average;
use support::latency::{Figures, ms};

/// Latency samples per target and store, and warm-up rounds (not counted), under `--bench`
/// and in test mode.
const SAMPLES: usize = 1_000;
const WARM_UP: usize = 20;
const TEST_SAMPLES: usize = 3;
const TEST_WARM_UP: usize = 1;
/// Armed hooks and the idle windows under `--bench`, and in test mode.
const HOOKS: usize = 200;
const WINDOW: Duration = Duration::from_secs(60);
const TEST_HOOKS: usize = 10;
const TEST_WINDOW: Duration = Duration::from_secs(1);
/// The goals: hook and channel p50 and p99 ≤ `RATIO` × the waiting fetch's; idle cost ≤
/// `IDLE_CORES` of a core.
const RATIO: f64 = 1.2;
const IDLE_CORES: f64 = 0.02;

fn met(ok: bool) -> &'static str {
    if ok { "met" } else { "NOT met" }
}

fn print_latency(results: &[LatencyFigures]) {
    eprintln!();
    eprintln!(
        "send → the receiver has the news, ms (nearest-rank percentiles, hdrhistogram, 3 \
         significant digits):"
    );
    eprintln!(
        "{:<10} {:<22} {:>7} {:>8} {:>8} {:>8}",
        "store", "target", "samples", "p50", "p99", "max"
    );
    for r in results {
        let rows: [(&str, &Figures); 4] = [
            ("waiting fetch", &r.fetch),
            ("Stop hook returns", &r.hook),
            ("channel event", &r.channel),
            ("(hook decision line)", &r.hook_decided),
        ];
        for (name, f) in rows {
            eprintln!(
                "{:<10} {name:<22} {:>7} {:>8.2} {:>8.2} {:>8.2}",
                r.store.name(),
                f.samples,
                ms(f.p50),
                ms(f.p99),
                ms(f.max)
            );
        }
    }
    eprintln!();
    eprintln!("goal: hook and channel p50 and p99 ≤ {RATIO} × the waiting fetch's");
    for r in results {
        for (name, f) in [("hook", &r.hook), ("channel", &r.channel)] {
            let p50 = f.p50.as_secs_f64() / r.fetch.p50.as_secs_f64();
            let p99 = f.p99.as_secs_f64() / r.fetch.p99.as_secs_f64();
            eprintln!(
                "{:<10} {name:<8} p50 ÷ fetch {p50:.2}, p99 ÷ fetch {p99:.2}: {}",
                r.store.name(),
                met(p50 <= RATIO && p99 <= RATIO)
            );
        }
    }
}

fn print_idle(r: &IdleFigures) {
    let (a, b) = (&r.without, &r.with);
    eprintln!();
    eprintln!(
        "idle cost on {}, CPU seconds over {:.1} s / {:.1} s windows ({} hooks armed in {:.1} s):",
        r.store.name(),
        a.seconds,
        b.seconds,
        r.hooks,
        r.armed_in
    );
    eprintln!(
        "{:<44} {:>10} {:>12} {:>10}",
        "",
        "no hook",
        format!("{} hooks", r.hooks),
        "Δ cores"
    );
    type Row = (&'static str, fn(&idle::WindowCpu) -> f64);
    let rows: [Row; 4] = [
        ("crewbus (this process: server, workers)", |w| w.crewbus),
        ("store (the bench database's sessions)", |w| w.store),
        ("crewbus + store", |w| w.crewbus + w.store),
        ("hook processes (apart)", |w| w.hooks),
    ];
    for (name, get) in rows {
        // Each window's rate, so two windows of slightly different lengths compare.
        let cores = get(b) / b.seconds - get(a) / a.seconds;
        eprintln!("{name:<44} {:>10.3} {:>12.3} {cores:>10.4}", get(a), get(b));
    }
    eprintln!(
        "watch reads in the window: {} without, {} with; safety sweeps: {} / {}",
        a.watch_reads, b.watch_reads, a.sweeps, b.sweeps
    );
    let cores = b.cores() - a.cores();
    eprintln!(
        "goal ≤ {IDLE_CORES} of a core (crewbus + store, with − without): {cores:.4} cores: {} \
         (with hooks, absolute: {:.4}; the hooks apart: {:.4})",
        met(cores <= IDLE_CORES),
        b.cores(),
        b.hooks / b.seconds
    );
}

fn main() {
    let bench = support::measuring();
    // Each armed hook holds two pipes and a server socket in this process.
    let open_files = raise_open_files(0, "armed hooks");
    let (samples, warm_up, hooks, window) = if bench {
        (SAMPLES, WARM_UP, HOOKS, WINDOW)
    } else {
        (TEST_SAMPLES, TEST_WARM_UP, TEST_HOOKS, TEST_WINDOW)
    };
    eprintln!(
        "wake bench ({}): RLIMIT_NOFILE {open_files}, {samples} samples per target and store, \
         {hooks} armed hooks, {window:?} windows; load average {}",
        if bench { "bench mode" } else { "test mode" },
        load_average()
    );
    let bin = processes::crewbus_bin();
    let runtime = support::runtime();
    runtime.block_on(async {
        let (mut latencies, mut idles) = (Vec::new(), Vec::new());
        for store in STORES {
            let scene = Scene::start(store).await;
            // The idle phase first: no watch of the latency phase's bridge may linger then (a
            // watch whose client left ends at its deadline when the server does not notice).
            assert_eq!(
                scene.bus.waiting_watches(),
                0,
                "a watch before the idle phase"
            );
            let i = idle::run(&scene, &bin, hooks, window).await;
            eprintln!(
                "{}: idle phase done (load average {})",
                store.name(),
                load_average()
            );
            idles.push(i);
            let l = latency::run(&scene, &bin, samples, warm_up).await;
            eprintln!(
                "{}: fetch p50 {:.2} p99 {:.2}; hook p50 {:.2} p99 {:.2}; channel p50 {:.2} p99 \
                 {:.2} ms (load average {})",
                store.name(),
                ms(l.fetch.p50),
                ms(l.fetch.p99),
                ms(l.hook.p50),
                ms(l.hook.p99),
                ms(l.channel.p50),
                ms(l.channel.p99),
                load_average()
            );
            latencies.push(l);
            scene.stop().await;
        }
        print_latency(&latencies);
        for i in &idles {
            print_idle(i);
        }
        if !bench {
            eprintln!(
                "\ntest mode: every hook, channel event and waiting fetch had its message; the \
                 figures above are not speed measurements"
            );
        }
    });
}
