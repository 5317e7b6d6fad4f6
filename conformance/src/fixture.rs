//! The fixtures: the traits the behaviours take (one fresh namespace per test, with the ports
//! and the hooks tests need), and the plain structs every target builds them as ([`TeamPorts`],
//! [`LedgerPorts`], [`PushStores`]), so a target only says how to make its adapters.

use std::any::Any;
use std::error::Error as StdError;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use crewbus_domain::{BusError, BusResult};
use crewbus_ports::{
    Backends, Clock, Inbox, Journal, Leases, Ledger, MessagingBackend, Operators, Oversight,
    PushStore, Search, SendAllowance,
};
use uuid::Uuid;

use crate::{Capabilities, LedgerFixture, PushStoreFixture};

/// A fresh namespace for one test: its own random team (and a second one), and the time hooks.
///
/// Nothing in a namespace is shared with another test (teams, streams, consumers, databases,
/// and the manual clock), so tests run in parallel. Resources the namespace needs (a temporary
/// database, a server handle) live as long as the fixture value and are released on drop.
#[async_trait]
pub trait Namespace: Send + Sync {
    /// The adapters' declared capabilities (the same values the factory declared).
    fn capabilities(&self) -> &Capabilities;

    /// The team under test: a new random id per namespace.
    fn team(&self) -> Uuid;

    /// A second team of the same deployment, for the forbidden cases.
    fn other_team(&self) -> Uuid;

    /// Moves time forward by `by` for both teams' adapters: a manual clock advanced at once
    /// (memory, Postgres), or a real wait of `by` (JetStream, where the server's timer is the
    /// behaviour under test; see [`Capabilities::instant_advance`]).
    async fn advance(&self, by: Duration);

    /// The current time as the adapters see it (the manual clock, or the wall clock when the
    /// server keeps time): what `retain(before)` is compared with.
    async fn now(&self) -> DateTime<Utc>;
}

/// A namespace with the body port of both teams.
pub trait BodyFixture: Namespace {
    /// The team's body backend, as a trait object.
    fn bodies(&self) -> Arc<dyn MessagingBackend>;

    /// The other team's body backend (same adapter, same configuration).
    fn other_bodies(&self) -> Arc<dyn MessagingBackend>;
}

/// A namespace with the inbox port of both teams and the consumer hook.
#[async_trait]
pub trait InboxFixture: Namespace {
    /// The team's inbox, as a trait object.
    fn inbox(&self) -> Arc<dyn Inbox>;

    /// The other team's inbox (same adapter, same configuration).
    fn other_inbox(&self) -> Arc<dyn Inbox>;

    /// Deletes `recipient`'s consumer in the team's inbox, as an operator or an accident would
    /// (its stored references stay). Only called when [`Capabilities::delete_consumer`] is true;
    /// a fixture without it may return any error.
    async fn delete_consumer(&self, recipient: &str) -> BusResult<()>;
}

/// A namespace with both ports: what a [`FixtureFactory`] hands out. Implemented for every type
/// that is both a [`BodyFixture`] and an [`InboxFixture`].
pub trait TeamFixture: BodyFixture + InboxFixture {}

impl<T: BodyFixture + InboxFixture + ?Sized> TeamFixture for T {}

/// Why a fixture could not be built (a server that did not start, a database that could not be
/// created). The trial fails with it: a missing server is never a silent skip.
pub type FixtureError = Box<dyn StdError + Send + Sync + 'static>;

/// Builds a fresh [`TeamFixture`] per test for one adapter (or one configuration of it).
///
/// Shared, long-lived resources (a spawned server, a connection pool) live in the factory; each
/// call of [`FixtureFactory::fixture`] makes a new namespace inside them.
#[async_trait]
pub trait FixtureFactory: Send + Sync + 'static {
    /// The capabilities every fixture of this factory has. Read once, before any test runs.
    fn capabilities(&self) -> Capabilities;

    /// A fresh namespace. Errors fail the trial, naming the cause.
    async fn fixture(&self) -> Result<Box<dyn TeamFixture>, FixtureError>;
}

