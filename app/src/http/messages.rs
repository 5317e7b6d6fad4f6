//! A message's receipts and acknowledging a message.

use axum::Json;
use axum::extract::State;
use crewbus_domain::Uuid;

use super::AppState;
use super::auth::Authenticated;
use super::error::{ApiResult, ErrorBody};
use super::extract::{ApiJsonOrDefault, ApiPath};
use super::views::{AcknowledgeRequest, ReceiptView};

/// The receipts of a message (members of its conversation only).
#[utoipa::path(get, path = "/v1/messages/{id}/receipts", tag = "messages",
    params(("id" = Uuid, Path, description = "message id")),
    responses((status = 200, body = Vec<ReceiptView>), (status = 400, body = ErrorBody),
        (status = 404, body = ErrorBody)),
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
    params(("id" = Uuid, Path, description = "message id")),
    request_body(content = AcknowledgeRequest, description = "optional"),
    responses((status = 200, body = ReceiptView),
        (status = 403, description = "not a recipient", body = ErrorBody),
        (status = 404, body = ErrorBody),
        (status = 409, description = "not yet delivered", body = ErrorBody)),
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
