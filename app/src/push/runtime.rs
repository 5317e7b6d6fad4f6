//! The push outbox as the running app uses it: the (sealed) outbox the runs use case opens
//! registrations with, and the delivery worker the server spawns beside the other workers.

use std::sync::Arc;
use std::time::Duration;

use crewbus_ports::Clock;

use super::delivery::DeliveryWorker;
use super::outbox::Outbox;

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
}

impl PushRuntime {
    /// Runs the delivery worker on `clock` until `shutdown` completes (see
    /// [`DeliveryWorker::run`]: turns in flight at shutdown are dropped with their cursors unsaved,
    /// so those events are sent again later — duplicates, never loss).
    pub async fn run(
        &self,
        clock: Arc<dyn Clock>,
        shutdown: impl std::future::Future<Output = ()> + Send,
    ) {
        self.worker.run(clock, self.poll, shutdown).await;
    }
}
