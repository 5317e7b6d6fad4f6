//! The SQLite ledger's reference worker side: leasing reference markers (one per stored
//! message) and removing them once the message's references are published.

use chrono::{DateTime, Utc};
use crewbus_domain::{BusResult, InboxEvent, ReferencePayload};
use uuid::Uuid;

use super::SqliteLedger;
use crate::codec::{Ts, from_db, marks};

/// One reference of a leased marker: the marker's fields with one undelivered receipt.
#[derive(sqlx::FromRow)]
struct Row {
    team_id: Uuid,
    inbox: String,
    message_id: Uuid,
    created_at: Ts,
    conversation_id: Uuid,
    seq: i64,
    recipient_id: Uuid,
    recipient_key: String,
}

pub(super) async fn lease_inbox_events(
    ledger: &SqliteLedger,
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
    .bind(ledger.tenant.as_str())
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
    let mut query = sqlx::query_as::<_, Row>(&sql);
    for ord in &due {
        query = query.bind(*ord);
    }
    let rows = query.fetch_all(&mut *tx).await.map_err(ledger.db(what))?;
    ledger.commit(tx, what).await?;
    Ok(rows
        .into_iter()
        .map(|r| InboxEvent {
            id: InboxEvent::id_for(r.message_id, r.recipient_id),
            team: r.team_id,
            inbox: r.inbox,
            message: r.message_id,
            recipient: r.recipient_id,
            recipient_key: r.recipient_key,
            payload: ReferencePayload {
                message: r.message_id,
                conversation: r.conversation_id,
                seq: from_db(r.seq),
            }
            .to_json(),
            created_at: r.created_at.0,
        })
        .collect())
}

pub(super) async fn mark_published(
    ledger: &SqliteLedger,
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
    let mut query = sqlx::query(&sql).bind(ledger.tenant.as_str());
    for id in messages {
        query = query.bind(*id);
    }
    let mut tx = ledger.begin(what).await?;
    let done = query.execute(&mut *tx).await.map_err(ledger.db(what))?;
    ledger.commit(tx, what).await?;
    Ok(done.rows_affected())
}
