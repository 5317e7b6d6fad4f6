//! The Postgres ledger's relay side: leasing outbox slots and settling them (set-based, in
//! `settle`).

use chrono::{DateTime, Utc};
use crewbus_domain::{BusResult, LeasedSlot, SettleOutcome, Settlement};
use crewbus_sql::rows::leased_slots;

use super::lease_rows;
use super::rows::SlotRow;
use super::settle;
use crate::dialect::Pg;
use crewbus_sql::ledger::SqlLedger;

pub(crate) async fn lease_slots(
    ledger: &SqlLedger<Pg>,
    at: DateTime<Utc>,
    until: DateTime<Utc>,
    limit: usize,
) -> BusResult<Vec<LeasedSlot>> {
    let rows: Vec<SlotRow> = lease_rows(
        ledger,
        "WITH due AS (
                 SELECT id FROM outbox_slots
                 WHERE tenant = $1 AND NOT failed AND next_attempt_at <= $2
                   AND (leased_until IS NULL OR leased_until <= $2)
                 ORDER BY next_attempt_at, ord
                 LIMIT $3
                 FOR UPDATE SKIP LOCKED)
             UPDATE outbox_slots s SET generation = s.generation + 1, leased_until = $4
             FROM due WHERE s.id = due.id
             RETURNING s.id, s.generation, s.backend, s.message_id, s.conversation_id,
                       s.team_id, s.body, s.publish_key, s.attempts, s.uncertain,
                       s.next_attempt_at, s.ord",
        at,
        until,
        limit,
        "lease slots",
    )
    .await?;
    leased_slots(rows, until)
}

pub(crate) async fn settle(
    ledger: &SqlLedger<Pg>,
    settlements: &[Settlement],
    at: DateTime<Utc>,
) -> BusResult<Vec<SettleOutcome>> {
    if settlements.is_empty() {
        return Ok(Vec::new());
    }
    let what = "settle";
    let mut tx = ledger.begin(what).await?;
    let outcomes = settle::settle(&mut tx, ledger.tenant(), settlements, at).await?;
    ledger.commit(tx, what).await?;
    Ok(outcomes)
}
