//! `POST /v1/inbox/fetch` and `POST /v1/inbox/confirm`.

use std::collections::{HashMap, HashSet};

use axum::Json;
use axum::extract::State;
use axum::extract::rejection::JsonRejection;
use axum::http::HeaderMap;
use axum::response::IntoResponse;
use bytes::Bytes;
use chrono::{DateTime, Utc};
use futures_util::StreamExt as _;
use futures_util::future::join_all;
use serde::Deserialize;
use serde_json::{Value, json};
use sqlx::Row;
use uuid::Uuid;

use crate::app::{Answer, Delivery, Shared, body, default_limit, rfc3339, unavailable};

#[derive(Deserialize)]
pub(crate) struct FetchRequest {
    #[serde(default = "default_limit")]
    limit: usize,
}

pub(crate) async fn fetch(
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
pub(crate) async fn ack_all(nats: &async_nats::Client, subjects: Vec<String>) {
    join_all(
        subjects
            .into_iter()
            .map(|s| nats.request(s, Bytes::from_static(b"+ACK"))),
    )
    .await;
}

#[derive(Deserialize)]
pub(crate) struct ConfirmRequest {
    deliveries: Vec<Uuid>,
}

pub(crate) async fn confirm(
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
