//! The ledger's delivery section for both SQL adapters: messages as they stand, hand-outs, the
//! top-up and wake-up reads, confirmations, acknowledgements and receipts, written once over
//! [`SqlLedger`]; `hand_out`'s reads and writes are the dialect's (Postgres: one statement over
//! `unnest` arrays with row locks; SQLite: `IN` lists and a statement per row, in its one write
//! transaction).
//!
//! The port functions ([`message`], [`messages`], [`hand_out`], [`undelivered`], [`wakeable`],
//! [`confirm`], [`acknowledge`], [`receipts`]) are what `impl LedgerSections for SqlLedger<D>`
//! (`crate::ledger`) calls, with the port's arguments already checked (`crewbus_ports::LedgerSections`).
//!
//! `hand_out` and `confirm` read the facts inside their write transaction, ask the domain's
//! delivery rules (`plan_hand_outs`, `decide_confirms`) for the decision and write it, in a
//! constant number of statements whatever the batch size on Postgres (one journal append per
//! first confirmation with a run aside).
//!
//! # Locks
//! Where writers lock rows ([`Dialect::ROW_LOCKS`]: Postgres), `hand_out`, `confirm` and
//! `acknowledge` lock the recipient's receipt rows (`FOR NO KEY UPDATE OF r`) before they decide,
//! in message id order (deterministic, so concurrent calls cannot deadlock), and, in `confirm`
//! and `acknowledge`, after the run they write to ([`SqlLedger::check_run_owner`]): concurrent
//! calls serialise per (message, recipient), and what they read next (a later statement, a fresh snapshot) includes the other
//! call's writes. On SQLite every write runs in a write transaction on the one write connection
//! (a part of its group commit), so what it read stays as read until it commits; the same
//! statements run without the locks.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use crewbus_domain::{
    BusError, BusResult, CandidateFacts, ConfirmFacts, ConfirmOutcome, DeliveryId, HandOutOutcome,
    HandOutRequest, InboxAck, LiveHandOut, Message, Receipt, RecordKind, RunId, SweepTarget,
    WakeupTarget, decide_confirms, plan_hand_outs,
};
use uuid::Uuid;

use crate::dialect::{BYTEWISE, Conn, Dialect, PerDialect};
use crate::driver::stmt;
use crate::from_db;
use crate::journal::append;
use crate::ledger::SqlLedger;
use crate::rows::{MESSAGE_COLUMNS, MessageRow, RECEIPT_COLUMNS, RECEIPTS, ReceiptRow};

/// A candidate of one `hand_out` call as the ledger knows it: a `Stored` message of the team
/// with a receipt for the recipient, its place, and whether that receipt is delivered.
pub struct Candidate {
    /// The message's conversation.
    pub conversation: Uuid,
    /// Its seq there, as stored.
    pub seq: i64,
    /// Whether the recipient's receipt is delivered.
    pub delivered: bool,
}

/// The hand-outs of one (message, recipient) recorded before a `hand_out` call, as
/// [`Dialect::prior_hand_outs`] answers them: the live one (`held_until > at`;
/// the latest by `ord` if several), `None` when every earlier one has lapsed.
pub type Prior = Option<LiveHandOut<DeliveryId>>;

/// How the top-up reads join a receipt `r` to its message `m` (`… r {RECEIPT_JOIN} messages m ON
/// …`): `JOIN` on Postgres; `CROSS JOIN` on SQLite, which pins that join order (its planner
/// otherwise may drive the query from `messages_sent (team_id, sent_at)` and walk every message
/// of the team: seen, the top-up and the wake-up sweep grew with the team's history; the SQLite
/// crate's `plans` tests check the order).
pub const RECEIPT_JOIN: PerDialect<&str> = PerDialect {
    postgres: "JOIN",
    sqlite: "CROSS JOIN",
};

