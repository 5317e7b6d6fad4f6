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
use crewbus_conformance::trial::{NoFixture, Run, Suite};
use crewbus_conformance::{
    Capabilities, FixtureError, FixtureFactory, LedgerFixture, LedgerFixtureFactory, LedgerPorts,
    TeamFixture, TeamPorts, Time,
};
use crewbus_domain::TenantId;
use crewbus_memory::ManualClock;
use crewbus_postgres::{PostgresBackends, PostgresLedger, PostgresSettings};
use libtest_mimic::Arguments;
use uuid::Uuid;

/// `tests![f, g]`: this target's own tests, each under its own name (`own_tests!`).
macro_rules! tests {
    ($($f:tt)*) => { crewbus_conformance::own_tests![$($f)*] };
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
        let capabilities = Capabilities::sql_store(
            crewbus_postgres::NAME,
            settings.max_body_bytes,
            settings.ack_wait,
            settings.max_deliver,
        );
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

    /// One trial's namespace: its own database, clock and two teams' ports.
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
            Box::new(db),
        )
        .await
    }
}

/// The ledger and journal under test: one fresh migrated database per behaviour (kept when it
/// panics), and a second server's ledger on its own pool.
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
        let journal = Arc::new(ledger.journal());
        Ok(LedgerPorts::of(ledger, journal, other, Box::new(db)))
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
