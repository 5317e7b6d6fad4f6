//! The one trial builder of the suite: every behaviour of every target — the shared ones and a
//! target's own — becomes a libtest-mimic [`Trial`] here, as OpenDAL's behaviour tests build
//! theirs.
//!
//! A behaviour is a name, what it needs, and an async function over a fixture ([`Behaviour`]).
//! A [`Source`] hands out a fresh fixture per trial and says which needs it cannot meet.
//! [`Suite::trials`] turns each behaviour into a trial named `<target>::<port>::<name>`
//! ([`Suite::trial`] takes any name): it asks the source for a fixture and runs the behaviour as
//! a task on the shared [`runtime`], failing on a panic (an assertion) with its message, on a
//! fixture error, or after [`TRIAL_TIMEOUT`]. A behaviour whose needs the source cannot meet is
//! ignored, naming why (`ignored (missing capability: body_quota)`), so the `test result` line
//! counts it as ignored, never as passed.

use std::convert::Infallible;
use std::fmt;
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use libtest_mimic::{Completion, Failed, Trial};
use tokio::runtime::Runtime;

use crate::FixtureError;

/// A boxed behaviour future borrowing its fixture.
pub type BehaviourFuture<'a> = Pin<Box<dyn Future<Output = ()> + Send + 'a>>;

/// One behaviour over fixture `Fx`, type-erased: runs on a fresh fixture and panics on a failed
/// assertion.
pub type Run<Fx> = for<'a> fn(&'a Fx) -> BehaviourFuture<'a>;

/// One entry of a suite: a behaviour function with the port it checks (the middle part of its
/// trial name), its name, and what it needs of the source (`N`: [`crate::Capability`] for the
/// port behaviours; a target's own kind of need for its own tests; nothing by default).
pub struct Behaviour<Fx: ?Sized, N: 'static = Infallible> {
    /// The port it checks, e.g. `"inbox"` or `"ledger"`.
    pub port: &'static str,
    /// The function's name, e.g. `publish_is_idempotent_on_publish_key`.
    pub name: &'static str,
    /// What it needs; a source that cannot meet one of them ignores the trial, naming it.
    pub needs: &'static [N],
    /// Runs it on a fixture.
    pub run: Run<Fx>,
}

impl<Fx: ?Sized, N> Clone for Behaviour<Fx, N> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<Fx: ?Sized, N> Copy for Behaviour<Fx, N> {}

impl<Fx: ?Sized, N: fmt::Debug> fmt::Debug for Behaviour<Fx, N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Behaviour")
            .field("port", &self.port)
            .field("name", &self.name)
            .field("needs", &self.needs)
            .finish_non_exhaustive()
    }
}

/// `behaviours![port => f, g, …]`: a `Vec` of [`Behaviour`]s of `port`, each named after its
/// function and needing nothing. Each function takes `&Fx` (generic functions are instantiated
/// at the fixture type the list is built for).
macro_rules! behaviours {
    ($port:expr => $($name:ident),* $(,)?) => {
        vec![$(
            $crate::trial::Behaviour {
                port: $port,
                name: stringify!($name),
                needs: &[],
                run: |fx| Box::pin($name(fx)),
            },
        )*]
    };
}
pub(crate) use behaviours;

/// Why a source cannot run a behaviour: the trial is ignored with `reason` (and shown with
/// `kind` in the test list when there is one, e.g. `missing:body_quota`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lack {
    /// The trial's kind, shown in brackets before its name; `None` leaves it plain.
    pub kind: Option<String>,
    /// The reason printed after `ignored`.
    pub reason: String,
}

/// Where a suite's fixtures come from: one fresh fixture per trial, and which needs it meets.
///
/// The fixture factories of the shared behaviours are sources (`dyn FixtureFactory`,
/// `dyn LedgerFixtureFactory`, …); a test target implements it for its own tests' fixture.
#[async_trait]
pub trait Source: Send + Sync + 'static {
    /// What each behaviour takes (`dyn TeamFixture`, `dyn LedgerFixture`, …).
    type Fixture: ?Sized + Send + Sync;

    /// What a behaviour may need beyond the fixture.
    type Need: Copy + Send + Sync + 'static;

    /// Why a behaviour needing `needs` cannot run here, or `None` when it can. Asked once, when
    /// the trial is built.
    fn lacks(&self, needs: &[Self::Need]) -> Option<Lack>;

    /// Whether a behaviour needing `needs` must run alone among the exclusive trials of its test
    /// binary (it spawns servers of its own). Default: no.
    fn exclusive(&self, _needs: &[Self::Need]) -> bool {
        false
    }

    /// A fresh fixture for one trial. Errors fail the trial, naming the cause (never a skip).
    async fn fixture(&self) -> Result<Box<Self::Fixture>, FixtureError>;
}

