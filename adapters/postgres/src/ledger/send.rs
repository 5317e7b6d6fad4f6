//! The Postgres ledger's `send`: the conversation lock, the repeat rule, and the one statement
//! that writes a message with its receipts and its outbox slot or inbox events.

use chrono::{DateTime, Utc};
use crewbus_domain::{
    BusError, BusResult, Envelope, Message, Publication, RecordKind, ReferencePayload, SendRequest,
    Sent, body_sha256,
};
use sqlx::PgConnection;
use uuid::Uuid;

use super::rows::{MESSAGE_COLUMNS, MessageRow, db_i64, from_db};
use super::{PostgresLedger, db};
use crate::body::{SCHEME, locator_for, store_body};
use crate::error::bus_error;
use crate::journal::append;

/// `send`'s write (after the checks, under the conversation lock), shared head: bumps the
/// conversation's `next_seq`, inserts the message (`$1` id, `$2` team, `$3` conversation, `$4`
/// seq, `$5` sender, `$6` request id, `$7` body SHA-256, `$8` body length, `$9` backend, `$10`
/// publication, `$11` locator, `$12` sent at, `$13` stored at) unless the request id is taken
/// or the sender is no longer an active member, and one receipt per member other than the
/// sender. The statement returns the message id, or no row when the message was not inserted
/// (nothing else is written then but the bump, which the caller rolls back). The sender is
/// checked again here because this statement's snapshot is taken after the conversation lock
/// was granted: a revocation committed while the send waited for the lock is seen.
macro_rules! send_head {
    () => {
        "WITH bump AS (
             UPDATE conversations SET next_seq = next_seq + 1 WHERE id = $3
         ), msg AS (
             INSERT INTO messages
                 (id, team_id, conversation_id, seq, sender_id, request_id, body_sha256,
                  body_len, backend, publication, locator, sent_at, stored_at)
             SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13
             WHERE EXISTS (
                 SELECT 1 FROM members m JOIN agents a ON a.id = m.agent_id
                 WHERE m.conversation_id = $3 AND m.agent_id = $5 AND a.team_id = $2
                   AND a.revoked_at IS NULL)
             ON CONFLICT (conversation_id, request_id) DO NOTHING
             RETURNING id
         ), rec AS (
             INSERT INTO receipts (message_id, recipient_id, recipient_key, stored_at)
             SELECT msg.id, mb.agent_id, mb.recipient_key, $13
             FROM msg JOIN members mb ON mb.conversation_id = $3 AND mb.agent_id <> $5
             RETURNING message_id, recipient_id, recipient_key
         )"
    };
}

/// `send` to another backend than the ledger's: [`send_head!`] and the outbox slot (`$14` slot
/// id, `$15` tenant, `$16` publish key, `$17` body bytes; due at `$12`).
const SEND_REMOTE: &str = concat!(
    send_head!(),
    ", slot AS (
         INSERT INTO outbox_slots
             (id, tenant, message_id, team_id, conversation_id, backend, publish_key, body,
              next_attempt_at)
         SELECT $14, $15, msg.id, $2, $3, $9, $16, $17, $12 FROM msg
     )
     SELECT id FROM msg"
);

/// `send` to the ledger's own backend: [`send_head!`] and one inbox event per receipt, by
/// recipient key, in the team's inbox now (`$14` reference payload, `$15` tenant).
const SEND_LOCAL: &str = concat!(
    send_head!(),
    ", events AS (
         INSERT INTO inbox_events
             (id, tenant, team_id, message_id, recipient_id, recipient_key, inbox, payload,
              created_at)
         SELECT gen_random_uuid(), $15, $2, rec.message_id, rec.recipient_id, rec.recipient_key,
                t.inbox, $14, $12
         FROM rec JOIN teams t ON t.id = $2
         ORDER BY rec.recipient_key
     )
     SELECT id FROM msg"
);

impl PostgresLedger {
    /// The repeat rule of `send`: the message already recorded under the request's
    /// `(conversation, request_id)`, as it stands, `created: false` — or `Conflict` when it was
    /// sent with another body; `None` when the request id is free.
    async fn repeated(
        conn: &mut PgConnection,
        conversation: Uuid,
        request_id: &str,
        sha: &str,
    ) -> BusResult<Option<Sent>> {
        let existing: Option<MessageRow> = sqlx::query_as(&format!(
            "SELECT {MESSAGE_COLUMNS} FROM messages m
             WHERE m.conversation_id = $1 AND m.request_id = $2"
        ))
        .bind(conversation)
        .bind(request_id)
        .fetch_optional(&mut *conn)
        .await
        .map_err(db("send"))?;
        let Some(existing) = existing else {
            return Ok(None);
        };
        let message = Message::try_from(existing)?;
        if message.body_sha256 != sha {
            return Err(BusError::conflict(
                "request id was already used with another body",
            ));
        }
        Ok(Some(Sent {
            message,
            created: false,
        }))
    }
}

