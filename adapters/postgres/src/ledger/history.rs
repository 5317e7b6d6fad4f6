//! The Postgres ledger's history pages.

use crewbus_domain::{BusResult, HistoryPage};
use crewbus_sql::rows::history_page;
use uuid::Uuid;

use super::rows::{MESSAGE_COLUMNS, MessageRow, db_i64};
use super::{PostgresLedger, db};

pub(super) async fn history(
    ledger: &PostgresLedger,
    team: Uuid,
    conversation: Uuid,
    after_seq: u64,
    limit: usize,
) -> BusResult<HistoryPage> {
    let what = "history";
    let mut conn = ledger.pool.acquire().await.map_err(db(what))?;
    ledger
        .conversation_row(&mut conn, team, conversation, what)
        .await?;
    let rows: Vec<MessageRow> = sqlx::query_as(&format!(
        "SELECT {MESSAGE_COLUMNS} FROM messages m
         WHERE m.conversation_id = $1 AND m.seq > $2 ORDER BY m.seq LIMIT $3"
    ))
    .bind(conversation)
    .bind(db_i64(after_seq))
    .bind(limit as i64)
    .fetch_all(&mut *conn)
    .await
    .map_err(db(what))?;
    history_page(after_seq, rows)
}
