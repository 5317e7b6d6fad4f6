//! The SQLite ledger's relay side: leasing outbox slots (settling them is in `settle`).

use chrono::{DateTime, Utc};
use crewbus_domain::{BusResult, LeasedSlot};
use crewbus_sql::rows::leased_slots;

use super::rows::SlotRow;
use crate::codec::Ts;
use crate::dialect::Lite;
use crewbus_sql::ledger::SqlLedger;

/// The port lists `settle` under the relay; it has its own file.
pub(crate) use super::settle::settle;

pub(crate) async fn lease_slots(
    ledger: &SqlLedger<Lite>,
    at: DateTime<Utc>,
    until: DateTime<Utc>,
    limit: usize,
) -> BusResult<Vec<LeasedSlot>> {
    let what = "lease slots";
    let mut tx = ledger.begin(what).await?;
    // No SKIP LOCKED: the write transaction is exclusive, so a concurrent relay waits for it and
    // then finds these slots leased.
    let rows: Vec<SlotRow> = sqlx::query_as(
        "UPDATE outbox_slots SET generation = generation + 1, leased_until = ?4
         WHERE ord IN (
             SELECT ord FROM outbox_slots
             WHERE tenant = ?1 AND failed = 0 AND next_attempt_at <= ?2
               AND (leased_until IS NULL OR leased_until <= ?2)
             ORDER BY next_attempt_at, ord
             LIMIT ?3)
         RETURNING id, generation, backend, message_id, conversation_id, team_id, body,
                   publish_key, attempts, uncertain, next_attempt_at, ord",
    )
    .bind(ledger.tenant().as_str())
    .bind(Ts(at))
    .bind(limit as i64)
    .bind(Ts(until))
    .fetch_all(&mut *tx)
    .await
    .map_err(ledger.db(what))?;
    ledger.commit(tx, what).await?;
    // RETURNING has no order: `leased_slots` restores the lease order.
    leased_slots(rows, until)
}
