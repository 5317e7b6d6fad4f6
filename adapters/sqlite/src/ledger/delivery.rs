//! The SQLite ledger's delivery: messages as they stand, hand-outs, the top-up and wake-up
//! reads, confirmations, acknowledgements and receipts.
//!
//! `hand_out` and `confirm` read the facts inside their write transaction, ask the domain's
//! delivery rules (`plan_hand_outs`, `decide_confirms`) for the decision, and write it; the
//! transaction is exclusive, so the facts hold until the commit.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use crewbus_domain::{
    BusError, BusResult, CandidateFacts, ConfirmFacts, ConfirmOutcome, DeliveryId, HandOutOutcome,
    HandOutRequest, InboxAck, LiveHandOut, Message, Receipt, RecordKind, RunId, WakeupTarget,
    decide_confirms, plan_hand_outs,
};
use crewbus_sql::ledger::SqlLedger;
use sqlx::SqliteConnection;
use uuid::Uuid;

use super::SqliteLedger;
use super::rows::{MESSAGE_COLUMNS, MessageRow, RECEIPT_COLUMNS, RECEIPTS, ReceiptRow};
use crate::codec::{Ts, db_i64, from_db, marks};
use crate::dialect::Lite;
use crewbus_sql::journal::append;

/// A candidate of one `hand_out` call as the ledger knows it: the message's place and whether
/// the recipient's receipt is delivered.
struct Candidate {
    conversation: Uuid,
    seq: i64,
    delivered: bool,
}

/// The hand-outs of one (message, recipient) recorded before a `hand_out` call: the live one
/// (unconfirmed, `held_until > at`; the latest if several), and whether any exists at all.
struct Prior {
    live: Option<(i64, LiveHandOut<DeliveryId>)>,
    earlier: bool,
}

impl SqliteLedger {
    /// `hand_out`, step 1: the candidates among `ids` (distinct) that are `Stored` messages of
    /// `team` (of this tenant) with a receipt for `recipient`, by message id.
    async fn candidates(
        &self,
        conn: &mut SqliteConnection,
        team: Uuid,
        recipient: Uuid,
        ids: &[Uuid],
    ) -> BusResult<HashMap<Uuid, Candidate>> {
        if ids.is_empty() {
            return Ok(HashMap::new());
        }
        let sql = format!(
            "SELECT m.id, m.conversation_id, m.seq, r.delivered_at IS NOT NULL
             FROM messages m
             JOIN teams t ON t.id = m.team_id AND t.tenant = ?
             JOIN receipts r ON r.message_id = m.id AND r.recipient_id = ?
             WHERE m.team_id = ? AND m.publication = 'stored' AND m.id IN ({})",
            marks(ids.len())
        );
        let mut query = sqlx::query_as::<_, (Uuid, Uuid, i64, bool)>(&sql)
            .bind(self.tenant.as_str())
            .bind(recipient)
            .bind(team);
        for id in ids {
            query = query.bind(*id);
        }
        let rows = query
            .fetch_all(&mut *conn)
            .await
            .map_err(self.db("hand-out"))?;
        Ok(rows
            .into_iter()
            .map(|(id, conversation, seq, delivered)| {
                let candidate = Candidate {
                    conversation,
                    seq,
                    delivered,
                };
                (id, candidate)
            })
            .collect())
    }

    /// `hand_out`, step 2: the hand-outs of `ids` to `recipient` recorded so far, by message id
    /// (a message never handed out is absent).
    async fn prior_hand_outs(
        &self,
        conn: &mut SqliteConnection,
        recipient: Uuid,
        ids: &[Uuid],
        at: DateTime<Utc>,
    ) -> BusResult<HashMap<Uuid, Prior>> {
        let sql = format!(
            "SELECT message_id, held_until > ?, delivery_id, held_until,
                    ord
             FROM hand_outs WHERE recipient_id = ? AND message_id IN ({})",
            marks(ids.len())
        );
        let mut query = sqlx::query_as::<_, (Uuid, bool, Uuid, Ts, i64)>(&sql)
            .bind(Ts(at))
            .bind(recipient);
        for id in ids {
            query = query.bind(*id);
        }
        let rows = query
            .fetch_all(&mut *conn)
            .await
            .map_err(self.db("hand-out"))?;
        let mut prior: HashMap<Uuid, Prior> = HashMap::new();
        for (message, live, delivery, until, ord) in rows {
            let entry = prior.entry(message).or_insert(Prior {
                live: None,
                earlier: true,
            });
            if live && entry.live.as_ref().is_none_or(|(o, _)| *o < ord) {
                let hand_out = LiveHandOut {
                    holder: DeliveryId(delivery),
                    held_until: until.0,
                };
                entry.live = Some((ord, hand_out));
            }
        }
        Ok(prior)
    }
}

