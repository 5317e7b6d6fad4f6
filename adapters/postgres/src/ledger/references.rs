//! The Postgres ledger's reference worker side: leasing reference markers (one per stored
//! message) and removing them once the message's references are published.

use super::rows::ReferenceRow;
use super::{db, lease_rows};
use crate::dialect::Pg;
use chrono::{DateTime, Utc};
use crewbus_domain::{BusResult, InboxEvent};
use crewbus_sql::ledger::SqlLedger;
use uuid::Uuid;

/// One statement: lock up to `$3` due markers of tenant `$1` at `$2` (`SKIP LOCKED`: two workers
/// never lease one), remove those with no undelivered receipt left, lease the others until `$4`
/// and answer one row per undelivered receipt of each leased marker.
const LEASE: &str = "
WITH due AS (
    SELECT message_id FROM reference_marks
    WHERE tenant = $1 AND (leased_until IS NULL OR leased_until <= $2)
    ORDER BY ord
    LIMIT $3
    FOR UPDATE SKIP LOCKED
), open AS (
    SELECT d.message_id FROM due d
    WHERE EXISTS (SELECT 1 FROM receipts r
                  WHERE r.message_id = d.message_id AND r.delivered_at IS NULL)
), done AS (
    DELETE FROM reference_marks k USING due d
    WHERE k.message_id = d.message_id
      AND NOT EXISTS (SELECT 1 FROM open o WHERE o.message_id = d.message_id)
), leased AS (
    UPDATE reference_marks k SET leased_until = $4
    FROM open o WHERE k.message_id = o.message_id
    RETURNING k.message_id, k.team_id, k.inbox, k.created_at, k.ord
)
SELECT l.ord, l.team_id, l.inbox, l.message_id, l.created_at, m.conversation_id, m.seq,
       r.recipient_id, r.recipient_key
FROM leased l
JOIN messages m ON m.id = l.message_id
JOIN receipts r ON r.message_id = l.message_id AND r.delivered_at IS NULL";

/// One reference of a leased marker, with the marker's order (`RETURNING` has none).
#[derive(sqlx::FromRow)]
struct Row {
    ord: i64,
    #[sqlx(flatten)]
    reference: ReferenceRow,
}

pub(crate) async fn lease_inbox_events(
    ledger: &SqlLedger<Pg>,
    at: DateTime<Utc>,
    until: DateTime<Utc>,
    limit: usize,
) -> BusResult<Vec<InboxEvent>> {
    let mut rows: Vec<Row> =
        lease_rows(ledger, LEASE, at, until, limit, "lease references").await?;
    // Marker order, then recipient key in byte order (COLLATE "C", as everywhere else).
    rows.sort_by(|a, b| {
        (a.ord, a.reference.recipient_key()).cmp(&(b.ord, b.reference.recipient_key()))
    });
    Ok(rows
        .into_iter()
        .map(|r| InboxEvent::from(r.reference))
        .collect())
}

pub(crate) async fn mark_published(
    ledger: &SqlLedger<Pg>,
    messages: &[Uuid],
    _at: DateTime<Utc>,
) -> BusResult<u64> {
    let done =
        sqlx::query("DELETE FROM reference_marks WHERE message_id = ANY($1) AND tenant = $2")
            .bind(messages)
            .bind(ledger.tenant().as_str())
            .execute(ledger.store())
            .await
            .map_err(db("mark references published"))?;
    Ok(done.rows_affected())
}
