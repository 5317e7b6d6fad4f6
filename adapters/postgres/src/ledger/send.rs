//! The Postgres ledger's `send` and `send_batch` (group commit; the transaction and the plan
//! are the shared `crewbus_sql::send`'s): the conversation locks, the facts read under them,
//! and the one statement that writes every message of the
//! batch with its receipts, its outbox slot or body and reference marker, and its journal records.
//!
//! `send` is a batch of one. A batch is a constant number of statements whatever its size:
//!
//! 1. `BEGIN`;
//! 2. the lock: the batch's conversations, `ORDER BY id FOR NO KEY UPDATE` (two batches lock in
//!    the same order, so they cannot deadlock), returning each locked row's latest `next_seq`;
//! 3. the facts, one statement over `unnest` of the requests, in a snapshot taken after the locks
//!    were granted (so a send or a revocation committed while this batch waited is seen): is the
//!    sender an active member, which message (if any) holds the request's idempotency key
//!    `(conversation, sender, request_id)`;
//! 4. only when some request id is taken: those messages as they stand (`id = ANY`);
//! 5. only when some request names a run: the runs, `ORDER BY id FOR NO KEY UPDATE`;
//! 6. the decision, in memory: [`crewbus_domain::plan_sends`] — every request's fate before any
//!    write, so no savepoint;
//! 7. only when something is created: one statement of data-modifying CTEs over `unnest` arrays
//!    (seq bumps, messages, receipts, outbox slots, bodies, reference markers);
//! 8. only when a created message names a run: one statement for every `MessageSent` record and
//!    run counter (after the messages, as `send` always wrote them);
//! 9. `COMMIT`.
//!
//! A send without a run that creates its message: five round trips; a batch of 64: the same
//! five.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use crewbus_domain::{
    AgentKind, BusError, BusResult, ConversationFacts, Message, Publication, RecordKind,
    RequestKey, RunFacts, RunId, SendDecision, SendFacts, SendRequest, validate_request_id,
};
use sqlx::PgConnection;
use uuid::Uuid;

use super::db;
use super::rows::{MESSAGE_COLUMNS, MessageRow, db_i64, from_db};
use crate::body::{SCHEME, locator_for};
use crate::dialect::Pg;
use crewbus_sql::ledger::SqlLedger;

const WHAT: &str = "send";

/// The batch's write (after the plan, under the locks): `$1`… `$16` are the created messages'
/// columns in queue order (id, team, conversation, seq, sender, request id, body SHA-256, body
/// length, backend, publication, locator, stored at, local — `true` when the body is stored
/// here, with a reference marker when the message has recipients —, outbox slot id — `NULL` for the local backend —, publish key, body bytes);
/// `$17` the time, `$18` the tenant. Each message takes its sender's kind, and gets one receipt
/// per agent member other than the sender (human members get none), with copies of the
/// message's conversation, seq and stored time (the top-up's order). Returns each inserted
/// message's id and sender kind.
const WRITE_BATCH: &str = "
WITH u AS (
    SELECT * FROM unnest($1::uuid[], $2::uuid[], $3::uuid[], $4::bigint[], $5::uuid[],
                         $6::text[], $7::text[], $8::bigint[], $9::text[], $10::text[],
                         $11::text[], $12::timestamptz[], $13::bool[], $14::uuid[], $15::uuid[],
                         $16::bytea[])
        WITH ORDINALITY AS u(id, team, conv, seq, sender, rid, sha, len, backend, publication,
                             locator, stored_at, local, slot_id, publish_key, body, ord)
), bump AS (
    UPDATE conversations c SET next_seq = c.next_seq + n.k
    FROM (SELECT conv, count(*) AS k FROM u GROUP BY conv) n
    WHERE c.id = n.conv
), msg AS (
    INSERT INTO messages
        (id, team_id, conversation_id, seq, sender_id, request_id, body_sha256, body_len,
         backend, publication, locator, sent_at, stored_at, sender_kind)
    SELECT u.id, u.team, u.conv, u.seq, u.sender, u.rid, u.sha, u.len, u.backend, u.publication,
           u.locator, $17, u.stored_at, a.kind
    FROM u JOIN agents a ON a.id = u.sender ORDER BY u.ord
    RETURNING id, sender_kind
), rec AS (
    INSERT INTO receipts
        (message_id, recipient_id, recipient_key, conversation_id, seq, stored_at)
    SELECT u.id, mb.agent_id, mb.recipient_key, u.conv, u.seq, u.stored_at
    FROM u JOIN members mb ON mb.conversation_id = u.conv AND mb.agent_id <> u.sender
    JOIN agents a ON a.id = mb.agent_id AND a.kind = 'agent'
    RETURNING message_id
), slot AS (
    INSERT INTO outbox_slots
        (id, tenant, message_id, team_id, conversation_id, backend, publish_key, body,
         next_attempt_at)
    SELECT slot_id, $18, id, team, conv, backend, publish_key, body, $17
    FROM u WHERE NOT local ORDER BY ord
), stored AS (
    INSERT INTO bodies (message_id, team_id, conversation_id, publish_key, body, stored_at)
    SELECT id, team, conv, publish_key, body, $17 FROM u WHERE local
), marks AS (
    INSERT INTO reference_marks (message_id, tenant, team_id, inbox, created_at)
    SELECT u.id, $18, u.team, t.inbox, $17
    FROM u JOIN teams t ON t.id = u.team
    WHERE u.local AND u.id IN (SELECT message_id FROM rec)
    ORDER BY u.ord
)
SELECT id, sender_kind FROM msg";

