//! The ledger, journal, operators and oversight behaviours as libtest-mimic trials.

use std::convert::Infallible;
use std::sync::Arc;

use async_trait::async_trait;
use libtest_mimic::Trial;
use tokio::runtime::Runtime;

use crate::trial::{Lack, Source, Suite};
use crate::{
    FixtureError, LedgerFixture, LedgerFixtureFactory, journal_behaviours, leases_behaviours,
    ledger_behaviours, operators_behaviours, oversight_behaviours, search_behaviours,
    send_allowance_behaviours,
};

/// The ledger fixtures' factory is the source of the ledger, journal, operators and oversight
/// behaviours; they need nothing of it.
#[async_trait]
impl Source for dyn LedgerFixtureFactory {
    type Fixture = dyn LedgerFixture;
    type Need = Infallible;

    fn lacks(&self, _needs: &[Infallible]) -> Option<Lack> {
        None
    }

    async fn fixture(&self) -> Result<Box<dyn LedgerFixture>, FixtureError> {
        LedgerFixtureFactory::fixture(self).await
    }
}

/// Every ledger, journal, operators and oversight behaviour as its own trial, named
/// `<target>::ledger::<behaviour>`, `<target>::journal::<behaviour>`,
/// `<target>::operators::<behaviour>` and `<target>::oversight::<behaviour>`.
///
/// Each trial asks `factory` for a fresh fixture and runs the behaviour as a task on `runtime`
/// (see [`crate::trial`]), failing on a panic (an assertion), a fixture error, or after
/// [`TRIAL_TIMEOUT`](crate::trial::TRIAL_TIMEOUT). No ledger behaviour needs a capability: both
/// adapters offer them all (the co-located backend is a branch inside
/// `send_follows_the_local_backend`, not a skip).
pub fn ledger_trials(
    target: &str,
    factory: Arc<dyn LedgerFixtureFactory>,
    runtime: &Arc<Runtime>,
) -> Vec<Trial> {
    Suite::new(factory, runtime).trials(
        target,
        ledger_behaviours()
            .into_iter()
            .chain(journal_behaviours())
            .chain(operators_behaviours())
            .chain(oversight_behaviours())
            .chain(leases_behaviours())
            .chain(send_allowance_behaviours())
            .chain(search_behaviours()),
    )
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use async_trait::async_trait;

    use super::*;
    use crate::trial::{run_one, runtime};

    struct Unreachable;

    #[async_trait]
    impl LedgerFixtureFactory for Unreachable {
        async fn fixture(&self) -> Result<Box<dyn LedgerFixture>, FixtureError> {
            Err("no database".into())
        }
    }

    #[test]
    fn names_are_unique_and_prefixed() {
        let runtime = runtime();
        let trials = ledger_trials("x", Arc::new(Unreachable), &runtime);
        assert_eq!(
            trials.len(),
            ledger_behaviours().len()
                + journal_behaviours().len()
                + operators_behaviours().len()
                + oversight_behaviours().len()
                + leases_behaviours().len()
                + send_allowance_behaviours().len()
                + search_behaviours().len()
        );
        let names: HashSet<&str> = trials.iter().map(Trial::name).collect();
        assert_eq!(names.len(), trials.len());
        let ports = [
            "ledger",
            "journal",
            "operators",
            "oversight",
            "leases",
            "send_allowance",
            "search",
        ];
        assert!(
            names
                .iter()
                .all(|n| { ports.iter().any(|p| n.starts_with(&format!("x::{p}::"))) })
        );
    }

    #[test]
    fn a_fixture_that_cannot_be_built_fails_the_trial() {
        let runtime = runtime();
        let b = ledger_behaviours()[0];
        let factory: Arc<dyn LedgerFixtureFactory> = Arc::new(Unreachable);
        let outcome = run_one(&runtime, factory, b.needs, b.run);
        let message = outcome.expect_err("must fail").message().map(str::to_owned);
        assert!(message.is_some_and(|m| m.contains("fixture failed")));
    }
}
