//! The memory ledger's counts for health and metrics.

use std::time::Duration;

use chrono::{DateTime, Utc};
use crewbus_domain::{BusResult, LedgerCounts, Publication};

use super::MemoryLedger;

pub(super) fn counts(ledger: &MemoryLedger, at: DateTime<Utc>) -> BusResult<LedgerCounts> {
    let st = ledger.state()?;
    let mut counts = LedgerCounts::default();
    let mut oldest: Option<DateTime<Utc>> = None;
    for m in st.messages.values() {
        match m.publication {
            Publication::PendingPublication => {
                counts.pending_publications += 1;
                oldest = Some(oldest.map_or(m.sent_at, |o| o.min(m.sent_at)));
            }
            Publication::Failed => counts.failed_publications += 1,
            Publication::Stored => {}
        }
    }
    counts.uncertain_publications = st
        .slots
        .values()
        .filter(|s| !s.failed && s.uncertain)
        .count() as u64;
    counts.oldest_pending_age = oldest.map(|o| (at - o).to_std().unwrap_or(Duration::ZERO));
    counts.pending_inbox_events = st
        .marks
        .keys()
        .flat_map(|m| {
            st.recipients
                .get(m)
                .into_iter()
                .flatten()
                .map(move |r| (*m, *r))
        })
        .filter(|key| st.receipts[key].delivered_at.is_none())
        .count() as u64;
    for (key, r) in &st.receipts {
        if r.delivered_at.is_some() {
            counts.deliveries += 1;
        } else if st.messages[&key.0].publication == Publication::Stored {
            counts.undelivered += 1;
        }
    }
    Ok(counts)
}
