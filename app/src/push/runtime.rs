//! The push outbox as the running app uses it: the (sealed) outbox the runs use case opens
//! registrations with, the delivery worker the server spawns beside the other workers, and the
//! periodic pruning of finished registrations' attempts logs.

use std::sync::Arc;
use std::time::Duration;

use crewbus_ports::Clock;
use futures_util::FutureExt as _;

use super::delivery::DeliveryWorker;
use super::outbox::Outbox;

/// How often the running push runtime prunes the attempts logs of finished registrations (1 h;
/// the first pruning comes one interval after the start).
pub const PRUNE_EVERY: Duration = Duration::from_secs(3600);

/// How long a finished registration's attempts log is kept by default (7 days,
/// `push.attempts_kept_days`).
pub const DEFAULT_ATTEMPTS_KEPT_DAYS: u64 = 7;

/// What the composition root built for push. Cheap to clone (shared state).
#[derive(Clone, Debug)]
pub struct PushRuntime {
    /// The operator's destinations over the tenant's push store (sealed for a persistent
    /// store).
    pub outbox: Outbox,
    /// The delivery worker, built from `outbox` (so it reads through the same sealed store) over
    /// the journal the ledger writes into.
    pub worker: DeliveryWorker,
    /// How often the running worker looks for due registrations.
    pub poll: Duration,
    /// How long the attempts log of a registration that no longer exists (its destination
    /// acknowledged the terminal record) is kept after its newest attempt
    /// (`push.attempts_kept_days`, 7 days by default).
    pub attempts_kept_for: Duration,
    /// How often those logs are pruned ([`PRUNE_EVERY`] by default).
    pub prune_every: Duration,
}

impl PushRuntime {
    /// A runtime over `outbox` and `worker` polling every `poll`, keeping finished
    /// registrations' attempts logs for [`DEFAULT_ATTEMPTS_KEPT_DAYS`] and pruning them every
    /// [`PRUNE_EVERY`].
    pub fn new(outbox: Outbox, worker: DeliveryWorker, poll: Duration) -> Self {
        PushRuntime {
            outbox,
            worker,
            poll,
            attempts_kept_for: Duration::from_secs(DEFAULT_ATTEMPTS_KEPT_DAYS * 86_400),
            prune_every: PRUNE_EVERY,
        }
    }

    /// Runs the delivery worker on `clock` until `shutdown` completes (see
    /// [`DeliveryWorker::run`]: turns in flight at shutdown are dropped with their cursors unsaved,
    /// so those events are sent again later — duplicates, never loss), and beside it, every
    /// `prune_every`, removes the attempts logs of finished registrations whose newest attempt
    /// is older than `attempts_kept_for` (`PushStore::prune_attempts`; a failure is logged and
    /// tried again at the next interval).
    pub async fn run(
        &self,
        clock: Arc<dyn Clock>,
        shutdown: impl std::future::Future<Output = ()> + Send,
    ) {
        let shutdown = shutdown.boxed().shared();
        tokio::join!(
            self.worker
                .run(Arc::clone(&clock), self.poll, shutdown.clone()),
            self.prune(clock, shutdown),
        );
    }

    /// The pruning loop of [`PushRuntime::run`].
    async fn prune(&self, clock: Arc<dyn Clock>, shutdown: impl std::future::Future<Output = ()>) {
        let mut shutdown = std::pin::pin!(shutdown);
        loop {
            tokio::select! {
                () = &mut shutdown => return,
                () = tokio::time::sleep(self.prune_every) => {}
            }
            let before = crewbus_domain::before(clock.now(), self.attempts_kept_for);
            match self.outbox.store().prune_attempts(before).await {
                Ok(0) => {}
                Ok(pruned) => {
                    tracing::debug!(
                        pruned,
                        "push: attempts logs of finished registrations pruned"
                    );
                }
                Err(error) => {
                    tracing::warn!(%error, "push: pruning finished registrations' attempts logs failed; trying again later");
                }
            }
        }
    }
}
