//! The ledger's `send` and `send_batch` on both SQL stores: one write transaction for the batch
//! (on SQLite one commit, one WAL flush: the group commit), and `send` a batch of one, so a lone
//! send and a batch take one write path.
//!
//! The facts are read ([`Dialect::send_facts`]), every request's fate is decided before any
//! write ([`crewbus_domain::plan_sends`]: no savepoint), and the created messages are written
//! ([`Dialect::write_sends`]). By default ([`facts_each`], [`write_each`]: what SQLite runs) the
//! reads and writes are per-request statements: inside SQLite's write transaction nothing else
//! writes (no row locks: the transaction holds the database's one write lock), so the facts
//! read at its start hold until its commit; SQLite runs in process, a statement costs no round
//! trip, and the commit's fsync is what the batch shares. Postgres locks the batch's
//! conversations first and reads and writes with set-based statements (its `ledger/send.rs`).

use std::collections::{HashMap, HashSet};
use std::future::Future;

use chrono::{DateTime, Utc};
use crewbus_domain::{
    AgentKind, BusError, BusResult, ConversationFacts, Envelope, Locator, Message, Publication,
    RecordKind, RequestKey, RunFacts, SendDecision, SendFacts, SendRequest, Sent, answer_sends,
    plan_sends, validate_request_id,
};
use uuid::Uuid;

use crate::body::store_body;
use crate::dialect::{Conn, Dialect};
use crate::driver::stmt;
use crate::journal::{append, lock_run};
use crate::ledger::SqlLedger;
use crate::rows::{MESSAGE_COLUMNS, MessageRow};
use crate::{db_i64, from_db};

const WHAT: &str = "send";

/// `Ledger::send_batch` (`requests` not empty), in one write transaction: the facts, the plan,
/// the writes, one commit.
pub async fn send_batch<D: Dialect>(
    ledger: &SqlLedger<D>,
    requests: &[SendRequest],
    at: DateTime<Utc>,
) -> BusResult<Vec<BusResult<Sent>>> {
    let mut tx = ledger.begin(WHAT).await?;
    let facts = D::send_facts(ledger, &mut tx, requests).await?;
    let plan = plan_sends(requests, &facts);
    let created = D::write_sends(ledger, &mut tx, requests, &plan, at).await?;
    ledger.commit(tx, WHAT).await?;
    Ok(answer_sends(plan, &created))
}

/// The one outcome of `batch`, the adapter's `send_batch` over a slice of exactly one request.
///
/// Errors: the batch's own error (its transaction failed: nothing was stored), else the
/// request's outcome as `send_batch` decided it. Panics if `batch` answers no outcome, which
/// `send_batch` never does (one outcome per request, in order).
pub async fn one(batch: impl Future<Output = BusResult<Vec<BusResult<Sent>>>>) -> BusResult<Sent> {
    batch.await?.pop().expect("one outcome per request")
}

