//! The relay's lease of outbox slots (`Ledger::lease_slots`), once for both SQL stores: one
//! statement, on [`Dialect::write`] (Postgres a pool connection, the statement its own
//! transaction; SQLite a write transaction of its own), scanning every due row each time (no
//! cursor), so a slot whose send committed after a later one is never skipped. Settling is the
//! dialect's ([`Dialect::settle`]).

use chrono::{DateTime, Utc};
use crewbus_domain::{BusResult, LeasedSlot};

use crate::dialect::{Dialect, PerDialect};
use crate::driver::stmt;
use crate::ledger::SqlLedger;
use crate::rows::{SlotRow, leased_slots};

/// The lease of this tenant's due slots — `$1` the tenant, `$2` the time `at`, `$3` at most
/// that many, `$4` the lease's end — returning the leased rows (in any order).
const LEASE_SLOTS: PerDialect<&str> = PerDialect {
    // `SKIP LOCKED`: concurrent relays never lease the same row.
    postgres: "WITH due AS (
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
    // No SKIP LOCKED: the write transaction is exclusive, so a concurrent relay waits for it
    // and then finds these slots leased.
    sqlite: "UPDATE outbox_slots SET generation = generation + 1, leased_until = ?4
         WHERE ord IN (
             SELECT ord FROM outbox_slots
             WHERE tenant = ?1 AND failed = 0 AND next_attempt_at <= ?2
               AND (leased_until IS NULL OR leased_until <= ?2)
             ORDER BY next_attempt_at, ord
             LIMIT ?3)
         RETURNING id, generation, backend, message_id, conversation_id, team_id, body,
                   publish_key, attempts, uncertain, next_attempt_at, ord",
};

/// `Ledger::lease_slots`, the lease ending at `until`: the leased slots in lease order
/// ([`leased_slots`]: `RETURNING` has no order).
pub async fn lease_slots<D: Dialect>(
    ledger: &SqlLedger<D>,
    at: DateTime<Utc>,
    until: DateTime<Utc>,
    limit: usize,
) -> BusResult<Vec<LeasedSlot>> {
    let what = "lease slots";
    let mut write = ledger.write(what).await?;
    let rows: Vec<SlotRow<D::Time, D::SlotAttempts>> = stmt::<D>(LEASE_SLOTS.of::<D>())
        .arg(ledger.tenant().as_str().to_owned())
        .arg(D::time(at))
        .arg(limit as i64)
        .arg(D::time(until))
        .all(&mut write)
        .await
        .map_err(ledger.db(what))?;
    ledger.end_write(write, what).await?;
    leased_slots(rows, until)
}
