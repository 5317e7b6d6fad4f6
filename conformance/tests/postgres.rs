//! The Postgres adapter against a real server: every test gets its own database (DATABASE_URL)
//! with the migrations applied; restart tests get a private cluster.
//!
//! - `postgres::<port>::<behaviour>` — the shared MessagingBackend and Inbox behaviours
//!   (idempotency and ack-after-commit included) through the `PostgresBackends` registry;
//! - `postgres::ledger::…`, `postgres::journal::…`, `postgres::operators::…`,
//!   `postgres::oversight::…` — the shared Ledger, Journal, Operators and Oversight behaviours
//!   on `PostgresLedger` and its journal;
//! - `postgres::push_store::…` and the push store's own tests — the `PushStore` behaviours on
//!   `PostgresPushStore` (`postgres/push.rs`, until issue 34 the `postgres_push` target);
//! - `postgres::wakeups::…`, `postgres::feed::…` — the shared Wakeups and Feed behaviours on two
//!   handles of one database;
//! - the rest — Postgres-specific tests (concurrency, fencing, U+0000, restarts, errors, the
//!   console feed's session, upgrading a database made before the console migration).
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use crewbus_conformance::postgres::TestDatabase;
use crewbus_conformance::trial::{NoFixture, Run, Suite};
use crewbus_conformance::{
    BodyFixture, Capabilities, FixtureError, FixtureFactory, InboxFixture, LedgerFixture,
    LedgerFixtureFactory, Namespace, TeamFixture,
};
use crewbus_domain::{BusError, BusResult, TenantId};
use crewbus_memory::ManualClock;
use crewbus_ports::{
    Backends, Clock, Inbox, Journal, Leases, Ledger, MessagingBackend, Operators, Oversight, Search,
};
use crewbus_postgres::{PostgresBackends, PostgresInbox, PostgresLedger, PostgresSettings};
use libtest_mimic::Arguments;
use uuid::Uuid;

/// `tests![f, g]`: each async fn registered under its own name; an `Err` it returns fails the
/// trial with its message, as a panic does.
macro_rules! tests {
    ($($f:ident),* $(,)?) => {
        &[$((stringify!($f), (|()| Box::pin(async { $crate::support::passed($f().await) })) as TestFn)),*]
    };
}

#[path = "postgres/body.rs"]
mod body;
#[path = "postgres/errors.rs"]
mod errors;
#[path = "postgres/feed.rs"]
mod feed;
#[path = "postgres/inbox.rs"]
mod inbox;
#[path = "postgres/ledger.rs"]
mod ledger;
#[path = "postgres/push.rs"]
mod push;
#[path = "postgres/restart.rs"]
mod restart;
#[path = "postgres/support.rs"]
mod support;
#[path = "postgres/upgrade.rs"]
mod upgrade;
#[path = "postgres/wakeups.rs"]
mod wakeups;

/// One of this target's own tests: it needs no fixture.
pub(crate) type TestFn = Run<()>;

/// The shared MessagingBackend and Inbox behaviours on Postgres: one fresh migrated database
/// per trial (kept when the behaviour panics), adapters from the `PostgresBackends` registry as
/// trait objects, time from a manual clock.
struct PgFactory {
    settings: PostgresSettings,
    capabilities: Capabilities,
}

impl PgFactory {
    fn new() -> Self {
        let settings = PostgresSettings {
            max_body_bytes: crewbus_domain::MAX_BODY_BYTES,
            ack_wait: Duration::from_secs(30),
            max_deliver: 4,
        };
        let capabilities = Capabilities {
            backend_name: crewbus_postgres::NAME,
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
        PgFactory {
            settings,
            capabilities,
        }
    }
}

#[async_trait]
impl FixtureFactory for PgFactory {
    fn capabilities(&self) -> Capabilities {
        self.capabilities.clone()
    }