/// How a namespace's adapters keep time.
pub enum Time {
    /// A manual clock the adapters read: [`Namespace::advance`] moves it at once (memory,
    /// Postgres, SQLite; [`Capabilities::instant_advance`]).
    Manual {
        /// The clock, as the adapters read it.
        clock: Arc<dyn Clock>,
        /// Moves it forward.
        advance: Box<dyn Fn(Duration) + Send + Sync>,
    },
    /// The server keeps time (JetStream): [`Namespace::advance`] waits the real duration plus
    /// `margin`, for the server's timer to fire on a loaded machine; `now` is the wall clock.
    Wall {
        /// Added to every wait.
        margin: Duration,
    },
}

impl Time {
    /// A manual clock, moved by `advance` (its own method, e.g. `ManualClock::advance`).
    pub fn manual<C: Clock + 'static, R: 'static>(
        clock: C,
        advance: fn(&C, Duration) -> R,
    ) -> Time {
        let clock = Arc::new(clock);
        let moved = Arc::clone(&clock);
        Time::Manual {
            clock,
            advance: Box::new(move |by| {
                advance(&moved, by);
            }),
        }
    }
}

/// Deletes `recipient`'s consumer in the team's inbox: `Ok(true)` when it existed.
pub type DeleteConsumer = Box<dyn Fn(String) -> ConsumerDeleted + Send + Sync>;

/// What a [`DeleteConsumer`] answers.
pub type ConsumerDeleted = Pin<Box<dyn Future<Output = BusResult<bool>> + Send>>;

/// One test's namespace as plain data, the [`TeamFixture`] every factory hands out: two fresh
/// teams' ports, how time moves, how a consumer is deleted, and what must live as long as the
/// namespace (a database, a store file, a registry).
pub struct TeamPorts {
    /// The adapters' declared capabilities.
    pub capabilities: Capabilities,
    /// The team under test.
    pub team: Uuid,
    /// The second team, for the forbidden cases.
    pub other_team: Uuid,
    /// The team's body backend.
    pub bodies: Arc<dyn MessagingBackend>,
    /// The other team's body backend.
    pub other_bodies: Arc<dyn MessagingBackend>,
    /// The team's inbox.
    pub inbox: Arc<dyn Inbox>,
    /// The other team's inbox.
    pub other_inbox: Arc<dyn Inbox>,
    /// How the adapters keep time.
    pub time: Time,
    /// Deletes a consumer of the team's inbox ([`InboxFixture::delete_consumer`]).
    pub delete_consumer: DeleteConsumer,
    /// Dropped with the namespace.
    pub keep: Box<dyn Any + Send + Sync>,
}

impl TeamPorts {
    /// Both teams' ports from `registry` under `capabilities.backend_name`, as trait objects
    /// (the path the application takes), with `time`, `delete_consumer` (of the first team's
    /// inbox: `Ok(true)` when the consumer existed) and `keep` as given.
    pub async fn from_registry<F, Fut>(
        registry: &dyn Backends,
        (team, other_team): (Uuid, Uuid),
        capabilities: Capabilities,
        time: Time,
        delete_consumer: F,
        keep: Box<dyn Any + Send + Sync>,
    ) -> Result<Box<dyn TeamFixture>, FixtureError>
    where
        F: Fn(String) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = BusResult<bool>> + Send + 'static,
    {
        let delete_consumer: DeleteConsumer =
            Box::new(move |recipient| -> ConsumerDeleted { Box::pin(delete_consumer(recipient)) });
        let name = capabilities.backend_name;
        Ok(Box::new(TeamPorts {
            bodies: registry.body_backend(team, name).await?,
            other_bodies: registry.body_backend(other_team, name).await?,
            inbox: registry.inbox(team, name).await?,
            other_inbox: registry.inbox(other_team, name).await?,
            capabilities,
            team,
            other_team,
            time,
            delete_consumer,
            keep,
        }))
    }
}

#[async_trait]
impl Namespace for TeamPorts {
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
        match &self.time {
            Time::Manual { advance, .. } => advance(by),
            Time::Wall { margin } => tokio::time::sleep(by + *margin).await,
        }
    }

    async fn now(&self) -> DateTime<Utc> {
        match &self.time {
            Time::Manual { clock, .. } => clock.now(),
            Time::Wall { .. } => Utc::now(),
        }
    }
}

impl BodyFixture for TeamPorts {
    fn bodies(&self) -> Arc<dyn MessagingBackend> {
        Arc::clone(&self.bodies)
    }

