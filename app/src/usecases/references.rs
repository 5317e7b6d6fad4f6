//! The reference worker: turns the ledger's reference markers into inbox references.
//!
//! One pass leases a batch of messages whose references are due (one marker per message, written
//! with the commit that stored its body; the worker is woken right after that commit), publishes
//! each recipient's reference to its team's inbox (deduplicated on the event id, derived from
//! (message, recipient), so a repeat after a lapsed lease is harmless), **wakes the recipients'
//! waiting fetches as soon as their references are confirmed** (the delivery is possible from
//! then on: the message is stored and its reference is in the inbox), and then marks the
//! messages whose every reference is confirmed published, in one transaction. A retryable
//! failure leaves the message's marker to be leased again when its lease lapses (all of its
//! references are published again; the inbox drops the repeats); a fatal refusal is logged and
//! counts as done, because the ledger stays the authority and the fetch top-up hands the message
//! out anyway.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use crewbus_domain::{BusResult, InboxEvent, Published, Uuid, WakeupTarget};
use crewbus_ports::Inbox;
use futures_util::stream::{self, StreamExt};

use crate::metrics::Metrics;
use crate::usecases::bus::Bus;

/// At most this many references of one pass are being published at once (the bound the pass
/// had when its limit counted references, not messages).
pub const PUBLISHES_IN_FLIGHT: usize = 256;

/// What one reference-worker pass did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ReferencePass {
    /// Messages leased (markers).
    pub messages: usize,
    /// References (events) leased: one per recipient not yet delivered.
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
        // Every leased message, in lease order (the ledger answers a message's references
        // together).
        let mut messages: Vec<Uuid> = events.iter().map(|e| e.message).collect();
        messages.dedup();
        pass.messages = messages.len();
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
        // At most PUBLISHES_IN_FLIGHT at once (a pass holds up to `reference_batch` messages,
        // each with all its recipients), in order.
        // Each future owns its event and inbox handle (a future borrowing the pass's events is
        // not `Send` for every lifetime the spawned worker loop needs).
        let publishes: Vec<_> = events
            .iter()
            .map(|e| {
                let inbox = inboxes.get(&(e.team, e.inbox.clone())).cloned().flatten();
                let event = e.clone();
                async move { publish_one(inbox, &event).await }
            })
            .collect();
        let results: Vec<Option<Published>> = stream::iter(publishes)
            .buffered(PUBLISHES_IN_FLIGHT)
            .collect()
            .await;
        let mut woken: Vec<WakeupTarget> = Vec::new();
        let mut deferred: HashSet<Uuid> = HashSet::new();
        for (event, result) in events.iter().zip(results) {
            match result {
                Some(Published::Confirmed { .. }) => {
                    pass.published += 1;
                    woken.push(WakeupTarget::new(event.team, event.recipient));
                }
                Some(Published::Fatal(error)) => {
                    pass.refused += 1;
                    tracing::warn!(event = %event.id, message = %event.message, code = error.code(), error = ?error, "inbox refused a reference; the ledger top-up will deliver it");
                }
                Some(Published::Retryable(_) | Published::Uncertain(_)) | None => {
                    pass.deferred += 1;
                    deferred.insert(event.message);
                }
            }
        }
        // Published: the messages are fetchable now. One wake-up per agent per pass, before the
        // markers' commit (which no fetch waits for).
        self.notify_waiters(&mut woken).await;
        messages.retain(|m| !deferred.contains(m));
        if !messages.is_empty() {
            self.ports
                .ledger
                .mark_references_published(&messages, self.now())
                .await?;
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
