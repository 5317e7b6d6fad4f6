//! The Postgres ledger's delivery: messages as they stand, hand-outs, the top-up and wake-up
//! reads, confirmations, acknowledgements and receipts.

use std::collections::{BTreeMap, HashMap};

use chrono::{DateTime, Utc};
use crewbus_domain::{
    BusError, BusResult, CandidateFacts, ConfirmFacts, ConfirmOutcome, DeliveryId, HandOutOutcome,
    HandOutRequest, InboxAck, IssuedHandOut, LiveHandOut, Message, Receipt, RecordKind, RunId,
    WakeupTarget, decide_confirms, plan_hand_outs,
};
use crewbus_sql::ledger::SqlLedger;
use sqlx::PgConnection;
use uuid::Uuid;

use super::rows::{
    MESSAGE_COLUMNS, MessageRow, RECEIPT_COLUMNS, RECEIPTS, ReceiptRow, db_i64, from_db,
};
use super::{PostgresLedger, db};
use crate::dialect::Pg;
use crewbus_sql::journal::append;

/// A candidate of one `hand_out` call as the ledger knows it: the message's place and whether
/// the recipient's receipt is delivered (read under the receipt's row lock).
struct Candidate {
    conversation: Uuid,
    seq: i64,
    delivered: bool,
}

/// The hand-outs of one (message, recipient) recorded before a `hand_out` call: the live one
/// (unconfirmed, `held_until > at`; the latest if several), and whether any exists at all.
struct Prior {
    live: Option<LiveHandOut<DeliveryId>>,
    earlier: bool,
}

impl PostgresLedger {
    /// `hand_out`, step 1, in one statement: the recipient checked (unknown or another team's
    /// → `NotFound`; revoked → `Unauthenticated`, whatever the app's token cache says), and the
    /// candidates among `ids` (sorted, distinct) that are `Stored` messages of `team` with a
    /// receipt for `recipient`, by message id. The receipt rows are locked in message id order
    /// (deterministic, so concurrent calls cannot deadlock): concurrent hand-outs of one
    /// message to one recipient are serialised, and the hand-outs read next (a later statement,
    /// a fresh snapshot) include the other call's.
    async fn lock_candidates(
        &self,
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
        .bind(self.tenant.as_str())
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

    /// `hand_out`, step 2: the hand-outs of `ids` to `recipient` recorded so far, by message id
    /// (a message never handed out is absent).
    async fn prior_hand_outs(
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
                let prior = Prior {
                    live: live.then_some(LiveHandOut {
                        holder: DeliveryId(delivery),
                        held_until: until,
                    }),
                    earlier: true,
                };
                (message, prior)
            })
            .collect())
    }

    /// `hand_out`, step 3: replaces the acks of hand-outs recorded before the call (one
    /// statement; rows in delivery id order).
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
        Self::write(conn, statement).await
    }

    /// `hand_out`, step 4: inserts the new hand-outs (one statement).
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
        Self::write(conn, statement).await
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
}

pub(super) async fn message(
    ledger: &PostgresLedger,
    team: Uuid,
    message: Uuid,
) -> BusResult<Message> {
    let mut conn = ledger.pool.acquire().await.map_err(db("message lookup"))?;
    ledger.message_row(&mut conn, team, message).await
}

pub(super) async fn messages(
    ledger: &PostgresLedger,
    team: Uuid,
    ids: &[Uuid],
) -> BusResult<Vec<Message>> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let what = "message lookup";
    let rows: Vec<MessageRow> = sqlx::query_as(&format!(
        "SELECT {MESSAGE_COLUMNS} FROM messages m JOIN teams t ON t.id = m.team_id
         WHERE m.id = ANY($1) AND m.team_id = $2 AND t.tenant = $3"
    ))
    .bind(ids)
    .bind(team)
    .bind(ledger.tenant.as_str())
    .fetch_all(&ledger.pool)
    .await
    .map_err(db(what))?;
    let mut found: HashMap<Uuid, Message> = HashMap::with_capacity(rows.len());
    for row in rows {
        let message = Message::try_from(row)?;
        found.insert(message.id, message);
    }
    // The order of first appearance in `ids`; `remove` answers a repeated id once.
    Ok(ids.iter().filter_map(|id| found.remove(id)).collect())
}

