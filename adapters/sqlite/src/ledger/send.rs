//! The SQLite ledger's `send` and `send_batch` (group commit): the facts, the plan, and the
//! writes of every message of the batch with its receipts and its outbox slot or body and inbox
//! events — one `BEGIN IMMEDIATE` write transaction, one commit (one WAL flush) for the batch.
//!
//! `send` is a batch of one. Inside the write transaction nothing else writes (SQLite has no row
//! locks: the transaction holds the database's one write lock), so the facts read at its start
//! hold until its commit. The reads and writes are per-request statements: SQLite runs in
//! process, a statement costs no round trip, and the commit's fsync is what the batch shares.
//! Every request's fate is decided ([`crewbus_domain::plan_sends`]) before any write: no
//! savepoint.

use chrono::{DateTime, Utc};
use std::collections::{HashMap, HashSet};

use crewbus_domain::{
    AgentKind, BusError, BusResult, ConversationFacts, Envelope, Message, Publication, RecordKind,
    RequestKey, RunFacts, SendDecision, SendFacts, SendRequest, Sent, answer_sends, plan_sends,
    validate_request_id,
};
use sqlx::SqliteConnection;
use uuid::Uuid;

use super::rows::{MESSAGE_COLUMNS, MessageRow};
use crate::body::{SCHEME, locator_for};
use crate::codec::{Ts, db_i64, from_db};
use crate::dialect::Lite;
use crewbus_sql::body::store_body;
use crewbus_sql::journal::{append, lock_run};
use crewbus_sql::ledger::SqlLedger;

/// Inserts the message (with its sender's kind, which it takes on), bumps the conversation's
/// counter, and writes one receipt per agent member other than the sender, with copies of the
/// message's conversation, seq and stored time (the top-up's order) (recipients
/// snapshotted now; human members get none); returns the recipients (agent id, recipient
/// key) in recipient key order.
async fn insert_message(
    ledger: &SqlLedger<Lite>,
    conn: &mut SqliteConnection,
    message: &mut Message,
) -> BusResult<Vec<(Uuid, String)>> {
    let what = "send";
    sqlx::query("UPDATE conversations SET next_seq = next_seq + 1 WHERE id = ?")
        .bind(message.conversation)
        .execute(&mut *conn)
        .await
        .map_err(ledger.db(what))?;
    let sender_kind: String = sqlx::query_scalar(
        "INSERT INTO messages
             (id, team_id, conversation_id, seq, sender_id, request_id, body_sha256,
              body_len, backend, publication, locator, sent_at, stored_at, sender_kind)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13,
                 (SELECT kind FROM agents WHERE id = ?5))
         RETURNING sender_kind",
    )
    .bind(message.id)
    .bind(message.team)
    .bind(message.conversation)
    .bind(db_i64(message.seq))
    .bind(message.sender)
    .bind(&message.request_id)
    .bind(&message.body_sha256)
    .bind(db_i64(message.body_len))
    .bind(&message.backend)
    .bind(message.publication.as_str())
    .bind(message.locator.as_ref().map(|l| l.as_str()))
    .bind(Ts(message.sent_at))
    .bind(message.stored_at.map(Ts))
    .fetch_one(&mut *conn)
    .await
    .map_err(ledger.db(what))?;
    message.sender_kind = AgentKind::from_stored(&sender_kind)?;
    let recipients: Vec<(Uuid, String)> = sqlx::query_as(
        "SELECT m.agent_id, m.recipient_key FROM members m
         JOIN agents a ON a.id = m.agent_id AND a.kind = 'agent'
         WHERE m.conversation_id = ? AND m.agent_id <> ? ORDER BY m.recipient_key",
    )
    .bind(message.conversation)
    .bind(message.sender)
    .fetch_all(&mut *conn)
    .await
    .map_err(ledger.db(what))?;
    for (agent, key) in &recipients {
        // With copies of the message's place and stored time: the top-up's order.
        sqlx::query(
            "INSERT INTO receipts
                 (message_id, recipient_id, recipient_key, conversation_id, seq, stored_at)
             VALUES (?, ?, ?, ?, ?, ?)",
        )
        .bind(message.id)
        .bind(*agent)
        .bind(key)
        .bind(message.conversation)
        .bind(db_i64(message.seq))
        .bind(message.stored_at.map(Ts))
        .execute(&mut *conn)
        .await
        .map_err(ledger.db(what))?;
    }
    Ok(recipients)
}

pub(crate) async fn send_batch(
    ledger: &SqlLedger<Lite>,
    requests: &[SendRequest],
    at: DateTime<Utc>,
) -> BusResult<Vec<BusResult<Sent>>> {
    let what = "send";
    let mut tx = ledger.begin(what).await?;
    let facts = send_facts(ledger, &mut tx, requests).await?;
    let plan = plan_sends(requests, &facts);
    let mut created = HashMap::new();
    for (i, (request, decision)) in requests.iter().zip(&plan).enumerate() {
        if let SendDecision::Create {
            seq,
            backend,
            body_sha256,
        } = decision
        {
            let message =
                write_message(ledger, &mut tx, request, *seq, backend, body_sha256, at).await?;
            created.insert(i, message);
        }
    }
    ledger.commit(tx, what).await?;
    Ok(answer_sends(plan, &created))
}

