//! The registry of the `MessagingBackend` and `Inbox` behaviours, and their trials.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use libtest_mimic::Trial;
use tokio::runtime::Runtime;

use crate::ack_after_commit::{self, ReceiptSet};
use crate::trial::{Lack, Run, Source, Suite};
use crate::{Capability, FixtureError, FixtureFactory, TeamFixture, bodies, idempotency, inbox};

/// One behaviour, type-erased: runs against a fresh fixture and panics on a failed assertion.
pub type BehaviourFn = Run<dyn TeamFixture>;

/// Which port a behaviour checks (the middle part of its test name).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Port {
    /// `MessagingBackend`.
    Bodies,
    /// `Inbox`.
    Inbox,
}

impl Port {
    /// `"bodies"` or `"inbox"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Port::Bodies => "bodies",
            Port::Inbox => "inbox",
        }
    }
}

impl fmt::Display for Port {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One entry of the suite: a behaviour function with its name, port and needed capabilities.
pub type Behaviour = crate::trial::Behaviour<dyn TeamFixture, Capability>;

/// `behaviour!(Port, module::function [, needs Capability...])`.
macro_rules! behaviour {
    ($port:ident, $module:ident :: $name:ident $(, needs $($cap:ident),+)?) => {
        Behaviour {
            name: stringify!($name),
            port: Port::$port.as_str(),
            needs: &[$($(Capability::$cap),+)?],
            run: |fx| Box::pin($module::$name(fx)),
        }
    };
}

/// The same for an ack-after-commit behaviour, which also gets a fresh [`ReceiptSet`].
macro_rules! with_receipts {
    ($name:ident) => {
        Behaviour {
            name: stringify!($name),
            port: Port::Inbox.as_str(),
            needs: &[],
            run: |fx| {
                Box::pin(async move {
                    let receipts = ReceiptSet::default();
                    ack_after_commit::$name(fx, &receipts).await
                })
            },
        }
    };
}

/// Every behaviour of the suite, bodies first, in a stable order.
pub fn behaviours() -> Vec<Behaviour> {
    vec![
        // MessagingBackend (BUS.md §2)
        behaviour!(Bodies, bodies::name_is_the_recorded_backend_name),
        behaviour!(Bodies, bodies::confirmed_body_is_fetchable_at_once),
        behaviour!(Bodies, bodies::distinct_messages_get_distinct_locators),
        behaviour!(Bodies, bodies::envelope_of_another_team_is_forbidden),
        behaviour!(Bodies, bodies::body_at_the_limit_is_confirmed),
        behaviour!(Bodies, bodies::body_above_the_limit_is_too_large),
        behaviour!(Bodies, bodies::full_message_quota_is_retryable_quota_exceeded, needs BodyQuota),
        behaviour!(Bodies, bodies::full_byte_quota_is_retryable_quota_exceeded, needs BodyQuota),
        behaviour!(Bodies, bodies::fetch_refuses_another_message),
        behaviour!(Bodies, bodies::fetch_refuses_another_teams_locator),
        behaviour!(Bodies, bodies::fetch_refuses_another_scheme),
        behaviour!(Bodies, bodies::fetch_refuses_a_malformed_locator),
        behaviour!(Bodies, bodies::forged_locators_never_yield_a_body),
        behaviour!(Bodies, bodies::retain_removes_bodies_stored_before),
        behaviour!(Bodies, bodies::retain_is_idempotent),
        behaviour!(Bodies, bodies::retained_body_fetches_as_none),
        behaviour!(Bodies, bodies::retain_frees_quota, needs BodyQuota),
        behaviour!(Bodies, bodies::republish_after_retain_stores_the_body_again),
        behaviour!(
            Bodies,
            bodies::reconcile_after_retain_does_not_claim_a_removed_body
        ),
        behaviour!(Bodies, bodies::reconcile_returns_the_locator_of_a_held_body),
        behaviour!(
            Bodies,
            bodies::reconcile_publishes_a_missing_body_under_its_key
        ),
        behaviour!(Bodies, bodies::reconcile_refuses_another_teams_envelope),
        behaviour!(
            Bodies,
            bodies::reconcile_of_a_message_held_under_another_key_is_conflict
        ),
        behaviour!(Bodies, bodies::reconcile_of_a_too_large_body_is_too_large),
        behaviour!(Bodies, bodies::reconcile_when_the_quota_is_full_is_none, needs BodyQuota),
        // Idempotency of bodies
        behaviour!(Bodies, idempotency::publish_is_idempotent_on_publish_key),
        behaviour!(Bodies, idempotency::duplicate_publish_stores_nothing_new),
        behaviour!(
            Bodies,
            idempotency::publish_is_idempotent_after_the_duplicate_window
        ),
        behaviour!(
            Bodies,
            idempotency::same_message_under_another_key_is_conflict
        ),
        behaviour!(
            Bodies,
            idempotency::same_message_under_another_key_is_conflict_after_the_window
        ),
        behaviour!(
            Bodies,
            idempotency::concurrent_publishes_of_one_key_store_once
        ),
        behaviour!(
            Bodies,
            idempotency::concurrent_republishes_after_retain_store_once
        ),
        behaviour!(Bodies, idempotency::duplicate_is_confirmed_when_the_quota_is_full, needs BodyQuota),
        // Inbox (BUS.md §3)
        behaviour!(Inbox, inbox::reference_publish_is_confirmed),
        behaviour!(Inbox, inbox::body_fetch_refuses_an_inbox_locator),
        behaviour!(Inbox, inbox::fetch_returns_the_reference_as_published),
        behaviour!(Inbox, inbox::references_reach_only_their_recipient),
        behaviour!(Inbox, inbox::fetch_respects_the_limit_and_stream_order),
        behaviour!(Inbox, inbox::fetch_does_not_acknowledge),
        behaviour!(
            Inbox,
            inbox::reference_is_not_handed_out_again_within_the_ack_wait
        ),
        behaviour!(Inbox, inbox::reference_is_redelivered_until_acked),
        behaviour!(Inbox, inbox::ack_of_one_reference_leaves_the_others),
        behaviour!(Inbox, inbox::status_counts_pending_awaiting_and_redelivered),
        behaviour!(Inbox, inbox::consumer_is_created_on_first_fetch),
        behaviour!(Inbox, inbox::missing_consumer_is_not_an_empty_inbox),
        behaviour!(Inbox, inbox::deleted_consumer_is_reported_not_present, needs DeleteConsumer),
        behaviour!(Inbox, inbox::deleted_consumer_is_recreated_with_what_is_still_stored, needs DeleteConsumer),
        behaviour!(Inbox, inbox::max_deliver_stops_redelivery, needs MaxDeliver),
        behaviour!(Inbox, inbox::overflow_discards_the_oldest, needs InboxOverflow),
        behaviour!(Inbox, inbox::ack_refuses_another_teams_subject),
        behaviour!(Inbox, inbox::ack_refuses_a_garbage_subject),
        behaviour!(Inbox, inbox::invalid_recipient_key_is_refused),
        // Idempotency of references
        behaviour!(Inbox, idempotency::reference_is_deduplicated_on_event_id),
        behaviour!(Inbox, idempotency::reference_dedup_survives_ack),
        behaviour!(Inbox, idempotency::reference_dedup_outlives_the_duplicate_window, needs InboxDedupForLife),
        // Ack after commit
        with_receipts!(uncommitted_reference_comes_back),
        with_receipts!(committed_and_acked_reference_never_comes_back),
        with_receipts!(repeated_ack_is_harmless),
        with_receipts!(redelivery_after_commit_is_recognised_and_recorded_once),
    ]
}

/// The team fixtures' factory is the source of the port behaviours: a behaviour needing a
/// [`Capability`] it does not declare is ignored, its kind `missing:<capability>` and its outcome
/// `ignored (missing capability: <capability>)`.
#[async_trait]
impl Source for dyn FixtureFactory {
    type Fixture = dyn TeamFixture;
    type Need = Capability;