/// [`Dialect::send_facts`]' default: what the plan needs, a statement per request and fact —
/// the batch's conversations, whether each sender is an active member, the messages holding
/// the batch's idempotency keys (`(conversation, sender, request_id)`), its runs — each read
/// once per batch.
pub async fn facts_each<D: Dialect>(
    ledger: &SqlLedger<D>,
    conn: &mut Conn<D>,
    requests: &[SendRequest],
) -> BusResult<SendFacts> {
    let mut facts = SendFacts::default();
    // What was looked up already (found or not), so each is read once per batch.
    let mut conversations_read = HashSet::new();
    let mut request_ids_read = HashSet::new();
    for request in requests {
        if conversations_read.insert(request.conversation) {
            let row: Option<(Uuid, String, i64)> = stmt::<D>(
                "SELECT c.team_id, c.backend, c.next_seq
                 FROM conversations c JOIN teams t ON t.id = c.team_id
                 WHERE c.id = $1 AND t.tenant = $2",
            )
            .arg(request.conversation)
            .arg(ledger.tenant().as_str().to_owned())
            .optional(conn)
            .await
            .map_err(ledger.db(WHAT))?;
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
            let (active,): (bool,) = stmt::<D>(
                "SELECT EXISTS (
                     SELECT 1 FROM members m
                     JOIN agents a ON a.id = m.agent_id
                     JOIN conversations c ON c.id = m.conversation_id
                     WHERE m.conversation_id = $1 AND m.agent_id = $2
                       AND a.team_id = c.team_id AND a.revoked_at IS NULL)",
            )
            .arg(request.conversation)
            .arg(request.sender)
            .one(conn)
            .await
            .map_err(ledger.db(WHAT))?;
            if active {
                facts.active_members.insert(pair);
            }
        }
        let key = RequestKey::from(request);
        // A request id the domain refuses is not looked up (Postgres cannot bind U+0000 in
        // text): the plan answers it `Invalid` alone.
        if validate_request_id(&request.request_id).is_ok() && request_ids_read.insert(key.clone())
        {
            let sql = format!(
                "SELECT {MESSAGE_COLUMNS} FROM messages m
                 WHERE m.conversation_id = $1 AND m.sender_id = $2 AND m.request_id = $3"
            );
            let existing: Option<MessageRow<D::Time>> = stmt::<D>(&sql)
                .arg(request.conversation)
                .arg(request.sender)
                .arg(request.request_id.clone())
                .optional(conn)
                .await
                .map_err(ledger.db(WHAT))?;
            if let Some(row) = existing {
                facts.recorded.insert(key, Message::try_from(row)?);
            }
        }
        if let Some(run) = request.run
            && !facts.runs.contains_key(&run)
            && let Some(state) = lock_run::<D>(conn, ledger.tenant(), run)
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

/// [`Dialect::write_sends`]' default: each `Create` of `plan` written in order
/// ([`write_message`]); returns the created messages by request index.
pub async fn write_each<D: Dialect>(
    ledger: &SqlLedger<D>,
    conn: &mut Conn<D>,
    requests: &[SendRequest],
    plan: &[SendDecision],
    at: DateTime<Utc>,
) -> BusResult<HashMap<usize, Message>> {
    let mut created = HashMap::new();
    for (i, (request, decision)) in requests.iter().zip(plan).enumerate() {
        if let SendDecision::Create {
            seq,
            backend,
            body_sha256,
        } = decision
        {
            let message =
                write_message(ledger, conn, request, *seq, backend, body_sha256, at).await?;
            created.insert(i, message);
        }
    }
    Ok(created)
}

/// Inserts the message (with its sender's kind, which it takes on), bumps the conversation's
/// counter, and writes one receipt per agent member other than the sender, with copies of the
/// message's conversation, seq and stored time (the top-up's order) (recipients snapshotted
/// now; human members get none); returns the recipients (agent id, recipient key) in recipient
/// key order.
async fn insert_message<D: Dialect>(
    ledger: &SqlLedger<D>,
    conn: &mut Conn<D>,
    message: &mut Message,
) -> BusResult<Vec<(Uuid, String)>> {
    stmt::<D>("UPDATE conversations SET next_seq = next_seq + 1 WHERE id = $1")
        .arg(message.conversation)
        .run(conn)
        .await
        .map_err(ledger.db(WHAT))?;
    let (sender_kind,): (String,) = stmt::<D>(
        "INSERT INTO messages
             (id, team_id, conversation_id, seq, sender_id, request_id, body_sha256,
              body_len, backend, publication, locator, sent_at, stored_at, sender_kind)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13,
                 (SELECT kind FROM agents WHERE id = $5))
         RETURNING sender_kind",
    )
    .arg(message.id)
    .arg(message.team)
    .arg(message.conversation)
    .arg(db_i64(message.seq))
    .arg(message.sender)
    .arg(message.request_id.clone())
    .arg(message.body_sha256.clone())
    .arg(db_i64(message.body_len))
    .arg(message.backend.clone())
    .arg(message.publication.as_str().to_owned())
    .arg(message.locator.as_ref().map(|l| l.as_str().to_owned()))
    .arg(D::time(message.sent_at))
    .arg(message.stored_at.map(D::time))
    .one(conn)
    .await
    .map_err(ledger.db(WHAT))?;
    message.sender_kind = AgentKind::from_stored(&sender_kind)?;
    let recipients: Vec<(Uuid, String)> = stmt::<D>(&format!(
        "SELECT m.agent_id, m.recipient_key FROM members m
         JOIN agents a ON a.id = m.agent_id AND a.kind = 'agent'
         WHERE m.conversation_id = $1 AND m.agent_id <> $2 ORDER BY m.recipient_key{}",
        crate::dialect::BYTEWISE.of::<D>()
    ))
    .arg(message.conversation)
    .arg(message.sender)
    .all(conn)
    .await
    .map_err(ledger.db(WHAT))?;
    for (agent, key) in &recipients {
        // With copies of the message's place and stored time: the top-up's order.
        stmt::<D>(
            "INSERT INTO receipts
                 (message_id, recipient_id, recipient_key, conversation_id, seq, stored_at)
             VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .arg(message.id)
        .arg(*agent)
        .arg(key.clone())
        .arg(message.conversation)
        .arg(db_i64(message.seq))
        .arg(message.stored_at.map(D::time))
        .run(conn)
        .await
        .map_err(ledger.db(WHAT))?;
    }
    Ok(recipients)
}

/// Writes one planned message: the message with its seq bump and receipts, then the body and
/// its reference marker (the store's own backend) or the outbox slot, then the run's
/// `MessageSent`. Any failure here is the transaction's (the outer `Err`): a body store
/// conflict cannot come from a fresh message id and publish key but a broken store.
async fn write_message<D: Dialect>(
    ledger: &SqlLedger<D>,
    conn: &mut Conn<D>,
    request: &SendRequest,
    seq: u64,
    backend: &str,
    body_sha256: &str,
    at: DateTime<Utc>,
) -> BusResult<Message> {
    let id = Uuid::new_v4();
    let local = backend == D::NAME;
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
        message.locator = Some(Locator::for_message(D::NAME, id));
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
            crate::references::mark_due(ledger, conn, request.team, id, at).await?;
        }
        match store_body::<D>(conn, &envelope, at).await {
            Ok(_) => {}
            Err(Ok(refused)) => {
                return Err(BusError::unavailable(format!(
                    "send: the body store refused a fresh body ({refused})"
                )));
            }
            Err(Err(e)) => return Err(ledger.bus_error(e, WHAT)),
        }
    } else {
        stmt::<D>(
            "INSERT INTO outbox_slots
                 (id, tenant, message_id, team_id, conversation_id, backend, publish_key, body,
                  next_attempt_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
        )
        .arg(Uuid::new_v4())
        .arg(ledger.tenant().as_str().to_owned())
        .arg(id)
        .arg(request.team)
        .arg(request.conversation)
        .arg(backend.to_owned())
        .arg(envelope.publish_key)
        .arg(envelope.body.as_bytes().to_vec())
        .arg(D::time(at))
        .run(conn)
        .await
        .map_err(ledger.db(WHAT))?;
    }
    if let Some(run) = request.run {
        let kind = RecordKind::MessageSent {
            conversation: request.conversation,
            message: id,
            seq,
        };
        append::<D>(conn, run, at, &kind)
            .await
            .map_err(ledger.db(WHAT))?;
    }
    Ok(message)
}
