//! The zero-loss check's reads: a conversation's history and a message's receipts.

use axum::Json;
use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use chrono::{DateTime, Utc};
use serde::Deserialize;
use serde_json::{Value, json};
use sqlx::Row;
use uuid::Uuid;

use crate::app::{Answer, Shared, default_limit, invalid, path_id, refuse, rfc3339, unavailable};

#[derive(Deserialize)]
pub(crate) struct HistoryQuery {
    #[serde(default)]
    after_seq: i64,
    #[serde(default = "default_limit")]
    limit: usize,
}

pub(crate) async fn history(
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

pub(crate) async fn receipts(
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
