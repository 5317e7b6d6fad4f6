//! The SQLite adapter: every test gets its own store file in a temp directory of its own
//! (deleted when the test passes, kept and named when it fails), opened and migrated.
//!
//! - `sqlite::<port>::<behaviour>` — the shared MessagingBackend and Inbox behaviours
//!   (idempotency and ack-after-commit included) through the `SqliteBackends` registry;
//! - `sqlite::ledger::…`, `sqlite::journal::…`, `sqlite::operators::…`, `sqlite::oversight::…`
//!   — the shared Ledger, Journal, Operators and Oversight behaviours on `SqliteLedger` and its
//!   journal;
//! - `sqlite::push_store::…` and the push store's own tests — the `PushStore` behaviours on
//!   `SqlitePushStore` (`sqlite/push.rs`, until issue 34 the `sqlite_push` target);
//! - `sqlite::wakeups::…`, `sqlite::feed::…` — declared not offered (ignored with the reason):
//!   one server per store, so there are no cross-server wake-ups or console events to test;
//! - the rest — SQLite-specific tests (32 concurrent writers, reopening, busy contention,
//!   backups, upgrading a store made before the console migration).
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use crewbus_conformance::feed::{FeedPair, feed_behaviours};
use crewbus_conformance::trial::{NoFixture, NotOffered, Run, Suite};
use crewbus_conformance::wakeups::{WakeupsPair, wakeups_behaviours};
use crewbus_conformance::{
    Capabilities, FixtureError, FixtureFactory, LedgerFixture, LedgerFixtureFactory, LedgerPorts,
    TeamFixture, TeamPorts, Time,
};
use crewbus_domain::TenantId;
use crewbus_memory::ManualClock;
use crewbus_sqlite::{SqliteBackends, SqliteLedger, SqliteSettings};
use libtest_mimic::Arguments;
use uuid::Uuid;

/// `tests![f, g]`: this target's own tests, each under its own name (`own_tests!`).
macro_rules! tests {
    ($($f:tt)*) => { crewbus_conformance::own_tests![$($f)*] };
}

#[path = "sqlite/adapters.rs"]
mod adapters;
#[path = "sqlite/busy.rs"]
mod busy;
#[path = "sqlite/concurrency.rs"]
mod concurrency;
#[path = "sqlite/durability.rs"]
mod durability;
#[path = "sqlite/push.rs"]
mod push;
#[path = "sqlite/support.rs"]
mod support;
#[path = "sqlite/upgrade.rs"]
mod upgrade;

/// One of this target's own tests: it needs no fixture.
pub(crate) type TestFn = Run<()>;

/// The shared MessagingBackend and Inbox behaviours on SQLite: one fresh migrated store file per
/// trial, adapters from the `SqliteBackends` registry as trait objects, time from a manual clock.
struct SqliteFactory {
    settings: SqliteSettings,
    capabilities: Capabilities,
}

impl SqliteFactory {
    fn new() -> Self {
        let settings = SqliteSettings {
            max_body_bytes: crewbus_domain::MAX_BODY_BYTES,
            ack_wait: Duration::from_secs(30),
            max_deliver: 4,
        };
        let capabilities = Capabilities::sql_store(
            crewbus_sqlite::NAME,
            settings.max_body_bytes,
            settings.ack_wait,
            settings.max_deliver,
        );
        SqliteFactory {
            settings,
            capabilities,
        }
    }
}

#[async_trait]
impl FixtureFactory for SqliteFactory {
    fn capabilities(&self) -> Capabilities {
        self.capabilities.clone()
    }

    /// One trial's namespace: its own store file, clock and two teams' ports.
    async fn fixture(&self) -> Result<Box<dyn TeamFixture>, FixtureError> {
        let store = support::store("sqlite::conformance").await;
        let clock = ManualClock::default();
        let registry = SqliteBackends::new(
            store.pools.clone(),
            Arc::new(clock.clone()),
            self.settings.clone(),
        );
        let team = Uuid::new_v4();
        let consumers = registry.team_inbox(team);
        TeamPorts::from_registry(
            &registry,
            (team, Uuid::new_v4()),
            self.capabilities.clone(),
            Time::manual(clock, ManualClock::advance),
            move |recipient| {
                let consumers = Arc::clone(&consumers);
                async move { consumers.delete_consumer(&recipient).await }
            },
            Box::new(store),
        )
        .await
    }
}

/// The ledger and journal under test: one fresh migrated store file per behaviour. A SQLite
/// store has one server (its one-host rule): the "other server" is a second ledger value over
/// the same pools, racing through the one write connection.
struct SqliteLedgerFactory;

#[async_trait]
impl LedgerFixtureFactory for SqliteLedgerFactory {
    async fn fixture(&self) -> Result<Box<dyn LedgerFixture>, FixtureError> {
        let store = support::store("sqlite::ledger").await;
        let ledger = SqliteLedger::new(store.pools.clone(), TenantId::default());
        let other = SqliteLedger::new(store.pools.clone(), TenantId::default());
        let journal = Arc::new(ledger.journal());
        Ok(LedgerPorts::of(ledger, journal, other, Box::new(store)))
    }
}

fn main() {
    let args = Arguments::from_args();
    let shared = crewbus_conformance::runtime();
    let conformance =
        crewbus_conformance::trials("sqlite", Arc::new(SqliteFactory::new()), &shared);
    let ledger =
        crewbus_conformance::ledger_trials("sqlite", Arc::new(SqliteLedgerFactory), &shared);
    // The `Wakeups` and `Feed` behaviours are about wake-ups and the console's events between
    // servers sharing one ledger. A SQLite store has one server (the crate's one-host/one-server
    // rule), so the adapter offers neither: the app wakes waiters and publishes its console
    // events in process (crewbus-memory's `MemoryWakeups` and `MemoryFeed`, whose behaviours
    // run in the memory target). Each behaviour is listed and ignored, naming this.
    let wakeups = NotOffered::<WakeupsPair>::new(
        "missing:cross_server_wakeups",
        "sqlite has one server per store: wake-ups are in process (MemoryWakeups, run by the \
         memory target)",
    );
    let wakeups = Suite::new(Arc::new(wakeups), &shared).trials("sqlite", wakeups_behaviours());
    let feed = NotOffered::<FeedPair>::new(
        "missing:cross_server_feed",
        "sqlite has one server per store: the console feed is in process (MemoryFeed, run by \
         the memory target)",
    );
    let feed = Suite::new(Arc::new(feed), &shared).trials("sqlite", feed_behaviours());
    let own = [
        adapters::TESTS,
        concurrency::TESTS,
        durability::TESTS,
        busy::TESTS,
        upgrade::TESTS,
    ]
    .concat();
    // This target's own tests on a runtime of their own, as they load the store hard.
    let own_suite = Suite::new(Arc::new(NoFixture), &crewbus_conformance::runtime());
    let own = own
        .into_iter()
        .map(|(name, run)| own_suite.trial(format!("sqlite::{name}"), &[], run));
    let trials = conformance
        .into_iter()
        .chain(ledger)
        .chain(wakeups)
        .chain(feed)
        .chain(push::trials(&shared))
        .chain(own)
        .collect();
    libtest_mimic::run(&args, trials).exit();
}