/// What a select of receipts `r` to change ends with: ` FOR NO KEY UPDATE OF r` where writers
/// lock rows, nothing on SQLite.
fn receipt_lock<D: Dialect>() -> String {
    if D::ROW_LOCKS {
        format!("{} OF r", D::FOR_NO_KEY_UPDATE)
    } else {
        String::new()
    }
}

/// The message `message` of `team` (this tenant's). Errors: unknown → `NotFound`; a stored
/// publication or sender kind the domain refuses → its error.
pub async fn message_row<D: Dialect>(
    ledger: &SqlLedger<D>,
    conn: &mut Conn<D>,
    team: Uuid,
    message: Uuid,
) -> BusResult<Message> {
    let sql = format!(
        "SELECT {MESSAGE_COLUMNS} FROM messages m JOIN teams t ON t.id = m.team_id
         WHERE m.id = $1 AND m.team_id = $2 AND t.tenant = $3"
    );
    let row: Option<MessageRow<D::Time>> = stmt::<D>(&sql)
        .arg(message)
        .arg(team)
        .arg(ledger.tenant().as_str().to_owned())
        .optional(conn)
        .await
        .map_err(ledger.db("message lookup"))?;
    row.ok_or_else(|| BusError::not_found(format!("message {message}")))?
        .try_into()
}

/// `Ledger::message`: one message of `team` as it stands. Errors: unknown → `NotFound`.
pub async fn message<D: Dialect>(
    ledger: &SqlLedger<D>,
    team: Uuid,
    message: Uuid,
) -> BusResult<Message> {
    let mut conn = ledger.reader("message lookup").await?;
    message_row(ledger, &mut conn, team, message).await
}

/// `Ledger::messages`: the messages of `team` among `ids`, in the order of their first
/// appearance there (unknown ids left out, a repeated one answered once), in one statement.
pub async fn messages<D: Dialect>(
    ledger: &SqlLedger<D>,
    team: Uuid,
    ids: &[Uuid],
) -> BusResult<Vec<Message>> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let what = "message lookup";
    let sql = format!(
        "SELECT {MESSAGE_COLUMNS} FROM messages m JOIN teams t ON t.id = m.team_id
         WHERE m.team_id = $1 AND t.tenant = $2 AND {}",
        D::any_id("m.id", 3, ids.len())
    );
    let mut conn = ledger.reader(what).await?;
    let q = stmt::<D>(&sql)
        .arg(team)
        .arg(ledger.tenant().as_str().to_owned());
    let rows: Vec<MessageRow<D::Time>> = D::bind_ids(q, ids)
        .all(&mut conn)
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

/// `Ledger::hand_out`: every request decided in order by the domain's hand-out ladder
/// (`plan_hand_outs`) from the facts read in the write transaction — the recipient and the
/// candidates (receipts locked where writers lock rows), then the earlier hand-outs of the
/// undelivered ones — and the acks that move and the new hand-outs written. Errors: as the port
/// states (unknown recipient → `NotFound`, revoked → `Unauthenticated`).
pub async fn hand_out<D: Dialect>(
    ledger: &SqlLedger<D>,
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
    let candidates = D::hand_out_candidates(ledger, &mut tx, team, recipient, &ids).await?;
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
        D::prior_hand_outs(ledger, &mut tx, recipient, &open, at).await?
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
                live: prior.get(&message).copied().flatten(),
                handed_out_before: prior.contains_key(&message),
            },
        },
        at,
        held_until,
        || DeliveryId(Uuid::new_v4()),
    );
    D::write_hand_outs(ledger, &mut tx, team, &plan.moved_acks, &plan.issued).await?;
    ledger.commit(tx, what).await?;
    Ok(plan.outcomes)
}

