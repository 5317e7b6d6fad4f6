//! `crewbus-raw-server`: the raw same-work baseline of `scripts/bench-e2e` (issue 14).
//!
//! A minimal axum + sqlx + async-nats program that serves the HTTP routes `crewbus load` uses
//! and does the same durable work per message as `crewbus serve` on a Postgres ledger with
//! JetStream bodies and inbox — with no outbox, relay, hand-outs, journal, quotas, retention,
//! metrics or configuration. What it does per message:
//!
//! - **send**, a two-stage pipeline with group commit (a batch is whatever queued while the
//!   stage was busy, at most `--batch-max` requests): stage 1 publishes the batch's bodies to
//!   the body stream concurrently (subject `raw.body.<conversation>`, `Nats-Msg-Id` =
//!   `<conversation>:<request_id>:<body digest>`, so a retry stores nothing twice) and waits
//!   for every PubAck;
//!   stage 2, while stage 1 publishes the next batch, runs one transaction that locks the
//!   batch's conversations `FOR NO KEY UPDATE` in id order, reads membership and request ids in
//!   one statement, decides every request in queue order (not a member → 403, a repeated
//!   request id → the first message (200) or 409 for another body), bumps `next_seq` and
//!   inserts the messages (with their body's stream sequence) and one receipt per recipient in
//!   one statement, commits and answers 201; then publishes one reference per recipient
//!   (subject `raw.inbox.<agent>`, `Nats-Msg-Id` = `<message>:<agent>`), each retried for up
//!   to about 10 s. A repeat (200) publishes its references again (deduplicated by the broker
//!   within its 120 s duplicate window), so a retried send whose first answer was lost gets
//!   its references. An answered message thus has its body in JetStream and its rows in
//!   Postgres, as with crewbus. A conversation that does not exist is 403, like one the sender
//!   is not a member of. A refused send (403, 409) leaves its body in the body stream, unused:
//!   bodies go first.
//! - **fetch**: pulls up to `limit` references from the agent's durable pull consumer (explicit
//!   ack), reads their messages and receipts in one statement and their bodies from the body
//!   stream (direct get), acknowledges a reference whose receipt is already committed (a
//!   redelivery after commit-but-no-ack) and hands out the others under a fresh delivery id.
//! - **confirm**: commits the receipts of the given delivery ids in one statement (locked in
//!   message order), then acknowledges their references (double ack) and answers, per delivery
//!   id in request order, `confirmed` (this call committed the receipt; once per message),
//!   `already_confirmed` (committed before, e.g. a retried confirm) or `unknown_delivery`.
//! - **history** and **receipts** reads for the load tool's zero-loss check (`stored_at` is
//!   the send's time: the body was stored before the commit; receipts of a message the caller
//!   cannot see are `[]`), `GET /v1/me`, `POST /v1/conversations`, `GET /healthz`.
//!
//! Refusals are `{code, message}` with 400 (`invalid`), 401 (`unauthenticated`), 403
//! (`forbidden`), 409 (`conflict`) or 503 (`unavailable`: the database or the broker failed;
//! retryable).
//!
//! It is **not** crash-safe (a crash between a commit and its reference publishes loses those
//! references, and nothing tops them up: that is what crewbus's outbox and ledger top-up are
//! for), keeps tokens and delivery ids in memory,
//! and trusts its input more than crewbus does. It exists only to be measured against.
//!
//! Usage: `crewbus-raw-server --database-url URL --nats-url URL --listen 127.0.0.1:PORT
//! --tokens-file PATH [--agents 4] [--batch-max 64] [--pool 10]` (the pool size and batch
//! bound are crewbus's defaults). It creates its tables in the database
//! (which should be fresh), its two streams on the server (`RAW_BODIES`, `RAW_INBOX`, replaced
//! if present), one team of `--agents` agents, writes their bearer tokens to `--tokens-file`
//! (one per line, written last: its presence means ready) and serves until SIGTERM or Ctrl-C.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::jetstream::{self, consumer::pull, stream};
use axum::extract::rejection::{JsonRejection, PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use bytes::Bytes;
use chrono::{DateTime, Utc};
use clap::Parser;
use futures_util::StreamExt as _;
use futures_util::future::join_all;
use serde::Deserialize;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use sqlx::postgres::{PgPool, PgPoolOptions};
use sqlx::{Postgres, Row, Transaction};
use tokio::sync::{mpsc, oneshot};
use uuid::Uuid;

const BODY_STREAM: &str = "RAW_BODIES";
const INBOX_STREAM: &str = "RAW_INBOX";

/// The raw same-work baseline server (see the module docs).
#[derive(Debug, Parser)]
#[command(
    name = "crewbus-raw-server",
    about = "The raw same-work baseline of scripts/bench-e2e: crewbus's HTTP routes and durable \
             work per message (Postgres rows, JetStream bodies and references) with no outbox, \
             relay or hand-outs",
    long_about = None,
    after_help = "It creates its tables in --database-url (use a fresh database), DELETES and \
                  recreates the streams RAW_BODIES and RAW_INBOX on --nats-url, creates one team \
                  of --agents agents (at least 2) and writes their bearer tokens to \
                  --tokens-file (removed first; written last, so its presence means ready). \
                  Drive it with `crewbus load --url http://<listen> --tokens-file <file>`. Not \
                  crash-safe: a benchmark baseline only. Stops on SIGTERM or Ctrl-C.\n\n\
                  Example:\n  crewbus-raw-server --database-url postgres://postgres@127.0.0.1:5432/raw \\\n    \
                  --nats-url nats://127.0.0.1:4222 --listen 127.0.0.1:7701 --tokens-file /tmp/raw-tokens"
)]
struct Args {
    /// Postgres URL of a fresh database (its tables are created there).
    #[arg(long)]
    database_url: String,
    /// NATS URL with JetStream (`nats://user:password@host:port` when the server needs them).
    #[arg(long)]
    nats_url: String,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:7701")]
    listen: SocketAddr,
    /// Agents of the one team it creates (at least 2).
    #[arg(long, default_value_t = 4)]
    agents: usize,
    /// Where to write the agents' bearer tokens (one per line), once ready.
    #[arg(long)]
    tokens_file: PathBuf,
    /// Most send requests one commit takes.
    #[arg(long, default_value_t = 64)]
    batch_max: usize,
    /// Postgres connections in the pool (crewbus's default).
    #[arg(long, default_value_t = 10)]
    pool: u32,
}

