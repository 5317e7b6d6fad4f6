//! Conversations, sending and history.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use crewbus_domain::Uuid;

use super::AppState;
use super::auth::Authenticated;
use super::extract::{ApiJson, ApiPath, ApiQuery};
use crate::edge::error::{ApiResult, ErrorBody};
use crate::edge::views::{
    ConversationView, CreateConversation, HistoryQuery, HistoryView, SendMessage, SentView,
};

/// Create a conversation with members of the caller's team.
#[utoipa::path(post, path = "/v1/conversations", tag = "conversations",
    operation_id = "create_conversation",
    request_body = CreateConversation,
    responses((status = 201, body = ConversationView),
        (status = 400, description = "bad title, or more than 1000 members", body = ErrorBody),
        (status = 404, description = "a member is no active agent of the team (named)", body = ErrorBody),
        (status = 401, description = "no, a malformed, an unknown or a revoked token", body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn create(
    State(state): State<AppState>,
    Authenticated(agent): Authenticated,
    ApiJson(req): ApiJson<CreateConversation>,
) -> ApiResult<(StatusCode, Json<ConversationView>)> {
    let c = state
        .bus
        .create_conversation(&agent, &req.title, &req.members)
        .await?;
    Ok((StatusCode::CREATED, Json(c.into())))
}

/// The caller's conversations, oldest first.
#[utoipa::path(get, path = "/v1/conversations", tag = "conversations",
    operation_id = "list_conversations",
    responses((status = 200, body = Vec<ConversationView>), (status = 401, description = "no, a malformed, an unknown or a revoked token", body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn list(
    State(state): State<AppState>,
    Authenticated(agent): Authenticated,
) -> ApiResult<Json<Vec<ConversationView>>> {
    let cs = state.bus.conversations_for(&agent).await?;
    Ok(Json(cs.into_iter().map(Into::into).collect()))
}

/// One conversation the caller is a member of.
#[utoipa::path(get, path = "/v1/conversations/{id}", tag = "conversations",
    operation_id = "get_conversation",
    params(("id" = Uuid, Path, description = "conversation id")),
    responses((status = 200, body = ConversationView),
        (status = 400, description = "bad id", body = ErrorBody),
        (status = 401, description = "no, a malformed, an unknown or a revoked token", body = ErrorBody),
        (status = 404, description = "unknown, another team's, or not a member", body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn get(
    State(state): State<AppState>,
    Authenticated(agent): Authenticated,
    ApiPath(id): ApiPath<Uuid>,
) -> ApiResult<Json<ConversationView>> {
    Ok(Json(state.bus.conversation_for(&agent, id).await?.into()))
}

/// Send a message, idempotent on `request_id`. `201` when created, `200` for a repeat.
#[utoipa::path(post, path = "/v1/conversations/{id}/messages", tag = "messages",
    operation_id = "send_message",
    params(("id" = Uuid, Path, description = "conversation id")),
    request_body = SendMessage,
    responses((status = 201, body = SentView), (status = 200, description = "a repeat", body = SentView),
        (status = 400, body = ErrorBody), (status = 401, description = "no, a malformed, an unknown or a revoked token", body = ErrorBody),
        (status = 403, description = "the run is another agent's", body = ErrorBody),
        (status = 404, description = "unknown conversation or run, another team's, or not a member", body = ErrorBody),
        (status = 409, description = "same request_id, other body; or the run is sealed", body = ErrorBody),
        (status = 413, description = "body above the limit", body = ErrorBody),
        (status = 429, description = "the team's quota is exhausted (`quota_exceeded`), or the agent is over its send rate limit (`rate_limited`: `Retry-After` and `retry_after_seconds` say when to retry)", body = ErrorBody,
            headers(("Retry-After" = u64, description = "seconds to wait before retrying"))),
        (status = 503, description = "not stored (`unavailable`), or not known to be (`timeout`); retry with the same request_id: never stored twice", body = ErrorBody),
        (status = 507, description = "the body backend has no room for the team", body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn send(
    State(state): State<AppState>,
    Authenticated(agent): Authenticated,
    ApiPath(id): ApiPath<Uuid>,
    ApiJson(req): ApiJson<SendMessage>,
) -> ApiResult<(StatusCode, Json<SentView>)> {
    let sent = state
        .bus
        .send(&agent, id, req.request_id, req.body, req.run)
        .await?;
    let status = if sent.created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((
        status,
        Json(SentView {
            created: sent.created,
            message: sent.message.into(),
        }),
    ))
}

/// History by `seq`. A page stops at the first pending message (shown with `absence:
/// "pending"`); read again from `next_after_seq`.
#[utoipa::path(get, path = "/v1/conversations/{id}/messages", tag = "messages",
    operation_id = "read_conversation",
    params(("id" = Uuid, Path, description = "conversation id"), HistoryQuery),
    responses((status = 200, body = HistoryView),
        (status = 400, description = "bad id or paging", body = ErrorBody),
        (status = 401, description = "no, a malformed, an unknown or a revoked token", body = ErrorBody),
        (status = 404, description = "unknown, another team's, or not a member", body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn history(
    State(state): State<AppState>,
    Authenticated(agent): Authenticated,
    ApiPath(id): ApiPath<Uuid>,
    ApiQuery(q): ApiQuery<HistoryQuery>,
) -> ApiResult<Json<HistoryView>> {
    let h = state.bus.history(&agent, id, q.after_seq, q.limit).await?;
    Ok(Json(h.into()))
}