/// The batch's `MessageSent` records, after [`WRITE_BATCH`] (as `send` always wrote the record
/// after the message): `$1`… `$3` the records (run, the record's rank among the batch's records
/// of its run from 1, kind JSON), `$4` the time; each takes its run's `last_seq` + its rank, and
/// each run's `last_seq` grows by its number of records. Every part of the statement sees the
/// runs as they were before it, so `last_seq` in `records` is the locked row's before `bump`.
const WRITE_RECORDS: &str = "
WITH j AS (
    SELECT * FROM unnest($1::uuid[], $2::bigint[], $3::text[]) AS j(run, nth, kind)
), bump AS (
    UPDATE runs r SET last_seq = r.last_seq + n.k
    FROM (SELECT run, count(*) AS k FROM j GROUP BY run) n
    WHERE r.id = n.run
)
INSERT INTO journal_records (run_id, seq, at, kind)
SELECT j.run, r.last_seq + j.nth, $4, j.kind FROM j JOIN runs r ON r.id = j.run";

/// Locks the batch's conversations (in id order), then reads what the plan needs under the
/// locks, and locks the batch's runs (in id order).
pub(crate) async fn send_facts(
    ledger: &SqlLedger<Pg>,
    conn: &mut PgConnection,
    requests: &[SendRequest],
) -> BusResult<SendFacts> {
    let mut conversations: Vec<Uuid> = requests.iter().map(|r| r.conversation).collect();
    conversations.sort_unstable();
    conversations.dedup();
    let locked: Vec<(Uuid, Uuid, String, i64)> = sqlx::query_as(
        "SELECT c.id, c.team_id, c.backend, c.next_seq
         FROM conversations c JOIN teams t ON t.id = c.team_id
         WHERE c.id = ANY($1) AND t.tenant = $2
         ORDER BY c.id
         FOR NO KEY UPDATE OF c",
    )
    .bind(&conversations)
    .bind(ledger.tenant().as_str())
    .fetch_all(&mut *conn)
    .await
    .map_err(db(WHAT))?;
    let mut facts = SendFacts::default();
    for (id, team, backend, next_seq) in locked {
        let next_seq = from_db(next_seq);
        facts.conversations.insert(
            id,
            ConversationFacts {
                team,
                backend,
                next_seq,
            },
        );
    }

    // A new statement: its snapshot is taken after every lock above was granted.
    let convs: Vec<Uuid> = requests.iter().map(|r| r.conversation).collect();
    let senders: Vec<Uuid> = requests.iter().map(|r| r.sender).collect();
    // A request id the domain refuses is never bound: Postgres text refuses U+0000, and the
    // error would fail the whole batch, every other request with it. Such a request is
    // looked up as "" (no message has it) and answered `Invalid` alone by the plan.
    let request_ids: Vec<&str> = requests
        .iter()
        .map(|r| match validate_request_id(&r.request_id) {
            Ok(()) => r.request_id.as_str(),
            Err(_) => "",
        })
        .collect();
    let rows: Vec<(i64, bool, Option<Uuid>)> = sqlx::query_as(
        "SELECT r.i,
                EXISTS (
                    SELECT 1 FROM members m
                    JOIN agents a ON a.id = m.agent_id
                    JOIN conversations c ON c.id = m.conversation_id
                    WHERE m.conversation_id = r.conv AND m.agent_id = r.sender
                      AND a.team_id = c.team_id AND a.revoked_at IS NULL),
                (SELECT e.id FROM messages e
                 WHERE e.conversation_id = r.conv AND e.sender_id = r.sender
                   AND e.request_id = r.rid)
         FROM unnest($1::uuid[], $2::uuid[], $3::text[]) WITH ORDINALITY AS r(conv, sender, rid, i)",
    )
    .bind(&convs)
    .bind(&senders)
    .bind(&request_ids)
    .fetch_all(&mut *conn)
    .await
    .map_err(db(WHAT))?;
    let mut recorded_ids = Vec::new();
    for (i, active, existing) in rows {
        let request = &requests[usize::try_from(i - 1).expect("ordinality from 1")];
        if active {
            facts
                .active_members
                .insert((request.conversation, request.sender));
        }
        recorded_ids.extend(existing);
    }
    if !recorded_ids.is_empty() {
        let rows: Vec<MessageRow> = sqlx::query_as(&format!(
            "SELECT {MESSAGE_COLUMNS} FROM messages m WHERE m.id = ANY($1)"
        ))
        .bind(&recorded_ids)
        .fetch_all(&mut *conn)
        .await
        .map_err(db(WHAT))?;
        for row in rows {
            let message = Message::try_from(row)?;
            facts.recorded.insert(RequestKey::from(&message), message);
        }
    }

    let mut runs: Vec<Uuid> = requests.iter().filter_map(|r| r.run.map(|r| r.0)).collect();
    if !runs.is_empty() {
        runs.sort_unstable();
        runs.dedup();
        let locked: Vec<(Uuid, Uuid, Uuid, bool)> = sqlx::query_as(
            "SELECT id, team_id, agent_id, sealed_at IS NOT NULL FROM runs
             WHERE id = ANY($1) AND tenant = $2
             ORDER BY id
             FOR NO KEY UPDATE",
        )
        .bind(&runs)
        .bind(ledger.tenant().as_str())
        .fetch_all(&mut *conn)
        .await
        .map_err(db("run lookup"))?;
        for (id, team, agent, sealed) in locked {
            facts.runs.insert(
                RunId(id),
                RunFacts {
                    team,
                    agent,
                    sealed,
                },
            );
        }
    }
    Ok(facts)
}