/// A handed-out reference (kept after its confirm, so a retried confirm is answered
/// `already_confirmed`).
struct Delivery {
    agent: Uuid,
    message: Uuid,
    ack_subject: String,
}

struct App {
    pool: PgPool,
    nats: async_nats::Client,
    js: jetstream::Context,
    bodies: stream::Stream,
    team: Uuid,
    tokens: HashMap<String, Uuid>,
    consumers: HashMap<Uuid, jetstream::consumer::Consumer<pull::Config>>,
    deliveries: Mutex<HashMap<Uuid, Delivery>>,
    sends: mpsc::Sender<SendRequest>,
}

struct SendRequest {
    sender: Uuid,
    conversation: Uuid,
    request_id: String,
    body: String,
    digest: Vec<u8>,
    /// The body's stream sequence, once stage 1 has its PubAck.
    body_seq: i64,
    answer: oneshot::Sender<Answer>,
}

/// A refusal, answered as `{code, message}` with its status.
struct Refusal {
    status: StatusCode,
    code: &'static str,
    message: String,
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        let body = json!({"code": self.code, "message": self.message});
        (self.status, Json(body)).into_response()
    }
}

/// What a handler answers.
type Answer = Result<Response, Refusal>;

fn refuse(status: StatusCode, code: &'static str, message: &str) -> Refusal {
    Refusal {
        status,
        code,
        message: message.to_owned(),
    }
}

/// A request the framework could not read (body, path or query) as a 400 `invalid` refusal.
fn invalid(e: impl std::fmt::Display) -> Refusal {
    refuse(StatusCode::BAD_REQUEST, "invalid", &e.to_string())
}

/// The JSON body, or 400 `invalid`.
fn body<T>(r: Result<Json<T>, JsonRejection>) -> Result<T, Refusal> {
    r.map(|Json(t)| t).map_err(|e| invalid(e.body_text()))
}

/// The path's id, or 400 `invalid`.
fn path_id(r: Result<Path<Uuid>, PathRejection>) -> Result<Uuid, Refusal> {
    r.map(|Path(id)| id).map_err(|e| invalid(e.body_text()))
}

fn unavailable(e: impl std::fmt::Display) -> Refusal {
    refuse(
        StatusCode::SERVICE_UNAVAILABLE,
        "unavailable",
        &e.to_string(),
    )
}

fn rfc3339(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
}

impl App {
    /// The agent of the request's bearer token; 401 without a known one.
    fn agent(&self, headers: &HeaderMap) -> Result<Uuid, Refusal> {
        headers
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .and_then(|t| self.tokens.get(t).copied())
            .ok_or_else(|| {
                refuse(
                    StatusCode::UNAUTHORIZED,
                    "unauthenticated",
                    "no valid bearer token",
                )
            })
    }

    async fn is_member(&self, conversation: Uuid, agent: Uuid) -> Result<bool, Refusal> {
        sqlx::query("SELECT 1 FROM raw_members WHERE conversation = $1 AND agent = $2")
            .bind(conversation)
            .bind(agent)
            .fetch_optional(&self.pool)
            .await
            .map(|r| r.is_some())
            .map_err(unavailable)
    }
}

type Shared = State<Arc<App>>;

async fn me(State(app): Shared, headers: HeaderMap) -> Answer {
    let id = app.agent(&headers)?;
    Ok(Json(json!({"id": id, "team": app.team})).into_response())
}

#[derive(Deserialize)]
struct NewConversation {
    title: String,
    #[serde(default)]
    members: Vec<Uuid>,
}

