//! placeholder

pub mod journal;
pub mod ledger;
mod ledger_fixture;
mod ledger_scene;
pub mod ledger_time;

pub use journal::journal_behaviours;
pub use ledger::ledger_behaviours;
pub use ledger_fixture::{BehaviourFuture, LedgerBehaviour, LedgerFixture};
