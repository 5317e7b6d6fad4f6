//! `PostgresLedger::settle`'s writes, set-based (the live slots' lock and the fence are the
//! shared `crewbus_sql::settle`'s): a constant number of statements per call, whatever the
//! batch size — one statement per outcome kind present among the applied ones, each over `unnest`ed
//!    arrays: `Confirmed` (messages stored, slots deleted, reference markers — data-modifying
//!    CTEs), `Retryable`/`Uncertain` (one `UPDATE` of the slots), `Fatal` (slots
//!    failed and messages failed — one statement with a CTE).
//!
//! Reference markers of confirmed messages are inserted in call order, so their `ord` (the
//! reference worker's order) is the same as a per-slot loop would give. A message without
//! recipients gets none.

use chrono::{DateTime, Utc};
use crewbus_domain::{BusError, BusResult, SlotOutcome, TenantId};
use crewbus_sql::settle::{LiveSlot, SlotWrite};
use sqlx::PgConnection;
use uuid::Uuid;

use crate::error::bus_error;

const WHAT: &str = "settle";

fn db(e: sqlx::Error) -> BusError {
    bus_error(e, WHAT)
}

/// The applied settlements of one call, by outcome kind, each kind as the columns of its
/// `unnest`.
#[derive(Default)]
struct Plan {
    /// `Confirmed`: slot, message, team, locator — in call order.
    confirmed_slots: Vec<Uuid>,
    confirmed_messages: Vec<Uuid>,
    confirmed_teams: Vec<Uuid>,
    confirmed_locators: Vec<String>,
    /// `Retryable` and `Uncertain`: slot, uncertain, next attempt, error code.
    retry_slots: Vec<Uuid>,
    retry_uncertain: Vec<bool>,
    retry_next: Vec<DateTime<Utc>>,
    retry_codes: Vec<&'static str>,
    /// `Fatal`: slot, message, error code.
    fatal_slots: Vec<Uuid>,
    fatal_messages: Vec<Uuid>,
    fatal_codes: Vec<&'static str>,
}

impl Plan {
    fn add(&mut self, slot: &LiveSlot, outcome: &SlotOutcome) {
        match SlotWrite::from(outcome) {
            SlotWrite::Stored { locator } => {
                self.confirmed_slots.push(slot.id);
                self.confirmed_messages.push(slot.message_id);
                self.confirmed_teams.push(slot.team_id);
                self.confirmed_locators.push(locator.as_str().to_owned());
            }
            SlotWrite::Retry {
                uncertain,
                next_attempt_at,
                code,
            } => {
                self.retry_slots.push(slot.id);
                self.retry_uncertain.push(uncertain);
                self.retry_next.push(next_attempt_at);
                self.retry_codes.push(code);
            }
            SlotWrite::Failed { code } => {
                self.fatal_slots.push(slot.id);
                self.fatal_messages.push(slot.message_id);
                self.fatal_codes.push(code);
            }
        }
    }

    /// Writes every applied settlement: at most three statements.
    async fn apply(
        &self,
        conn: &mut PgConnection,
        tenant: &TenantId,
        at: DateTime<Utc>,
    ) -> BusResult<()> {
        if !self.confirmed_slots.is_empty() {
            sqlx::query(
                "WITH batch AS (
                     SELECT * FROM unnest($1::uuid[], $2::uuid[], $3::uuid[], $4::text[])
                         WITH ORDINALITY AS b(slot, message, team, locator, i)
                 ), stored AS (
                     UPDATE messages m
                     SET publication = 'stored', locator = b.locator, stored_at = $5
                     FROM batch b WHERE m.id = b.message
                 ), due AS (
                     UPDATE receipts r SET stored_at = $5
                     FROM batch b WHERE r.message_id = b.message
                 ), deleted AS (
                     DELETE FROM outbox_slots s USING batch b WHERE s.id = b.slot
                 )
                 INSERT INTO reference_marks (message_id, tenant, team_id, inbox, created_at)
                 SELECT b.message, $6, b.team, t.inbox, $5
                 FROM batch b JOIN teams t ON t.id = b.team
                 WHERE EXISTS (SELECT 1 FROM receipts r WHERE r.message_id = b.message)
                 ORDER BY b.i",
            )
            .bind(&self.confirmed_slots)
            .bind(&self.confirmed_messages)
            .bind(&self.confirmed_teams)
            .bind(&self.confirmed_locators)
            .bind(at)
            .bind(tenant.as_str())
            .execute(&mut *conn)
            .await
            .map_err(db)?;
        }
        if !self.retry_slots.is_empty() {
            sqlx::query(
                "UPDATE outbox_slots s
                 SET attempts = LEAST(s.attempts::bigint + 1, 2147483647)::integer,
                     uncertain = b.uncertain, next_attempt_at = b.next_attempt_at,
                     leased_until = NULL, last_error = b.code
                 FROM unnest($1::uuid[], $2::bool[], $3::timestamptz[], $4::text[])
                     AS b(slot, uncertain, next_attempt_at, code)
                 WHERE s.id = b.slot",
            )
            .bind(&self.retry_slots)
            .bind(&self.retry_uncertain)
            .bind(&self.retry_next)
            .bind(&self.retry_codes)
            .execute(&mut *conn)
            .await
            .map_err(db)?;
        }
        if !self.fatal_slots.is_empty() {
            sqlx::query(
                "WITH batch AS (
                     SELECT * FROM unnest($1::uuid[], $2::uuid[], $3::text[])
                         AS b(slot, message, code)
                 ), failed AS (
                     UPDATE outbox_slots s SET failed = true, leased_until = NULL,
                                               last_error = b.code
                     FROM batch b WHERE s.id = b.slot
                 )
                 UPDATE messages m SET publication = 'failed', failure = b.code
                 FROM batch b WHERE m.id = b.message",
            )
            .bind(&self.fatal_slots)
            .bind(&self.fatal_messages)
            .bind(&self.fatal_codes)
            .execute(&mut *conn)
            .await
            .map_err(db)?;
        }
        Ok(())
    }
}

/// `Dialect::write_settlements` on Postgres: the applied settlements of one call (in call
/// order, inside the settle's transaction) in at most three statements, one per outcome kind.
pub(crate) async fn write_settlements(
    conn: &mut PgConnection,
    tenant: &TenantId,
    applied: &[(LiveSlot, &SlotOutcome)],
    at: DateTime<Utc>,
) -> BusResult<()> {
    let mut plan = Plan::default();
    for (slot, outcome) in applied {
        plan.add(slot, outcome);
    }
    plan.apply(conn, tenant, at).await
}