async fn create_conversation(
    State(app): Shared,
    headers: HeaderMap,
    req: Result<Json<NewConversation>, JsonRejection>,
) -> Answer {
    let owner = app.agent(&headers)?;
    let req = body(req)?;
    let mut members: Vec<Uuid> = vec![owner];
    for m in req.members {
        if !app.tokens.values().any(|a| *a == m) {
            return Err(refuse(
                StatusCode::BAD_REQUEST,
                "invalid",
                "a member is not an agent",
            ));
        }
        if !members.contains(&m) {
            members.push(m);
        }
    }
    let id = Uuid::new_v4();
    let done = sqlx::query(
        "WITH c AS (INSERT INTO raw_conversations (id, title) VALUES ($1, $2)) \
         INSERT INTO raw_members (conversation, agent) SELECT $1, unnest($3::uuid[])",
    )
    .bind(id)
    .bind(&req.title)
    .bind(&members)
    .execute(&app.pool)
    .await;
    done.map_err(unavailable)?;
    Ok((
        StatusCode::CREATED,
        Json(json!({"id": id, "title": req.title, "members": members})),
    )
        .into_response())
}

#[derive(Deserialize)]
struct NewMessage {
    request_id: String,
    body: String,
}

async fn send(
    State(app): Shared,
    headers: HeaderMap,
    conversation: Result<Path<Uuid>, PathRejection>,
    req: Result<Json<NewMessage>, JsonRejection>,
) -> Answer {
    let sender = app.agent(&headers)?;
    let (conversation, req) = (path_id(conversation)?, body(req)?);
    if req.request_id.is_empty() {
        return Err(refuse(
            StatusCode::BAD_REQUEST,
            "invalid",
            "request_id is empty",
        ));
    }
    let (answer, answered) = oneshot::channel();
    let digest = Sha256::digest(req.body.as_bytes()).to_vec();
    let queued = app
        .sends
        .send(SendRequest {
            sender,
            conversation,
            request_id: req.request_id,
            body: req.body,
            digest,
            body_seq: 0,
            answer,
        })
        .await;
    if queued.is_err() {
        return Err(unavailable("shutting down"));
    }
    answered
        .await
        .unwrap_or_else(|_| Err(unavailable("the batch was dropped")))
}

/// Stage 1: takes whatever queued (at most `batch_max`), publishes the bodies, hands the batch
/// to stage 2 ([`committer`]); a request whose body publish fails is answered 503.
async fn batcher(app: Arc<App>, mut queue: mpsc::Receiver<SendRequest>, batch_max: usize) {
    let (to_commit, commits) = mpsc::channel::<Vec<SendRequest>>(1);
    tokio::spawn(committer(app.clone(), commits));
    while let Some(first) = queue.recv().await {
        let mut batch = vec![first];
        while batch.len() < batch_max {
            match queue.try_recv() {
                Ok(r) => batch.push(r),
                Err(_) => break,
            }
        }
        let acks = join_all(batch.iter().map(|r| {
            let digest: String = r.digest[..8].iter().map(|b| format!("{b:02x}")).collect();
            publish(
                &app.js,
                format!("raw.body.{}", r.conversation),
                format!("{}:{}:{digest}", r.conversation, r.request_id),
                Bytes::from(r.body.clone()),
            )
        }))
        .await;
        let mut stored = Vec::with_capacity(batch.len());
        for (mut r, ack) in batch.into_iter().zip(acks) {
            match ack {
                Ok(seq) => {
                    r.body_seq = seq as i64;
                    stored.push(r);
                }
                Err(e) => {
                    let _ = r.answer.send(Err(unavailable(e)));
                }
            }
        }
        if !stored.is_empty() && to_commit.send(stored).await.is_err() {
            return;
        }
    }
}

/// Stage 2: one commit per batch, then the answers, then the references (in a task of their
/// own, so the next commit starts at once).
async fn committer(app: Arc<App>, mut batches: mpsc::Receiver<Vec<SendRequest>>) {
    while let Some(batch) = batches.recv().await {
        commit_batch(&app, batch).await;
    }
}

/// A message accepted by a commit, to publish.
struct Accepted {
    request: SendRequest,
    id: Uuid,
    seq: i64,
    sent_at: DateTime<Utc>,
    recipients: Vec<Uuid>,
}

async fn commit_batch(app: &Arc<App>, batch: Vec<SendRequest>) {
    let mut tx = match app.pool.begin().await {
        Ok(tx) => tx,
        Err(e) => return fail_all(batch, &e),
    };
    match decide_and_write(&mut tx, batch).await {
        Ok((accepted, answered, repeats)) => match tx.commit().await {
            Ok(()) => {
                for (req, resp) in answered {
                    let _ = req.answer.send(resp);
                }
                let mut published = repeats;
                for a in accepted {
                    let resp = (
                        StatusCode::CREATED,
                        Json(json!({"message": {
                            "id": a.id,
                            "conversation": a.request.conversation,
                            "seq": a.seq,
                            "request_id": a.request.request_id,
                            "sent_at": rfc3339(a.sent_at),
                        }})),
                    )
                        .into_response();
                    let _ = a.request.answer.send(Ok(resp));
                    published.push((a.id, a.recipients));
                }
                tokio::spawn(publish_references(app.clone(), published));
            }
            Err(e) => fail_all(
                accepted
                    .into_iter()
                    .map(|a| a.request)
                    .chain(answered.into_iter().map(|(r, _)| r))
                    .collect(),
                &e,
            ),
        },
        Err((batch, e)) => fail_all(batch, &e),
    }
}

