//! The relay: publishes pending bodies from the outbox to their body backends.
//!
//! One pass leases a batch of due slots in one transaction (generation bumped, lease set),
//! publishes them concurrently with no transaction open, then settles each team's slots in one
//! transaction as soon as that team's attempts are done. Settling is fenced by the ledger on generation and an unexpired lease: a pass
//! whose lease expired writes nothing. A slot whose last attempt was unanswered (`uncertain`) is
//! reconciled before it is published again; before giving up on a retryable failure the relay
//! reconciles once more. Each slot backs off on its own schedule, so one team's unsendable
//! messages never hold up another team's.
//!
//! A team whose streams are not provisioned (`NotProvisioned`) is not a final answer while an
//! operator may still provision them: its slots stay pending and back off like a retryable
//! failure (visible in health and the relay metrics), and fail for good only once the backoff
//! schedule is used up.

use std::time::Instant;

use crewbus_domain::{
    BusError, BusResult, FeedEvent, FeedKind, LeasedSlot, Published, SettleOutcome, Settlement,
    SlotOutcome, Uuid,
};
use futures_util::future::join_all;

use crate::metrics::Metrics;
use crate::usecases::bus::{Bus, after};

/// What one relay pass did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct RelayPass {
    /// Slots leased.
    pub leased: usize,
    /// Bodies confirmed stored.
    pub confirmed: usize,
    /// Attempts to be retried (retryable or unanswered).
    pub retried: usize,
    /// Messages marked failed.
    pub failed: usize,
    /// Settlements the ledger refused because the lease had expired or moved on.
    pub stale: usize,
}

impl Bus {
    /// One relay pass (see the module docs). Errors: the ledger failing to lease or settle
    /// (`Unavailable`/`Timeout`); an unsettled batch is leased again when its lease expires.
    pub async fn relay_pass(&self) -> BusResult<RelayPass> {
        let slots = self
            .ports
            .ledger
            .lease_slots(
                self.now(),
                self.settings.relay_lease,
                self.settings.relay_batch,
            )
            .await?;
        if slots.is_empty() {
            return Ok(RelayPass::default());
        }
        // Slots are grouped by team; each group publishes concurrently and settles in its own
        // transaction as soon as its attempts are done, so a slow team's broker never delays
        // another team's bodies being recorded as stored.
        let mut groups: Vec<(Uuid, Vec<&LeasedSlot>)> = Vec::new();
        for slot in &slots {
            match groups.iter_mut().find(|(t, _)| *t == slot.envelope.team_id) {
                Some((_, g)) => g.push(slot),
                None => groups.push((slot.envelope.team_id, vec![slot])),
            }
        }
        let results = join_all(
            groups
                .into_iter()
                .map(|(_, group)| self.publish_and_settle(group)),
        )
        .await;
        let mut pass = RelayPass {
            leased: slots.len(),
            ..RelayPass::default()
        };
        let mut first_error = None;
        for result in results {
            match result {
                Ok(p) => {
                    pass.confirmed += p.confirmed;
                    pass.retried += p.retried;
                    pass.failed += p.failed;
                    pass.stale += p.stale;
                }
                // Unsettled: leased again once the lease expires.
                Err(e) => first_error = first_error.or(Some(e)),
            }
        }
        Metrics::add(&self.metrics.relay_published, pass.confirmed as u64);
        Metrics::add(&self.metrics.relay_retried, pass.retried as u64);
        Metrics::add(&self.metrics.relay_failed, pass.failed as u64);
        if pass.confirmed > 0 {
            self.wakers.references.notify_one();
            self.wakers.index.notify_one();
        }
        match first_error {
            Some(e) if pass.confirmed + pass.retried + pass.failed + pass.stale == 0 => Err(e),
            Some(e) => {
                tracing::warn!(code = e.code(), error = ?e, "relay: a team's batch could not be settled; it is leased again when its lease expires");
                Ok(pass)
            }
            None => Ok(pass),
        }
    }

