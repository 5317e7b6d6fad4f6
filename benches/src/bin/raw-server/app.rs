//! The server's state, the refusals every handler answers with, and the helpers they share.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use async_nats::jetstream::{self, consumer::pull, stream};
use axum::Json;
use axum::extract::rejection::{JsonRejection, PathRejection};
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};
use serde_json::json;
use sqlx::postgres::PgPool;
use tokio::sync::{mpsc, oneshot};
use uuid::Uuid;

/// A handed-out reference (kept after its confirm, so a retried confirm is answered
/// `already_confirmed`).
pub(crate) struct Delivery {
    pub(crate) agent: Uuid,
    pub(crate) message: Uuid,
    pub(crate) ack_subject: String,
}

pub(crate) struct App {
    pub(crate) pool: PgPool,
    pub(crate) nats: async_nats::Client,
    pub(crate) js: jetstream::Context,
    pub(crate) bodies: stream::Stream,
    pub(crate) team: Uuid,
    pub(crate) tokens: HashMap<String, Uuid>,
    pub(crate) consumers: HashMap<Uuid, jetstream::consumer::Consumer<pull::Config>>,
    pub(crate) deliveries: Mutex<HashMap<Uuid, Delivery>>,
    pub(crate) sends: mpsc::Sender<SendRequest>,
}

pub(crate) struct SendRequest {
    pub(crate) sender: Uuid,
    pub(crate) conversation: Uuid,
    pub(crate) request_id: String,
    pub(crate) body: String,
    pub(crate) digest: Vec<u8>,
    /// The body's stream sequence, once stage 1 has its PubAck.
    pub(crate) body_seq: i64,
    pub(crate) answer: oneshot::Sender<Answer>,
}

/// A refusal, answered as `{code, message}` with its status.
pub(crate) struct Refusal {
    pub(crate) status: StatusCode,
    pub(crate) code: &'static str,
    pub(crate) message: String,
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        let body = json!({"code": self.code, "message": self.message});
        (self.status, Json(body)).into_response()
    }
}

/// What a handler answers.
pub(crate) type Answer = Result<Response, Refusal>;

pub(crate) fn refuse(status: StatusCode, code: &'static str, message: &str) -> Refusal {
    Refusal {
        status,
        code,
        message: message.to_owned(),
    }
}

/// A request the framework could not read (body, path or query) as a 400 `invalid` refusal.
pub(crate) fn invalid(e: impl std::fmt::Display) -> Refusal {
    refuse(StatusCode::BAD_REQUEST, "invalid", &e.to_string())
}

/// The JSON body, or 400 `invalid`.
pub(crate) fn body<T>(r: Result<Json<T>, JsonRejection>) -> Result<T, Refusal> {
    r.map(|Json(t)| t).map_err(|e| invalid(e.body_text()))
}

/// The path's id, or 400 `invalid`.
pub(crate) fn path_id(r: Result<Path<Uuid>, PathRejection>) -> Result<Uuid, Refusal> {
    r.map(|Path(id)| id).map_err(|e| invalid(e.body_text()))
}

pub(crate) fn unavailable(e: impl std::fmt::Display) -> Refusal {
    refuse(
        StatusCode::SERVICE_UNAVAILABLE,
        "unavailable",
        &e.to_string(),
    )
}

pub(crate) fn rfc3339(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
}

impl App {
    /// The agent of the request's bearer token; 401 without a known one.
    pub(crate) fn agent(&self, headers: &HeaderMap) -> Result<Uuid, Refusal> {
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

    pub(crate) async fn is_member(&self, conversation: Uuid, agent: Uuid) -> Result<bool, Refusal> {
        sqlx::query("SELECT 1 FROM raw_members WHERE conversation = $1 AND agent = $2")
            .bind(conversation)
            .bind(agent)
            .fetch_optional(&self.pool)
            .await
            .map(|r| r.is_some())
            .map_err(unavailable)
    }
}

pub(crate) type Shared = State<Arc<App>>;

pub(crate) fn default_limit() -> usize {
    100
}