pub(super) async fn message(
    ledger: &SqliteLedger,
    team: Uuid,
    message: Uuid,
) -> BusResult<Message> {
    let what = "message lookup";
    let mut conn = ledger.read_connection(what).await?;
    ledger.message_row(&mut conn, team, message).await
}

pub(super) async fn messages(
    ledger: &SqliteLedger,
    team: Uuid,
    ids: &[Uuid],
) -> BusResult<Vec<Message>> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let what = "message lookup";
    let sql = format!(
        "SELECT {MESSAGE_COLUMNS} FROM messages m JOIN teams t ON t.id = m.team_id
         WHERE m.team_id = ? AND t.tenant = ? AND m.id IN ({})",
        marks(ids.len())
    );
    let mut query = sqlx::query_as::<_, MessageRow>(&sql)
        .bind(team)
        .bind(ledger.tenant.as_str());
    for id in ids {
        query = query.bind(*id);
    }
    let rows = query
        .fetch_all(ledger.pools.reader())
        .await
        .map_err(ledger.db(what))?;
    let mut found: HashMap<Uuid, Message> = HashMap::with_capacity(rows.len());
    for row in rows {
        let message = Message::try_from(row)?;
        found.insert(message.id, message);
    }
    // The order of first appearance in `ids`; `remove` answers a repeated id once.
    Ok(ids.iter().filter_map(|id| found.remove(id)).collect())
}

pub(super) async fn hand_out(
    ledger: &SqliteLedger,
    team: Uuid,
    recipient: Uuid,
    requests: &[HandOutRequest],
    held_until: DateTime<Utc>,
    at: DateTime<Utc>,
) -> BusResult<Vec<HandOutOutcome>> {
    let what = "hand-out";
    let mut tx = ledger.begin(what).await?;
    let mut ids: Vec<Uuid> = requests.iter().map(|r| r.message).collect();
    ids.sort_unstable();
    ids.dedup();
    // Unknown recipient → `NotFound`, revoked → `Unauthenticated` (whatever the app's token
    // cache says); the transaction is exclusive, so a revocation cannot land before the commit.
    ledger
        .agent_row(&mut tx, team, recipient)
        .await?
        .ensure_active()?;
    let candidates = ledger.candidates(&mut tx, team, recipient, &ids).await?;
    if requests.is_empty() {
        ledger.commit(tx, what).await?;
        return Ok(Vec::new());
    }
    let open: Vec<Uuid> = ids
        .into_iter()
        .filter(|id| candidates.get(id).is_some_and(|c| !c.delivered))
        .collect();
    let prior = if open.is_empty() {
        HashMap::new()
    } else {
        ledger
            .prior_hand_outs(&mut tx, recipient, &open, at)
            .await?
    };
    let plan = plan_hand_outs(
        recipient,
        requests,
        |message| match candidates.get(&message) {
            None => CandidateFacts::Unknown,
            Some(c) if c.delivered => CandidateFacts::Delivered,
            Some(c) => CandidateFacts::Open {
                conversation: c.conversation,
                seq: from_db(c.seq),
                live: prior
                    .get(&message)
                    .and_then(|p| p.live.as_ref().map(|(_, l)| *l)),
                handed_out_before: prior.get(&message).is_some_and(|p| p.earlier),
            },
        },
        at,
        held_until,
        || DeliveryId(Uuid::new_v4()),
    );
    let db = ledger.db(what);
    for (delivery, ack) in &plan.moved_acks {
        sqlx::query("UPDATE hand_outs SET ack_inbox = ?, ack_subject = ? WHERE delivery_id = ?")
            .bind(&ack.inbox)
            .bind(&ack.ack_subject)
            .bind(delivery.0)
            .execute(&mut *tx)
            .await
            .map_err(&db)?;
    }
    for issued in &plan.issued {
        let h = &issued.hand_out;
        sqlx::query(
            "INSERT INTO hand_outs
                 (delivery_id, team_id, message_id, recipient_id, conversation_id, seq,
                  redelivered, issued_at, held_until, ack_inbox, ack_subject)
             VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        )
        .bind(h.delivery.0)
        .bind(team)
        .bind(h.message)
        .bind(h.recipient)
        .bind(h.conversation)
        .bind(db_i64(h.seq))
        .bind(h.redelivered)
        .bind(Ts(h.issued_at))
        .bind(Ts(h.held_until))
        .bind(issued.ack.as_ref().map(|a| a.inbox.as_str()))
        .bind(issued.ack.as_ref().map(|a| a.ack_subject.as_str()))
        .execute(&mut *tx)
        .await
        .map_err(&db)?;
    }
    ledger.commit(tx, what).await?;
    Ok(plan.outcomes)
}

