//! The ledger and journal behaviours on the memory adapter (temporary runner until the shared
//! harness lands; then they move to `tests/memory.rs`).

use std::sync::Arc;

use crewbus_conformance::{LedgerFixture, journal_behaviours, ledger_behaviours};
use crewbus_domain::TenantId;
use crewbus_memory::MemoryLedger;
use crewbus_ports::{Journal, Ledger};
use libtest_mimic::{Arguments, Trial};

struct Memory(MemoryLedger);

impl LedgerFixture for Memory {
    fn ledger(&self) -> Arc<dyn Ledger> {
        Arc::new(self.0.clone())
    }
    fn journal(&self) -> Arc<dyn Journal> {
        Arc::new(self.0.journal())
    }
}

fn main() {
    let args = Arguments::from_args();
    let trials = ledger_behaviours()
        .into_iter()
        .map(|(n, f)| (format!("ledger::{n}"), f))
        .chain(
            journal_behaviours()
                .into_iter()
                .map(|(n, f)| (format!("journal::{n}"), f)),
        )
        .map(|(name, behaviour)| {
            Trial::test(name, move || {
                let rt = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .enable_all()
                    .build()
                    .map_err(|e| e.to_string())?;
                let fx = Memory(MemoryLedger::new(TenantId::default()));
                rt.block_on(behaviour(&fx));
                Ok(())
            })
        })
        .collect();
    libtest_mimic::run(&args, trials).exit();
}
