//! A team's conversations, their messages with every recipient's state, one message, and
//! posting as the operator's human member.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use crewbus_domain::{BusError, Uuid};

use super::auth::Operator;
use super::views::{AdminConversationView, AdminMessageView, AdminMessagesView, PostMessage};
use crate::edge::error::{ApiResult, ErrorBody};
use crate::edge::views::{HistoryQuery, SentView};
use crate::http::AppState;
use crate::http::extract::{ApiJson, ApiPath, ApiQuery};

/// A team's conversations, oldest first, with their members, message counts and latest send.
#[utoipa::path(get, path = "/v1/admin/teams/{team}/conversations", tag = "admin",
    operation_id = "admin_list_conversations",
    params(("team" = Uuid, Path, description = "team id")),
    responses((status = 200, body = Vec<AdminConversationView>),
        (status = 400, description = "bad id", body = ErrorBody),
        (status = 401, description = "no, a malformed, an unknown or a revoked operator token (an agent's token included)", body = ErrorBody),
        (status = 404, description = "unknown team, or outside the operator's scope", body = ErrorBody)),
    security(("operator" = [])))]
pub async fn list(
    State(state): State<AppState>,
    Operator(operator): Operator,
    ApiPath(team): ApiPath<Uuid>,
) -> ApiResult<Json<Vec<AdminConversationView>>> {
    let list = state
        .bus
        .admin_conversation_list(&operator.scope, team)
        .await?;
    Ok(Json(AdminConversationView::list(list)))
}

/// A page of a conversation's messages by `seq`, each with its body and every recipient's
/// delivery state. A page stops at the first pending message; read again from
/// `next_after_seq`.
#[utoipa::path(get, path = "/v1/admin/teams/{team}/conversations/{conversation}/messages",
    tag = "admin", operation_id = "admin_read_conversation",
    params(("team" = Uuid, Path, description = "team id"),
        ("conversation" = Uuid, Path, description = "conversation id"), HistoryQuery),
    responses((status = 200, body = AdminMessagesView),
        (status = 400, description = "bad id or paging", body = ErrorBody),
        (status = 401, description = "no, a malformed, an unknown or a revoked operator token (an agent's token included)", body = ErrorBody),
        (status = 404, description = "unknown team or conversation, another team's, or outside the operator's scope", body = ErrorBody)),
    security(("operator" = [])))]
pub async fn messages(
    State(state): State<AppState>,
    Operator(operator): Operator,
    ApiPath((team, conversation)): ApiPath<(Uuid, Uuid)>,
    ApiQuery(q): ApiQuery<HistoryQuery>,
) -> ApiResult<Json<AdminMessagesView>> {
    let page = state
        .bus
        .admin_messages(&operator.scope, team, conversation, q.after_seq, q.limit)
        .await?;
    Ok(Json(page.into()))
}

/// Post into a conversation as the operator's human member of the team (`<operator> (human)`,
/// created and made a member on the first post; agents see its messages with `sender_kind:
/// human`). Idempotent on `request_id`: `201` when created, `200` for a repeat.
#[utoipa::path(post, path = "/v1/admin/teams/{team}/conversations/{conversation}/messages",
    tag = "admin", operation_id = "admin_post_message",
    params(("team" = Uuid, Path, description = "team id"),
        ("conversation" = Uuid, Path, description = "conversation id")),
    request_body = PostMessage,
    responses((status = 201, body = SentView), (status = 200, description = "a repeat", body = SentView),
        (status = 400, description = "bad id, request id or body", body = ErrorBody),
        (status = 401, description = "no, a malformed, an unknown or a revoked operator token (an agent's token included)", body = ErrorBody),
        (status = 403, description = "the operator's human member of the team was revoked", body = ErrorBody),
        (status = 404, description = "unknown team or conversation, another team's, or outside the operator's scope", body = ErrorBody),
        (status = 409, description = "same request_id, other body", body = ErrorBody),
        (status = 413, description = "body above the limit", body = ErrorBody),
        (status = 429, description = "the team's quota is exhausted", body = ErrorBody),
        (status = 503, description = "not stored (`unavailable`), or not known to be (`timeout`); retry with the same request_id: never stored twice", body = ErrorBody),
        (status = 507, description = "the body backend has no room for the team", body = ErrorBody)),
    security(("operator" = [])))]
pub async fn post(
    State(state): State<AppState>,
    Operator(operator): Operator,
    ApiPath((team, conversation)): ApiPath<(Uuid, Uuid)>,
    ApiJson(req): ApiJson<PostMessage>,
) -> ApiResult<(StatusCode, Json<SentView>)> {
    let sent = state
        .bus
        .admin_post(&operator, team, conversation, req.request_id, req.body)
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

/// One message of a team with its whole body and every recipient's delivery state.
#[utoipa::path(get, path = "/v1/admin/teams/{team}/messages/{message}", tag = "admin",
    operation_id = "admin_get_message",
    params(("team" = Uuid, Path, description = "team id"), ("message" = Uuid, Path, description = "message id")),
    responses((status = 200, body = AdminMessageView),
        (status = 400, description = "bad id", body = ErrorBody),
        (status = 401, description = "no, a malformed, an unknown or a revoked operator token (an agent's token included)", body = ErrorBody),
        (status = 404, description = "unknown team or message, another team's, or outside the operator's scope", body = ErrorBody)),
    security(("operator" = [])))]
pub async fn message(
    State(state): State<AppState>,
    Operator(operator): Operator,
    ApiPath((team, message)): ApiPath<(Uuid, Uuid)>,
) -> ApiResult<Json<AdminMessageView>> {
    let page = state
        .bus
        .admin_message_page(&operator.scope, team, message)
        .await?;
    AdminMessageView::single(page)
        .map(Json)
        .ok_or_else(|| BusError::not_found(format!("message {message}")).into())
}
