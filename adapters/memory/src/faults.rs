//! Fault injection for tests: make a body store fail the way a real broker does.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};

use crewbus_domain::BusError;

/// A handle that makes the next publishes or reconciles of one [`crate::MemoryBackend`] fail.
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use crewbus_domain::{BusError, Published};
    use crewbus_ports::{Backends, MessagingBackend};
    use uuid::Uuid;

    use crate::test_support::envelope;
    use crate::{BodiesConfig, ManualClock, MemoryBackend, MemoryBackends, MemoryConfig};

    fn store() -> MemoryBackend {
        MemoryBackend::new(
            Uuid::new_v4(),
            BodiesConfig::default(),
            Arc::new(ManualClock::default()),
        )
    }

    #[tokio::test]
    async fn failed_publishes_are_retryable_and_store_nothing() {
        let bodies = store();
        bodies.faults().fail_next_publishes(2);
        let env = envelope(bodies.team(), "x");
        for _ in 0..2 {
            let outcome = bodies.publish(env.clone()).await;
            assert!(
                matches!(outcome, Published::Retryable(BusError::Unavailable { .. })),
                "{outcome:?}"
            );
        }
        assert_eq!(bodies.stored_messages(), 0);
        assert!(!bodies.faults().is_armed());
        let outcome = bodies.publish(env).await;
        assert!(matches!(
            outcome,
            Published::Confirmed {
                duplicate: false,
                ..
            }
        ));
    }

    #[tokio::test]
    async fn a_lost_confirmation_stores_then_answers_uncertain_and_reconcile_finds_it() {
        let bodies = store();
        bodies.faults().lose_next_confirmations(1);
        let env = envelope(bodies.team(), "landed");
        let outcome = bodies.publish(env.clone()).await;
        assert!(
            matches!(outcome, Published::Uncertain(BusError::Timeout { .. })),
            "{outcome:?}"
        );
        assert_eq!(bodies.stored_messages(), 1);
        let locator = bodies.reconcile(&env).await.unwrap().expect("held");
        assert_eq!(
            bodies
                .fetch(&locator, env.message_id)
                .await
                .unwrap()
                .as_deref(),
            Some("landed")
        );
        let again = bodies.publish(env).await;
        assert!(
            matches!(again, Published::Confirmed { duplicate: true, locator: l } if l == locator)
        );
        assert_eq!(bodies.stored_messages(), 1);
    }

    #[tokio::test]
    async fn a_lost_confirmation_of_a_refused_publish_stores_nothing() {
        let bodies = store();
        bodies.faults().lose_next_confirmations(1);
        let limit = bodies.config().max_body_bytes as usize;
        let env = envelope(bodies.team(), &"x".repeat(limit + 1));
        assert!(matches!(
            bodies.publish(env.clone()).await,
            Published::Uncertain(_)
        ));
        assert_eq!(bodies.stored_messages(), 0);
        assert!(matches!(
            bodies.reconcile(&env).await,
            Err(BusError::TooLarge { .. })
        ));
    }

    #[tokio::test]
    async fn armed_errors_follow_the_one_retry_rule_in_order() {
        let bodies = store();
        bodies.faults().fatal_next_publish();
        bodies
            .faults()
            .fail_next_publish_with(BusError::quota_exceeded("injected"));
        bodies.faults().fail_next_publishes(1);
        let env = envelope(bodies.team(), "x");
        assert!(matches!(
            bodies.publish(env.clone()).await,
            Published::Fatal(BusError::Unauthenticated)
        ));
        assert!(matches!(
            bodies.publish(env.clone()).await,
            Published::Retryable(BusError::QuotaExceeded { .. })
        ));
        assert!(matches!(
            bodies.publish(env.clone()).await,
            Published::Retryable(BusError::Unavailable { .. })
        ));
        assert_eq!(bodies.stored_messages(), 0);
        assert!(bodies.publish(env).await.is_confirmed());
    }

    #[tokio::test]
    async fn failing_reconciles_are_retryable_and_look_nothing_up() {
        let bodies = store();
        bodies.faults().fail_next_reconciles(2);
        let env = envelope(bodies.team(), "x");
        for _ in 0..2 {
            let got = bodies.reconcile(&env).await;
            assert!(
                matches!(&got, Err(e @ BusError::Unavailable { .. }) if e.is_retryable()),
                "{got:?}"
            );
        }
        assert_eq!(bodies.stored_messages(), 0);
        assert!(bodies.reconcile(&env).await.unwrap().is_some());
    }

    #[tokio::test]
    async fn clear_disarms_everything() {
        let bodies = store();
        let faults = bodies.faults();
        faults.fail_next_publishes(3);
        faults.lose_next_confirmations(1);
        faults.fatal_next_publish();
        faults.fail_next_reconciles(1);
        assert!(faults.is_armed());
        faults.clear();
        assert!(!faults.is_armed());
        assert!(
            bodies
                .publish(envelope(bodies.team(), "x"))
                .await
                .is_confirmed()
        );
    }

    #[tokio::test]
    async fn faults_are_shared_with_the_store_the_registry_hands_out() {
        let registry =
            MemoryBackends::new(MemoryConfig::default(), Arc::new(ManualClock::default())).unwrap();
        let team = Uuid::new_v4();
        let handed_out = registry.body_backend(team, "memory").await.unwrap();
        registry.bodies(team).faults().fail_next_publishes(1);
        assert!(matches!(
            handed_out.publish(envelope(team, "x")).await,
            Published::Retryable(_)
        ));
        // Another team's store is unaffected.
        let other = Uuid::new_v4();
        registry.bodies(team).faults().fail_next_publishes(1);
        let other_store = registry.body_backend(other, "memory").await.unwrap();
        assert!(
            other_store
                .publish(envelope(other, "x"))
                .await
                .is_confirmed()
        );
    }
}