/// The top-up query: `$1` the recipient, `$2` the team, `$3` stored before, `$4` the time the
/// holds are compared with, `$5` at most that many; rows `(message id,)`, oldest stored first
/// (the message's `stored_at`, `conversation_id`, `seq`, as its receipt holds copies of them).
/// Driven by the recipient's undelivered receipts in that order (the partial index
/// `receipts_topup_order`), joined to their messages ([`RECEIPT_JOIN`]): it reads the rows it
/// returns and those it skips (held by a live hand-out), never the whole backlog, so a fetch
/// from 100,000 pending costs what one from 100 does.
pub fn undelivered_sql<D: Dialect>() -> String {
    let join = RECEIPT_JOIN.of::<D>();
    format!(
        "SELECT m.id FROM receipts r {join} messages m ON m.id = r.message_id
         WHERE r.recipient_id = $1 AND r.delivered_at IS NULL AND r.stored_at < $3
           AND m.team_id = $2 AND m.publication = 'stored'
           AND NOT EXISTS (
               SELECT 1 FROM hand_outs h
               WHERE h.message_id = m.id AND h.recipient_id = $1
                 AND h.held_until > $4)
         ORDER BY r.stored_at, r.conversation_id, r.seq
         LIMIT $5"
    )
}

/// `Ledger::undelivered`: the recipient's messages stored before `stored_before` that are not
/// delivered and not held at `at`, oldest stored first, at most `limit`. Errors: unknown
/// recipient → `NotFound`; revoked → `Unauthenticated` (whatever the app's token cache says).
pub async fn undelivered<D: Dialect>(
    ledger: &SqlLedger<D>,
    team: Uuid,
    recipient: Uuid,
    stored_before: DateTime<Utc>,
    at: DateTime<Utc>,
    limit: usize,
) -> BusResult<Vec<Uuid>> {
    let what = "undelivered";
    let mut conn = ledger.hold(D::READS, what).await?;
    ledger
        .agent_row(&mut conn, team, recipient)
        .await?
        .ensure_active()?;
    let sql = undelivered_sql::<D>();
    let ids: Vec<(Uuid,)> = stmt::<D>(&sql)
        .arg(recipient)
        .arg(team)
        .arg(D::time(stored_before))
        .arg(D::time(at))
        .arg(limit as i64)
        .all(&mut conn)
        .await
        .map_err(ledger.db(what))?;
    Ok(ids.into_iter().map(|(id,)| id).collect())
}

/// The wake-up sweep for `n` waiters: `$1` the tenant, `$2` stored before, `$3` the time the
/// holds are compared with, the waiters from `$4` on ([`Dialect::sweep_targets`]); rows `(team,
/// agent)` of the waiters whose agent is gone or revoked, or for whom the top-up query
/// ([`undelivered_sql`]) finds a message (the same join) stored after the waiter's
/// `stored_after` (when it has one).
pub fn wakeable_sql<D: Dialect>(n: usize) -> String {
    let waiters = D::sweep_targets(4, n);
    let join = RECEIPT_JOIN.of::<D>();
    format!(
        "{waiters}
         WHERE NOT EXISTS (
                 SELECT 1 FROM agents a JOIN teams t ON t.id = a.team_id
                 WHERE a.id = w.agent AND a.team_id = w.team AND t.tenant = $1
                   AND a.revoked_at IS NULL)
            OR EXISTS (
                 SELECT 1 FROM receipts r {join} messages m ON m.id = r.message_id
                 WHERE r.recipient_id = w.agent AND r.delivered_at IS NULL
                   AND m.team_id = w.team AND m.publication = 'stored'
                   AND m.stored_at < $2
                   AND (w.stored_after IS NULL OR m.stored_at > w.stored_after)
                   AND NOT EXISTS (
                       SELECT 1 FROM hand_outs h
                       WHERE h.message_id = m.id AND h.recipient_id = w.agent
                         AND h.held_until > $3))"
    )
}

