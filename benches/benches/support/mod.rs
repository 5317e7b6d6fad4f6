//! Shared by the benches: test-mode detection, the one histogram of durations
//! ([`latency::Latencies`]), the one alternating runner and tally of rates ([`rounds`]), and the
//! timed lease + settle loop of the ledger's side of the relay (`relay`, `relay_jetstream`). The
//! stores a bench's bus runs on are the test kit's (`crewbus_benches::kit`), which the app's
//! tests share.
#![allow(dead_code)]

pub mod cpu;
pub mod latency;
pub mod rounds;
pub mod senders;

use std::time::{Duration, Instant};

use chrono::Utc;
use crewbus_domain::{LeasedSlot, Locator, SettleOutcome, Settlement, SlotOutcome};
use crewbus_ports::Ledger;

/// The runtime every bench runs on: multi-threaded, two workers (the project's machine has two
/// cores), I/O and timers on.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

/// Whether criterion measures (`cargo bench` passes `--bench`) rather than runs each benchmark
/// once (test mode: `cargo test --benches`, or `--test`).
pub fn measuring() -> bool {
    let args: Vec<String> = std::env::args().collect();
    args.iter().any(|a| a == "--bench") && !args.iter().any(|a| a == "--test")
}

/// Timed: leases `slots` due slots of `ledger`, `batch` at a time with `lease`, and settles each
/// batch as `Confirmed` at the locator `locator` gives; asserts every settlement applies and
/// that exactly `slots` were settled. Returns the time taken.
pub async fn lease_and_settle_all(
    ledger: &dyn Ledger,
    lease: Duration,
    batch: usize,
    slots: usize,
    locator: impl Fn(&LeasedSlot) -> Locator,
) -> Duration {
    let start = Instant::now();
    let mut settled = 0;
    while settled < slots {
        let at = Utc::now();
        let leased = ledger
            .lease_slots(at, lease, batch)
            .await
            .expect("lease slots");
        assert!(
            !leased.is_empty(),
            "{settled} of {slots} slots settled, none due"
        );
        let settlements: Vec<Settlement> = leased
            .iter()
            .map(|l| Settlement {
                slot: l.slot,
                generation: l.generation,
                outcome: SlotOutcome::Confirmed {
                    locator: locator(l),
                },
            })
            .collect();
        let outcomes = ledger.settle(&settlements, at).await.expect("settle");
        assert!(
            outcomes.iter().all(|o| *o == SettleOutcome::Applied),
            "{outcomes:?}"
        );
        settled += outcomes.len();
    }
    let took = start.elapsed();
    assert_eq!(settled, slots);
    took
}
