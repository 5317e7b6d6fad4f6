//! The relay's settle (`Ledger::settle`), once for both SQL stores: the live slots read, the
//! fence (which settlements of a call apply to them) and, where the store writes them row by
//! row, the applied settlements' writes.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use crewbus_domain::{BusResult, Locator, SettleOutcome, Settlement, SlotOutcome};
use uuid::Uuid;

use crate::dialect::{Conn, Dialect, LEAST};
use crate::driver::stmt;
use crate::ledger::SqlLedger;

const WHAT: &str = "settle";

/// `Ledger::settle`, in one write transaction:
///
/// 1. The live slots named by the batch (not failed, lease unexpired at `at`) are read with
///    their generation and their message's place, in id order; where writers lock rows they are
///    locked (`FOR UPDATE`), so concurrent settlers lock in the same order and never deadlock;
///    on SQLite the write transaction is exclusive, so they cannot change before the commit.
/// 2. The fence is decided in memory ([`fence`]).
/// 3. The applied settlements are written by [`Dialect::write_settlements`] (Postgres: one
///    statement per outcome kind; SQLite: [`write_each`]).
pub async fn settle<D: Dialect>(
    ledger: &SqlLedger<D>,
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
    // Locked in id order (the sort sits below the lock), like every other settler.
    let sql = format!(
        "SELECT s.id, s.generation, s.message_id, s.team_id
         FROM outbox_slots s
         WHERE {} AND s.tenant = $1 AND NOT s.failed AND s.leased_until > $2
         ORDER BY s.id{}",
        D::any_id("s.id", 3, ids.len()),
        D::FOR_UPDATE
    );
    let q = stmt::<D>(&sql)
        .arg(ledger.tenant().as_str().to_owned())
        .arg(D::time(at));
    let rows: Vec<LiveSlot> = D::bind_ids(q, &ids)
        .all(&mut tx)
        .await
        .map_err(ledger.db(WHAT))?;
    let (outcomes, applied) = fence(settlements, rows);
    D::write_settlements(ledger, &mut tx, &applied, at).await?;
    ledger.commit(tx, WHAT).await?;
    Ok(outcomes)
}

/// Writes each applied settlement of `applied` at once, in call order, a statement per row:
/// `Confirmed` (message stored, its receipts' copy of the stored time, slot deleted, the
/// message's reference marker), `Retryable`/`Uncertain` (slot backs off), `Fatal` (slot and
/// message failed). Reference markers get their `ord` in call order. What SQLite runs (in
/// process, a statement per row costs no round trip): [`Dialect::write_settlements`]' default.
pub async fn write_each<D: Dialect>(
    ledger: &SqlLedger<D>,
    conn: &mut Conn<D>,
    applied: &[(LiveSlot, &SlotOutcome)],
    at: DateTime<Utc>,
) -> BusResult<()> {
    let db = ledger.db(WHAT);
    for (slot, outcome) in applied {
        match SlotWrite::from(*outcome) {
            SlotWrite::Stored { locator } => {
                stmt::<D>(
                    "UPDATE messages SET publication = 'stored', locator = $1, stored_at = $2
                     WHERE id = $3",
                )
                .arg(locator.as_str().to_owned())
                .arg(D::time(at))
                .arg(slot.message_id)
                .run(conn)
                .await
                .map_err(&db)?;
                // The receipts' copy of the stored time (the top-up's order).
                stmt::<D>("UPDATE receipts SET stored_at = $1 WHERE message_id = $2")
                    .arg(D::time(at))
                    .arg(slot.message_id)
                    .run(conn)
                    .await
                    .map_err(&db)?;
                stmt::<D>("DELETE FROM outbox_slots WHERE id = $1")
                    .arg(slot.id)
                    .run(conn)
                    .await
                    .map_err(&db)?;
                crate::references::mark_due(ledger, conn, slot.team_id, slot.message_id, at)
                    .await?;
            }
            SlotWrite::Retry {
                uncertain,
                next_attempt_at,
                code,
            } => {
                let sql = format!(
                    "UPDATE outbox_slots
                     SET attempts = {}(attempts + 1, 2147483647), uncertain = $1,
                         next_attempt_at = $2, leased_until = NULL, last_error = $3
                     WHERE id = $4",
                    LEAST.of::<D>()
                );
                stmt::<D>(&sql)
                    .arg(uncertain)
                    .arg(D::time(next_attempt_at))
                    .arg(code.to_owned())
                    .arg(slot.id)
                    .run(conn)
                    .await
                    .map_err(&db)?;
            }
            SlotWrite::Failed { code } => {
                stmt::<D>(
                    "UPDATE outbox_slots SET failed = $1, leased_until = NULL, last_error = $2
                     WHERE id = $3",
                )
                .arg(true)
                .arg(code.to_owned())
                .arg(slot.id)
                .run(conn)
                .await
                .map_err(&db)?;
                stmt::<D>("UPDATE messages SET publication = 'failed', failure = $1 WHERE id = $2")
                    .arg(code.to_owned())
                    .arg(slot.message_id)
                    .run(conn)
                    .await
                    .map_err(&db)?;
            }
        }
    }
    Ok(())
}