/// `Ledger::wakeable`: the `targets` to wake — their agent gone or revoked, or the top-up
/// query's condition holding for at least one message stored after the target's
/// `stored_after` — in one statement.
pub async fn wakeable<D: Dialect>(
    ledger: &SqlLedger<D>,
    targets: &[SweepTarget],
    stored_before: DateTime<Utc>,
    at: DateTime<Utc>,
) -> BusResult<Vec<WakeupTarget>> {
    if targets.is_empty() {
        return Ok(Vec::new());
    }
    let what = "wakeable";
    let sql = wakeable_sql::<D>(targets.len());
    let mut conn = ledger.reader(what).await?;
    let q = stmt::<D>(&sql)
        .arg(ledger.tenant().as_str().to_owned())
        .arg(D::time(stored_before))
        .arg(D::time(at));
    let rows: Vec<(Uuid, Uuid)> = D::bind_sweep_targets(q, targets)
        .all(&mut conn)
        .await
        .map_err(ledger.db(what))?;
    Ok(rows
        .into_iter()
        .map(|(team, agent)| WakeupTarget { team, agent })
        .collect())
}

/// A hand-out `confirm` decides on, as read: `(delivery, message, conversation, ack inbox, ack
/// subject, receipt delivered)`.
type Found = (Uuid, Uuid, Uuid, Option<String>, Option<String>, bool);

/// `Ledger::confirm`: every delivery decided in order by the domain's confirm rule
/// (`decide_confirms`) from the hand-outs read with their receipts (locked in message id order
/// where writers lock rows, the order `hand_out` locks them in); the first confirmations set
/// their receipts delivered at `at` (one statement) and, with a run, append a
/// `MessageDelivered` record each (the hand-outs are not written again: a confirmation is the
/// receipt's). Errors: unknown recipient → `NotFound`, revoked → `Unauthenticated`; the run
/// sealed → `Conflict`, another team's → `NotFound`, another agent's → `Forbidden`.
pub async fn confirm<D: Dialect>(
    ledger: &SqlLedger<D>,
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
    let order = if D::ROW_LOCKS {
        " ORDER BY h.message_id, h.delivery_id"
    } else {
        ""
    };
    let sql = format!(
        "SELECT h.delivery_id, h.message_id, h.conversation_id, h.ack_inbox, h.ack_subject,
                r.delivered_at IS NOT NULL
         FROM hand_outs h
         JOIN receipts r ON r.message_id = h.message_id AND r.recipient_id = h.recipient_id
         WHERE h.team_id = $1 AND h.recipient_id = $2 AND {}{order}{}",
        D::any_id("h.delivery_id", 3, ids.len()),
        receipt_lock::<D>()
    );
    let q = stmt::<D>(&sql).arg(team).arg(recipient);
    let rows: Vec<Found> = D::bind_ids(q, &ids)
        .all(&mut tx)
        .await
        .map_err(ledger.db(what))?;
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
    let mut confirmed: Vec<Uuid> = Vec::new();
    let mut records: Vec<RecordKind> = Vec::new();
    for (delivery, outcome) in deliveries.iter().zip(&outcomes) {
        let ConfirmOutcome::Confirmed { message, .. } = outcome else {
            continue;
        };
        confirmed.push(*message);
        records.push(RecordKind::MessageDelivered {
            conversation: found[&delivery.0].2,
            message: *message,
        });
    }
    if !confirmed.is_empty() {
        // Each message once (`decide_confirms` confirms a message once per call), in id order.
        confirmed.sort_unstable();
        let sql = format!(
            "UPDATE receipts SET delivered_at = $1 WHERE recipient_id = $2 AND {}",
            D::any_id("message_id", 3, confirmed.len())
        );
        let q = stmt::<D>(&sql).arg(D::time(at)).arg(recipient);
        D::bind_ids(q, &confirmed)
            .run(&mut tx)
            .await
            .map_err(ledger.db(what))?;
    }
    if let Some(run) = run {
        for kind in &records {
            append::<D>(&mut tx, run, at, kind)
                .await
                .map_err(ledger.db(what))?;
        }
    }
    ledger.commit(tx, what).await?;
    Ok(outcomes)
}