pub(super) async fn hand_out(
    ledger: &PostgresLedger,
    team: Uuid,
    recipient: Uuid,
    requests: &[HandOutRequest],
    held_until: DateTime<Utc>,
    at: DateTime<Utc>,
) -> BusResult<Vec<HandOutOutcome>> {
    let what = "hand-out";
    let mut tx = ledger.begin(what).await?;
    // A constant number of statements whatever the batch size: check the recipient and lock
    // the receipts (one statement), read the earlier hand-outs, then decide every request, in
    // order, by the domain's hand-out ladder (`plan_hand_outs`), and write the acks that move
    // and the new hand-outs in one statement each.
    let mut ids: Vec<Uuid> = requests.iter().map(|r| r.message).collect();
    ids.sort_unstable();
    ids.dedup();
    let candidates = ledger
        .lock_candidates(&mut tx, team, recipient, &ids)
        .await?;
    if requests.is_empty() {
        PostgresLedger::commit(tx, what).await?;
        return Ok(Vec::new());
    }
    let open: Vec<Uuid> = ids
        .into_iter()
        .filter(|id| candidates.get(id).is_some_and(|c| !c.delivered))
        .collect();
    let prior = if open.is_empty() {
        HashMap::new()
    } else {
        PostgresLedger::prior_hand_outs(&mut tx, recipient, &open, at).await?
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
                live: prior.get(&message).and_then(|p| p.live),
                handed_out_before: prior.get(&message).is_some_and(|p| p.earlier),
            },
        },
        at,
        held_until,
        || DeliveryId(Uuid::new_v4()),
    );
    PostgresLedger::replace_acks(&mut tx, &plan.moved_acks).await?;
    PostgresLedger::insert_hand_outs(&mut tx, team, &plan.issued).await?;
    PostgresLedger::commit(tx, what).await?;
    Ok(plan.outcomes)
}

pub(super) async fn undelivered(
    ledger: &PostgresLedger,
    team: Uuid,
    recipient: Uuid,
    stored_before: DateTime<Utc>,
    at: DateTime<Utc>,
    limit: usize,
) -> BusResult<Vec<Uuid>> {
    let what = "undelivered";
    let mut conn = ledger.pool.acquire().await.map_err(db(what))?;
    // Revoked → `Unauthenticated`, whatever the app's token cache says (the agent is looked up
    // anyway).
    ledger
        .agent_row(&mut conn, team, recipient)
        .await?
        .ensure_active()?;
    let ids: Vec<Uuid> = sqlx::query_scalar(
        "SELECT m.id FROM receipts r JOIN messages m ON m.id = r.message_id
         WHERE r.recipient_id = $1 AND r.delivered_at IS NULL AND m.team_id = $2
           AND m.publication = 'stored' AND m.stored_at < $3
           AND NOT EXISTS (
               SELECT 1 FROM hand_outs h
               WHERE h.message_id = m.id AND h.recipient_id = $1
                 AND h.held_until > $4)
         ORDER BY m.stored_at, m.conversation_id, m.seq
         LIMIT $5",
    )
    .bind(recipient)
    .bind(team)
    .bind(stored_before)
    .bind(at)
    .bind(limit as i64)
    .fetch_all(&mut *conn)
    .await
    .map_err(db(what))?;
    Ok(ids)
}

pub(super) async fn wakeable(
    ledger: &PostgresLedger,
    targets: &[WakeupTarget],
    stored_before: DateTime<Utc>,
    at: DateTime<Utc>,
) -> BusResult<Vec<WakeupTarget>> {
    if targets.is_empty() {
        return Ok(Vec::new());
    }
    let teams: Vec<Uuid> = targets.iter().map(|t| t.team).collect();
    let agents: Vec<Uuid> = targets.iter().map(|t| t.agent).collect();
    // One statement for every waiter: the agent gone or revoked, or the top-up query's
    // condition (`undelivered`) holding for at least one message.
    let rows: Vec<(Uuid, Uuid)> = sqlx::query_as(
        "SELECT DISTINCT w.team, w.agent FROM unnest($1::uuid[], $2::uuid[]) AS w(team, agent)
         WHERE NOT EXISTS (
                 SELECT 1 FROM agents a JOIN teams t ON t.id = a.team_id
                 WHERE a.id = w.agent AND a.team_id = w.team AND t.tenant = $3
                   AND a.revoked_at IS NULL)
            OR EXISTS (
                 SELECT 1 FROM receipts r JOIN messages m ON m.id = r.message_id
                 WHERE r.recipient_id = w.agent AND r.delivered_at IS NULL
                   AND m.team_id = w.team AND m.publication = 'stored'
                   AND m.stored_at < $4
                   AND NOT EXISTS (
                       SELECT 1 FROM hand_outs h
                       WHERE h.message_id = m.id AND h.recipient_id = w.agent
                         AND h.held_until > $5))",
    )
    .bind(&teams)
    .bind(&agents)
    .bind(ledger.tenant.as_str())
    .bind(stored_before)
    .bind(at)
    .fetch_all(&ledger.pool)
    .await
    .map_err(db("wakeable"))?;
    Ok(rows
        .into_iter()
        .map(|(team, agent)| WakeupTarget { team, agent })
        .collect())
}

