//! The fixture of the ledger and journal behaviours, and how behaviours are listed.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use crewbus_ports::{Journal, Ledger};

/// A fresh, empty ledger and its journal for one behaviour.
///
/// Nothing is visible from another test (a fresh memory state; a fresh Postgres database with
/// migrations applied): behaviours lease "every due slot" and count the whole ledger. The journal
/// must share the ledger's store, so the ledger's bus records land in the journal's runs.
///
/// Time is the behaviour's own: ledger and journal take `at` from their caller, so behaviours
/// pass instants they choose (from [`crate::ledger_time`]), never the wall clock.
pub trait LedgerFixture: Send + Sync {
    /// The ledger under test, as a trait object.
    fn ledger(&self) -> Arc<dyn Ledger>;

    /// The journal sharing the ledger's store.
    fn journal(&self) -> Arc<dyn Journal>;
}

/// A boxed behaviour future borrowing its fixture.
pub type BehaviourFuture<'a> = Pin<Box<dyn Future<Output = ()> + Send + 'a>>;

/// One ledger or journal behaviour: an async function over the fixture that panics on failure.
pub type LedgerBehaviour = for<'a> fn(&'a dyn LedgerFixture) -> BehaviourFuture<'a>;

/// Lists behaviours as `(name, fn)` pairs, each wrapped to take `&dyn LedgerFixture`.
macro_rules! behaviours {
    ($($name:ident),* $(,)?) => {
        vec![$(
            (stringify!($name), {
                fn run<'a>(
                    fx: &'a dyn $crate::LedgerFixture,
                ) -> $crate::BehaviourFuture<'a> {
                    Box::pin($name(fx))
                }
                run as $crate::LedgerBehaviour
            }),
        )*]
    };
}
pub(crate) use behaviours;