/// A slot live at the settle time (not failed, lease unexpired), with its message's place:
/// `SELECT s.id, s.generation, s.message_id, s.team_id FROM outbox_slots s …`.
#[derive(sqlx::FromRow)]
pub struct LiveSlot {
    /// The slot.
    pub id: Uuid,
    /// Its current generation (bumped by each lease).
    pub generation: i64,
    /// The message it publishes.
    pub message_id: Uuid,
    /// The message's team.
    pub team_id: Uuid,
}

/// Decides the fence, settlement by settlement in call order: a settlement applies only when its
/// slot is among `live` with the same generation and no earlier settlement of this call applied
/// to it (an applied one releases the lease); everything else is `Stale`.
///
/// Returns one outcome per settlement, in order, and the applied ones as (slot, outcome), in
/// call order: the writes the adapter then makes.
pub fn fence(
    settlements: &[Settlement],
    live: Vec<LiveSlot>,
) -> (Vec<SettleOutcome>, Vec<(LiveSlot, &SlotOutcome)>) {
    let mut live: HashMap<Uuid, LiveSlot> = live.into_iter().map(|r| (r.id, r)).collect();
    let mut applied = Vec::new();
    let outcomes = settlements
        .iter()
        .map(|s| {
            let current = live
                .get(&s.slot)
                .is_some_and(|r| i64::try_from(s.generation) == Ok(r.generation));
            // An applied settlement releases the lease: the same slot again is stale.
            match current.then(|| live.remove(&s.slot)).flatten() {
                Some(slot) => {
                    applied.push((slot, &s.outcome));
                    SettleOutcome::Applied
                }
                None => SettleOutcome::Stale,
            }
        })
        .collect();
    (outcomes, applied)
}

/// What an applied settlement writes, on either store: the relay's four outcomes as the three
/// writes they make (`Retryable` and `Uncertain` differ only in the slot's uncertain flag).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlotWrite<'a> {
    /// `Confirmed`: the message becomes stored at `locator`, the slot is deleted and the
    /// message's reference marker is written.
    Stored {
        /// Where the body backend keeps the body.
        locator: &'a Locator,
    },
    /// `Retryable` or `Uncertain`: the slot's attempts grow by one (saturating at `i32::MAX`),
    /// its lease is released and it is due again at `next_attempt_at`.
    Retry {
        /// Whether the attempt may have landed (`Uncertain`): the relay then reconciles it.
        uncertain: bool,
        /// When the slot is due again.
        next_attempt_at: DateTime<Utc>,
        /// The error's `BusError::code`, recorded as the slot's last error (never backend text).
        code: &'static str,
    },
    /// `Fatal`: the slot and its message are failed with `code`.
    Failed {
        /// The error's `BusError::code`, recorded on the slot and the message.
        code: &'static str,
    },
}

impl<'a> From<&'a SlotOutcome> for SlotWrite<'a> {
    fn from(outcome: &'a SlotOutcome) -> Self {
        match outcome {
            SlotOutcome::Confirmed { locator } => SlotWrite::Stored { locator },
            SlotOutcome::Retryable {
                error,
                next_attempt_at,
            } => SlotWrite::Retry {
                uncertain: false,
                next_attempt_at: *next_attempt_at,
                code: error.code(),
            },
            SlotOutcome::Uncertain {
                error,
                next_attempt_at,
            } => SlotWrite::Retry {
                uncertain: true,
                next_attempt_at: *next_attempt_at,
                code: error.code(),
            },
            SlotOutcome::Fatal { error } => SlotWrite::Failed { code: error.code() },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crewbus_domain::BusError;

    #[test]
    fn retryable_and_uncertain_write_alike_but_for_the_flag() {
        let at = DateTime::from_timestamp(1_000, 0).unwrap();
        let error = BusError::unavailable("down");
        let retry = SlotOutcome::Retryable {
            error: error.clone(),
            next_attempt_at: at,
        };
        let uncertain = SlotOutcome::Uncertain {
            error: error.clone(),
            next_attempt_at: at,
        };
        let write = |uncertain| SlotWrite::Retry {
            uncertain,
            next_attempt_at: at,
            code: error.code(),
        };
        assert_eq!(SlotWrite::from(&retry), write(false));
        assert_eq!(SlotWrite::from(&uncertain), write(true));
        let fatal = SlotOutcome::Fatal {
            error: BusError::conflict("held"),
        };
        assert_eq!(
            SlotWrite::from(&fatal),
            SlotWrite::Failed {
                code: BusError::conflict("held").code()
            }
        );
    }
}