fn fail_all(batch: Vec<SendRequest>, e: &sqlx::Error) {
    for r in batch {
        let _ = r.answer.send(Err(unavailable(e)));
    }
}

/// What a batch decided: the messages to insert; the requests answered without one (refused,
/// or a repeat of a stored message); and the repeats' (message, recipients), whose references
/// are published again after the commit.
type Decided = (
    Vec<Accepted>,
    Vec<(SendRequest, Answer)>,
    Vec<(Uuid, Vec<Uuid>)>,
);

/// Locks, reads, decides and writes one batch inside `tx`; on a database error hands the whole
/// batch back with the error.
async fn decide_and_write(
    tx: &mut Transaction<'static, Postgres>,
    batch: Vec<SendRequest>,
) -> Result<Decided, (Vec<SendRequest>, sqlx::Error)> {
    let mut convs: Vec<Uuid> = batch.iter().map(|r| r.conversation).collect();
    convs.sort();
    convs.dedup();
    let locked = sqlx::query(
        "SELECT id, next_seq FROM raw_conversations WHERE id = ANY($1) ORDER BY id \
         FOR NO KEY UPDATE",
    )
    .bind(&convs)
    .fetch_all(&mut **tx)
    .await;
    let locked = match locked {
        Ok(rows) => rows,
        Err(e) => return Err((batch, e)),
    };
    let mut next_seq: HashMap<Uuid, i64> = locked
        .iter()
        .map(|r| (r.get::<Uuid, _>(0), r.get::<i64, _>(1)))
        .collect();
    let req_convs: Vec<Uuid> = batch.iter().map(|r| r.conversation).collect();
    let req_ids: Vec<String> = batch.iter().map(|r| r.request_id.clone()).collect();
    let facts = sqlx::query(
        "SELECT 'member' AS kind, conversation, agent, NULL::text AS request_id, \
                NULL::uuid AS id, NULL::bytea AS digest \
           FROM raw_members WHERE conversation = ANY($1) \
         UNION ALL \
         SELECT 'message', m.conversation, m.sender, m.request_id, m.id, m.body_digest \
           FROM unnest($2::uuid[], $3::text[]) AS u(c, r) \
           JOIN raw_messages m ON m.conversation = u.c AND m.request_id = u.r",
    )
    .bind(&convs)
    .bind(&req_convs)
    .bind(&req_ids)
    .fetch_all(&mut **tx)
    .await;
    let facts = match facts {
        Ok(rows) => rows,
        Err(e) => return Err((batch, e)),
    };
    let mut members: HashMap<Uuid, Vec<Uuid>> = HashMap::new();
    // (conversation, request id) → (message, body digest, sender)
    let mut known: HashMap<(Uuid, String), (Uuid, Vec<u8>, Uuid)> = HashMap::new();
    for row in &facts {
        let conversation: Uuid = row.get(1);
        if row.get::<String, _>(0) == "member" {
            members.entry(conversation).or_default().push(row.get(2));
        } else {
            known.insert(
                (conversation, row.get(3)),
                (row.get(4), row.get::<Vec<u8>, _>(5), row.get(2)),
            );
        }
    }
    let recipients_of = |conversation: &Uuid, sender: Uuid| -> Vec<Uuid> {
        members[conversation]
            .iter()
            .copied()
            .filter(|a| *a != sender)
            .collect()
    };
    let mut accepted = Vec::new();
    let mut answered = Vec::new();
    let mut repeats = Vec::new();
    for request in batch {
        let member = members
            .get(&request.conversation)
            .is_some_and(|m| m.contains(&request.sender));
        if !member || !next_seq.contains_key(&request.conversation) {
            answered.push((
                request,
                Err(refuse(StatusCode::FORBIDDEN, "forbidden", "not a member")),
            ));
            continue;
        }
        let key = (request.conversation, request.request_id.clone());
        if let Some((id, digest, sender)) = known.get(&key) {
            let resp = if *digest == request.digest {
                repeats.push((*id, recipients_of(&request.conversation, *sender)));
                Ok((StatusCode::OK, Json(json!({"message": {"id": id}}))).into_response())
            } else {
                Err(refuse(StatusCode::CONFLICT, "conflict", "another body"))
            };
            answered.push((request, resp));
            continue;
        }
        let id = Uuid::new_v4();
        known.insert(key, (id, request.digest.clone(), request.sender));
        let seq = next_seq.get_mut(&request.conversation).expect("locked");
        *seq += 1;
        let recipients = recipients_of(&request.conversation, request.sender);
        accepted.push(Accepted {
            seq: *seq,
            id,
            sent_at: Utc::now(),
            recipients,
            request,
        });
    }
    if accepted.is_empty() {
        return Ok((accepted, answered, repeats));
    }
    let bumped: Vec<Uuid> = next_seq.keys().copied().collect();
    let seqs: Vec<i64> = bumped.iter().map(|c| next_seq[c]).collect();
    let (mut receipt_msgs, mut receipt_agents) = (Vec::new(), Vec::new());
    for a in &accepted {
        for r in &a.recipients {
            receipt_msgs.push(a.id);
            receipt_agents.push(*r);
        }
    }
    let written = sqlx::query(
        "WITH c AS (UPDATE raw_conversations SET next_seq = v.n \
                      FROM unnest($1::uuid[], $2::bigint[]) AS v(id, n) \
                     WHERE raw_conversations.id = v.id), \
              m AS (INSERT INTO raw_messages \
                      (id, conversation, seq, sender, request_id, body_digest, sent_at, body_seq) \
                    SELECT * FROM unnest($3::uuid[], $4::uuid[], $5::bigint[], $6::uuid[], \
                                         $7::text[], $8::bytea[], $9::timestamptz[], \
                                         $12::bigint[])) \
         INSERT INTO raw_receipts (message, recipient) \
         SELECT * FROM unnest($10::uuid[], $11::uuid[])",
    )
    .bind(&bumped)
    .bind(&seqs)
    .bind(accepted.iter().map(|a| a.id).collect::<Vec<_>>())
    .bind(
        accepted
            .iter()
            .map(|a| a.request.conversation)
            .collect::<Vec<_>>(),
    )
    .bind(accepted.iter().map(|a| a.seq).collect::<Vec<_>>())
    .bind(
        accepted
            .iter()
            .map(|a| a.request.sender)
            .collect::<Vec<_>>(),
    )
    .bind(
        accepted
            .iter()
            .map(|a| a.request.request_id.clone())
            .collect::<Vec<_>>(),
    )
    .bind(
        accepted
            .iter()
            .map(|a| a.request.digest.clone())
            .collect::<Vec<_>>(),
    )
    .bind(accepted.iter().map(|a| a.sent_at).collect::<Vec<_>>())
    .bind(&receipt_msgs)
    .bind(&receipt_agents)
    .bind(
        accepted
            .iter()
            .map(|a| a.request.body_seq)
            .collect::<Vec<_>>(),
    )
    .execute(&mut **tx)
    .await;
    match written {
        Ok(_) => Ok((accepted, answered, repeats)),
        Err(e) => Err((
            accepted
                .into_iter()
                .map(|a| a.request)
                .chain(answered.into_iter().map(|(r, _)| r))
                .collect(),
            e,
        )),
    }
}

