//! The ledger's counts for health and metrics (`Ledger::counts`), once for both SQL stores: four
//! reads in one snapshot ([`Dialect::snapshot`]: Postgres a repeatable-read, read-only
//! transaction; SQLite one read transaction, a WAL reader's), so every count sees the same
//! state. The statements that differ are [`PerDialect`] pairs beside the shared ones.

use std::time::Duration;

use chrono::{DateTime, Utc};
use crewbus_domain::{BusResult, LedgerCounts};

use crate::counter::from_db;
use crate::dialect::{Dialect, PerDialect};
use crate::driver::stmt;
use crate::ledger::SqlLedger;

/// The unsettled messages: pending and failed publications and the oldest pending one's send
/// time. SQLite reads them through their partial index (`INDEXED BY`: the planner would
/// otherwise take `messages_sent (team_id, sent_at)` and read every message of each team).
const UNSETTLED: PerDialect<&str> = PerDialect {
    postgres: "SELECT count(*) FILTER (WHERE m.publication = 'pending_publication'),
                count(*) FILTER (WHERE m.publication = 'failed'),
                min(m.sent_at) FILTER (WHERE m.publication = 'pending_publication')
         FROM messages m JOIN teams t ON t.id = m.team_id
         WHERE t.tenant = $1 AND m.publication <> 'stored'",
    sqlite: "SELECT count(*) FILTER (WHERE m.publication = 'pending_publication'),
                count(*) FILTER (WHERE m.publication = 'failed'),
                min(m.sent_at) FILTER (WHERE m.publication = 'pending_publication')
         FROM messages m INDEXED BY messages_unsettled JOIN teams t ON t.id = m.team_id
         WHERE t.tenant = $1 AND m.publication <> 'stored'",
};

/// The live outbox slots whose publication is uncertain.
const UNCERTAIN: PerDialect<&str> = PerDialect {
    postgres: "SELECT count(*) FROM outbox_slots WHERE tenant = $1 AND NOT failed AND uncertain",
    sqlite: "SELECT count(*) FROM outbox_slots WHERE tenant = $1 AND failed = 0 AND uncertain = 1",
};

/// `Ledger::counts`.
pub async fn counts<D: Dialect>(
    ledger: &SqlLedger<D>,
    at: DateTime<Utc>,
) -> BusResult<LedgerCounts> {
    let what = "counts";
    let mut snapshot = ledger.snapshot(what).await?;
    let tenant = || ledger.tenant().as_str().to_owned();
    let (pending, failed, oldest): (i64, i64, Option<D::Time>) = stmt::<D>(UNSETTLED.of::<D>())
        .arg(tenant())
        .one(&mut snapshot)
        .await
        .map_err(ledger.db(what))?;
    let (uncertain,): (i64,) = stmt::<D>(UNCERTAIN.of::<D>())
        .arg(tenant())
        .one(&mut snapshot)
        .await
        .map_err(ledger.db(what))?;
    let (events,): (i64,) = stmt::<D>(
        "SELECT count(*) FROM reference_marks k
         JOIN receipts r ON r.message_id = k.message_id AND r.delivered_at IS NULL
         WHERE k.tenant = $1",
    )
    .arg(tenant())
    .one(&mut snapshot)
    .await
    .map_err(ledger.db(what))?;
    let (deliveries, undelivered): (i64, i64) = stmt::<D>(
        "SELECT count(*) FILTER (WHERE r.delivered_at IS NOT NULL),
                count(*) FILTER (WHERE r.delivered_at IS NULL AND m.publication = 'stored')
         FROM receipts r JOIN messages m ON m.id = r.message_id
         JOIN teams t ON t.id = m.team_id
         WHERE t.tenant = $1",
    )
    .arg(tenant())
    .one(&mut snapshot)
    .await
    .map_err(ledger.db(what))?;
    ledger.end_snapshot(snapshot, what).await?;
    Ok(LedgerCounts {
        pending_publications: from_db(pending),
        uncertain_publications: from_db(uncertain),
        failed_publications: from_db(failed),
        oldest_pending_age: oldest
            .map(Into::into)
            .map(|o: DateTime<Utc>| (at - o).to_std().unwrap_or(Duration::ZERO)),
        pending_inbox_events: from_db(events),
        deliveries: from_db(deliveries),
        undelivered: from_db(undelivered),
    })
}
