//! The reference worker: turns the ledger's inbox events into inbox references.
//!
//! One pass leases a batch of unpublished events, publishes each to its team's inbox (deduplicated
//! on the event id, so a repeat after a lapsed lease is harmless) and marks the confirmed ones
//! published in one transaction. A retryable failure leaves the event to be leased again when
//! its lease lapses; a fatal refusal is logged and the event marked published, because the ledger
//! stays the authority and the fetch top-up hands the message out anyway.

use std::collections::HashMap;
use std::sync::Arc;

use crewbus_domain::{BusResult, InboxEvent, Published, Uuid, WakeupTarget};
use crewbus_ports::Inbox;
use futures_util::future::join_all;

use crate::metrics::Metrics;
use crate::usecases::bus::Bus;

/// What one reference-worker pass did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ReferencePass {
    /// Events leased.
    pub leased: usize,
    /// References confirmed by the inbox (duplicates included).
    pub published: usize,
    /// Events left for a later pass (inbox unavailable).
    pub deferred: usize,
    /// Events the inbox refused for good (the top-up covers them).
    pub refused: usize,
}

impl Bus {
    /// One reference-worker pass (see the module docs). Errors: the ledger failing.
    pub async fn reference_pass(&self) -> BusResult<ReferencePass> {
        let events = self
            .ports
            .ledger
            .lease_inbox_events(
                self.now(),
                self.settings.reference_lease,
                self.settings.reference_batch,
            )
            .await?;
        let mut pass = ReferencePass {
            leased: events.len(),
            ..ReferencePass::default()
        };
        if events.is_empty() {
            return Ok(pass);
        }
        let mut inboxes: HashMap<(Uuid, String), Option<Arc<dyn Inbox>>> = HashMap::new();
        for e in &events {
            let key = (e.team, e.inbox.clone());
            if let std::collections::hash_map::Entry::Vacant(slot) = inboxes.entry(key) {
                let inbox = match self.ports.backends.inbox(e.team, &e.inbox).await {
                    Ok(i) => Some(i),
                    Err(error) => {
                        tracing::warn!(team = %e.team, inbox = %e.inbox, code = error.code(), error = ?error, "inbox unavailable; references deferred");
                        None
                    }
                };
                slot.insert(inbox);
            }
        }
        let results = join_all(events.iter().map(|e| {
            let inbox = inboxes.get(&(e.team, e.inbox.clone())).cloned().flatten();
            publish_one(inbox, e)
        }))
        .await;
        let mut done = Vec::new();
        for (event, result) in events.iter().zip(results) {
            match result {
                Some(Published::Confirmed { .. }) => {
                    pass.published += 1;
                    done.push(event.id);
                }
                Some(Published::Fatal(error)) => {
                    pass.refused += 1;
                    tracing::warn!(event = %event.id, code = error.code(), error = ?error, "inbox refused a reference; the ledger top-up will deliver it");
                    done.push(event.id);
                }
                Some(Published::Retryable(_) | Published::Uncertain(_)) | None => {
                    pass.deferred += 1;
                }
            }
        }
        if !done.is_empty() {
            self.ports.ledger.mark_published(&done, self.now()).await?;
            // Marked: the messages are fetchable now. One wake-up per agent per pass, after
            // the commit.
            let mut woken: Vec<WakeupTarget> = events
                .iter()
                .filter(|e| done.contains(&e.id))
                .map(|e| WakeupTarget::new(e.team, e.recipient))
                .collect();
            self.notify_waiters(&mut woken).await;
        }
        Metrics::add(&self.metrics.references_published, pass.published as u64);
        Ok(pass)
    }
}

async fn publish_one(inbox: Option<Arc<dyn Inbox>>, event: &InboxEvent) -> Option<Published> {
    let inbox = inbox?;
    Some(
        inbox
            .publish_reference(&event.recipient_key, event.id, &event.payload)
            .await,
    )
}