pub(super) async fn confirm(
    ledger: &PostgresLedger,
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
        PostgresLedger::commit(tx, what).await?;
        return Ok(Vec::new());
    }
    // A constant number of statements whatever the batch size (plus one journal append per
    // first confirmation with a run): read the hand-outs with their receipts locked in
    // message id order (deterministic, the order `hand_out` locks them in), decide every id,
    // in order, by the domain's confirm rule (`decide_confirms`), then set the receipts in one
    // statement (the hand-outs are not written again: a confirmation is the receipt's).
    let mut ids: Vec<Uuid> = deliveries.iter().map(|d| d.0).collect();
    ids.sort_unstable();
    ids.dedup();
    type Found = (Uuid, Uuid, Uuid, Option<String>, Option<String>, bool);
    let rows: Vec<Found> = sqlx::query_as(
        "SELECT h.delivery_id, h.message_id, h.conversation_id, h.ack_inbox, h.ack_subject,
                r.delivered_at IS NOT NULL
         FROM hand_outs h
         JOIN receipts r ON r.message_id = h.message_id AND r.recipient_id = h.recipient_id
         WHERE h.delivery_id = ANY($1) AND h.team_id = $2 AND h.recipient_id = $3
         ORDER BY h.message_id, h.delivery_id
         FOR NO KEY UPDATE OF r",
    )
    .bind(&ids)
    .bind(team)
    .bind(recipient)
    .fetch_all(&mut *tx)
    .await
    .map_err(db(what))?;
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
    let mut confirmed_messages: Vec<Uuid> = Vec::new();
    let mut records: Vec<RecordKind> = Vec::new();
    for (delivery, outcome) in deliveries.iter().zip(&outcomes) {
        let ConfirmOutcome::Confirmed { message, .. } = outcome else {
            continue;
        };
        confirmed_messages.push(*message);
        records.push(RecordKind::MessageDelivered {
            conversation: found[&delivery.0].2,
            message: *message,
        });
    }
    if !confirmed_messages.is_empty() {
        confirmed_messages.sort_unstable();
        sqlx::query(
            "UPDATE receipts SET delivered_at = $3
             WHERE recipient_id = $2 AND message_id = ANY($1)",
        )
        .bind(&confirmed_messages)
        .bind(recipient)
        .bind(at)
        .execute(&mut *tx)
        .await
        .map_err(db(what))?;
    }
    if let Some(run) = run {
        for kind in &records {
            append::<Pg>(&mut tx, run, at, kind)
                .await
                .map_err(db(what))?;
        }
    }
    PostgresLedger::commit(tx, what).await?;
    Ok(outcomes)
}

pub(super) async fn acknowledge(
    ledger: &PostgresLedger,
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
    let is_recipient: bool = sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM receipts WHERE message_id = $1 AND recipient_id = $2)",
    )
    .bind(message)
    .bind(agent)
    .fetch_one(&mut *tx)
    .await
    .map_err(db(what))?;
    if !is_recipient {
        return Err(BusError::forbidden(
            "only a recipient acknowledges a message",
        ));
    }
    // Lock order everywhere: run, then receipt (as `confirm`), so the two never deadlock.
    let sealed = ledger.check_run_owner(&mut tx, run, team, agent).await?;
    let receipt: ReceiptRow = sqlx::query_as(&format!(
        "SELECT {RECEIPT_COLUMNS} FROM {RECEIPTS}
         WHERE r.message_id = $1 AND r.recipient_id = $2 FOR NO KEY UPDATE OF r"
    ))
    .bind(message)
    .bind(agent)
    .fetch_one(&mut *tx)
    .await
    .map_err(db(what))?;
    let receipt = Receipt::from(receipt);
    if receipt.acknowledged_at.is_some() {
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
        "UPDATE receipts SET acknowledged_at = $3 WHERE message_id = $1 AND recipient_id = $2",
    )
    .bind(message)
    .bind(agent)
    .bind(at)
    .execute(&mut *tx)
    .await
    .map_err(db(what))?;
    if let Some(run) = run {
        let kind = RecordKind::MessageAcknowledged {
            conversation,
            message,
        };
        append::<Pg>(&mut tx, run, at, &kind)
            .await
            .map_err(db(what))?;
    }
    PostgresLedger::commit(tx, what).await?;
    Ok(Receipt {
        acknowledged_at: Some(at),
        ..receipt
    })
}

pub(super) async fn receipts(
    ledger: &PostgresLedger,
    team: Uuid,
    message: Uuid,
) -> BusResult<Vec<Receipt>> {
    let what = "receipts";
    let mut conn = ledger.pool.acquire().await.map_err(db(what))?;
    ledger.message_row(&mut conn, team, message).await?;
    let rows: Vec<ReceiptRow> = sqlx::query_as(&format!(
        "SELECT {RECEIPT_COLUMNS} FROM {RECEIPTS} WHERE r.message_id = $1
         ORDER BY r.recipient_key COLLATE \"C\""
    ))
    .bind(message)
    .fetch_all(&mut *conn)
    .await
    .map_err(db(what))?;
    Ok(rows.into_iter().map(Receipt::from).collect())
}
