//! Fault injection for tests: make a body store fail the way a real broker does.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};

use crewbus_domain::BusError;

/// A handle that makes the next publishes or reconciles of one [`crate::MemoryBodies`] fail.
///
/// Clones share the same queue, and every clone of the body store (including the one the
/// [`crate::MemoryBackends`] registry caches) consults it, so a test can arm a fault on a store
/// it fetched through the registry. Each armed fault is consumed by exactly one call, in this
/// order of precedence for `publish`:
///
/// 1. an error armed with [`Faults::fail_next_publish_with`] / [`Faults::fatal_next_publish`]
///    → `Published::from_error(error)` (fatal or retryable by the one retry rule), nothing stored;
/// 2. [`Faults::fail_next_publishes`] → `Retryable(Unavailable)`, nothing stored;
/// 3. [`Faults::lose_next_confirmations`] → the publish runs normally (the body is stored if it
///    would have been), then the answer is lost: `Uncertain(Timeout)`.
///
/// `reconcile` consults only [`Faults::fail_next_reconciles`] (→ `Err(Unavailable)`, nothing
/// looked up or stored).
#[derive(Debug, Clone, Default)]
pub struct Faults {
    inner: Arc<Mutex<Armed>>,
}

#[derive(Debug, Default)]
struct Armed {
    errors: VecDeque<BusError>,
    unavailable: u64,
    lost_confirmations: u64,
    failing_reconciles: u64,
}

/// What the next publish must do, decided by [`Faults::take_publish`].
#[derive(Debug)]
pub(crate) enum PublishFault {
    /// Answer this error without storing.
    Refuse(BusError),
    /// Store normally, then answer `Uncertain`.
    LoseConfirmation,
}

impl Faults {
    /// The next `n` publishes answer `Retryable(Unavailable)` and store nothing (a broker that is
    /// down or has no responders).
    pub fn fail_next_publishes(&self, n: u64) {
        self.armed().unavailable += n;
    }

    /// The next `n` publishes store the body (when it would have been stored) and then answer
    /// `Uncertain(Timeout)`: a PubAck lost after the write. `reconcile` finds the body.
    pub fn lose_next_confirmations(&self, n: u64) {
        self.armed().lost_confirmations += n;
    }

    /// The next publish answers `Published::from_error(error)` and stores nothing. Arm several
    /// and they are used in order.
    pub fn fail_next_publish_with(&self, error: BusError) {
        self.armed().errors.push_back(error);
    }

    /// The next publish answers `Fatal(Unauthenticated)` (a revoked credential) and stores
    /// nothing.
    pub fn fatal_next_publish(&self) {
        self.fail_next_publish_with(BusError::Unauthenticated);
    }

    /// The next `n` reconciles answer `Err(Unavailable)` (retryable) without looking anything up.
    pub fn fail_next_reconciles(&self, n: u64) {
        self.armed().failing_reconciles += n;
    }

    /// Disarms every fault.
    pub fn clear(&self) {
        *self.armed() = Armed::default();
    }

    /// Whether any fault is still armed.
    pub fn is_armed(&self) -> bool {
        let a = self.armed();
        !a.errors.is_empty()
            || a.unavailable > 0
            || a.lost_confirmations > 0
            || a.failing_reconciles > 0
    }

    /// Consumes the fault the next publish must suffer, if any.
    pub(crate) fn take_publish(&self) -> Option<PublishFault> {
        let mut a = self.armed();
        if let Some(error) = a.errors.pop_front() {
            return Some(PublishFault::Refuse(error));
        }
        if a.unavailable > 0 {
            a.unavailable -= 1;
            return Some(PublishFault::Refuse(BusError::unavailable(
                "memory body store (injected fault)",
            )));
        }
        if a.lost_confirmations > 0 {
            a.lost_confirmations -= 1;
            return Some(PublishFault::LoseConfirmation);
        }
        None
    }

    /// Consumes one failing reconcile, if armed.
    pub(crate) fn take_reconcile(&self) -> Option<BusError> {
        let mut a = self.armed();
        if a.failing_reconciles > 0 {
            a.failing_reconciles -= 1;
            return Some(BusError::unavailable(
                "memory body store reconcile (injected fault)",
            ));
        }
        None
    }

    fn armed(&self) -> std::sync::MutexGuard<'_, Armed> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