/// What the plan needs, read inside the write transaction: the batch's conversations, whether
/// each sender is an active member, the messages holding the batch's idempotency keys
/// (`(conversation, sender, request_id)`), its runs.
async fn send_facts(
    ledger: &SqlLedger<Lite>,
    conn: &mut SqliteConnection,
    requests: &[SendRequest],
) -> BusResult<SendFacts> {
    let what = "send";
    let mut facts = SendFacts::default();
    // What was looked up already (found or not), so each is read once per batch.
    let mut conversations_read = HashSet::new();
    let mut request_ids_read = HashSet::new();
    for request in requests {
        if conversations_read.insert(request.conversation) {
            let row: Option<(Uuid, String, i64)> = sqlx::query_as(
                "SELECT c.team_id, c.backend, c.next_seq
                 FROM conversations c JOIN teams t ON t.id = c.team_id
                 WHERE c.id = ? AND t.tenant = ?",
            )
            .bind(request.conversation)
            .bind(ledger.tenant().as_str())
            .fetch_optional(&mut *conn)
            .await
            .map_err(ledger.db(what))?;
            if let Some((team, backend, next_seq)) = row {
                facts.conversations.insert(
                    request.conversation,
                    ConversationFacts {
                        team,
                        backend,
                        next_seq: from_db(next_seq),
                    },
                );
            }
        }
        let pair = (request.conversation, request.sender);
        if !facts.active_members.contains(&pair) {
            let active: bool = sqlx::query_scalar(
                "SELECT EXISTS (
                     SELECT 1 FROM members m
                     JOIN agents a ON a.id = m.agent_id
                     JOIN conversations c ON c.id = m.conversation_id
                     WHERE m.conversation_id = ? AND m.agent_id = ?
                       AND a.team_id = c.team_id AND a.revoked_at IS NULL)",
            )
            .bind(request.conversation)
            .bind(request.sender)
            .fetch_one(&mut *conn)
            .await
            .map_err(ledger.db(what))?;
            if active {
                facts.active_members.insert(pair);
            }
        }
        let key = RequestKey::from(request);
        // A request id the domain refuses is not looked up (as on Postgres, which cannot
        // bind U+0000 in text): the plan answers it `Invalid` alone.
        if validate_request_id(&request.request_id).is_ok() && request_ids_read.insert(key.clone())
        {
            let existing: Option<MessageRow> = sqlx::query_as(&format!(
                "SELECT {MESSAGE_COLUMNS} FROM messages m
                 WHERE m.conversation_id = ? AND m.sender_id = ? AND m.request_id = ?"
            ))
            .bind(request.conversation)
            .bind(request.sender)
            .bind(&request.request_id)
            .fetch_optional(&mut *conn)
            .await
            .map_err(ledger.db(what))?;
            if let Some(row) = existing {
                facts.recorded.insert(key, Message::try_from(row)?);
            }
        }
        if let Some(run) = request.run
            && !facts.runs.contains_key(&run)
            && let Some(state) = lock_run::<Lite>(conn, ledger.tenant(), run)
                .await
                .map_err(ledger.db("run lookup"))?
        {
            facts.runs.insert(
                run,
                RunFacts {
                    team: state.team,
                    agent: state.agent,
                    sealed: state.sealed,
                },
            );
        }
    }
    Ok(facts)
}

/// Writes one planned message as `send` always has: the message with its seq bump and
/// receipts, then the body and inbox events (local backend) or the outbox slot, then the
/// run's `MessageSent`. Any failure here is the transaction's (the outer `Err`): a body
/// store conflict cannot come from a fresh message id and publish key but a broken store.
async fn write_message(
    ledger: &SqlLedger<Lite>,
    conn: &mut SqliteConnection,
    request: &SendRequest,
    seq: u64,
    backend: &str,
    body_sha256: &str,
    at: DateTime<Utc>,
) -> BusResult<Message> {
    let what = "send";
    let id = Uuid::new_v4();
    let local = backend == SCHEME;
    let mut message = Message::pending(
        id,
        request,
        seq,
        backend.to_owned(),
        body_sha256.to_owned(),
        at,
    );
    if local {
        message.publication = Publication::Stored;
        message.locator = Some(locator_for(id));
        message.stored_at = Some(at);
    }
    let envelope = Envelope {
        message_id: id,
        conversation_id: request.conversation,
        team_id: request.team,
        body: request.body.clone(),
        publish_key: Uuid::new_v4(),
    };
    let recipients = insert_message(ledger, conn, &mut message).await?;
    if local {
        if !recipients.is_empty() {
            crewbus_sql::references::mark_due(ledger, conn, request.team, id, at).await?;
        }
        match store_body::<Lite>(conn, &envelope, at).await {
            Ok(_) => {}
            Err(Ok(refused)) => {
                return Err(BusError::unavailable(format!(
                    "send: the body store refused a fresh body ({refused})"
                )));
            }
            Err(Err(e)) => return Err(ledger.store().bus_error(e, what)),
        }
    } else {
        sqlx::query(
            "INSERT INTO outbox_slots
                 (id, tenant, message_id, team_id, conversation_id, backend, publish_key, body,
                  next_attempt_at)
             VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        )
        .bind(Uuid::new_v4())
        .bind(ledger.tenant().as_str())
        .bind(id)
        .bind(request.team)
        .bind(request.conversation)
        .bind(backend)
        .bind(envelope.publish_key)
        .bind(envelope.body.as_bytes())
        .bind(Ts(at))
        .execute(&mut *conn)
        .await
        .map_err(ledger.db(what))?;
    }
    if let Some(run) = request.run {
        let kind = RecordKind::MessageSent {
            conversation: request.conversation,
            message: id,
            seq,
        };
        append::<Lite>(conn, run, at, &kind)
            .await
            .map_err(ledger.db(what))?;
    }
    Ok(message)
}