/// The top-up query: the recipient's undelivered receipts (the partial index
/// `receipts_undelivered`, a handful of rows) joined to their messages, oldest stored first.
/// `CROSS JOIN` pins that join order: SQLite's planner otherwise may drive the query from
/// `messages_sent (team_id, sent_at)` and walk every message of the team (seen: the top-up and
/// the wake-up sweep grew with the team's history). `plans` below checks the order.
pub(super) const UNDELIVERED_SQL: &str =
    "SELECT m.id FROM receipts r CROSS JOIN messages m ON m.id = r.message_id
         WHERE r.recipient_id = ?1 AND r.delivered_at IS NULL AND m.team_id = ?2
           AND m.publication = 'stored' AND m.stored_at < ?3
           AND NOT EXISTS (
               SELECT 1 FROM hand_outs h
               WHERE h.message_id = m.id AND h.recipient_id = ?1
                 AND h.held_until > ?4)
         ORDER BY m.stored_at, m.conversation_id, m.seq
         LIMIT ?5";

pub(super) async fn undelivered(
    ledger: &SqliteLedger,
    team: Uuid,
    recipient: Uuid,
    stored_before: DateTime<Utc>,
    at: DateTime<Utc>,
    limit: usize,
) -> BusResult<Vec<Uuid>> {
    let what = "undelivered";
    let mut tx = ledger.read(what).await?;
    ledger
        .agent_row(&mut tx, team, recipient)
        .await?
        .ensure_active()?;
    let ids: Vec<Uuid> = sqlx::query_scalar(UNDELIVERED_SQL)
        .bind(recipient)
        .bind(team)
        .bind(Ts(stored_before))
        .bind(Ts(at))
        .bind(limit as i64)
        .fetch_all(&mut *tx)
        .await
        .map_err(ledger.db(what))?;
    Ok(ids)
}

/// The wake-up sweep for `n` waiters (`(team, agent)` pairs bound first, then the tenant, the
/// stored-before and the hold times): the waiters whose agent is gone or revoked, or for whom
/// the top-up query (`UNDELIVERED_SQL`) finds a message. The same `CROSS JOIN` pin as there.
pub(super) fn wakeable_sql(n: usize) -> String {
    let values = vec!["(?, ?)"; n].join(", ");
    format!(
        "WITH w(team, agent) AS (VALUES {values})
         SELECT DISTINCT w.team, w.agent FROM w
         WHERE NOT EXISTS (
                 SELECT 1 FROM agents a JOIN teams t ON t.id = a.team_id
                 WHERE a.id = w.agent AND a.team_id = w.team AND t.tenant = ?
                   AND a.revoked_at IS NULL)
            OR EXISTS (
                 SELECT 1 FROM receipts r CROSS JOIN messages m ON m.id = r.message_id
                 WHERE r.recipient_id = w.agent AND r.delivered_at IS NULL
                   AND m.team_id = w.team AND m.publication = 'stored'
                   AND m.stored_at < ?
                   AND NOT EXISTS (
                       SELECT 1 FROM hand_outs h
                       WHERE h.message_id = m.id AND h.recipient_id = w.agent
                         AND h.held_until > ?))"
    )
}