    async fn fixture(&self) -> Result<Box<dyn TeamFixture>, FixtureError> {
        let db = support::database("postgres::conformance")
            .await
            .drop_unless_panicking();
        let clock = ManualClock::default();
        let registry = PostgresBackends::new(
            db.pool().clone(),
            Arc::new(clock.clone()),
            self.settings.clone(),
        );
        let (team, other_team) = (Uuid::new_v4(), Uuid::new_v4());
        let name = crewbus_postgres::NAME;
        Ok(Box::new(PgFixture {
            capabilities: self.capabilities.clone(),
            team,
            other_team,
            bodies: registry.body_backend(team, name).await?,
            other_bodies: registry.body_backend(other_team, name).await?,
            inbox: registry.inbox(team, name).await?,
            other_inbox: registry.inbox(other_team, name).await?,
            concrete_inbox: registry.team_inbox(team),
            clock,
            _db: db,
        }))
    }
}

/// One trial's namespace: its own database, clock and two teams' ports.
struct PgFixture {
    capabilities: Capabilities,
    team: Uuid,
    other_team: Uuid,
    bodies: Arc<dyn MessagingBackend>,
    other_bodies: Arc<dyn MessagingBackend>,
    inbox: Arc<dyn Inbox>,
    other_inbox: Arc<dyn Inbox>,
    concrete_inbox: Arc<PostgresInbox>,
    clock: ManualClock,
    _db: TestDatabase,
}

#[async_trait]
impl Namespace for PgFixture {
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

impl BodyFixture for PgFixture {
    fn bodies(&self) -> Arc<dyn MessagingBackend> {
        Arc::clone(&self.bodies)
    }
    fn other_bodies(&self) -> Arc<dyn MessagingBackend> {
        Arc::clone(&self.other_bodies)
    }
}

#[async_trait]
impl InboxFixture for PgFixture {
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

/// The ledger and journal under test: one fresh migrated database per behaviour (kept when it
/// panics).
struct PgLedgerFactory;

#[async_trait]
impl LedgerFixtureFactory for PgLedgerFactory {
    async fn fixture(&self) -> Result<Box<dyn LedgerFixture>, FixtureError> {
        let db = support::database("postgres::ledger")
            .await
            .drop_unless_panicking();
        let ledger = PostgresLedger::new(db.pool().clone(), TenantId::default());
        // A second server: its own pool on the same database.
        let other_pool = sqlx::postgres::PgPoolOptions::new()
            .max_connections(8)
            .connect_with((*db.pool().connect_options()).clone())
            .await
            .map_err(|e| format!("a second pool: {e}"))?;
        let other = PostgresLedger::new(other_pool, TenantId::default());
        Ok(Box::new(PgLedger {
            ledger,
            other,
            _db: db,
        }))
    }
}

struct PgLedger {
    ledger: PostgresLedger,
    other: PostgresLedger,
    _db: TestDatabase,
}

impl LedgerFixture for PgLedger {
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
    fn other_server_leases(&self) -> Arc<dyn Leases> {
        Arc::new(self.other.clone())
    }
    fn send_allowances(&self) -> [Arc<dyn crewbus_ports::SendAllowance>; 2] {
        [Arc::new(self.ledger.clone()), Arc::new(self.other.clone())]
    }
    fn search(&self) -> Arc<dyn Search> {
        Arc::new(self.ledger.clone())
    }
}

fn main() {
    let args = Arguments::from_args();
    let shared = crewbus_conformance::runtime();
    let conformance = crewbus_conformance::trials("postgres", Arc::new(PgFactory::new()), &shared);
    let own = [
        body::TESTS,
        inbox::TESTS,
        errors::TESTS,
        restart::TESTS,
        ledger::TESTS,
        wakeups::TESTS,
        feed::TESTS,
        upgrade::TESTS,
    ]
    .concat();
    // This target's own tests on a runtime of their own, as they load the server hard.
    let own_suite = Suite::new(Arc::new(NoFixture), &crewbus_conformance::runtime());
    let own = own
        .into_iter()
        .map(|(name, run)| own_suite.trial(name.to_owned(), &[], run));
    let ledger = crewbus_conformance::ledger_trials("postgres", Arc::new(PgLedgerFactory), &shared);
    let wakeups = crewbus_conformance::wakeups::wakeups_trials(
        "postgres",
        Arc::new(wakeups::PgWakeupsFactory),
        &shared,
    );
    let feed =
        crewbus_conformance::feed::feed_trials("postgres", Arc::new(feed::PgFeedFactory), &shared);
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