    fn lacks(&self, needs: &[Capability]) -> Option<Lack> {
        self.capabilities().missing(needs).map(|cap| Lack {
            kind: Some(format!("missing:{cap}")),
            reason: format!("missing capability: {cap}"),
        })
    }

    async fn fixture(&self) -> Result<Box<dyn TeamFixture>, FixtureError> {
        FixtureFactory::fixture(self).await
    }
}

/// Every behaviour of [`behaviours`] as its own trial named `<target>::<port>::<behaviour>`.
///
/// Each trial asks `factory` for a fresh fixture and runs the behaviour as a task on `runtime`
/// (see [`crate::trial`]): failing on a panic (an assertion), a fixture error, or after
/// [`TRIAL_TIMEOUT`](crate::trial::TRIAL_TIMEOUT). A behaviour whose [`Capability`] the factory
/// does not declare is ignored at run time: its kind is `missing:<capability>` and the outcome
/// reads `ignored (missing capability: <capability>)`, so the `test result` line counts it as
/// ignored, never as passed.
pub fn trials(
    target: &str,
    factory: Arc<dyn FixtureFactory>,
    runtime: &Arc<Runtime>,
) -> Vec<Trial> {
    Suite::new(factory, runtime).trials(target, behaviours())
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use async_trait::async_trait;

    use std::time::Duration;

    use super::*;
    use crate::Capabilities;
    use crate::trial::{run_one, runtime};

    struct Unreachable(Capabilities);

    #[async_trait]
    impl FixtureFactory for Unreachable {
        fn capabilities(&self) -> Capabilities {
            self.0.clone()
        }
        async fn fixture(&self) -> Result<Box<dyn TeamFixture>, FixtureError> {
            Err("no server".into())
        }
    }

    fn bare() -> Capabilities {
        Capabilities {
            backend_name: "none",
            body_limit_bytes: 1,
            body_quota: None,
            body_duplicate_window: None,
            ack_wait: Duration::from_secs(1),
            max_deliver: None,
            inbox_overflow_limit: None,
            inbox_dedup_for_life: false,
            inbox_duplicate_window: None,
            delete_consumer: false,
            instant_advance: false,
            settle_timeout: Duration::from_secs(1),
        }
    }

    #[test]
    fn at_least_thirty_uniquely_named_behaviours() {
        let all = behaviours();
        assert!(all.len() >= 30, "{}", all.len());
        let names: HashSet<_> = all.iter().map(|b| b.name).collect();
        assert_eq!(names.len(), all.len(), "behaviour names are unique");
    }

    #[test]
    fn a_missing_capability_is_named_in_the_trial_kind() {
        let runtime = runtime();
        let trials = trials("none", Arc::new(Unreachable(bare())), &runtime);
        let by_name: std::collections::HashMap<_, _> = behaviours()
            .into_iter()
            .map(|b| (format!("none::{}::{}", b.port, b.name), b))
            .collect();
        let mut ignored = 0;
        for trial in &trials {
            let b = by_name[trial.name()];
            match b.needs.first() {
                Some(cap) => {
                    ignored += 1;
                    assert_eq!(trial.kind(), format!("missing:{cap}"));
                }
                None => assert_eq!(trial.kind(), ""),
            }
        }
        assert!(ignored >= 5, "{ignored}");
    }

    #[test]
    fn a_fixture_that_cannot_be_built_fails_the_trial() {
        let runtime = runtime();
        let factory: Arc<dyn FixtureFactory> = Arc::new(Unreachable(bare()));
        let b = behaviours()[0];
        let outcome = run_one(&runtime, factory, b.needs, b.run);
        let message = outcome.expect_err("must fail").message().map(str::to_owned);
        assert!(message.is_some_and(|m| m.contains("fixture failed")));
    }
}
