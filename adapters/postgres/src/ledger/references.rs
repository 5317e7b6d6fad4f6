//! The Postgres ledger's reference worker side: leasing inbox events and marking them
//! published.

use super::{PostgresLedger, db};
use chrono::{DateTime, Utc};
use crewbus_domain::{BusResult, InboxEvent};
use uuid::Uuid;

pub(super) async fn lease_inbox_events(
    ledger: &PostgresLedger,
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
        created_at: DateTime<Utc>,
        ord: i64,
    }
    let mut rows: Vec<Row> = ledger
        .lease_rows(
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
            at,
            until,
            limit,
            "lease inbox events",
        )
        .await?;
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
