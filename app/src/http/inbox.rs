//! The caller's inbox: fetch, confirm, status.

use axum::Json;
use axum::extract::State;
use crewbus_domain::DeliveryId;

use super::AppState;
use super::auth::Authenticated;
use super::error::{ApiResult, ErrorBody};
use super::extract::{ApiJson, ApiJsonOrDefault};
use super::views::{ConfirmRequest, ConfirmView, FetchRequest, FetchView, InboxStatusView};

/// Hand out the caller's next messages. Nothing is confirmed: confirm each delivery id once it is
/// processed, or it comes back (marked `redelivered`) after the hand-out grace. With `wait_ms`,
/// waits up to that long for a message when none can be handed out now (an empty page after
/// the wait, or at once when the server shuts down).
#[utoipa::path(post, path = "/v1/inbox/fetch", tag = "inbox", operation_id = "fetch_inbox",
    request_body(content = Option<FetchRequest>, description = "optional (an empty body is `{}`)"),
    responses((status = 200, body = FetchView),
        (status = 400, description = "bad limit or wait_ms, malformed body", body = ErrorBody),
        (status = 401, description = "no, a malformed, an unknown or a revoked token", body = ErrorBody),
        (status = 503, description = "the inbox backend did not answer; retry", body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn fetch(
    State(state): State<AppState>,
    Authenticated(agent): Authenticated,
    ApiJsonOrDefault(req): ApiJsonOrDefault<FetchRequest>,
) -> ApiResult<Json<FetchView>> {
    let wait = std::time::Duration::from_millis(req.wait_ms);
    let ds = state.bus.fetch_waiting(&agent, req.limit, wait).await?;
    Ok(Json(FetchView {
        deliveries: ds.into_iter().map(Into::into).collect(),
    }))
}

/// Confirm deliveries by id: the receipt is committed, then the inbox reference acknowledged.
/// A second confirm changes nothing and says `already_confirmed`.
#[utoipa::path(post, path = "/v1/inbox/confirm", tag = "inbox", operation_id = "confirm_deliveries",
    request_body = ConfirmRequest,
    responses((status = 200, body = ConfirmView), (status = 400, body = ErrorBody),
        (status = 401, description = "no, a malformed, an unknown or a revoked token", body = ErrorBody),
        (status = 403, description = "the run is another agent's", body = ErrorBody),
        (status = 404, description = "unknown run, or another team's", body = ErrorBody),
        (status = 409, description = "the run is sealed", body = ErrorBody),
        (status = 503, description = "not committed; retry", body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn confirm(
    State(state): State<AppState>,
    Authenticated(agent): Authenticated,
    ApiJson(req): ApiJson<ConfirmRequest>,
) -> ApiResult<Json<ConfirmView>> {
    let ids: Vec<DeliveryId> = req.deliveries.iter().copied().map(DeliveryId).collect();
    let outcomes = state.bus.confirm(&agent, &ids, req.run).await?;
    Ok(Json(ConfirmView::new(req.deliveries, outcomes)))
}

/// The caller's inbox as its backend reports it.
#[utoipa::path(get, path = "/v1/inbox/status", tag = "inbox", operation_id = "inbox_status",
    responses((status = 200, body = InboxStatusView),
        (status = 401, description = "no, a malformed, an unknown or a revoked token", body = ErrorBody),
        (status = 503, description = "the inbox backend did not answer", body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn status(
    State(state): State<AppState>,
    Authenticated(agent): Authenticated,
) -> ApiResult<Json<InboxStatusView>> {
    Ok(Json(state.bus.inbox_status(&agent).await?.into()))
}
