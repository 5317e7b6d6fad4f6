//! The SQLite ledger's history pages.

use crewbus_domain::{BusError, BusResult, HistoryPage};
use crewbus_sql::rows::history_page;
use uuid::Uuid;

use super::SqliteLedger;
use super::rows::{MESSAGE_COLUMNS, MessageRow};
use crate::codec::db_i64;

pub(super) async fn history(
    ledger: &SqliteLedger,
    team: Uuid,
    conversation: Uuid,
    after_seq: u64,
    limit: usize,
) -> BusResult<HistoryPage> {
    let what = "history";
    // One snapshot: the conversation check and its page agree.
    let mut tx = ledger.read(what).await?;
    let found: Option<i64> = sqlx::query_scalar(
        "SELECT 1 FROM conversations c JOIN teams t ON t.id = c.team_id
         WHERE c.id = ? AND c.team_id = ? AND t.tenant = ?",
    )
    .bind(conversation)
    .bind(team)
    .bind(ledger.tenant.as_str())
    .fetch_optional(&mut *tx)
    .await
    .map_err(ledger.db(what))?;
    if found.is_none() {
        return Err(BusError::not_found(format!("conversation {conversation}")));
    }
    let rows: Vec<MessageRow> = sqlx::query_as(&format!(
        "SELECT {MESSAGE_COLUMNS} FROM messages m
         WHERE m.conversation_id = ? AND m.seq > ? ORDER BY m.seq LIMIT ?"
    ))
    .bind(conversation)
    .bind(db_i64(after_seq))
    .bind(limit as i64)
    .fetch_all(&mut *tx)
    .await
    .map_err(ledger.db(what))?;
    history_page(after_seq, rows)
}
