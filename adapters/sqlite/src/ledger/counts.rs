//! The SQLite ledger's counts for health and metrics.

use std::time::Duration;

use chrono::{DateTime, Utc};
use crewbus_domain::{BusResult, LedgerCounts};

use crate::codec::{Ts, from_db, opt};
use crate::dialect::Lite;
use crewbus_sql::ledger::SqlLedger;

pub(crate) async fn counts(ledger: &SqlLedger<Lite>, at: DateTime<Utc>) -> BusResult<LedgerCounts> {
    let what = "counts";
    // One read transaction: every count sees the same snapshot (a WAL reader's). The unsettled
    // messages through their partial index (`INDEXED BY`: the planner would otherwise take
    // `messages_sent (team_id, sent_at)` and read every message of each team).
    let mut tx = ledger.snapshot(what).await?;
    let tenant = ledger.tenant().as_str();
    let (pending, failed, oldest): (i64, i64, Option<Ts>) = sqlx::query_as(
        "SELECT count(*) FILTER (WHERE m.publication = 'pending_publication'),
                count(*) FILTER (WHERE m.publication = 'failed'),
                min(m.sent_at) FILTER (WHERE m.publication = 'pending_publication')
         FROM messages m INDEXED BY messages_unsettled JOIN teams t ON t.id = m.team_id
         WHERE t.tenant = ? AND m.publication <> 'stored'",
    )
    .bind(tenant)
    .fetch_one(&mut *tx)
    .await
    .map_err(ledger.db(what))?;
    let uncertain: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM outbox_slots WHERE tenant = ? AND failed = 0 AND uncertain = 1",
    )
    .bind(tenant)
    .fetch_one(&mut *tx)
    .await
    .map_err(ledger.db(what))?;
    let events: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM reference_marks k
         JOIN receipts r ON r.message_id = k.message_id AND r.delivered_at IS NULL
         WHERE k.tenant = ?",
    )
    .bind(tenant)
    .fetch_one(&mut *tx)
    .await
    .map_err(ledger.db(what))?;
    let (deliveries, undelivered): (i64, i64) = sqlx::query_as(
        "SELECT count(*) FILTER (WHERE r.delivered_at IS NOT NULL),
                count(*) FILTER (WHERE r.delivered_at IS NULL AND m.publication = 'stored')
         FROM receipts r JOIN messages m ON m.id = r.message_id
         JOIN teams t ON t.id = m.team_id
         WHERE t.tenant = ?",
    )
    .bind(tenant)
    .fetch_one(&mut *tx)
    .await
    .map_err(ledger.db(what))?;
    Ok(LedgerCounts {
        pending_publications: from_db(pending),
        uncertain_publications: from_db(uncertain),
        failed_publications: from_db(failed),
        oldest_pending_age: opt(oldest).map(|o| (at - o).to_std().unwrap_or(Duration::ZERO)),
        pending_inbox_events: from_db(events),
        deliveries: from_db(deliveries),
        undelivered: from_db(undelivered),
    })
}