    fn other_bodies(&self) -> Arc<dyn MessagingBackend> {
        Arc::clone(&self.other_bodies)
    }
}

#[async_trait]
impl InboxFixture for TeamPorts {
    fn inbox(&self) -> Arc<dyn Inbox> {
        Arc::clone(&self.inbox)
    }

    fn other_inbox(&self) -> Arc<dyn Inbox> {
        Arc::clone(&self.other_inbox)
    }

    async fn delete_consumer(&self, recipient: &str) -> BusResult<()> {
        if (self.delete_consumer)(recipient.to_owned()).await? {
            Ok(())
        } else {
            Err(BusError::not_found(format!("consumer of {recipient}")))
        }
    }
}

/// A fresh ledger's ports as plain data, the [`LedgerFixture`] every ledger factory hands out:
/// the ledger, the journal sharing its store, its other ports, a second server's, and what must
/// live as long as the test (a database, a store file).
pub struct LedgerPorts {
    /// The ledger under test.
    pub ledger: Arc<dyn Ledger>,
    /// The journal sharing its store.
    pub journal: Arc<dyn Journal>,
    /// Its operators.
    pub operators: Arc<dyn Operators>,
    /// Its oversight reads.
    pub oversight: Arc<dyn Oversight>,
    /// Its leases.
    pub leases: Arc<dyn Leases>,
    /// A second server's leases over the same store.
    pub other_server_leases: Arc<dyn Leases>,
    /// Its send allowances and a second server's.
    pub send_allowances: [Arc<dyn SendAllowance>; 2],
    /// Its search index.
    pub search: Arc<dyn Search>,
    /// Dropped with the fixture.
    pub keep: Box<dyn Any + Send + Sync>,
}

impl LedgerPorts {
    /// Every port of `ledger` (one value serving them all), `journal`, and `other` as the second
    /// server sharing the store.
    pub fn of<L>(
        ledger: L,
        journal: Arc<dyn Journal>,
        other: L,
        keep: Box<dyn Any + Send + Sync>,
    ) -> Box<dyn LedgerFixture>
    where
        L: Ledger + Operators + Oversight + Leases + SendAllowance + Search + Clone + 'static,
    {
        Box::new(LedgerPorts {
            ledger: Arc::new(ledger.clone()),
            journal,
            operators: Arc::new(ledger.clone()),
            oversight: Arc::new(ledger.clone()),
            leases: Arc::new(ledger.clone()),
            other_server_leases: Arc::new(other.clone()),
            send_allowances: [Arc::new(ledger.clone()), Arc::new(other)],
            search: Arc::new(ledger),
            keep,
        })
    }
}

impl LedgerFixture for LedgerPorts {
    fn ledger(&self) -> Arc<dyn Ledger> {
        Arc::clone(&self.ledger)
    }

    fn journal(&self) -> Arc<dyn Journal> {
        Arc::clone(&self.journal)
    }

    fn operators(&self) -> Arc<dyn Operators> {
        Arc::clone(&self.operators)
    }

    fn oversight(&self) -> Arc<dyn Oversight> {
        Arc::clone(&self.oversight)
    }

    fn leases(&self) -> Arc<dyn Leases> {
        Arc::clone(&self.leases)
    }

    fn other_server_leases(&self) -> Arc<dyn Leases> {
        Arc::clone(&self.other_server_leases)
    }

    fn send_allowances(&self) -> [Arc<dyn SendAllowance>; 2] {
        self.send_allowances.clone()
    }

    fn search(&self) -> Arc<dyn Search> {
        Arc::clone(&self.search)
    }
}

/// A push store and another tenant's over the same backing state, as plain data: the
/// [`PushStoreFixture`] every push store factory hands out.
pub struct PushStores {
    /// The store under test.
    pub store: Arc<dyn PushStore>,
    /// Another tenant's over the same state.
    pub other_tenant: Arc<dyn PushStore>,
    /// Dropped with the fixture.
    pub keep: Box<dyn Any + Send + Sync>,
}

impl PushStoreFixture for PushStores {
    fn store(&self) -> Arc<dyn PushStore> {
        Arc::clone(&self.store)
    }

    fn other_tenant(&self) -> Arc<dyn PushStore> {
        Arc::clone(&self.other_tenant)
    }
}
