//! The Postgres ledger's counts for health and metrics.

use std::time::Duration;

use chrono::{DateTime, Utc};
use crewbus_domain::{BusResult, LedgerCounts};

use super::db;
use super::rows::from_db;
use crate::dialect::Pg;
use crewbus_sql::ledger::SqlLedger;

pub(crate) async fn counts(ledger: &SqlLedger<Pg>, at: DateTime<Utc>) -> BusResult<LedgerCounts> {
    let what = "counts";
    // One transaction at REPEATABLE READ: every count sees the same snapshot.
    let mut tx = ledger.begin(what).await?;
    sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
        .execute(&mut *tx)
        .await
        .map_err(db(what))?;
    let tenant = ledger.tenant().as_str();
    let (pending, failed, oldest): (i64, i64, Option<DateTime<Utc>>) = sqlx::query_as(
        "SELECT count(*) FILTER (WHERE m.publication = 'pending_publication'),
                count(*) FILTER (WHERE m.publication = 'failed'),
                min(m.sent_at) FILTER (WHERE m.publication = 'pending_publication')
         FROM messages m JOIN teams t ON t.id = m.team_id
         WHERE t.tenant = $1 AND m.publication <> 'stored'",
    )
    .bind(tenant)
    .fetch_one(&mut *tx)
    .await
    .map_err(db(what))?;
    let uncertain: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM outbox_slots WHERE tenant = $1 AND NOT failed AND uncertain",
    )
    .bind(tenant)
    .fetch_one(&mut *tx)
    .await
    .map_err(db(what))?;
    let events: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM reference_marks k
         JOIN receipts r ON r.message_id = k.message_id AND r.delivered_at IS NULL
         WHERE k.tenant = $1",
    )
    .bind(tenant)
    .fetch_one(&mut *tx)
    .await
    .map_err(db(what))?;
    let (deliveries, undelivered): (i64, i64) = sqlx::query_as(
        "SELECT count(*) FILTER (WHERE r.delivered_at IS NOT NULL),
                count(*) FILTER (WHERE r.delivered_at IS NULL AND m.publication = 'stored')
         FROM receipts r JOIN messages m ON m.id = r.message_id
         JOIN teams t ON t.id = m.team_id
         WHERE t.tenant = $1",
    )
    .bind(tenant)
    .fetch_one(&mut *tx)
    .await
    .map_err(db(what))?;
    ledger.commit(tx, what).await?;
    Ok(LedgerCounts {
        pending_publications: from_db(pending),
        uncertain_publications: from_db(uncertain),
        failed_publications: from_db(failed),
        oldest_pending_age: oldest.map(|o| (at - o).to_std().unwrap_or(Duration::ZERO)),
        pending_inbox_events: from_db(events),
        deliveries: from_db(deliveries),
        undelivered: from_db(undelivered),
    })
}
