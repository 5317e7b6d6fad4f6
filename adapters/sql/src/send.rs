//! The ledger's `send` on both SQL stores: a batch of one through the adapter's `send_batch`, so
//! a lone send and a batch take one write path (the conversation lock, the plan, the group
//! commit of each store).

use std::future::Future;

use crewbus_domain::{BusResult, Sent};

/// The one outcome of `batch`, the adapter's `send_batch` over a slice of exactly one request.
///
/// Errors: the batch's own error (its transaction failed: nothing was stored), else the
/// request's outcome as `send_batch` decided it. Panics if `batch` answers no outcome, which
/// `send_batch` never does (one outcome per request, in order).
pub async fn one(batch: impl Future<Output = BusResult<Vec<BusResult<Sent>>>>) -> BusResult<Sent> {
    batch.await?.pop().expect("one outcome per request")
}