/// Held by the exclusive trials of one test binary while they run, so they run one at a time.
static EXCLUSIVE: Mutex<()> = Mutex::new(());

/// Builds the trials of one [`Source`], each running on one shared runtime.
pub struct Suite<S: ?Sized> {
    source: Arc<S>,
    runtime: Arc<Runtime>,
}

impl<S: Source + ?Sized> Suite<S> {
    /// A suite over `source` whose trials run on `runtime` (see [`runtime`]).
    pub fn new(source: Arc<S>, runtime: &Arc<Runtime>) -> Self {
        Suite {
            source,
            runtime: Arc::clone(runtime),
        }
    }

    /// Every behaviour of `behaviours` as its trial `<target>::<port>::<name>`, in order.
    pub fn trials(
        &self,
        target: &str,
        behaviours: impl IntoIterator<Item = Behaviour<S::Fixture, S::Need>>,
    ) -> Vec<Trial> {
        behaviours
            .into_iter()
            .map(|b| self.trial(format!("{target}::{}::{}", b.port, b.name), b.needs, b.run))
            .collect()
    }

    /// One trial named `name`: ignored when the source lacks one of `needs`, else `run` on a
    /// fresh fixture as a task on the runtime, failing on a panic, a fixture error, or after
    /// [`TRIAL_TIMEOUT`].
    pub fn trial(&self, name: String, needs: &'static [S::Need], run: Run<S::Fixture>) -> Trial {
        if let Some(lack) = self.source.lacks(needs) {
            let trial = Trial::ignorable_test(name, move || {
                Ok(Completion::ignored_with(lack.reason.clone()))
            });
            return match lack.kind.clone() {
                Some(kind) => trial.with_kind(kind),
                None => trial,
            };
        }
        let source = Arc::clone(&self.source);
        let runtime = Arc::clone(&self.runtime);
        Trial::test(name, move || run_one(&runtime, source, needs, run))
    }
}

/// Runs `run` on a fresh fixture of `source` as a task on `runtime` (alone among the exclusive
/// trials when `source` says so).
pub(crate) fn run_one<S: Source + ?Sized>(
    runtime: &Runtime,
    source: Arc<S>,
    needs: &'static [S::Need],
    run: Run<S::Fixture>,
) -> Result<(), Failed> {
    let _alone = source
        .exclusive(needs)
        .then(|| EXCLUSIVE.lock().unwrap_or_else(PoisonError::into_inner));
    run_task(runtime, async move {
        let fixture = source
            .fixture()
            .await
            .map_err(|e| Failed::from(format!("fixture failed: {e}")))?;
        run(&*fixture).await;
        Ok(())
    })
}

/// Longest a single trial may run (fixture set-up included) before it fails.
pub const TRIAL_TIMEOUT: Duration = Duration::from_secs(120);

/// The runtime every trial of a test binary runs on: multi-threaded (2 workers), time and I/O
/// enabled. Build fixture factories inside it (`runtime.block_on(...)`) when they open
/// connections, so their background tasks live on it.
pub fn runtime() -> Arc<Runtime> {
    Arc::new(
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("build the conformance runtime"),
    )
}

/// Runs one trial's future as a task on `runtime`: a panic (a failed assertion) becomes a
/// failure with its message, and the trial fails after [`TRIAL_TIMEOUT`].
fn run_task<F>(runtime: &Runtime, trial: F) -> Result<(), Failed>
where
    F: Future<Output = Result<(), Failed>> + Send + 'static,
{
    let task = runtime.spawn(trial);
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

fn panic_message(payload: Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "behaviour panicked".to_owned()
    }
}

/// A source for a target's own tests that need no fixture: each trial gets `()`.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoFixture;

#[async_trait]
impl Source for NoFixture {
    type Fixture = ();
    type Need = Infallible;

    fn lacks(&self, _needs: &[Infallible]) -> Option<Lack> {
        None
    }

    async fn fixture(&self) -> Result<Box<()>, FixtureError> {
        Ok(Box::new(()))
    }
}

/// Fails the trial with the message of a test's `Err` (its `?` on an error), as a panic does.
pub fn passed(outcome: Result<(), Failed>) {
    if let Err(failed) = outcome {
        panic!("{}", failed.message().unwrap_or("the test failed"));
    }
}

