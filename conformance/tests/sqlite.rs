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
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use crewbus_conformance::feed::{FeedPair, feed_behaviours};
use crewbus_conformance::trial::{Lack, NoFixture, Run, Source, Suite};
use crewbus_conformance::wakeups::{WakeupsPair, wakeups_behaviours};
use crewbus_conformance::{
    BodyFixture, Capabilities, FixtureError, FixtureFactory, InboxFixture, LedgerFixture,
    LedgerFixtureFactory, Namespace, TeamFixture,
};
use crewbus_domain::{BusError, BusResult, TenantId};
use crewbus_memory::ManualClock;
use crewbus_ports::{
    Backends, Clock, Inbox, Journal, Leases, Ledger, MessagingBackend, Operators, Oversight, Search,
};
use crewbus_sqlite::{SqliteBackends, SqliteInbox, SqliteLedger, SqliteSettings};
use libtest_mimic::Arguments;
use uuid::Uuid;

/// `tests![f, g]`: each async fn registered under its own name; an `Err` it returns fails the
/// trial with its message, as a panic does.
macro_rules! tests {
    ($($f:ident),* $(,)?) => {
        &[$((stringify!($f), (|()| Box::pin(async { $crate::support::passed($f().await) })) as TestFn)),*]
    };
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
        // As Postgres: no body quota (the table grows with the disk), no inbox overflow (the
        // queue never drops a reference), dedup on the event id for the life of the row.
        let capabilities = Capabilities {
            backend_name: crewbus_sqlite::NAME,
            body_limit_bytes: settings.max_body_bytes,
            body_quota: None,
            body_duplicate_window: None,
            ack_wait: settings.ack_wait,
            max_deliver: Some(settings.max_deliver),
            inbox_overflow_limit: None,
            inbox_dedup_for_life: true,
            inbox_duplicate_window: None,
            delete_consumer: true,
            instant_advance: true,
            settle_timeout: Duration::from_secs(5),
        };
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

    async fn fixture(&self) -> Result<Box<dyn TeamFixture>, FixtureError> {
        let store = support::store("sqlite::conformance").await;
        let clock = ManualClock::default();
        let registry = SqliteBackends::new(
            store.pools.clone(),
            Arc::new(clock.clone()),
            self.settings.clone(),
        );
        let (team, other_team) = (Uuid::new_v4(), Uuid::new_v4());
        let name = crewbus_sqlite::NAME;
        Ok(Box::new(SqliteFixture {
            capabilities: self.capabilities.clone(),
            team,
            other_team,
            bodies: registry.body_backend(team, name).await?,
            other_bodies: registry.body_backend(other_team, name).await?,
            inbox: registry.inbox(team, name).await?,
            other_inbox: registry.inbox(other_team, name).await?,
            concrete_inbox: registry.team_inbox(team),
            clock,
            _store: store,
        }))
    }
}

/// One trial's namespace: its own store file, clock and two teams' ports.
struct SqliteFixture {
    capabilities: Capabilities,
    team: Uuid,
    other_team: Uuid,
    bodies: Arc<dyn MessagingBackend>,
    other_bodies: Arc<dyn MessagingBackend>,
    inbox: Arc<dyn Inbox>,
    other_inbox: Arc<dyn Inbox>,
    concrete_inbox: Arc<SqliteInbox>,
    clock: ManualClock,
    _store: support::Store,
}

#[async_trait]
impl Namespace for SqliteFixture {
    fn capabilities(&self) -> &Capabilities {
        &self.capabilities
    }
    fn team(&self) -> Uuid {
        self.team
    }
    fn other_team(&self) -> Uuid {
        self.other_team
    }
    async fn advance(&self, by: Duration) {
        self.clock.advance(by);
    }
    async fn now(&self) -> DateTime<Utc> {
        Clock::now(&self.clock)
    }
}

impl BodyFixture for SqliteFixture {
    fn bodies(&self) -> Arc<dyn MessagingBackend> {
        Arc::clone(&self.bodies)
    }
    fn other_bodies(&self) -> Arc<dyn MessagingBackend> {
        Arc::clone(&self.other_bodies)
    }
}

#[async_trait]
impl InboxFixture for SqliteFixture {
    fn inbox(&self) -> Arc<dyn Inbox> {
        Arc::clone(&self.inbox)
    }
    fn other_inbox(&self) -> Arc<dyn Inbox> {
        Arc::clone(&self.other_inbox)
    }
    async fn delete_consumer(&self, recipient: &str) -> BusResult<()> {
        if self.concrete_inbox.delete_consumer(recipient).await? {
            Ok(())
        } else {
            Err(BusError::not_found(format!("consumer of {recipient}")))
        }
    }
}

