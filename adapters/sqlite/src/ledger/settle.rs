//! `SqliteLedger::settle`: the fence, then each applied settlement written in call order, in
//! one write transaction.
//!
//! 1. The live slots named by the batch (not failed, lease unexpired at `at`) are read with
//!    their generation and their message's place; the write transaction is exclusive, so they
//!    cannot change before the commit.
//! 2. The fence is decided settlement by settlement in call order: a settlement applies only
//!    when its slot was read live with the same generation and no earlier settlement of this
//!    call applied to it (an applied one releases the lease); everything else is `Stale`.
//! 3. Each applied settlement is written at once: `Confirmed` (message stored, slot deleted, the
//!    message's reference marker), `Retryable`/`Uncertain` (slot backs off), `Fatal` (slot and
//!    message failed). SQLite runs in process, so a statement per row costs no round trip;
//!    reference markers get their `ord` in call order, as on Postgres.

use chrono::{DateTime, Utc};
use crewbus_domain::{BusResult, SettleOutcome, Settlement, SlotOutcome};
use crewbus_sql::settle::{LiveSlot, SlotWrite, fence};
use sqlx::SqliteConnection;
use uuid::Uuid;

use super::send::mark_references_due;
use crate::codec::{Ts, marks};
use crate::dialect::Lite;
use crewbus_sql::ledger::SqlLedger;

const WHAT: &str = "settle";

/// Writes one applied settlement of `slot`.
async fn apply(
    ledger: &SqlLedger<Lite>,
    conn: &mut SqliteConnection,
    slot: &LiveSlot,
    outcome: &SlotOutcome,
    at: DateTime<Utc>,
) -> BusResult<()> {
    let db = ledger.db(WHAT);
    match SlotWrite::from(outcome) {
        SlotWrite::Stored { locator } => {
            sqlx::query(
                "UPDATE messages SET publication = 'stored', locator = ?, stored_at = ?
                 WHERE id = ?",
            )
            .bind(locator.as_str())
            .bind(Ts(at))
            .bind(slot.message_id)
            .execute(&mut *conn)
            .await
            .map_err(&db)?;
            // The receipts' copy of the stored time (the top-up's order).
            sqlx::query("UPDATE receipts SET stored_at = ? WHERE message_id = ?")
                .bind(Ts(at))
                .bind(slot.message_id)
                .execute(&mut *conn)
                .await
                .map_err(&db)?;
            sqlx::query("DELETE FROM outbox_slots WHERE id = ?")
                .bind(slot.id)
                .execute(&mut *conn)
                .await
                .map_err(&db)?;
            mark_references_due(ledger, conn, slot.team_id, slot.message_id, at).await?;
        }
        SlotWrite::Retry {
            uncertain,
            next_attempt_at,
            code,
        } => {
            sqlx::query(
                "UPDATE outbox_slots
                 SET attempts = min(attempts + 1, 2147483647), uncertain = ?,
                     next_attempt_at = ?, leased_until = NULL, last_error = ?
                 WHERE id = ?",
            )
            .bind(uncertain)
            .bind(Ts(next_attempt_at))
            .bind(code)
            .bind(slot.id)
            .execute(&mut *conn)
            .await
            .map_err(&db)?;
        }
        SlotWrite::Failed { code } => {
            sqlx::query(
                "UPDATE outbox_slots SET failed = 1, leased_until = NULL, last_error = ?
                 WHERE id = ?",
            )
            .bind(code)
            .bind(slot.id)
            .execute(&mut *conn)
            .await
            .map_err(&db)?;
            sqlx::query("UPDATE messages SET publication = 'failed', failure = ? WHERE id = ?")
                .bind(code)
                .bind(slot.message_id)
                .execute(&mut *conn)
                .await
                .map_err(&db)?;
        }
    }
    Ok(())
}

pub(crate) async fn settle(
    ledger: &SqlLedger<Lite>,
    settlements: &[Settlement],
    at: DateTime<Utc>,
) -> BusResult<Vec<SettleOutcome>> {
    if settlements.is_empty() {
        return Ok(Vec::new());
    }
    let mut ids: Vec<Uuid> = settlements.iter().map(|s| s.slot).collect();
    ids.sort_unstable();
    ids.dedup();
    let mut tx = ledger.begin(WHAT).await?;
    let sql = format!(
        "SELECT s.id, s.generation, s.message_id, s.team_id
         FROM outbox_slots s JOIN messages m ON m.id = s.message_id
         WHERE s.tenant = ? AND s.failed = 0 AND s.leased_until > ? AND s.id IN ({})",
        marks(ids.len())
    );
    let mut query = sqlx::query_as::<_, LiveSlot>(&sql)
        .bind(ledger.tenant().as_str())
        .bind(Ts(at));
    for id in &ids {
        query = query.bind(*id);
    }
    let rows = query.fetch_all(&mut *tx).await.map_err(ledger.db(WHAT))?;
    let (outcomes, applied) = fence(settlements, rows);
    for (slot, outcome) in &applied {
        apply(ledger, &mut tx, slot, outcome, at).await?;
    }
    ledger.commit(tx, WHAT).await?;
    Ok(outcomes)
}