/// Writes every `Create` of `plan` in one statement and returns the created messages by
/// request index (nothing is written, and no statement sent, when nothing is created).
pub(crate) async fn write_plan(
    ledger: &SqlLedger<Pg>,
    conn: &mut PgConnection,
    requests: &[SendRequest],
    plan: &[SendDecision],
    at: DateTime<Utc>,
) -> BusResult<HashMap<usize, Message>> {
    let mut created = HashMap::new();
    let mut cols = Columns::default();
    let mut records: (Vec<Uuid>, Vec<i64>, Vec<String>) = Default::default();
    let mut per_run: HashMap<Uuid, i64> = HashMap::new();
    for (i, (request, decision)) in requests.iter().zip(plan).enumerate() {
        let SendDecision::Create {
            seq,
            backend,
            body_sha256,
        } = decision
        else {
            continue;
        };
        let id = Uuid::new_v4();
        let mut message =
            Message::pending(id, request, *seq, backend.clone(), body_sha256.clone(), at);
        let local = backend == SCHEME;
        if local {
            message.publication = Publication::Stored;
            message.locator = Some(locator_for(id));
            message.stored_at = Some(at);
        }
        cols.push(&message, request, local);
        if let Some(run) = request.run {
            let nth = per_run.entry(run.0).or_default();
            *nth += 1;
            records.0.push(run.0);
            records.1.push(*nth);
            records.2.push(
                serde_json::to_string(&RecordKind::MessageSent {
                    conversation: request.conversation,
                    message: id,
                    seq: *seq,
                })
                .map_err(|e| db(WHAT)(sqlx::Error::Encode(Box::new(e))))?,
            );
        }
        created.insert(i, message);
    }
    if created.is_empty() {
        return Ok(created);
    }
    let inserted: Vec<(Uuid, String)> = sqlx::query_as(WRITE_BATCH)
        .bind(&cols.id)
        .bind(&cols.team)
        .bind(&cols.conv)
        .bind(&cols.seq)
        .bind(&cols.sender)
        .bind(&cols.request_id)
        .bind(&cols.sha)
        .bind(&cols.len)
        .bind(&cols.backend)
        .bind(&cols.publication)
        .bind(&cols.locator)
        .bind(&cols.stored_at)
        .bind(&cols.local)
        .bind(&cols.slot_id)
        .bind(&cols.publish_key)
        .bind(&cols.body)
        .bind(at)
        .bind(ledger.tenant().as_str())
        .fetch_all(&mut *conn)
        .await
        .map_err(db(WHAT))?;
    if inserted.len() != created.len() {
        return Err(BusError::unavailable(
            "send: the batch's write did not insert every planned message",
        ));
    }
    let kinds: HashMap<Uuid, String> = inserted.into_iter().collect();
    for message in created.values_mut() {
        let kind = kinds.get(&message.id).ok_or_else(|| {
            BusError::unavailable("send: the batch's write lost a planned message")
        })?;
        message.sender_kind = AgentKind::from_stored(kind)?;
    }
    if !records.0.is_empty() {
        sqlx::query(WRITE_RECORDS)
            .bind(&records.0)
            .bind(&records.1)
            .bind(&records.2)
            .bind(at)
            .execute(&mut *conn)
            .await
            .map_err(db(WHAT))?;
    }
    Ok(created)
}

