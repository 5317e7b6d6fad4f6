//! The Postgres ledger's delivery: the section is `crewbus_sql::delivery`'s (re-exported here);
//! this module holds the statements only Postgres runs — `hand_out`'s set-based reads and writes
//! (`= ANY($1)`, `unnest` arrays: a constant number of statements whatever the batch size), with
//! the receipts locked in message id order — and the wake-up sweep's waiters as arrays.

use std::collections::{BTreeMap, HashMap};

use chrono::{DateTime, Utc};
use crewbus_domain::{
    BusError, BusResult, DeliveryId, InboxAck, IssuedHandOut, LiveHandOut, SweepTarget,
};
use crewbus_sql::delivery::{Candidate, Prior};
use crewbus_sql::driver::Stmt;
use crewbus_sql::ledger::SqlLedger;
use sqlx::{PgConnection, Postgres};
use uuid::Uuid;

use super::db;
use super::rows::db_i64;
use crate::dialect::Pg;

/// `Dialect::sweep_targets` on Postgres: the waiters as three arrays (`unnest`).
pub(crate) fn sweep_targets(first: usize) -> String {
    format!(
        "SELECT DISTINCT w.team, w.agent
         FROM unnest(${first}::uuid[], ${}::uuid[], ${}::timestamptz[])
              AS w(team, agent, stored_after)",
        first + 1,
        first + 2
    )
}

/// `Dialect::bind_sweep_targets` on Postgres.
pub(crate) fn bind_sweep_targets<'q>(
    q: Stmt<'q, Postgres>,
    targets: &[SweepTarget],
) -> Stmt<'q, Postgres> {
    let teams: Vec<Uuid> = targets.iter().map(|t| t.target.team).collect();
    let agents: Vec<Uuid> = targets.iter().map(|t| t.target.agent).collect();
    let after: Vec<Option<DateTime<Utc>>> = targets.iter().map(|t| t.stored_after).collect();
    q.arg(teams).arg(agents).arg(after)
}

/// `Dialect::hand_out_candidates` on Postgres, in one statement: the recipient's row of
/// this tenant, and the candidates with their receipt rows locked in message id order
/// (deterministic, so concurrent calls cannot deadlock): concurrent hand-outs of one message
/// to one recipient are serialised, and the hand-outs read next (a later statement, a fresh
/// snapshot) include the other call's.
pub(crate) async fn hand_out_candidates(
    ledger: &SqlLedger<Pg>,
    conn: &mut PgConnection,
    team: Uuid,
    recipient: Uuid,
    ids: &[Uuid],
) -> BusResult<HashMap<Uuid, Candidate>> {
    // The agent's row (of this tenant) is the outer side: no row → unknown; one row with
    // NULL candidate columns when no candidate is found. The candidates are a materialised
    // CTE, so their locks are taken once, in `ORDER BY m.id` order.
    type Row = (bool, Option<Uuid>, Option<Uuid>, Option<i64>, Option<bool>);
    let rows: Vec<Row> = sqlx::query_as(
        "WITH c AS MATERIALIZED (
             SELECT m.id, m.conversation_id, m.seq, r.delivered_at IS NOT NULL AS delivered
             FROM messages m
             JOIN receipts r ON r.message_id = m.id AND r.recipient_id = $2
             WHERE m.id = ANY($1) AND m.team_id = $3 AND m.publication = 'stored'
             ORDER BY m.id
             FOR NO KEY UPDATE OF r)
         SELECT a.revoked_at IS NOT NULL, c.id, c.conversation_id, c.seq, c.delivered
         FROM agents a
         JOIN teams t ON t.id = a.team_id AND t.tenant = $4
         LEFT JOIN c ON true
         WHERE a.id = $2 AND a.team_id = $3",
    )
    .bind(ids)
    .bind(recipient)
    .bind(team)
    .bind(ledger.tenant().as_str())
    .fetch_all(&mut *conn)
    .await
    .map_err(db("hand-out"))?;
    let Some((revoked, ..)) = rows.first() else {
        return Err(BusError::not_found(format!("agent {recipient}")));
    };
    if *revoked {
        return Err(BusError::Unauthenticated);
    }
    Ok(rows
        .into_iter()
        .filter_map(|(_, id, conversation, seq, delivered)| {
            let candidate = Candidate {
                conversation: conversation?,
                seq: seq?,
                delivered: delivered?,
            };
            Some((id?, candidate))
        })
        .collect())
}

