//! The ledger's history pages (`Ledger::history`), once for both SQL stores.

use crewbus_domain::{BusResult, HistoryPage};
use uuid::Uuid;

use crate::counter::db_i64;
use crate::dialect::Dialect;
use crate::directory::conversation_row;
use crate::driver::stmt;
use crate::ledger::SqlLedger;
use crate::rows::{MESSAGE_COLUMNS, MessageRow, history_page};

/// `Ledger::history`: at most `limit` messages of `conversation` after `after_seq`, in seq
/// order, held as the dialect's reads ([`Dialect::READS`]: on SQLite one snapshot,
/// so the conversation check and its page agree). Errors: unknown or another team's
/// conversation → `NotFound`; a row the domain refuses → its error.
pub async fn history<D: Dialect>(
    ledger: &SqlLedger<D>,
    team: Uuid,
    conversation: Uuid,
    after_seq: u64,
    limit: usize,
) -> BusResult<HistoryPage> {
    let what = "history";
    let mut held = ledger.hold(D::READS, what).await?;
    conversation_row(ledger, &mut held, team, conversation, what).await?;
    let rows: Vec<MessageRow<D::Time>> = stmt::<D>(&format!(
        "SELECT {MESSAGE_COLUMNS} FROM messages m
         WHERE m.conversation_id = $1 AND m.seq > $2 ORDER BY m.seq LIMIT $3"
    ))
    .arg(conversation)
    .arg(db_i64(after_seq))
    .arg(limit as i64)
    .all(&mut held)
    .await
    .map_err(ledger.db(what))?;
    ledger.release(held, what).await?;
    history_page(after_seq, rows)
}