/// The created messages' columns, one array per column of [`WRITE_BATCH`]'s `unnest`.
#[derive(Default)]
struct Columns {
    id: Vec<Uuid>,
    team: Vec<Uuid>,
    conv: Vec<Uuid>,
    seq: Vec<i64>,
    sender: Vec<Uuid>,
    request_id: Vec<String>,
    sha: Vec<String>,
    len: Vec<i64>,
    backend: Vec<String>,
    publication: Vec<&'static str>,
    locator: Vec<Option<String>>,
    stored_at: Vec<Option<DateTime<Utc>>>,
    local: Vec<bool>,
    slot_id: Vec<Option<Uuid>>,
    publish_key: Vec<Uuid>,
    body: Vec<Vec<u8>>,
}

impl Columns {
    fn push(&mut self, message: &Message, request: &SendRequest, local: bool) {
        self.id.push(message.id);
        self.team.push(message.team);
        self.conv.push(message.conversation);
        self.seq.push(db_i64(message.seq));
        self.sender.push(message.sender);
        self.request_id.push(message.request_id.clone());
        self.sha.push(message.body_sha256.clone());
        self.len.push(db_i64(message.body_len));
        self.backend.push(message.backend.clone());
        self.publication.push(message.publication.as_str());
        self.locator
            .push(message.locator.as_ref().map(|l| l.as_str().to_owned()));
        self.stored_at.push(message.stored_at);
        self.local.push(local);
        self.slot_id.push((!local).then(Uuid::new_v4));
        self.publish_key.push(Uuid::new_v4());
        self.body.push(request.body.as_bytes().to_vec());
    }
}
