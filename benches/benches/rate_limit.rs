//! The send rate limit (issue 21 item 4) on but never hit ÷ off, in one run, on the embedded
//! store (SQLite: each agent's bucket in the server) and on Postgres (each agent's bucket one
//! row of the ledger, leased `rate_limit.chunk` = 10 tokens at a time), through the use case
//! (`Bus::send`) as the HTTP and MCP handlers call it.
//!
//! Set-up (untimed), per store and setting: a bus with `[rate_limit]` on (rate and burst of
//! 10 000 000: never hit) and one with it off. SQLite: two fresh stores of the same shape (one
//! server holds a store); Postgres: two buses on one fresh database of `DATABASE_URL` (two
//! servers sharing a ledger, as production runs them; an unreachable server fails the run
//! loudly), each with a team of 32 agents in one conversation of two members each.
//!
//! Measured: 32 agents, each in a task of its own, send 16-byte messages as fast as the store
//! answers for a window; the windows alternate on, off, on, off… (6 windows each in bench mode),
//! and the figure is Σ messages ÷ Σ time per setting. Printed: messages/s on and off and on ÷
//! off (the goal: ≥ 0.97).
//!
//! Test mode (`cargo test --bench rate_limit`; `scripts/test` runs every bench so): one 0.3 s
//! window each, checked to run and to send, not measured. Bench mode: `cargo bench -p
//! crewbus-benches --bench rate_limit` (3 s windows).

use std::time::Duration;

use crewbus::config::Config;

mod support;

use crewbus_benches::kit::postgres::database;
use crewbus_benches::kit::store::{postgres_bus, sqlite_bus};
use support::cpu::load_average;
use support::measuring;
use support::rounds::{Order, Tally, rounds};
use support::senders::{Sender, burst, sender};

fn config(limited: bool) -> Config {
    let mut config = Config::default();
    config.rate_limit.enabled = limited;
    config.rate_limit.rate_per_second = 10_000_000;
    config.rate_limit.burst = 10_000_000;
    config
}

struct Figures {
    store: &'static str,
    on: f64,
    off: f64,
}

async fn measure(store: &'static str, on: Sender, off: Sender, bench: bool) -> Figures {
    let (windows, window) = if bench {
        (6, Duration::from_secs(3))
    } else {
        (1, Duration::from_millis(300))
    };
    let sent = Tally::new();
    for (round, (limited, s)) in rounds(windows, [(true, &on), (false, &off)], Order::Same) {
        let (n, t) = burst(s, window, round).await;
        sent.add(limited, n, t);
    }
    let rate = |limited| sent.rate(&limited).expect("nothing was sent");
    Figures {
        store,
        on: rate(true),
        off: rate(false),
    }
}

fn main() {
    let bench = measuring();
    eprintln!(
        "rate limit bench ({}): load average {}",
        if bench { "bench mode" } else { "test mode" },
        load_average()
    );
    let runtime = support::runtime();
    runtime.block_on(async {
        let mut all = Vec::new();
        {
            let (on, _on_dir) = sqlite_bus(&mut config(true)).await;
            let (off, _off_dir) = sqlite_bus(&mut config(false)).await;
            let (on, off) = (sender(on, "limited").await, sender(off, "free").await);
            all.push(measure("sqlite", on, off, bench).await);
        }
        {
            let db = database("rate limit bench").await;
            let on = postgres_bus(&config(true), db.pool().clone()).await;
            let off = postgres_bus(&config(false), db.pool().clone()).await;
            let (on, off) = (sender(on, "limited").await, sender(off, "free").await);
            all.push(measure("postgres", on, off, bench).await);
            db.passed().await;
        }
        eprintln!();
        eprintln!("| store | limit on, not hit (msg/s) | limit off (msg/s) | on ÷ off |");
        eprintln!("|---|---:|---:|---:|");
        for f in &all {
            eprintln!(
                "| {} | {:.0} | {:.0} | {:.3} |",
                f.store,
                f.on,
                f.off,
                f.on / f.off
            );
        }
    });
}