/// `own_tests![f, g]`: a target's own tests (async fns returning `Result<(), Failed>`, needing
/// no fixture: [`NoFixture`]), each under its own name; an `Err` fails the trial with its
/// message, as a panic does ([`passed`]).
#[macro_export]
macro_rules! own_tests {
    ($($f:ident),* $(,)?) => {
        &[$((
            stringify!($f),
            (|()| Box::pin(async { $crate::trial::passed($f().await) }))
                as $crate::trial::Run<()>,
        )),*]
    };
}

/// A source for behaviours an adapter does not offer at all (a SQLite store has no second
/// server to wake): every trial is ignored, shown as `kind` and naming `reason`; no fixture is
/// ever made.
pub struct NotOffered<Fx: ?Sized> {
    /// The trials' kind, e.g. `missing:cross_server_wakeups`.
    pub kind: &'static str,
    /// Why the adapter does not offer them.
    pub reason: &'static str,
    fixture: PhantomData<fn() -> Box<Fx>>,
}

impl<Fx: ?Sized> NotOffered<Fx> {
    /// Behaviours over `Fx` not offered: ignored as `kind`, naming `reason`.
    pub fn new(kind: &'static str, reason: &'static str) -> Self {
        NotOffered {
            kind,
            reason,
            fixture: PhantomData,
        }
    }
}

#[async_trait]
impl<Fx: ?Sized + Send + Sync + 'static> Source for NotOffered<Fx> {
    type Fixture = Fx;
    type Need = Infallible;

    fn lacks(&self, _needs: &[Infallible]) -> Option<Lack> {
        Some(Lack {
            kind: Some(self.kind.to_owned()),
            reason: self.reason.to_owned(),
        })
    }

    async fn fixture(&self) -> Result<Box<Fx>, FixtureError> {
        Err(format!("not offered: {}", self.reason).into())
    }
}

/// Sources whose fixture factory has a method `fixture()` of their own and no needs.
macro_rules! factory_source {
    ($factory:path => $fixture:ty) => {
        #[::async_trait::async_trait]
        impl $crate::trial::Source for dyn $factory {
            type Fixture = $fixture;
            type Need = ::std::convert::Infallible;

            fn lacks(&self, _needs: &[::std::convert::Infallible]) -> Option<$crate::trial::Lack> {
                None
            }

            async fn fixture(&self) -> Result<Box<$fixture>, $crate::FixtureError> {
                <Self as $factory>::fixture(self).await
            }
        }
    };
}
pub(crate) use factory_source;

#[cfg(test)]
mod tests {
    use super::*;

    struct Broken;

    #[async_trait]
    impl Source for Broken {
        type Fixture = ();
        type Need = bool;
        fn lacks(&self, needs: &[bool]) -> Option<Lack> {
            needs.contains(&false).then(|| Lack {
                kind: Some("missing:false".into()),
                reason: "false is never met".into(),
            })
        }
        async fn fixture(&self) -> Result<Box<()>, FixtureError> {
            Err("no server".into())
        }
    }

    fn passes(_: &()) -> BehaviourFuture<'_> {
        Box::pin(async {})
    }

    fn panics(_: &()) -> BehaviourFuture<'_> {
        Box::pin(async { panic!("the assertion said no") })
    }

    #[test]
    fn a_panic_fails_the_trial_with_its_message() {
        let runtime = runtime();
        let outcome = run_task(&runtime, async {
            panics(&()).await;
            Ok(())
        });
        let failed = outcome.expect_err("a panic fails");
        assert_eq!(failed.message(), Some("the assertion said no"));
        assert!(run_task(&runtime, async { Ok(()) }).is_ok());
    }

    #[test]
    fn a_fixture_that_cannot_be_built_fails_the_trial() {
        let runtime = runtime();
        let outcome = run_one(&runtime, Arc::new(Broken), &[true], passes);
        let message = outcome.expect_err("must fail").message().map(str::to_owned);
        assert!(message.is_some_and(|m| m.starts_with("fixture failed: no server")));
    }

    #[test]
    fn a_lacking_need_ignores_the_trial_and_names_its_kind() {
        let runtime = runtime();
        let suite = Suite::new(Arc::new(Broken), &runtime);
        let trials = suite.trials(
            "x",
            [
                Behaviour {
                    port: "p",
                    name: "needs_false",
                    needs: &[false],
                    run: passes,
                },
                Behaviour {
                    port: "p",
                    name: "needs_true",
                    needs: &[true],
                    run: passes,
                },
            ],
        );
        let names: Vec<&str> = trials.iter().map(Trial::name).collect();
        assert_eq!(names, ["x::p::needs_false", "x::p::needs_true"]);
        assert_eq!(trials[0].kind(), "missing:false");
        assert_eq!(trials[1].kind(), "");
    }
}
