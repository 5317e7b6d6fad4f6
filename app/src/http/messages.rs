//! A message's receipts and acknowledging a message.

use axum::Json;
use axum::extract::State;
use crewbus_domain::Uuid;

use super::AppState;
use super::auth::Authenticated;
use super::extract::{ApiJsonOrDefault, ApiPath};
use crate::edge::error::{ApiResult, ErrorBody};
use crate::edge::views::{AcknowledgeRequest, ReceiptView};

/// The receipts of a message (members of its conversation only).
#[utoipa::path(get, path = "/v1/messages/{id}/receipts", tag = "messages",
    operation_id = "get_receipts",
    params(("id" = Uuid, Path, description = "message id")),
    responses((status = 200, body = Vec<ReceiptView>), (status = 400, body = ErrorBody),
        (status = 401, description = "no, a malformed, an unknown or a revoked token", body = ErrorBody),
        (status = 404, description = "unknown, another team's, or not a member", body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn receipts(
    State(state): State<AppState>,
    Authenticated(agent): Authenticated,
    ApiPath(id): ApiPath<Uuid>,
) -> ApiResult<Json<Vec<ReceiptView>>> {
    let rs = state.bus.receipts(&agent, id).await?;
    Ok(Json(rs.into_iter().map(Into::into).collect()))
}

/// The caller has read the message (after delivery). Idempotent: the first time is kept.
#[utoipa::path(post, path = "/v1/messages/{id}/acknowledge", tag = "messages",
    operation_id = "acknowledge_message",
    params(("id" = Uuid, Path, description = "message id")),
    request_body(content = Option<AcknowledgeRequest>, description = "optional (an empty body is `{}`)"),
    responses((status = 200, body = ReceiptView),
        (status = 400, description = "bad id, malformed body", body = ErrorBody),
        (status = 401, description = "no, a malformed, an unknown or a revoked token", body = ErrorBody),
        (status = 403, description = "not a recipient, or the run is another agent's", body = ErrorBody),
        (status = 404, description = "unknown message or run, or another team's", body = ErrorBody),
        (status = 409, description = "not yet delivered, or the run is sealed", body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn acknowledge(
    State(state): State<AppState>,
    Authenticated(agent): Authenticated,
    ApiPath(id): ApiPath<Uuid>,
    ApiJsonOrDefault(body): ApiJsonOrDefault<AcknowledgeRequest>,
) -> ApiResult<Json<ReceiptView>> {
    let run = body.run;
    Ok(Json(state.bus.acknowledge(&agent, id, run).await?.into()))
}
