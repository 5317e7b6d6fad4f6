//! The fixture traits: one fresh namespace per test, with the ports and the hooks tests need.

use std::error::Error as StdError;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use crewbus_domain::BusResult;
use crewbus_ports::{Inbox, MessagingBackend};
use uuid::Uuid;

use crate::Capabilities;

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