/// The ledger and journal under test: one fresh migrated store file per behaviour.
struct SqliteLedgerFactory;

#[async_trait]
impl LedgerFixtureFactory for SqliteLedgerFactory {
    async fn fixture(&self) -> Result<Box<dyn LedgerFixture>, FixtureError> {
        let store = support::store("sqlite::ledger").await;
        let ledger = SqliteLedger::new(store.pools.clone(), TenantId::default());
        Ok(Box::new(SqliteLedgerFixture {
            ledger,
            _store: store,
        }))
    }
}

struct SqliteLedgerFixture {
    ledger: SqliteLedger,
    _store: support::Store,
}

impl LedgerFixture for SqliteLedgerFixture {
    fn ledger(&self) -> Arc<dyn Ledger> {
        Arc::new(self.ledger.clone())
    }
    fn journal(&self) -> Arc<dyn Journal> {
        Arc::new(self.ledger.journal())
    }
    fn operators(&self) -> Arc<dyn Operators> {
        Arc::new(self.ledger.clone())
    }
    fn oversight(&self) -> Arc<dyn Oversight> {
        Arc::new(self.ledger.clone())
    }
    fn leases(&self) -> Arc<dyn Leases> {
        Arc::new(self.ledger.clone())
    }
    /// A SQLite store has one server (its one-host rule): the "other server" is a second ledger
    /// value over the same pools, racing through the one write connection.
    fn other_server_leases(&self) -> Arc<dyn Leases> {
        Arc::new(SqliteLedger::new(
            self.ledger.store().clone(),
            TenantId::default(),
        ))
    }
    fn send_allowances(&self) -> [Arc<dyn crewbus_ports::SendAllowance>; 2] {
        let other = SqliteLedger::new(self.ledger.store().clone(), TenantId::default());
        [Arc::new(self.ledger.clone()), Arc::new(other)]
    }
    fn search(&self) -> Arc<dyn Search> {
        Arc::new(self.ledger.clone())
    }
}

/// The `Wakeups` behaviours are about wake-ups between servers sharing one ledger. A SQLite
/// store has one server (the crate's one-host/one-server rule), so the adapter offers no
/// `Wakeups` of its own: the app wakes waiters in process (crewbus-memory's `MemoryWakeups`,
/// whose behaviours run in the memory target). Each behaviour is listed and ignored, naming this.
struct NoCrossServerWakeups;

#[async_trait]
impl Source for NoCrossServerWakeups {
    type Fixture = WakeupsPair;
    type Need = Infallible;

    fn lacks(&self, _needs: &[Infallible]) -> Option<Lack> {
        Some(Lack {
            kind: Some("missing:cross_server_wakeups".to_owned()),
            reason: "sqlite has one server per store: wake-ups are in process (MemoryWakeups, \
                     run by the memory target)"
                .to_owned(),
        })
    }

    async fn fixture(&self) -> Result<Box<WakeupsPair>, FixtureError> {
        Err("sqlite offers no cross-server wake-ups".into())
    }
}

/// The `Feed` behaviours, likewise, are about the console's events between servers sharing one
/// ledger: a SQLite store's server publishes in process (crewbus-memory's `MemoryFeed`, whose
/// behaviours run in the memory target). Each behaviour is listed and ignored, naming this.
struct NoCrossServerFeed;

#[async_trait]
impl Source for NoCrossServerFeed {
    type Fixture = FeedPair;
    type Need = Infallible;

    fn lacks(&self, _needs: &[Infallible]) -> Option<Lack> {
        Some(Lack {
            kind: Some("missing:cross_server_feed".to_owned()),
            reason: "sqlite has one server per store: the console feed is in process \
                     (MemoryFeed, run by the memory target)"
                .to_owned(),
        })
    }

    async fn fixture(&self) -> Result<Box<FeedPair>, FixtureError> {
        Err("sqlite offers no cross-server feed".into())
    }
}

fn main() {
    let args = Arguments::from_args();
    let shared = crewbus_conformance::runtime();
    let conformance =
        crewbus_conformance::trials("sqlite", Arc::new(SqliteFactory::new()), &shared);
    let ledger =
        crewbus_conformance::ledger_trials("sqlite", Arc::new(SqliteLedgerFactory), &shared);
    let wakeups =
        Suite::new(Arc::new(NoCrossServerWakeups), &shared).trials("sqlite", wakeups_behaviours());
    let feed = Suite::new(Arc::new(NoCrossServerFeed), &shared).trials("sqlite", feed_behaviours());
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
