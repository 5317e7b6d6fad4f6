//! placeholder

mod journal;
mod ledger;
mod ledger_state;

pub use journal::MemoryJournal;
pub use ledger::MemoryLedger;
