//! The SQLite ledger's reference worker side: leasing inbox events and marking them published.

use chrono::{DateTime, Utc};
use crewbus_domain::{BusResult, InboxEvent};
use uuid::Uuid;

use super::SqliteLedger;
use crate::codec::{Ts, marks};

pub(super) async fn lease_inbox_events(
    ledger: &SqliteLedger,
    at: DateTime<Utc>,
    until: DateTime<Utc>,
    limit: usize,
) -> BusResult<Vec<InboxEvent>> {
    #[derive(sqlx::FromRow)]
    struct Row {
        id: Uuid,
        team_id: Uuid,
        inbox: String,
        message_id: Uuid,
        recipient_id: Uuid,
        recipient_key: String,
        payload: String,
        created_at: Ts,
        ord: i64,
    }
    let what = "lease inbox events";
    let mut tx = ledger.begin(what).await?;
    let mut rows: Vec<Row> = sqlx::query_as(
        "UPDATE inbox_events SET leased_until = ?4
         WHERE ord IN (
             SELECT ord FROM inbox_events
             WHERE tenant = ?1 AND published_at IS NULL
               AND (leased_until IS NULL OR leased_until <= ?2)
             ORDER BY ord
             LIMIT ?3)
         RETURNING id, team_id, inbox, message_id, recipient_id, recipient_key, payload,
                   created_at, ord",
    )
    .bind(ledger.tenant.as_str())
    .bind(Ts(at))
    .bind(limit as i64)
    .bind(Ts(until))
    .fetch_all(&mut *tx)
    .await
    .map_err(ledger.db(what))?;
    ledger.commit(tx, what).await?;
    rows.sort_by_key(|r| r.ord);
    Ok(rows
        .into_iter()
        .map(|r| InboxEvent {
            id: r.id,
            team: r.team_id,
            inbox: r.inbox,
            message: r.message_id,
            recipient: r.recipient_id,
            recipient_key: r.recipient_key,
            payload: r.payload,
            created_at: r.created_at.0,
        })
        .collect())
}

pub(super) async fn mark_published(
    ledger: &SqliteLedger,
    events: &[Uuid],
    at: DateTime<Utc>,
) -> BusResult<u64> {
    if events.is_empty() {
        return Ok(0);
    }
    let what = "mark published";
    let sql = format!(
        "UPDATE inbox_events SET published_at = ?
         WHERE tenant = ? AND published_at IS NULL AND id IN ({})",
        marks(events.len())
    );
    let mut query = sqlx::query(&sql).bind(Ts(at)).bind(ledger.tenant.as_str());
    for id in events {
        query = query.bind(*id);
    }
    let mut tx = ledger.begin(what).await?;
    let done = query.execute(&mut *tx).await.map_err(ledger.db(what))?;
    ledger.commit(tx, what).await?;
    Ok(done.rows_affected())
}
