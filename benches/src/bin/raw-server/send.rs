//! `POST /v1/conversations/{id}/messages`: the two-stage send pipeline (bodies published, then
//! one commit per batch, then the references).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream;
use axum::Json;
use axum::extract::rejection::{JsonRejection, PathRejection};
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use bytes::Bytes;
use chrono::{DateTime, Utc};
use futures_util::future::join_all;
use serde::Deserialize;
use serde_json::json;
use sha2::{Digest, Sha256};
use sqlx::{Postgres, Row, Transaction};
use tokio::sync::{mpsc, oneshot};
use uuid::Uuid;

use crate::app::{Answer, App, SendRequest, Shared, body, path_id, refuse, rfc3339, unavailable};

#[derive(Deserialize)]
pub(crate) struct NewMessage {
    request_id: String,
    body: String,
}

pub(crate) async fn send(
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
pub(crate) async fn batcher(
    app: Arc<App>,
    mut queue: mpsc::Receiver<SendRequest>,
    batch_max: usize,
) {
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
pub(crate) async fn committer(app: Arc<App>, mut batches: mpsc::Receiver<Vec<SendRequest>>) {
    while let Some(batch) = batches.recv().await {
        commit_batch(&app, batch).await;
    }
}

/// A message accepted by a commit, to publish.
pub(crate) struct Accepted {
    request: SendRequest,
    id: Uuid,
    seq: i64,
    sent_at: DateTime<Utc>,
    recipients: Vec<Uuid>,
}

pub(crate) async fn commit_batch(app: &Arc<App>, batch: Vec<SendRequest>) {
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

pub(crate) fn fail_all(batch: Vec<SendRequest>, e: &sqlx::Error) {
    for r in batch {
        let _ = r.answer.send(Err(unavailable(e)));
    }
}

/// What a batch decided: the messages to insert; the requests answered without one (refused,
/// or a repeat of a stored message); and the repeats' (message, recipients), whose references
/// are published again after the commit.
pub(crate) type Decided = (
    Vec<Accepted>,
    Vec<(SendRequest, Answer)>,
    Vec<(Uuid, Vec<Uuid>)>,
);

/// Locks, reads, decides and writes one batch inside `tx`; on a database error hands the whole
/// batch back with the error.
pub(crate) async fn decide_and_write(
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
pub(crate) async fn publish_references(app: Arc<App>, committed: Vec<(Uuid, Vec<Uuid>)>) {
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

pub(crate) async fn publish(
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
