//! The SQLite ledger's `send`: the checks, the repeat rule, and the writes of a message with
//! its receipts and its outbox slot or inbox events — one write transaction.

use chrono::{DateTime, Utc};
use crewbus_domain::{
    BusError, BusResult, Envelope, Message, Publication, RecordKind, ReferencePayload, SendRequest,
    Sent, body_sha256,
};
use sqlx::SqliteConnection;
use uuid::Uuid;

use super::SqliteLedger;
use super::rows::{MESSAGE_COLUMNS, MessageRow};
use crate::body::{SCHEME, locator_for, store_body};
use crate::codec::{Ts, db_i64, from_db};
use crate::journal::append;

impl SqliteLedger {
    /// The repeat rule of `send`: the message already recorded under the request's
    /// `(conversation, request_id)`, as it stands, `created: false` — or `Conflict` when it was
    /// sent with another body; `None` when the request id is free.
    async fn repeated(
        &self,
        conn: &mut SqliteConnection,
        conversation: Uuid,
        request_id: &str,
        sha: &str,
    ) -> BusResult<Option<Sent>> {
        let existing: Option<MessageRow> = sqlx::query_as(&format!(
            "SELECT {MESSAGE_COLUMNS} FROM messages m
             WHERE m.conversation_id = ? AND m.request_id = ?"
        ))
        .bind(conversation)
        .bind(request_id)
        .fetch_optional(&mut *conn)
        .await
        .map_err(self.db("send"))?;
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

    /// Inserts the message, bumps the conversation's counter, and writes one receipt per member
    /// other than the sender (recipients snapshotted now); returns the recipients (agent id,
    /// recipient key) in recipient key order.
    async fn insert_message(
        &self,
        conn: &mut SqliteConnection,
        message: &Message,
    ) -> BusResult<Vec<(Uuid, String)>> {
        let what = "send";
        sqlx::query("UPDATE conversations SET next_seq = next_seq + 1 WHERE id = ?")
            .bind(message.conversation)
            .execute(&mut *conn)
            .await
            .map_err(self.db(what))?;
        sqlx::query(
            "INSERT INTO messages
                 (id, team_id, conversation_id, seq, sender_id, request_id, body_sha256,
                  body_len, backend, publication, locator, sent_at, stored_at)
             VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
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
        .execute(&mut *conn)
        .await
        .map_err(self.db(what))?;
        let recipients: Vec<(Uuid, String)> = sqlx::query_as(
            "SELECT agent_id, recipient_key FROM members
             WHERE conversation_id = ? AND agent_id <> ? ORDER BY recipient_key",
        )
        .bind(message.conversation)
        .bind(message.sender)
        .fetch_all(&mut *conn)
        .await
        .map_err(self.db(what))?;
        for (agent, key) in &recipients {
            sqlx::query(
                "INSERT INTO receipts (message_id, recipient_id, recipient_key, stored_at)
                 VALUES (?, ?, ?, ?)",
            )
            .bind(message.id)
            .bind(*agent)
            .bind(key)
            .bind(message.stored_at.map(Ts))
            .execute(&mut *conn)
            .await
            .map_err(self.db(what))?;
        }
        Ok(recipients)
    }

    /// Enqueues one inbox event per receipt of `message` (stored now, at `at`), in the team's
    /// inbox, in recipient key order. Shared by `send` (local backend) and `settle`.
    pub(super) async fn enqueue_inbox_events(
        &self,
        conn: &mut SqliteConnection,
        team: Uuid,
        message: Uuid,
        payload: &str,
        at: DateTime<Utc>,
    ) -> BusResult<()> {
        let what = "inbox events";
        let recipients: Vec<(Uuid, String)> = sqlx::query_as(
            "SELECT recipient_id, recipient_key FROM receipts WHERE message_id = ?
             ORDER BY recipient_key",
        )
        .bind(message)
        .fetch_all(&mut *conn)
        .await
        .map_err(self.db(what))?;
        for (recipient, key) in recipients {
            sqlx::query(
                "INSERT INTO inbox_events
                     (id, tenant, team_id, message_id, recipient_id, recipient_key, inbox,
                      payload, created_at)
                 SELECT ?1, ?2, ?3, ?4, ?5, ?6, t.inbox, ?7, ?8 FROM teams t WHERE t.id = ?3",
            )
            .bind(Uuid::new_v4())
            .bind(self.tenant.as_str())
            .bind(team)
            .bind(message)
            .bind(recipient)
            .bind(key)
            .bind(payload)
            .bind(Ts(at))
            .execute(&mut *conn)
            .await
            .map_err(self.db(what))?;
        }
        Ok(())
    }
}

pub(super) async fn send(
    ledger: &SqliteLedger,
    request: SendRequest,
    at: DateTime<Utc>,
) -> BusResult<Sent> {
    let what = "send";
    let mut tx = ledger.begin(what).await?;
    // Inside the write transaction nothing changes between these checks and the writes: no
    // concurrent send, revocation or seal can interleave.
    let conv: Option<(String, i64, bool, bool)> = sqlx::query_as(
        "SELECT c.backend, c.next_seq,
                EXISTS (
                    SELECT 1 FROM members m JOIN agents a ON a.id = m.agent_id
                    WHERE m.conversation_id = c.id AND m.agent_id = ?4
                      AND a.team_id = c.team_id AND a.revoked_at IS NULL),
                EXISTS (
                    SELECT 1 FROM messages e
                    WHERE e.conversation_id = c.id AND e.request_id = ?5)
         FROM conversations c JOIN teams t ON t.id = c.team_id
         WHERE c.id = ?1 AND c.team_id = ?2 AND t.tenant = ?3",
    )
    .bind(request.conversation)
    .bind(request.team)
    .bind(ledger.tenant.as_str())
    .bind(request.sender)
    .bind(&request.request_id)
    .fetch_optional(&mut *tx)
    .await
    .map_err(ledger.db(what))?;
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
    if repeat {
        return ledger
            .repeated(&mut tx, request.conversation, &request.request_id, &sha)
            .await?
            .ok_or_else(|| BusError::conflict("the request id is taken"));
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
    let mut message = Message {
        id,
        team: request.team,
        conversation: request.conversation,
        seq,
        sender: request.sender,
        request_id: request.request_id.clone(),
        body_sha256: sha,
        body_len: request.body.len() as u64,
        backend: backend.clone(),
        locator: None,
        publication: Publication::PendingPublication,
        sent_at: at,
        stored_at: None,
        retained_at: None,
        failure: None,
    };
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
    ledger.insert_message(&mut tx, &message).await?;
    if local {
        let payload = ReferencePayload {
            message: id,
            conversation: request.conversation,
            seq,
        };
        ledger
            .enqueue_inbox_events(&mut tx, request.team, id, &payload.to_json(), at)
            .await?;
        match store_body(&mut tx, &envelope, at).await {
            Ok(_) => {}
            Err(Ok(refused)) => return Err(refused),
            Err(Err(e)) => return Err(ledger.pools.bus_error(e, what)),
        }
    } else {
        sqlx::query(
            "INSERT INTO outbox_slots
                 (id, tenant, message_id, team_id, conversation_id, backend, publish_key, body,
                  next_attempt_at)
             VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        )
        .bind(Uuid::new_v4())
        .bind(ledger.tenant.as_str())
        .bind(id)
        .bind(request.team)
        .bind(request.conversation)
        .bind(&backend)
        .bind(envelope.publish_key)
        .bind(envelope.body.as_bytes())
        .bind(Ts(at))
        .execute(&mut *tx)
        .await
        .map_err(ledger.db(what))?;
    }
    if let Some(run) = request.run {
        let kind = RecordKind::MessageSent {
            conversation: request.conversation,
            message: id,
            seq,
        };
        append(&mut tx, run, at, &kind)
            .await
            .map_err(ledger.db(what))?;
    }
    ledger.commit(tx, what).await?;
    Ok(Sent {
        message,
        created: true,
    })
}
