//! The memory ledger's history pages.

use crewbus_domain::{BusResult, HistoryPage};
use uuid::Uuid;

use super::MemoryLedger;

pub(super) fn history(
    ledger: &MemoryLedger,
    team: Uuid,
    conversation: Uuid,
    after_seq: u64,
    limit: usize,
) -> BusResult<HistoryPage> {
    let st = ledger.state()?;
    let row = st.conversation_of(team, conversation)?;
    let messages = row
        .messages
        .range(after_seq.saturating_add(1)..)
        .take(limit)
        .map(|(_, id)| st.messages[id].clone());
    Ok(HistoryPage::build(after_seq, messages))
}
