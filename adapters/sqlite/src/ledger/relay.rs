//! The SQLite ledger's relay side: leasing outbox slots (settling them is in `settle`).

use chrono::{DateTime, Utc};
use crewbus_domain::{BusError, BusResult, Envelope, LeasedSlot};
use uuid::Uuid;

use super::SqliteLedger;
use crate::codec::{Ts, from_db};

/// The port lists `settle` under the relay; it has its own file.
pub(super) use super::settle::settle;

pub(super) async fn lease_slots(
    ledger: &SqliteLedger,
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
        attempts: i64,
        uncertain: bool,
        next_attempt_at: Ts,
        ord: i64,
    }
    let what = "lease slots";
    let mut tx = ledger.begin(what).await?;
    // No SKIP LOCKED: the write transaction is exclusive, so a concurrent relay waits for it and
    // then finds these slots leased.
    let mut rows: Vec<Row> = sqlx::query_as(
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
    .bind(ledger.tenant.as_str())
    .bind(Ts(at))
    .bind(limit as i64)
    .bind(Ts(until))
    .fetch_all(&mut *tx)
    .await
    .map_err(ledger.db(what))?;
    ledger.commit(tx, what).await?;
    // RETURNING has no order: restore the lease order.
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
                attempts: u32::try_from(r.attempts).unwrap_or(u32::MAX),
                uncertain: r.uncertain,
                leased_until: until,
            })
        })
        .collect()
}
