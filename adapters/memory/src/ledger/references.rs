//! The memory ledger's reference worker side: leasing reference markers (one per message) and
//! removing them once the references are published.

use chrono::{DateTime, Utc};
use crewbus_domain::{BusResult, InboxEvent, ReferencePayload};
use uuid::Uuid;

use super::MemoryLedger;

pub(super) fn lease_inbox_events(
    ledger: &MemoryLedger,
    at: DateTime<Utc>,
    until: DateTime<Utc>,
    limit: usize,
) -> BusResult<Vec<InboxEvent>> {
    let mut st = ledger.state()?;
    let mut due: Vec<(u64, Uuid)> = st
        .marks
        .iter()
        .filter(|(_, m)| m.leased_until.is_none_or(|u| u <= at))
        .map(|(id, m)| (m.order, *id))
        .collect();
    due.sort();
    due.truncate(limit);
    let mut events = Vec::new();
    for (_, message_id) in due {
        let undelivered = st
            .recipients
            .get(&message_id)
            .into_iter()
            .flatten()
            .any(|r| st.receipts[&(message_id, *r)].delivered_at.is_none());
        if !undelivered {
            // Nothing left to publish: the top-up delivered every recipient first.
            st.marks.remove(&message_id);
            continue;
        }
        let mark = st.marks.get_mut(&message_id).expect("collected above");
        mark.leased_until = Some(until);
        let (team, inbox, created_at) = (mark.team, mark.inbox.clone(), mark.created_at);
        let message = &st.messages[&message_id];
        let payload = ReferencePayload {
            message: message_id,
            conversation: message.conversation,
            seq: message.seq,
        }
        .to_json();
        let mut pending: Vec<&crewbus_domain::Receipt> = st
            .recipients
            .get(&message_id)
            .into_iter()
            .flatten()
            .map(|r| &st.receipts[&(message_id, *r)])
            .filter(|r| r.delivered_at.is_none())
            .collect();
        pending.sort_by(|a, b| a.recipient_key.cmp(&b.recipient_key));
        events.extend(pending.into_iter().map(|r| InboxEvent {
            id: InboxEvent::id_for(message_id, r.recipient),
            team,
            inbox: inbox.clone(),
            message: message_id,
            recipient: r.recipient,
            recipient_key: r.recipient_key.clone(),
            payload: payload.clone(),
            created_at,
        }));
    }
    Ok(events)
}

pub(super) fn mark_published(
    ledger: &MemoryLedger,
    messages: &[Uuid],
    _at: DateTime<Utc>,
) -> BusResult<u64> {
    let mut st = ledger.state()?;
    Ok(messages
        .iter()
        .filter(|m| st.marks.remove(m).is_some())
        .count() as u64)
}