/// `Dialect::prior_hand_outs` on Postgres: the latest live hand-out of each message, else
/// its latest (`DISTINCT ON`).
pub(crate) async fn prior_hand_outs(
    conn: &mut PgConnection,
    recipient: Uuid,
    ids: &[Uuid],
    at: DateTime<Utc>,
) -> BusResult<HashMap<Uuid, Prior>> {
    let rows: Vec<(Uuid, bool, Uuid, DateTime<Utc>)> = sqlx::query_as(
        "SELECT DISTINCT ON (message_id)
                message_id, held_until > $3, delivery_id, held_until
         FROM hand_outs
         WHERE message_id = ANY($1) AND recipient_id = $2
         ORDER BY message_id, (held_until > $3) DESC, ord DESC",
    )
    .bind(ids)
    .bind(recipient)
    .bind(at)
    .fetch_all(&mut *conn)
    .await
    .map_err(db("hand-out"))?;
    Ok(rows
        .into_iter()
        .map(|(message, live, delivery, until)| {
            let live = live.then_some(LiveHandOut {
                holder: DeliveryId(delivery),
                held_until: until,
            });
            (message, live)
        })
        .collect())
}

/// `Dialect::write_hand_outs` on Postgres: one statement for the acks (rows in delivery id
/// order), one for the new hand-outs.
pub(crate) async fn write_hand_outs(
    conn: &mut PgConnection,
    team: Uuid,
    acks: &BTreeMap<DeliveryId, InboxAck>,
    issued: &[IssuedHandOut],
) -> BusResult<()> {
    replace_acks(conn, acks).await?;
    insert_hand_outs(conn, team, issued).await
}

/// One statement (rows in delivery id order).
async fn replace_acks(
    conn: &mut PgConnection,
    acks: &BTreeMap<DeliveryId, InboxAck>,
) -> BusResult<()> {
    if acks.is_empty() {
        return Ok(());
    }
    let deliveries: Vec<Uuid> = acks.keys().map(|d| d.0).collect();
    let inboxes: Vec<&str> = acks.values().map(|a| a.inbox.as_str()).collect();
    let subjects: Vec<&str> = acks.values().map(|a| a.ack_subject.as_str()).collect();
    let statement = sqlx::query(
        "UPDATE hand_outs h SET ack_inbox = u.inbox, ack_subject = u.subject
         FROM unnest($1::uuid[], $2::text[], $3::text[]) AS u (delivery_id, inbox, subject)
         WHERE h.delivery_id = u.delivery_id",
    )
    .bind(&deliveries)
    .bind(&inboxes)
    .bind(&subjects);
    write(conn, statement).await
}

/// One statement.
async fn insert_hand_outs(
    conn: &mut PgConnection,
    team: Uuid,
    rows: &[IssuedHandOut],
) -> BusResult<()> {
    let Some(first) = rows.first() else {
        return Ok(());
    };
    let (recipient, issued_at, held_until) = (
        first.hand_out.recipient,
        first.hand_out.issued_at,
        first.hand_out.held_until,
    );
    let deliveries: Vec<Uuid> = rows.iter().map(|r| r.hand_out.delivery.0).collect();
    let messages: Vec<Uuid> = rows.iter().map(|r| r.hand_out.message).collect();
    let conversations: Vec<Uuid> = rows.iter().map(|r| r.hand_out.conversation).collect();
    let seqs: Vec<i64> = rows.iter().map(|r| db_i64(r.hand_out.seq)).collect();
    let redelivered: Vec<bool> = rows.iter().map(|r| r.hand_out.redelivered).collect();
    let inboxes: Vec<Option<&str>> = rows
        .iter()
        .map(|r| r.ack.as_ref().map(|a| a.inbox.as_str()))
        .collect();
    let subjects: Vec<Option<&str>> = rows
        .iter()
        .map(|r| r.ack.as_ref().map(|a| a.ack_subject.as_str()))
        .collect();
    let statement = sqlx::query(
        "INSERT INTO hand_outs
             (delivery_id, team_id, message_id, recipient_id, conversation_id, seq,
              redelivered, issued_at, held_until, ack_inbox, ack_subject)
         SELECT u.delivery_id, $1, u.message_id, $2, u.conversation_id, u.seq,
                u.redelivered, $3, $4, u.ack_inbox, u.ack_subject
         FROM unnest($5::uuid[], $6::uuid[], $7::uuid[], $8::int8[], $9::bool[],
                     $10::text[], $11::text[])
              AS u (delivery_id, message_id, conversation_id, seq, redelivered,
                    ack_inbox, ack_subject)",
    )
    .bind(team)
    .bind(recipient)
    .bind(issued_at)
    .bind(held_until)
    .bind(&deliveries)
    .bind(&messages)
    .bind(&conversations)
    .bind(&seqs)
    .bind(&redelivered)
    .bind(&inboxes)
    .bind(&subjects);
    write(conn, statement).await
}

/// Runs one of `hand_out`'s write statements.
async fn write(
    conn: &mut PgConnection,
    statement: sqlx::query::Query<'_, sqlx::Postgres, sqlx::postgres::PgArguments>,
) -> BusResult<()> {
    statement
        .execute(&mut *conn)
        .await
        .map_err(db("hand-out"))?;
    Ok(())
}
