//! The memory ledger's reference worker side: leasing inbox events and marking them published.

use chrono::{DateTime, Utc};
use crewbus_domain::{BusResult, InboxEvent};
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
        .events
        .values()
        .filter(|e| e.published_at.is_none() && e.leased_until.is_none_or(|u| u <= at))
        .map(|e| (e.order, e.event.id))
        .collect();
    due.sort();
    due.truncate(limit);
    Ok(due
        .into_iter()
        .map(|(_, id)| {
            let row = st.events.get_mut(&id).expect("collected above");
            row.leased_until = Some(until);
            row.event.clone()
        })
        .collect())
}

pub(super) fn mark_published(
    ledger: &MemoryLedger,
    events: &[Uuid],
    at: DateTime<Utc>,
) -> BusResult<u64> {
    let mut st = ledger.state()?;
    let mut changed = 0;
    for id in events {
        if let Some(row) = st.events.get_mut(id)
            && row.published_at.is_none()
        {
            row.published_at = Some(at);
            changed += 1;
        }
    }
    Ok(changed)
}
