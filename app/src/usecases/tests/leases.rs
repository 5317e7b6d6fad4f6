//! The waiting acquire across two servers sharing one ledger (two buses over one memory
//! ledger, as two processes over one Postgres are): woken by a release through the wake-up
//! port, and — with a wake-up double that loses everything — granted all the same within the
//! stated re-check bound.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crewbus_domain::{Acquired, LeaseClaim, LeaseMode, TokenHash};
use crewbus_memory::{
    MemoryBackends, MemoryConfig, MemoryFeed, MemoryLedger, MemoryPushStore, MemoryWakeups,
};
use crewbus_ports::{Ledger, SystemClock, Wakeups};

use crate::shutdown::Shutdown;
use crate::usecases::bus::{Bus, BusSettings, Ports};
use crate::usecases::leases::LEASE_RECHECK;

fn server(ledger: &MemoryLedger, wakeups: Arc<dyn Wakeups>) -> Bus {
    let clock = Arc::new(SystemClock);
    Bus::new(
        Ports {
            ledger: Arc::new(ledger.clone()),
            backends: Arc::new(
                MemoryBackends::new(MemoryConfig::default(), clock.clone()).unwrap(),
            ),
            journal: Arc::new(ledger.journal()),
            clock,
            broker: None,
            wakeups,
            operators: Arc::new(ledger.clone()),
            oversight: Arc::new(ledger.clone()),
            leases: Arc::new(ledger.clone()),
            send_allowance: None,
            search: Arc::new(ledger.clone()),
            feed: Arc::new(MemoryFeed::new()),
            push_store: Arc::new(MemoryPushStore::new(Default::default())),
        },
        BusSettings::default(),
    )
}

fn claim(p: &str) -> LeaseClaim {
    LeaseClaim {
        pattern: p.parse().unwrap(),
        mode: LeaseMode::Exclusive,
    }
}

/// Alice holds `src/**` through server A; Bob's acquire of `src/a.rs` waits on server B (up to
/// 20 s); Alice releases through A. Returns how long after the release Bob was granted.
async fn release_on_one_server_grants_a_waiter_on_the_other(
    wakeups_a: Arc<dyn Wakeups>,
    wakeups_b: Arc<dyn Wakeups>,
) -> Duration {
    let ledger = MemoryLedger::new(Default::default());
    let now = chrono::Utc::now();
    let team = ledger
        .create_team("t", "memory", "memory", now)
        .await
        .unwrap();
    let alice = ledger
        .create_agent(team.id, "alice", TokenHash::of("a"), now)
        .await
        .unwrap();
    let bob = ledger
        .create_agent(team.id, "bob", TokenHash::of("b"), now)
        .await
        .unwrap();
    let (a, b) = (server(&ledger, wakeups_a), server(&ledger, wakeups_b));
    let shutdown = Shutdown::new();
    let listener = tokio::spawn(crate::usecases::wait::run_listener(
        b.clone(),
        shutdown.clone(),
    ));
    let Acquired::Granted(held) = a
        .acquire_lease(
            &alice,
            &claim("src/**"),
            Some(Duration::from_secs(600)),
            None,
            Duration::ZERO,
        )
        .await
        .unwrap()
    else {
        panic!("alice's lease is granted");
    };
    let waiter = {
        let (b, bob) = (b.clone(), bob.clone());
        tokio::spawn(async move {
            let got = b
                .acquire_lease(
                    &bob,
                    &claim("src/a.rs"),
                    None,
                    None,
                    Duration::from_secs(20),
                )
                .await;
            (got, Instant::now())
        })
    };
    // Bob has asked and met the conflict before Alice releases.
    let deadline = Instant::now() + Duration::from_secs(10);
    while b.waiting_acquires() == 0 {
        assert!(Instant::now() < deadline, "bob never waited");
        tokio::task::yield_now().await;
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let released_at = Instant::now();
    a.release_lease(&alice, held.id).await.unwrap();
    let (got, granted_at) = waiter.await.unwrap();
    let Acquired::Granted(lease) = got.unwrap() else {
        panic!("bob's wait ends in a grant");
    };
    assert!(
        lease.token > held.token,
        "a later grant carries a greater token"
    );
    shutdown.trigger();
    listener.await.unwrap();
    granted_at - released_at
}

#[tokio::test]
async fn a_release_wakes_a_waiting_acquire_on_another_server_at_once() {
    let wakeups = MemoryWakeups::new();
    let after = release_on_one_server_grants_a_waiter_on_the_other(
        Arc::new(wakeups.clone()),
        Arc::new(wakeups),
    )
    .await;
    // Woken by the wake-up, not by the re-check.
    assert!(
        after < LEASE_RECHECK / 2,
        "granted {after:?} after the release"
    );
}

#[tokio::test]
async fn a_lost_wake_up_delays_a_waiting_acquire_at_most_the_recheck() {
    let after = release_on_one_server_grants_a_waiter_on_the_other(
        Arc::new(MemoryWakeups::losing_everything()),
        Arc::new(MemoryWakeups::losing_everything()),
    )
    .await;
    // The re-check, plus scheduling.
    assert!(
        after <= LEASE_RECHECK + Duration::from_millis(300),
        "granted {after:?} after the release"
    );
}
