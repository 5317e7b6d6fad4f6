//! The Postgres ledger's relay side: leasing outbox slots and settling them (set-based, in
//! `settle`).

use chrono::{DateTime, Utc};
use crewbus_domain::{BusError, BusResult, Envelope, LeasedSlot, SettleOutcome, Settlement};
use uuid::Uuid;

use super::PostgresLedger;
use super::rows::from_db;
use super::settle;

pub(super) async fn lease_slots(
    ledger: &PostgresLedger,
    at: DateTime<Utc>,
    until: DateTime<Utc>,
    limit: usize,
) -> BusResult<Vec<LeasedSlot>> {
    #[derive(sqlx::FromRow)]
    struct Row {
        id: Uuid,
        generation: i64,
        backend: String,
        message_id: Uuid,
        conversation_id: Uuid,
        team_id: Uuid,
        body: Vec<u8>,
        publish_key: Uuid,
        attempts: i32,
        uncertain: bool,
        next_attempt_at: DateTime<Utc>,
        ord: i64,
    }
    let mut rows: Vec<Row> = ledger
        .lease_rows(
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
    rows.sort_by_key(|r| (r.next_attempt_at, r.ord));
    rows.into_iter()
        .map(|r| {
            let body = String::from_utf8(r.body)
                .map_err(|_| BusError::invalid("a slot's stored body is not UTF-8"))?;
            Ok(LeasedSlot {
                slot: r.id,
                generation: from_db(r.generation),
                backend: r.backend,
                envelope: Envelope {
                    message_id: r.message_id,
                    conversation_id: r.conversation_id,
                    team_id: r.team_id,
                    body,
                    publish_key: r.publish_key,
                },
                attempts: u32::try_from(r.attempts).unwrap_or(0),
                uncertain: r.uncertain,
                leased_until: until,
            })
        })
        .collect()
}

pub(super) async fn settle(
    ledger: &PostgresLedger,
    settlements: &[Settlement],
    at: DateTime<Utc>,
) -> BusResult<Vec<SettleOutcome>> {
    if settlements.is_empty() {
        return Ok(Vec::new());
    }
    let what = "settle";
    let mut tx = ledger.begin(what).await?;
    let outcomes = settle::settle(&mut tx, &ledger.tenant, settlements, at).await?;
    PostgresLedger::commit(tx, what).await?;
    Ok(outcomes)
}
