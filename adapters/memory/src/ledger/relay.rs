//! The memory ledger's relay side: leasing outbox slots and settling them.

use chrono::{DateTime, Utc};
use crewbus_domain::{BusResult, LeasedSlot, Publication, SettleOutcome, Settlement, SlotOutcome};
use uuid::Uuid;

use super::MemoryLedger;
use super::state::MarkRow;

pub(super) fn lease_slots(
    ledger: &MemoryLedger,
    at: DateTime<Utc>,
    until: DateTime<Utc>,
    limit: usize,
) -> BusResult<Vec<LeasedSlot>> {
    let mut st = ledger.state()?;
    let mut due: Vec<(DateTime<Utc>, u64, Uuid)> = st
        .slots
        .values()
        .filter(|s| !s.failed && s.next_attempt_at <= at && s.leased_until.is_none_or(|u| u <= at))
        .map(|s| (s.next_attempt_at, s.order, s.id))
        .collect();
    due.sort();
    due.truncate(limit);
    Ok(due
        .into_iter()
        .map(|(_, _, id)| {
            let s = st.slots.get_mut(&id).expect("collected above");
            s.generation += 1;
            s.leased_until = Some(until);
            LeasedSlot {
                slot: s.id,
                generation: s.generation,
                backend: s.backend.clone(),
                envelope: s.envelope.clone(),
                attempts: s.attempts,
                uncertain: s.uncertain,
                leased_until: until,
            }
        })
        .collect())
}

pub(super) fn settle(
    ledger: &MemoryLedger,
    settlements: &[Settlement],
    at: DateTime<Utc>,
) -> BusResult<Vec<SettleOutcome>> {
    let mut st = ledger.state()?;
    let mut outcomes = Vec::with_capacity(settlements.len());
    for s in settlements {
        let live = st.slots.get(&s.slot).is_some_and(|slot| {
            !slot.failed
                && slot.generation == s.generation
                && slot.leased_until.is_some_and(|u| at < u)
        });
        if !live {
            outcomes.push(SettleOutcome::Stale);
            continue;
        }
        match &s.outcome {
            SlotOutcome::Confirmed { locator } => {
                let slot = st.slots.remove(&s.slot).expect("checked above");
                let message_id = slot.envelope.message_id;
                let team = slot.envelope.team_id;
                let inbox = st.teams[&team].inbox.clone();
                let message = st
                    .messages
                    .get_mut(&message_id)
                    .expect("slot has a message");
                message.publication = Publication::Stored;
                message.locator = Some(locator.clone());
                message.stored_at = Some(at);
                let recipients = st.recipients.get(&message_id).cloned().unwrap_or_default();
                for recipient in &recipients {
                    // The memory ledger keeps the copy; the SQL ledgers read it from the message.
                    if let Some(receipt) = st.receipts.get_mut(&(message_id, *recipient)) {
                        receipt.stored_at = Some(at);
                    }
                }
                if !recipients.is_empty() {
                    let order = st.next_order();
                    st.marks.insert(
                        message_id,
                        MarkRow {
                            team,
                            inbox,
                            created_at: at,
                            order,
                            leased_until: None,
                        },
                    );
                }
            }
            SlotOutcome::Retryable {
                error,
                next_attempt_at,
            } => {
                let slot = st.slots.get_mut(&s.slot).expect("checked above");
                slot.attempts = slot.attempts.saturating_add(1);
                slot.uncertain = false;
                slot.next_attempt_at = *next_attempt_at;
                slot.leased_until = None;
                slot.last_error = Some(error.code().to_owned());
            }
            SlotOutcome::Fatal { error } => {
                let slot = st.slots.get_mut(&s.slot).expect("checked above");
                slot.failed = true;
                slot.leased_until = None;
                slot.last_error = Some(error.code().to_owned());
                let message_id = slot.envelope.message_id;
                let message = st
                    .messages
                    .get_mut(&message_id)
                    .expect("slot has a message");
                message.publication = Publication::Failed;
                message.failure = Some(error.code().to_owned());
            }
            SlotOutcome::Uncertain {
                error,
                next_attempt_at,
            } => {
                let slot = st.slots.get_mut(&s.slot).expect("checked above");
                slot.attempts = slot.attempts.saturating_add(1);
                slot.uncertain = true;
                slot.next_attempt_at = *next_attempt_at;
                slot.leased_until = None;
                slot.last_error = Some(error.code().to_owned());
            }
        }
        outcomes.push(SettleOutcome::Applied);
    }
    Ok(outcomes)
}