/// Publishes one reference per recipient of each committed message and waits for the
/// PubAcks, each retried up to 20 times 0.5 s apart; one that still fails is logged (there is
/// no outbox to keep it).
async fn publish_references(app: Arc<App>, committed: Vec<(Uuid, Vec<Uuid>)>) {
    let refs = committed.iter().flat_map(|(id, recipients)| {
        let app = &app;
        recipients.iter().map(move |r| async move {
            let mut attempt = 0;
            loop {
                let published = publish(
                    &app.js,
                    format!("raw.inbox.{r}"),
                    format!("{id}:{r}"),
                    Bytes::from(id.to_string()),
                )
                .await;
                attempt += 1;
                match published {
                    Ok(_) => return,
                    Err(e) if attempt >= 20 => {
                        eprintln!("crewbus-raw-server: a reference was not stored: {e}");
                        return;
                    }
                    Err(_) => tokio::time::sleep(Duration::from_millis(500)).await,
                }
            }
        })
    });
    join_all(refs).await;
}

async fn publish(
    js: &jetstream::Context,
    subject: String,
    msg_id: String,
    payload: Bytes,
) -> Result<u64, String> {
    let mut headers = async_nats::HeaderMap::new();
    headers.insert(async_nats::header::NATS_MESSAGE_ID, msg_id.as_str());
    js.publish_with_headers(subject, headers, payload)
        .await
        .map_err(|e| e.to_string())?
        .await
        .map(|ack| ack.sequence)
        .map_err(|e| e.to_string())
}

#[derive(Deserialize)]
struct FetchRequest {
    #[serde(default = "default_limit")]
    limit: usize,
}

fn default_limit() -> usize {
    100
}