    /// Publishes one team's leased slots concurrently, then settles them in one transaction.
    async fn publish_and_settle(&self, group: Vec<&LeasedSlot>) -> BusResult<RelayPass> {
        let settlements: Vec<Settlement> =
            join_all(group.iter().map(|slot| self.attempt(slot))).await;
        let outcomes = self.ports.ledger.settle(&settlements, self.now()).await?;
        let mut pass = RelayPass::default();
        let mut stored = Vec::new();
        for ((slot, settlement), outcome) in group.iter().zip(&settlements).zip(&outcomes) {
            if *outcome != SettleOutcome::Applied {
                pass.stale += 1;
                tracing::info!(slot = %settlement.slot, "relay lease expired before settling; nothing written");
                continue;
            }
            match &settlement.outcome {
                SlotOutcome::Confirmed { .. } => {
                    pass.confirmed += 1;
                    let e = &slot.envelope;
                    stored.push(
                        FeedEvent::new(e.team_id, FeedKind::MessageStored)
                            .conversation(e.conversation_id)
                            .message(e.message_id),
                    );
                }
                SlotOutcome::Fatal { error } => {
                    pass.failed += 1;
                    tracing::warn!(slot = %settlement.slot, code = error.code(), error = ?error, "message failed");
                }
                _ => pass.retried += 1,
            }
        }
        self.emit(stored);
        Ok(pass)
    }

    /// One slot's attempt: reconcile first when the last one was unanswered, else publish.
    async fn attempt(&self, slot: &LeasedSlot) -> Settlement {
        let outcome = self.attempt_outcome(slot).await;
        Settlement {
            slot: slot.slot,
            generation: slot.generation,
            outcome,
        }
    }

    async fn attempt_outcome(&self, slot: &LeasedSlot) -> SlotOutcome {
        let backend = match self
            .ports
            .backends
            .body_backend(slot.envelope.team_id, &slot.backend)
            .await
        {
            Ok(b) => b,
            Err(error) => return self.failure(slot, error),
        };
        if slot.uncertain {
            return match backend.reconcile(&slot.envelope).await {
                Ok(Some(locator)) => SlotOutcome::Confirmed { locator },
                // Not held and the backend refused a republish retryably: a retry is safe.
                Ok(None) => self.retry(slot, BusError::unavailable("body backend")),
                Err(error) if error.is_retryable() => self.uncertain(slot, error),
                Err(error) => self.failure(slot, error),
            };
        }
        let started = Instant::now();
        let published = backend.publish(slot.envelope.clone()).await;
        self.metrics.relay_latency.observe(started.elapsed());
        match published {
            Published::Confirmed { locator, .. } => SlotOutcome::Confirmed { locator },
            Published::Fatal(error) => self.failure(slot, error),
            Published::Uncertain(error) => self.uncertain(slot, error),
            Published::Retryable(error) => {
                if !self
                    .settings
                    .backoff
                    .exhausted(slot.attempts.saturating_add(1))
                {
                    return self.retry(slot, error);
                }
                // Last attempt: ask the backend before giving up.
                match backend.reconcile(&slot.envelope).await {
                    Ok(Some(locator)) => SlotOutcome::Confirmed { locator },
                    Ok(None) => SlotOutcome::Fatal { error },
                    Err(e) if e.is_retryable() => self.uncertain(slot, e),
                    Err(_) => SlotOutcome::Fatal { error },
                }
            }
        }
    }

    /// A failed attempt: retried with backoff when the error is retryable or the team's streams
    /// are not provisioned (yet), until the schedule is used up; else failed for good.
    fn failure(&self, slot: &LeasedSlot, error: BusError) -> SlotOutcome {
        let may_heal = error.is_retryable() || matches!(error, BusError::NotProvisioned { .. });
        if may_heal
            && !self
                .settings
                .backoff
                .exhausted(slot.attempts.saturating_add(1))
        {
            self.retry(slot, error)
        } else {
            SlotOutcome::Fatal { error }
        }
    }

    fn next_attempt(&self, slot: &LeasedSlot) -> crewbus_domain::DateTime<crewbus_domain::Utc> {
        let seed = slot.slot.as_u64_pair().1;
        let delay = self
            .settings
            .backoff
            .delay(slot.attempts.saturating_add(1), seed);
        after(self.now(), delay)
    }

    fn retry(&self, slot: &LeasedSlot, error: BusError) -> SlotOutcome {
        SlotOutcome::Retryable {
            next_attempt_at: self.next_attempt(slot),
            error,
        }
    }

    /// Unanswered: never failed; reconcile decides on the next attempt.
    fn uncertain(&self, slot: &LeasedSlot, error: BusError) -> SlotOutcome {
        SlotOutcome::Uncertain {
            next_attempt_at: self.next_attempt(slot),
            error,
        }
    }
}
