//! The Postgres ledger's reference worker side: leasing inbox events and marking them
//! published.

use std::time::Duration;

use super::{PostgresLedger, db};
use chrono::{DateTime, Utc};
use crewbus_domain::{BusResult, InboxEvent, positive_ledger_span, validate_batch, validate_limit};
use uuid::Uuid;

pub(super) async fn lease_inbox_events(
    ledger: &PostgresLedger,
    at: DateTime<Utc>,
    lease_for: Duration,
    limit: usize,
) -> BusResult<Vec<InboxEvent>> {
    validate_limit(limit)?;
    let until = at + positive_ledger_span(lease_for, "lease_for")?;
    #[derive(sqlx::FromRow)]
    struct Row {
        id: Uuid,
        team_id: Uuid,
        inbox: String,
        message_id: Uuid,
        recipient_id: Uuid,
        recipient_key: String,
        payload: String,
        created_at: DateTime<Utc>,
        ord: i64,
    }
    let mut rows: Vec<Row> = sqlx::query_as(
        "WITH due AS (
             SELECT id FROM inbox_events
             WHERE tenant = $1 AND published_at IS NULL
               AND (leased_until IS NULL OR leased_until <= $2)
             ORDER BY ord
             LIMIT $3
             FOR UPDATE SKIP LOCKED)
         UPDATE inbox_events e SET leased_until = $4
         FROM due WHERE e.id = due.id
         RETURNING e.id, e.team_id, e.inbox, e.message_id, e.recipient_id,
                   e.recipient_key, e.payload, e.created_at, e.ord",
    )
    .bind(ledger.tenant.as_str())
    .bind(at)
    .bind(limit as i64)
    .bind(until)
    .fetch_all(&ledger.pool)
    .await
    .map_err(db("lease inbox events"))?;
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
            created_at: r.created_at,
        })
        .collect())
}

pub(super) async fn mark_published(
    ledger: &PostgresLedger,
    events: &[Uuid],
    at: DateTime<Utc>,
) -> BusResult<u64> {
    validate_batch(events.len())?;
    let done = sqlx::query(
        "UPDATE inbox_events SET published_at = $2
         WHERE id = ANY($1) AND tenant = $3 AND published_at IS NULL",
    )
    .bind(events)
    .bind(at)
    .bind(ledger.tenant.as_str())
    .execute(&ledger.pool)
    .await
    .map_err(db("mark published"))?;
    Ok(done.rows_affected())
}