async fn fetch(
    State(app): Shared,
    headers: HeaderMap,
    req: Result<Json<FetchRequest>, JsonRejection>,
) -> Answer {
    let agent = app.agent(&headers)?;
    let req = body(req)?;
    let consumer = &app.consumers[&agent];
    let mut pulled = Vec::new();
    let batch = consumer
        .fetch()
        .max_messages(req.limit.clamp(1, 1000))
        .messages()
        .await;
    let mut batch = batch.map_err(unavailable)?;
    while let Some(item) = batch.next().await {
        let Ok(m) = item else { continue };
        let (Some(reply), Ok(info)) = (m.reply.clone(), m.info()) else {
            continue;
        };
        let redelivered = info.delivered > 1;
        if let Ok(id) = std::str::from_utf8(&m.payload)
            .unwrap_or("")
            .parse::<Uuid>()
        {
            pulled.push((id, reply.to_string(), redelivered));
        }
    }
    if pulled.is_empty() {
        return Ok(Json(json!({"deliveries": []})).into_response());
    }
    let ids: Vec<Uuid> = pulled.iter().map(|p| p.0).collect();
    let rows = sqlx::query(
        "SELECT m.id, m.conversation, m.seq, m.sender, m.request_id, m.sent_at, r.delivered_at, \
                m.body_seq \
           FROM raw_messages m JOIN raw_receipts r ON r.message = m.id AND r.recipient = $2 \
          WHERE m.id = ANY($1)",
    )
    .bind(&ids)
    .bind(agent)
    .fetch_all(&app.pool)
    .await;
    let rows = rows.map_err(unavailable)?;
    let by_id: HashMap<Uuid, &sqlx::postgres::PgRow> =
        rows.iter().map(|r| (r.get::<Uuid, _>(0), r)).collect();
    // Bodies by stream sequence (a direct get, the leader on a miss), as crewbus reads them.
    let bodies = join_all(pulled.iter().map(|(id, _, _)| {
        let bodies = app.bodies.clone();
        let seq = by_id.get(id).map(|r| r.get::<i64, _>(7) as u64);
        async move {
            let seq = seq?;
            match bodies.direct_get(seq).await {
                Ok(m) => Some(m.payload),
                Err(_) => bodies.get_raw_message(seq).await.ok().map(|m| m.payload),
            }
        }
    }))
    .await;
    let mut out = Vec::new();
    let mut settled = Vec::new();
    {
        let mut deliveries = app.deliveries.lock().expect("deliveries");
        for ((id, ack_subject, redelivered), body) in pulled.into_iter().zip(bodies) {
            let Some(row) = by_id.get(&id) else {
                settled.push(ack_subject); // not this agent's, or no longer in the ledger
                continue;
            };
            if row.get::<Option<DateTime<Utc>>, _>(6).is_some() {
                settled.push(ack_subject); // the receipt is committed: a redelivery after commit
                continue;
            }
            let Some(body) = body else {
                continue; // unreadable now: left for redelivery after the ack wait
            };
            let delivery = Uuid::new_v4();
            deliveries.insert(
                delivery,
                Delivery {
                    agent,
                    message: id,
                    ack_subject,
                },
            );
            out.push(json!({
                "delivery_id": delivery,
                "redelivered": redelivered,
                "message": {
                    "id": id,
                    "conversation": row.get::<Uuid, _>(1),
                    "seq": row.get::<i64, _>(2),
                    "sender": row.get::<Uuid, _>(3),
                    "request_id": row.get::<String, _>(4),
                    "sent_at": rfc3339(row.get(5)),
                    "body": String::from_utf8_lossy(&body),
                },
            }));
        }
    }
    ack_all(&app.nats, settled).await;
    Ok(Json(json!({"deliveries": out})).into_response())
}

/// Double-acks each reference (waits for the broker's answer).
async fn ack_all(nats: &async_nats::Client, subjects: Vec<String>) {
    join_all(
        subjects
            .into_iter()
            .map(|s| nats.request(s, Bytes::from_static(b"+ACK"))),
    )
    .await;
}

#[derive(Deserialize)]
struct ConfirmRequest {
    deliveries: Vec<Uuid>,
}

async fn confirm(
    State(app): Shared,
    headers: HeaderMap,
    req: Result<Json<ConfirmRequest>, JsonRejection>,
) -> Answer {
    let agent = app.agent(&headers)?;
    let req = body(req)?;
    let mut known = Vec::new(); // (delivery, message, ack subject)
    {
        let deliveries = app.deliveries.lock().expect("deliveries");
        for d in &req.deliveries {
            if let Some(x) = deliveries.get(d).filter(|x| x.agent == agent) {
                known.push((*d, x.message, x.ack_subject.clone()));
            }
        }
    }
    let mut messages: Vec<Uuid> = known.iter().map(|k| k.1).collect();
    messages.sort();
    messages.dedup();
    let updated = sqlx::query(
        "WITH locked AS (SELECT message FROM raw_receipts \
                          WHERE recipient = $1 AND message = ANY($2) AND delivered_at IS NULL \
                          ORDER BY message FOR UPDATE) \
         UPDATE raw_receipts r SET delivered_at = now() FROM locked \
          WHERE r.recipient = $1 AND r.message = locked.message RETURNING r.message",
    )
    .bind(agent)
    .bind(&messages)
    .fetch_all(&app.pool)
    .await;
    // Receipts this call committed: each answered `confirmed` once, for its first delivery id.
    let mut confirmed: HashSet<Uuid> = updated
        .map_err(unavailable)?
        .iter()
        .map(|r| r.get(0))
        .collect();
    ack_all(&app.nats, known.iter().map(|k| k.2.clone()).collect()).await;
    let results: Vec<Value> = req
        .deliveries
        .iter()
        .map(|d| match known.iter().find(|k| k.0 == *d) {
            Some((_, m, _)) => {
                let outcome = if confirmed.remove(m) {
                    "confirmed"
                } else {
                    "already_confirmed"
                };
                json!({"delivery_id": d, "message": m, "outcome": outcome})
            }
            None => json!({"delivery_id": d, "outcome": "unknown_delivery"}),
        })
        .collect();
    Ok(Json(json!({ "results": results })).into_response())
}