pub(super) async fn send(
    ledger: &PostgresLedger,
    request: SendRequest,
    at: DateTime<Utc>,
) -> BusResult<Sent> {
    let what = "send";
    let mut tx = ledger.begin(what).await?;
    // The conversation row is the per-conversation lock: seq allocation and the insert
    // happen under it. The same statement checks the sender and whether the request id is
    // taken, under the statement's snapshot (taken before any wait for the lock); `next_seq`
    // is the locked row's latest. A repeat that committed while this send waited for the
    // lock is caught by the insert (`ON CONFLICT … DO NOTHING`) and looked up again.
    let conv: Option<(String, i64, bool, bool)> = sqlx::query_as(
        "SELECT c.backend, c.next_seq,
                EXISTS (
                    SELECT 1 FROM members m JOIN agents a ON a.id = m.agent_id
                    WHERE m.conversation_id = c.id AND m.agent_id = $4
                      AND a.team_id = c.team_id AND a.revoked_at IS NULL),
                EXISTS (
                    SELECT 1 FROM messages e
                    WHERE e.conversation_id = c.id AND e.request_id = $5)
         FROM conversations c JOIN teams t ON t.id = c.team_id
         WHERE c.id = $1 AND c.team_id = $2 AND t.tenant = $3
         FOR NO KEY UPDATE OF c",
    )
    .bind(request.conversation)
    .bind(request.team)
    .bind(ledger.tenant.as_str())
    .bind(request.sender)
    .bind(&request.request_id)
    .fetch_optional(&mut *tx)
    .await
    .map_err(db(what))?;
    let (backend, next_seq, sender_ok, repeat) =
        conv.ok_or_else(|| BusError::not_found(format!("conversation {}", request.conversation)))?;
    if !sender_ok {
        return Err(BusError::forbidden(
            "the sender is not an active member of the conversation",
        ));
    }
    let sealed = ledger
        .check_run_owner(&mut tx, request.run, request.team, request.sender)
        .await?;
    let sha = body_sha256(&request.body);
    // The repeat rule; when sealed, look again: a repeat committed during the lock wait
    // answers before the seal does.
    if (repeat || sealed)
        && let Some(sent) =
            PostgresLedger::repeated(&mut tx, request.conversation, &request.request_id, &sha)
                .await?
    {
        return Ok(sent);
    }
    if sealed {
        return Err(BusError::conflict(format!(
            "run {} is sealed",
            request.run.map(|r| r.to_string()).unwrap_or_default()
        )));
    }
    let seq = from_db(next_seq);
    let id = Uuid::new_v4();
    let local = backend == SCHEME;
    let mut message = Message::pending(id, &request, seq, backend.clone(), sha, at);
    if local {
        message.publication = Publication::Stored;
        message.locator = Some(locator_for(id));
        message.stored_at = Some(at);
    }
    let envelope = Envelope {
        message_id: id,
        conversation_id: request.conversation,
        team_id: request.team,
        body: request.body,
        publish_key: Uuid::new_v4(),
    };
    // One statement: seq bump, message, receipts, and the outbox slot (other backends) or
    // the inbox events (local backend). Foreign keys are checked at the statement's end.
    let query = sqlx::query_scalar(if local { SEND_LOCAL } else { SEND_REMOTE })
        .bind(id)
        .bind(request.team)
        .bind(request.conversation)
        .bind(next_seq)
        .bind(request.sender)
        .bind(&request.request_id)
        .bind(&message.body_sha256)
        .bind(db_i64(message.body_len))
        .bind(&backend)
        .bind(message.publication.as_str())
        .bind(message.locator.as_ref().map(|l| l.as_str()))
        .bind(at)
        .bind(message.stored_at);
    let query = if local {
        let payload = ReferencePayload {
            message: id,
            conversation: request.conversation,
            seq,
        };
        query.bind(payload.to_json()).bind(ledger.tenant.as_str())
    } else {
        query
            .bind(Uuid::new_v4())
            .bind(ledger.tenant.as_str())
            .bind(envelope.publish_key)
            .bind(envelope.body.as_bytes())
    };
    let inserted: Option<Uuid> = query.fetch_optional(&mut *tx).await.map_err(db(what))?;
    if inserted.is_none() {
        // Not inserted: the sender was revoked, or the request id was taken by a send that
        // committed while this one waited for the conversation lock (this transaction is
        // rolled back). Checked in the trait's order: the sender, then the repeat rule.
        let active: bool = sqlx::query_scalar(
            "SELECT EXISTS (
                 SELECT 1 FROM members m JOIN agents a ON a.id = m.agent_id
                 WHERE m.conversation_id = $1 AND m.agent_id = $2 AND a.team_id = $3
                   AND a.revoked_at IS NULL)",
        )
        .bind(request.conversation)
        .bind(request.sender)
        .bind(request.team)
        .fetch_one(&mut *tx)
        .await
        .map_err(db(what))?;
        if !active {
            return Err(BusError::forbidden(
                "the sender is not an active member of the conversation",
            ));
        }
        return PostgresLedger::repeated(
            &mut tx,
            request.conversation,
            &request.request_id,
            &message.body_sha256,
        )
        .await?
        .ok_or_else(|| BusError::conflict("the request id is taken"));
    }
    if local {
        match store_body(&mut tx, &envelope, at).await {
            Ok(_) => {}
            Err(Ok(refused)) => return Err(refused),
            Err(Err(e)) => return Err(bus_error(e, what)),
        }
    }
    if let Some(run) = request.run {
        let kind = RecordKind::MessageSent {
            conversation: request.conversation,
            message: id,
            seq,
        };
        append(&mut tx, run, at, &kind).await.map_err(db(what))?;
    }
    PostgresLedger::commit(tx, what).await?;
    Ok(Sent {
        message,
        created: true,
    })
}
