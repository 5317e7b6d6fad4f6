//! The SQLite ledger's reference worker side: leasing reference markers (one per stored
//! message) and removing them once the message's references are published.

use chrono::{DateTime, Utc};
use crewbus_domain::{BusResult, InboxEvent};
use uuid::Uuid;

use super::rows::ReferenceRow;
use crate::codec::{Ts, marks};
use crate::dialect::Lite;
use crewbus_sql::ledger::SqlLedger;

pub(crate) async fn lease_inbox_events(
    ledger: &SqlLedger<Lite>,
    at: DateTime<Utc>,
    until: DateTime<Utc>,
    limit: usize,
) -> BusResult<Vec<InboxEvent>> {
    let what = "lease references";
    let mut tx = ledger.begin(what).await?;
    let due: Vec<i64> = sqlx::query_scalar(
        "SELECT ord FROM reference_marks
         WHERE tenant = ?1 AND (leased_until IS NULL OR leased_until <= ?2)
         ORDER BY ord LIMIT ?3",
    )
    .bind(ledger.tenant().as_str())
    .bind(Ts(at))
    .bind(limit as i64)
    .fetch_all(&mut *tx)
    .await
    .map_err(ledger.db(what))?;
    if due.is_empty() {
        ledger.commit(tx, what).await?;
        return Ok(Vec::new());
    }
    let list = marks(due.len());
    // Nothing left to publish (every receipt delivered, by the top-up): removed, not leased.
    let sql = format!(
        "DELETE FROM reference_marks WHERE ord IN ({list})
           AND NOT EXISTS (SELECT 1 FROM receipts r
                           WHERE r.message_id = reference_marks.message_id
                             AND r.delivered_at IS NULL)"
    );
    let mut query = sqlx::query(&sql);
    for ord in &due {
        query = query.bind(*ord);
    }
    query.execute(&mut *tx).await.map_err(ledger.db(what))?;
    let sql = format!("UPDATE reference_marks SET leased_until = ? WHERE ord IN ({list})");
    let mut query = sqlx::query(&sql).bind(Ts(until));
    for ord in &due {
        query = query.bind(*ord);
    }
    query.execute(&mut *tx).await.map_err(ledger.db(what))?;
    let sql = format!(
        "SELECT k.team_id, k.inbox, k.message_id, k.created_at, m.conversation_id, m.seq,
                r.recipient_id, r.recipient_key
         FROM reference_marks k
         JOIN messages m ON m.id = k.message_id
         JOIN receipts r ON r.message_id = k.message_id AND r.delivered_at IS NULL
         WHERE k.ord IN ({list})
         ORDER BY k.ord, r.recipient_key"
    );
    let mut query = sqlx::query_as::<_, ReferenceRow>(&sql);
    for ord in &due {
        query = query.bind(*ord);
    }
    let rows = query.fetch_all(&mut *tx).await.map_err(ledger.db(what))?;
    ledger.commit(tx, what).await?;
    Ok(rows.into_iter().map(InboxEvent::from).collect())
}

pub(crate) async fn mark_published(
    ledger: &SqlLedger<Lite>,
    messages: &[Uuid],
    _at: DateTime<Utc>,
) -> BusResult<u64> {
    if messages.is_empty() {
        return Ok(0);
    }
    let what = "mark references published";
    let sql = format!(
        "DELETE FROM reference_marks WHERE tenant = ? AND message_id IN ({})",
        marks(messages.len())
    );
    let mut query = sqlx::query(&sql).bind(ledger.tenant().as_str());
    for id in messages {
        query = query.bind(*id);
    }
    let mut tx = ledger.begin(what).await?;
    let done = query.execute(&mut *tx).await.map_err(ledger.db(what))?;
    ledger.commit(tx, what).await?;
    Ok(done.rows_affected())
}