#[derive(Deserialize)]
struct HistoryQuery {
    #[serde(default)]
    after_seq: i64,
    #[serde(default = "default_limit")]
    limit: usize,
}

async fn history(
    State(app): Shared,
    headers: HeaderMap,
    conversation: Result<Path<Uuid>, PathRejection>,
    q: Result<Query<HistoryQuery>, QueryRejection>,
) -> Answer {
    let agent = app.agent(&headers)?;
    let conversation = path_id(conversation)?;
    let q = q.map(|Query(q)| q).map_err(|e| invalid(e.body_text()))?;
    if !app.is_member(conversation, agent).await? {
        return Err(refuse(StatusCode::FORBIDDEN, "forbidden", "not a member"));
    }
    let rows = sqlx::query(
        "SELECT id, seq, sender, request_id, sent_at FROM raw_messages \
          WHERE conversation = $1 AND seq > $2 ORDER BY seq LIMIT $3",
    )
    .bind(conversation)
    .bind(q.after_seq)
    .bind(q.limit.clamp(1, 1000) as i64)
    .fetch_all(&app.pool)
    .await;
    let rows = rows.map_err(unavailable)?;
    let next = rows.last().map_or(q.after_seq, |r| r.get::<i64, _>(1));
    let messages: Vec<Value> = rows
        .iter()
        .map(|r| {
            let sent = rfc3339(r.get(4));
            json!({"message": {
                "id": r.get::<Uuid, _>(0),
                "seq": r.get::<i64, _>(1),
                "sender": r.get::<Uuid, _>(2),
                "request_id": r.get::<String, _>(3),
                "publication": "stored",
                "sent_at": sent,
                "stored_at": sent,
            }})
        })
        .collect();
    Ok(Json(json!({"messages": messages, "next_after_seq": next})).into_response())
}

