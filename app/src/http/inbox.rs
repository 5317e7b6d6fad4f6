//! The caller's inbox: fetch, confirm, status.

use axum::Json;
use axum::extract::State;
use axum::response::Response;
use crewbus_domain::DeliveryId;

use super::AppState;
use super::auth::Authenticated;
use super::extract::{ApiJson, ApiJsonOrDefault};
use super::held_answer;
use crate::edge::error::{ApiResult, ErrorBody};
use crate::edge::views::{ConfirmRequest, ConfirmView, FetchRequest, FetchView, InboxStatusView};
use crate::usecases::deliver::Fetched;

/// Hand out the caller's next messages. Nothing is confirmed: confirm each delivery id once it is
/// processed, or it comes back (marked `redelivered`) after the hand-out grace. With `wait_ms`,
/// waits up to that long for a message when none can be handed out now (an empty page after
/// the wait, or at once when the server shuts down). At most `max_bytes` of bodies per answer
/// (default 4 MiB): what does not fit is not handed out and comes with the next fetch; a single
/// body larger than `max_bytes` is answered alone, whole. When the server's room for bodies in
/// flight (`bus.max_body_bytes_in_flight`) is full, the fetch waits for room within its
/// `wait_ms` (at least 1 s), then answers what fits — possibly nothing; the rest stays for the
/// next fetch.
///
/// The handler parses, calls the one fetch use case both driving adapters share
/// ([`crate::bus::Bus::fetch_waiting_within`]), and answers through [`held_answer::json`], which
/// keeps the bodies' room until the connection has taken the whole answer.
#[utoipa::path(post, path = "/v1/inbox/fetch", tag = "inbox", operation_id = "fetch_inbox",
    request_body(content = Option<FetchRequest>, description = "optional (an empty body is `{}`)"),
    responses((status = 200, body = FetchView),
        (status = 400, description = "bad limit, wait_ms or max_bytes, malformed body", body = ErrorBody),
        (status = 401, description = "no, a malformed, an unknown or a revoked token", body = ErrorBody),
        (status = 503, description = "the inbox backend did not answer (`unavailable`), or the fetch did not finish in time (`timeout`: what it handed out comes back, marked redelivered, after the hand-out grace); retry", body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn fetch(
    State(state): State<AppState>,
    Authenticated(agent): Authenticated,
    ApiJsonOrDefault(req): ApiJsonOrDefault<FetchRequest>,
) -> ApiResult<Response> {
    let wait = std::time::Duration::from_millis(req.wait_ms);
    let max_bytes = req
        .max_bytes
        .unwrap_or(state.bus.settings().fetch_bytes_default);
    let Fetched { deliveries, held } = state
        .bus
        .fetch_waiting_within(&agent, req.limit, wait, max_bytes)
        .await?;
    // The bodies' size as JSON (what the room holds for them), for the answer's buffer.
    let bodies = usize::try_from(held.bytes()).unwrap_or(usize::MAX);
    let items = deliveries.len();
    let view = FetchView {
        deliveries: deliveries.into_iter().map(Into::into).collect(),
    };
    Ok(held_answer::json(view, bodies, items, held))
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
        (status = 503, description = "not committed (`unavailable`), or not known to be (`timeout`); retry: a confirm is once per delivery", body = ErrorBody)),
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
