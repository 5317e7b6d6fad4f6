//! crewbus conformance suite: one async function per behaviour, generic over each port, and the
//! real-server fixtures the adapters' test targets use.
#![warn(missing_docs)]

pub mod journal;
pub mod ledger;
mod ledger_fixture;
mod ledger_scene;
pub mod ledger_time;
pub mod postgres;

pub use journal::journal_behaviours;
pub use ledger::ledger_behaviours;
pub use ledger_fixture::{BehaviourFuture, LedgerBehaviour, LedgerFixture};
