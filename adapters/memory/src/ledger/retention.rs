//! The memory ledger's retention: what is due, and marking it retained.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use crewbus_domain::{BusResult, Publication, RetentionTarget};
use uuid::Uuid;

use super::MemoryLedger;

pub(super) fn retention_due(
    ledger: &MemoryLedger,
    before: DateTime<Utc>,
    limit: usize,
) -> BusResult<Vec<RetentionTarget>> {
    let st = ledger.state()?;
    let mut groups: BTreeMap<(Uuid, String), u64> = BTreeMap::new();
    for m in st.messages.values() {
        if m.publication == Publication::Stored
            && m.retained_at.is_none()
            && m.stored_at.is_some_and(|s| s < before)
        {
            *groups.entry((m.team, m.backend.clone())).or_default() += 1;
        }
    }
    Ok(groups
        .into_iter()
        .take(limit)
        .map(|((team, backend), messages)| RetentionTarget {
            team,
            backend,
            messages,
        })
        .collect())
}

pub(super) fn mark_retained(
    ledger: &MemoryLedger,
    team: Uuid,
    backend: &str,
    before: DateTime<Utc>,
    at: DateTime<Utc>,
) -> BusResult<u64> {
    let mut st = ledger.state()?;
    st.team_of(team)?;
    let mut changed = Vec::new();
    for m in st.messages.values_mut() {
        if m.team == team
            && m.backend == backend
            && m.publication == Publication::Stored
            && m.retained_at.is_none()
            && m.stored_at.is_some_and(|s| s < before)
        {
            m.retained_at = Some(at);
            changed.push(m.id);
        }
    }
    // Retention removes what it removed from the search index too, in the same "transaction".
    st.unindex(&changed);
    Ok(changed.len() as u64)
}
