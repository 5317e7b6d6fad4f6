//! The ledger and journal behaviours as libtest-mimic trials.

use std::sync::Arc;

use libtest_mimic::{Failed, Trial};
use tokio::runtime::Runtime;

use crate::harness::{TRIAL_TIMEOUT, panic_message};
use crate::{LedgerBehaviour, LedgerFixtureFactory, journal_behaviours, ledger_behaviours};

/// Every ledger and journal behaviour as its own trial, named `<target>::ledger::<behaviour>` and
/// `<target>::journal::<behaviour>`.
///
/// Each trial asks `factory` for a fresh fixture and runs the behaviour as a task on `runtime`
/// (see [`crate::runtime`]), failing on a panic (an assertion), a fixture error, or after
/// [`TRIAL_TIMEOUT`]. No ledger behaviour needs a capability: both adapters offer them all (the
/// co-located backend is a branch inside `send_follows_the_local_backend`, not a skip).
pub fn ledger_trials(
    target: &str,
    factory: Arc<dyn LedgerFixtureFactory>,
    runtime: &Arc<Runtime>,
) -> Vec<Trial> {
    let ledger = ledger_behaviours().into_iter().map(|b| ("ledger", b));
    let journal = journal_behaviours().into_iter().map(|b| ("journal", b));
    ledger
        .chain(journal)
        .map(|(port, (name, run))| {
            let factory = Arc::clone(&factory);
            let runtime = Arc::clone(runtime);
            Trial::test(format!("{target}::{port}::{name}"), move || {
                run_one(&runtime, factory, run)
            })
        })
        .collect()
}

fn run_one(
    runtime: &Runtime,
    factory: Arc<dyn LedgerFixtureFactory>,
    run: LedgerBehaviour,
) -> Result<(), Failed> {
    let task = runtime.spawn(async move {
        let fixture = factory
            .fixture()
            .await
            .map_err(|e| Failed::from(format!("fixture failed: {e}")))?;
        run(&*fixture).await;
        Ok::<(), Failed>(())
    });
    runtime.block_on(async move {
        let abort = task.abort_handle();
        match tokio::time::timeout(TRIAL_TIMEOUT, task).await {
            Ok(Ok(outcome)) => outcome,
            Ok(Err(join)) if join.is_panic() => Err(panic_message(join.into_panic()).into()),
            Ok(Err(join)) => Err(format!("behaviour task ended: {join}").into()),
            Err(_) => {
                abort.abort();
                Err(format!("timed out after {TRIAL_TIMEOUT:?}").into())
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use async_trait::async_trait;

    use super::*;
    use crate::{FixtureError, LedgerFixture};

    struct Unreachable;

    #[async_trait]
    impl LedgerFixtureFactory for Unreachable {
        async fn fixture(&self) -> Result<Box<dyn LedgerFixture>, FixtureError> {
            Err("no database".into())
        }
    }

    #[test]
    fn names_are_unique_and_prefixed() {
        let runtime = crate::runtime();
        let trials = ledger_trials("x", Arc::new(Unreachable), &runtime);
        assert_eq!(
            trials.len(),
            ledger_behaviours().len() + journal_behaviours().len()
        );
        let names: HashSet<&str> = trials.iter().map(Trial::name).collect();
        assert_eq!(names.len(), trials.len());
        assert!(
            names
                .iter()
                .all(|n| n.starts_with("x::ledger::") || n.starts_with("x::journal::"))
        );
    }

    #[test]
    fn a_fixture_that_cannot_be_built_fails_the_trial() {
        let runtime = crate::runtime();
        let (_, run) = ledger_behaviours()[0];
        let outcome = run_one(&runtime, Arc::new(Unreachable), run);
        let message = outcome.expect_err("must fail").message().map(str::to_owned);
        assert!(message.is_some_and(|m| m.contains("fixture failed")));
    }
}