/// The receipt of `message` for `recipient`, the select ending with `lock`; `None` without one.
async fn receipt_row<D: Dialect>(
    conn: &mut Conn<D>,
    message: Uuid,
    recipient: Uuid,
    lock: &str,
) -> Result<Option<Receipt>, sqlx::Error> {
    let sql = format!(
        "SELECT {RECEIPT_COLUMNS} FROM {RECEIPTS}
         WHERE r.message_id = $1 AND r.recipient_id = $2{lock}"
    );
    let row: Option<ReceiptRow<D::Time>> = stmt::<D>(&sql)
        .arg(message)
        .arg(recipient)
        .optional(conn)
        .await?;
    Ok(row.map(Receipt::from))
}

/// `Ledger::acknowledge`: the recipient's receipt acknowledged at `at` (an acknowledged one is
/// answered as it is), with a `MessageAcknowledged` record when a run is given. The run is
/// checked (and locked where writers lock rows) before the receipt is locked: the lock order of
/// `confirm` too, so the two never deadlock. Errors: unknown message → `NotFound`; not a
/// recipient → `Forbidden`; not delivered yet, or the run sealed → `Conflict`; the run another
/// team's → `NotFound`, another agent's → `Forbidden`.
pub async fn acknowledge<D: Dialect>(
    ledger: &SqlLedger<D>,
    team: Uuid,
    agent: Uuid,
    message: Uuid,
    run: Option<RunId>,
    at: DateTime<Utc>,
) -> BusResult<Receipt> {
    let what = "acknowledge";
    let mut tx = ledger.begin(what).await?;
    let conversation = message_row(ledger, &mut tx, team, message)
        .await?
        .conversation;
    let found = receipt_row::<D>(&mut tx, message, agent, "")
        .await
        .map_err(ledger.db(what))?;
    let Some(mut receipt) = found else {
        return Err(BusError::forbidden(
            "only a recipient acknowledges a message",
        ));
    };
    let sealed = ledger.check_run_owner(&mut tx, run, team, agent).await?;
    if D::ROW_LOCKS {
        // Read again under the receipt's lock (after the run's).
        receipt = receipt_row::<D>(&mut tx, message, agent, &receipt_lock::<D>())
            .await
            .map_err(ledger.db(what))?
            .ok_or_else(|| ledger.bus_error(sqlx::Error::RowNotFound, what))?;
    }
    if receipt.acknowledged_at.is_some() {
        // Committed before the answer: on SQLite the repeat may have read an acknowledgement
        // another part of the same group-commit transaction wrote, which holds only once that
        // commits (on Postgres the transaction wrote nothing).
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
    stmt::<D>(
        "UPDATE receipts SET acknowledged_at = $3 WHERE message_id = $1 AND recipient_id = $2",
    )
    .arg(message)
    .arg(agent)
    .arg(D::time(at))
    .run(&mut tx)
    .await
    .map_err(ledger.db(what))?;
    if let Some(run) = run {
        let kind = RecordKind::MessageAcknowledged {
            conversation,
            message,
        };
        append::<D>(&mut tx, run, at, &kind)
            .await
            .map_err(ledger.db(what))?;
    }
    ledger.commit(tx, what).await?;
    Ok(Receipt {
        acknowledged_at: Some(at),
        ..receipt
    })
}

/// `Ledger::receipts`: every receipt of the message, by recipient key (bytewise). Errors:
/// unknown message → `NotFound`.
pub async fn receipts<D: Dialect>(
    ledger: &SqlLedger<D>,
    team: Uuid,
    message: Uuid,
) -> BusResult<Vec<Receipt>> {
    let what = "receipts";
    let mut conn = ledger.hold(D::READS, what).await?;
    message_row(ledger, &mut conn, team, message).await?;
    let sql = format!(
        "SELECT {RECEIPT_COLUMNS} FROM {RECEIPTS} WHERE r.message_id = $1
         ORDER BY r.recipient_key{}",
        BYTEWISE.of::<D>()
    );
    let rows: Vec<ReceiptRow<D::Time>> = stmt::<D>(&sql)
        .arg(message)
        .all(&mut conn)
        .await
        .map_err(ledger.db(what))?;
    Ok(rows.into_iter().map(Receipt::from).collect())
}