pub(super) async fn wakeable(
    ledger: &SqliteLedger,
    targets: &[WakeupTarget],
    stored_before: DateTime<Utc>,
    at: DateTime<Utc>,
) -> BusResult<Vec<WakeupTarget>> {
    if targets.is_empty() {
        return Ok(Vec::new());
    }
    // One statement for every waiter: the agent gone or revoked, or the top-up query's
    // condition (`undelivered`) holding for at least one message.
    let sql = wakeable_sql(targets.len());
    let mut query = sqlx::query_as::<_, (Uuid, Uuid)>(&sql);
    for t in targets {
        query = query.bind(t.team).bind(t.agent);
    }
    let rows = query
        .bind(ledger.tenant.as_str())
        .bind(Ts(stored_before))
        .bind(Ts(at))
        .fetch_all(ledger.pools.reader())
        .await
        .map_err(ledger.db("wakeable"))?;
    Ok(rows
        .into_iter()
        .map(|(team, agent)| WakeupTarget { team, agent })
        .collect())
}

pub(super) async fn confirm(
    ledger: &SqliteLedger,
    team: Uuid,
    recipient: Uuid,
    deliveries: &[DeliveryId],
    run: Option<RunId>,
    at: DateTime<Utc>,
) -> BusResult<Vec<ConfirmOutcome>> {
    let what = "confirm";
    let mut tx = ledger.begin(what).await?;
    // Revoked → `Unauthenticated`, whatever the app's token cache says (the read is free: the
    // agent is looked up anyway).
    ledger
        .agent_row(&mut tx, team, recipient)
        .await?
        .ensure_active()?;
    if ledger
        .check_run_owner(&mut tx, run, team, recipient)
        .await?
    {
        return Err(BusError::conflict("the run is sealed"));
    }
    if deliveries.is_empty() {
        ledger.commit(tx, what).await?;
        return Ok(Vec::new());
    }
    let mut ids: Vec<Uuid> = deliveries.iter().map(|d| d.0).collect();
    ids.sort_unstable();
    ids.dedup();
    type Found = (Uuid, Uuid, Uuid, Option<String>, Option<String>, bool);
    let sql = format!(
        "SELECT h.delivery_id, h.message_id, h.conversation_id, h.ack_inbox, h.ack_subject,
                r.delivered_at IS NOT NULL
         FROM hand_outs h
         JOIN receipts r ON r.message_id = h.message_id AND r.recipient_id = h.recipient_id
         WHERE h.team_id = ? AND h.recipient_id = ? AND h.delivery_id IN ({})",
        marks(ids.len())
    );
    let mut query = sqlx::query_as::<_, Found>(&sql).bind(team).bind(recipient);
    for id in &ids {
        query = query.bind(*id);
    }
    let rows = query.fetch_all(&mut *tx).await.map_err(ledger.db(what))?;
    let found: HashMap<Uuid, Found> = rows.into_iter().map(|r| (r.0, r)).collect();
    let outcomes = decide_confirms(deliveries, |delivery| {
        let (_, message, _, ack_inbox, ack_subject, delivered) = found.get(&delivery.0)?;
        let ack = match (ack_inbox, ack_subject) {
            (Some(inbox), Some(ack_subject)) => Some(InboxAck {
                inbox: inbox.clone(),
                ack_subject: ack_subject.clone(),
            }),
            _ => None,
        };
        Some(ConfirmFacts {
            message: *message,
            ack,
            delivered: *delivered,
        })
    });
    let db = ledger.db(what);
    for (delivery, outcome) in deliveries.iter().zip(&outcomes) {
        let ConfirmOutcome::Confirmed { message, .. } = outcome else {
            continue;
        };
        sqlx::query(
            "UPDATE receipts SET delivered_at = ? WHERE message_id = ? AND recipient_id = ?",
        )
        .bind(Ts(at))
        .bind(*message)
        .bind(recipient)
        .execute(&mut *tx)
        .await
        .map_err(&db)?;
        if let Some(run) = run {
            let kind = RecordKind::MessageDelivered {
                conversation: found[&delivery.0].2,
                message: *message,
            };
            append::<Lite>(&mut tx, run, at, &kind).await.map_err(&db)?;
        }
    }
    ledger.commit(tx, what).await?;
    Ok(outcomes)
}