async fn receipts(
    State(app): Shared,
    headers: HeaderMap,
    message: Result<Path<Uuid>, PathRejection>,
) -> Answer {
    let agent = app.agent(&headers)?;
    let message = path_id(message)?;
    let rows = sqlx::query(
        "SELECT r.recipient, r.delivered_at FROM raw_receipts r \
           JOIN raw_messages m ON m.id = r.message \
           JOIN raw_members mb ON mb.conversation = m.conversation AND mb.agent = $2 \
          WHERE r.message = $1 ORDER BY r.recipient",
    )
    .bind(message)
    .bind(agent)
    .fetch_all(&app.pool)
    .await;
    let receipts: Vec<Value> = rows
        .map_err(unavailable)?
        .iter()
        .map(|r| {
            json!({
                "recipient": r.get::<Uuid, _>(0),
                "delivered_at": r.get::<Option<DateTime<Utc>>, _>(1).map(rfc3339),
            })
        })
        .collect();
    Ok(Json(receipts).into_response())
}

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS raw_agents (id uuid PRIMARY KEY, team uuid NOT NULL, token text UNIQUE NOT NULL);
CREATE TABLE IF NOT EXISTS raw_conversations (id uuid PRIMARY KEY, title text NOT NULL, next_seq bigint NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS raw_members (conversation uuid NOT NULL REFERENCES raw_conversations, agent uuid NOT NULL REFERENCES raw_agents, PRIMARY KEY (conversation, agent));
CREATE TABLE IF NOT EXISTS raw_messages (id uuid PRIMARY KEY, conversation uuid NOT NULL REFERENCES raw_conversations, seq bigint NOT NULL, sender uuid NOT NULL, request_id text NOT NULL, body_digest bytea NOT NULL, sent_at timestamptz NOT NULL, body_seq bigint NOT NULL, UNIQUE (conversation, request_id), UNIQUE (conversation, seq));
CREATE TABLE IF NOT EXISTS raw_receipts (message uuid NOT NULL REFERENCES raw_messages, recipient uuid NOT NULL, delivered_at timestamptz, PRIMARY KEY (message, recipient));
";

async fn streams(js: &jetstream::Context) -> Result<stream::Stream, Box<dyn std::error::Error>> {
    for name in [BODY_STREAM, INBOX_STREAM] {
        let _ = js.delete_stream(name).await; // a previous run's
    }
    let bodies = js
        .create_stream(stream::Config {
            name: BODY_STREAM.into(),
            subjects: vec!["raw.body.>".into()],
            allow_direct: true,
            duplicate_window: Duration::from_secs(120),
            ..Default::default()
        })
        .await?;
    js.create_stream(stream::Config {
        name: INBOX_STREAM.into(),
        subjects: vec!["raw.inbox.>".into()],
        duplicate_window: Duration::from_secs(120),
        ..Default::default()
    })
    .await?;
    Ok(bodies)
}

/// Connects to `url`; a `user:password@` in it is sent as the user and password (the client
/// does not read them from the URL itself).
async fn connect_nats(url: &str) -> Result<async_nats::Client, Box<dyn std::error::Error>> {
    let (scheme, rest) = url.split_once("://").unwrap_or(("nats", url));
    let client = match rest.rsplit_once('@') {
        Some((credentials, host)) => {
            let (user, password) = credentials.split_once(':').unwrap_or((credentials, ""));
            async_nats::ConnectOptions::with_user_and_password(user.into(), password.into())
                .connect(format!("{scheme}://{host}"))
                .await?
        }
        None => async_nats::connect(url).await?,
    };
    Ok(client)
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let args = Args::parse();
    match run(args).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("crewbus-raw-server: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// `what: error` for a failed start-up step.
fn step<E: std::fmt::Display>(what: &'static str) -> impl FnOnce(E) -> String {
    move |e| format!("{what}: {e}")
}

/// Sets up (listener and tokens file first, so a bad `--listen` or `--tokens-file` changes
/// nothing), then serves until SIGTERM or Ctrl-C. Errors: the failed step and its cause.
async fn run(args: Args) -> Result<(), String> {
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .map_err(step("--listen"))?;
    match std::fs::remove_file(&args.tokens_file) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            return Err(format!("--tokens-file {}: {e}", args.tokens_file.display()));
        }
        _ => {}
    }
    let tmp = args.tokens_file.with_extension("partial");
    std::fs::write(&tmp, "").map_err(|e| format!("--tokens-file {}: {e}", tmp.display()))?;
    let pool = PgPoolOptions::new()
        .max_connections(args.pool)
        .acquire_timeout(Duration::from_secs(5))
        .connect(&args.database_url)
        .await
        .map_err(step("--database-url"))?;
    sqlx::raw_sql(SCHEMA)
        .execute(&pool)
        .await
        .map_err(step("creating the tables"))?;
    let nats = connect_nats(&args.nats_url)
        .await
        .map_err(step("--nats-url"))?;
    let js = jetstream::new(nats.clone());
    let bodies = streams(&js).await.map_err(step("creating the streams"))?;
    let inbox = js
        .get_stream(INBOX_STREAM)
        .await
        .map_err(step("the inbox stream"))?;

    let team = Uuid::new_v4();
    let mut tokens = HashMap::new();
    let mut consumers = HashMap::new();
    for _ in 0..args.agents.max(2) {
        let (id, token) = (Uuid::new_v4(), format!("raw_{}", Uuid::new_v4().simple()));
        sqlx::query("INSERT INTO raw_agents (id, team, token) VALUES ($1, $2, $3)")
            .bind(id)
            .bind(team)
            .bind(&token)
            .execute(&pool)
            .await
            .map_err(step("creating the agents"))?;
        let consumer = inbox
            .create_consumer(pull::Config {
                durable_name: Some(id.simple().to_string()),
                filter_subject: format!("raw.inbox.{id}"),
                ack_policy: jetstream::consumer::AckPolicy::Explicit,
                ack_wait: Duration::from_secs(30),
                ..Default::default()
            })
            .await
            .map_err(step("creating the agents' consumers"))?;
        consumers.insert(id, consumer);
        tokens.insert(token, id);
    }

    let (sends, queue) = mpsc::channel(4096);
    let app = Arc::new(App {
        pool,
        nats,
        js,
        bodies,
        team,
        tokens,
        consumers,
        deliveries: Mutex::new(HashMap::new()),
        sends,
    });
    tokio::spawn(batcher(app.clone(), queue, args.batch_max.max(1)));
    let router = Router::new()
        .route("/v1/me", get(me))
        .route("/v1/conversations", post(create_conversation))
        .route("/v1/conversations/{id}/messages", post(send).get(history))
        .route("/v1/inbox/fetch", post(fetch))
        .route("/v1/inbox/confirm", post(confirm))
        .route("/v1/messages/{id}/receipts", get(receipts))
        .route("/healthz", get(|| async { "ok" }))
        .with_state(app.clone());
    let lines: Vec<&str> = app.tokens.keys().map(String::as_str).collect();
    std::fs::write(&tmp, lines.join("\n") + "\n")
        .and_then(|()| std::fs::rename(&tmp, &args.tokens_file))
        .map_err(|e| format!("--tokens-file {}: {e}", args.tokens_file.display()))?;
    eprintln!("crewbus-raw-server: listening on {}", args.listen);
    axum::serve(listener, router)
        .with_graceful_shutdown(async {
            let mut term =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
                    .expect("SIGTERM handler");
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
        })
        .await
        .map_err(step("serving"))
}
