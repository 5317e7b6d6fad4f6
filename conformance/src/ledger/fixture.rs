//! The fixture of the ledger and journal behaviours, its factory, and how behaviours are listed.

use std::sync::Arc;

use async_trait::async_trait;
use crewbus_ports::{Journal, Leases, Ledger, Operators, Oversight, Search, SendAllowance};

use crate::FixtureError;
use crate::trial::Run;

/// A fresh, empty ledger, its journal, its operators and its oversight reads for one behaviour.
///
/// Nothing is visible from another test (a fresh memory state; a fresh Postgres database with
/// migrations applied): behaviours lease "every due slot" and count the whole ledger. The journal
/// must share the ledger's store, so the ledger's bus records land in the journal's runs.
///
/// Time is the behaviour's own: ledger and journal take `at` from their caller, so behaviours
/// pass instants they choose ([`crate::ledger::time`]), never the wall clock; no clock hook is
/// needed.
pub trait LedgerFixture: Send + Sync {
    /// The ledger under test, as a trait object.
    fn ledger(&self) -> Arc<dyn Ledger>;

    /// The journal sharing the ledger's store.
    fn journal(&self) -> Arc<dyn Journal>;

    /// The operators of the ledger's store and tenant: agents' and operators' token hashes are
    /// checked against each other, and operator scopes name the ledger's teams.
    fn operators(&self) -> Arc<dyn Operators>;

    /// The oversight reads and human members over the ledger's store and tenant.
    fn oversight(&self) -> Arc<dyn Oversight>;

    /// The leases over the ledger's store and tenant.
    fn leases(&self) -> Arc<dyn Leases>;

    /// The leases of a second server sharing the store: another ledger value with connections
    /// of its own (Postgres: another pool), for the behaviours that race two servers.
    fn other_server_leases(&self) -> Arc<dyn Leases>;

    /// The send allowances over the ledger's store and tenant, and those of a second server
    /// sharing the store (as [`LedgerFixture::other_server_leases`]).
    fn send_allowances(&self) -> [Arc<dyn SendAllowance>; 2];

    /// The search index over the ledger's store and tenant.
    fn search(&self) -> Arc<dyn Search>;
}

/// Builds a fresh [`LedgerFixture`] per test for one adapter. Shared resources (a server, an
/// admin pool) live in the factory; per-test ones (the database) in the fixture, dropped with it.
#[async_trait]
pub trait LedgerFixtureFactory: Send + Sync + 'static {
    /// A fresh, empty ledger and journal. Errors fail the trial, naming the cause (never a skip).
    async fn fixture(&self) -> Result<Box<dyn LedgerFixture>, FixtureError>;
}

/// One ledger, journal, operators or oversight behaviour, type-erased: runs on a fresh fixture and panics on a failed
/// assertion.
pub type LedgerBehaviour = Run<dyn LedgerFixture>;