pub(super) async fn acknowledge(
    ledger: &SqliteLedger,
    team: Uuid,
    agent: Uuid,
    message: Uuid,
    run: Option<RunId>,
    at: DateTime<Utc>,
) -> BusResult<Receipt> {
    let what = "acknowledge";
    let mut tx = ledger.begin(what).await?;
    let conversation = ledger
        .message_row(&mut tx, team, message)
        .await?
        .conversation;
    let receipt: Option<ReceiptRow> = sqlx::query_as(&format!(
        "SELECT {RECEIPT_COLUMNS} FROM {RECEIPTS} WHERE r.message_id = ? AND r.recipient_id = ?"
    ))
    .bind(message)
    .bind(agent)
    .fetch_optional(&mut *tx)
    .await
    .map_err(ledger.db(what))?;
    let Some(receipt) = receipt.map(Receipt::from) else {
        return Err(BusError::forbidden(
            "only a recipient acknowledges a message",
        ));
    };
    let sealed = ledger.check_run_owner(&mut tx, run, team, agent).await?;
    if receipt.acknowledged_at.is_some() {
        // Committed before the answer: the repeat may have read an acknowledgement another
        // part of the same group-commit transaction wrote, which holds only once that commits.
        ledger.commit(tx, what).await?;
        return Ok(receipt);
    }
    if receipt.delivered_at.is_none() {
        return Err(BusError::conflict(
            "the message has not been delivered to this recipient yet",
        ));
    }
    if sealed {
        return Err(BusError::conflict("the run is sealed"));
    }
    sqlx::query(
        "UPDATE receipts SET acknowledged_at = ? WHERE message_id = ? AND recipient_id = ?",
    )
    .bind(Ts(at))
    .bind(message)
    .bind(agent)
    .execute(&mut *tx)
    .await
    .map_err(ledger.db(what))?;
    if let Some(run) = run {
        let kind = RecordKind::MessageAcknowledged {
            conversation,
            message,
        };
        append::<Lite>(&mut tx, run, at, &kind)
            .await
            .map_err(ledger.db(what))?;
    }
    ledger.commit(tx, what).await?;
    Ok(Receipt {
        acknowledged_at: Some(at),
        ..receipt
    })
}

pub(super) async fn receipts(
    ledger: &SqliteLedger,
    team: Uuid,
    message: Uuid,
) -> BusResult<Vec<Receipt>> {
    let what = "receipts";
    let mut tx = ledger.read(what).await?;
    ledger.message_row(&mut tx, team, message).await?;
    let rows: Vec<ReceiptRow> = sqlx::query_as(&format!(
        "SELECT {RECEIPT_COLUMNS} FROM {RECEIPTS} WHERE r.message_id = ? ORDER BY r.recipient_key"
    ))
    .bind(message)
    .fetch_all(&mut *tx)
    .await
    .map_err(ledger.db(what))?;
    Ok(rows.into_iter().map(Receipt::from).collect())
}

#[cfg(test)]
mod plans {
    use super::*;

    /// The query plan of `sql` on a freshly migrated store: one line per step, in order.
    async fn plan(sql: &str, binds: usize) -> Vec<String> {
        let dir = tempfile::tempdir().unwrap();
        let config = crate::SqliteConfig {
            create_if_missing: true,
            ..crate::SqliteConfig::default()
        };
        let pools = crate::open(dir.path().join("bus.db"), &config)
            .await
            .unwrap();
        crate::migrate(&pools).await.unwrap();
        let explain = format!("EXPLAIN QUERY PLAN {sql}");
        let mut query = sqlx::query_as::<_, (i64, i64, i64, String)>(&explain);
        for _ in 0..binds {
            query = query.bind(Option::<i64>::None);
        }
        let rows = query.fetch_all(pools.reader()).await.unwrap();
        pools.close().await;
        rows.into_iter().map(|r| r.3).collect()
    }

    /// Asserts the plan reads the recipient's undelivered receipts first, through their
    /// partial index, and never scans the team's messages by `messages_sent`.
    fn assert_driven_by_receipts(plan: &[String]) {
        let first_table = plan
            .iter()
            .find(|line| line.contains(" r ") || line.contains(" m "))
            .unwrap_or_else(|| panic!("no table in {plan:?}"));
        assert!(
            first_table.contains(" r ") && first_table.contains("receipts_undelivered"),
            "the receipts drive the join: {plan:?}"
        );
        assert!(
            !plan.iter().any(|line| line.contains("messages_sent")),
            "no walk of the team's messages: {plan:?}"
        );
    }

    #[tokio::test]
    async fn the_top_up_starts_from_the_recipients_undelivered_receipts() {
        assert_driven_by_receipts(&plan(UNDELIVERED_SQL, 5).await);
    }

    #[tokio::test]
    async fn the_wakeup_sweep_starts_from_each_waiters_undelivered_receipts() {
        assert_driven_by_receipts(&plan(&wakeable_sql(3), 3 * 2 + 3).await);
    }
}
