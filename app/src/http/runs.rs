//! Runs: admit, resume, seal, and read the journal. The run always belongs to the calling agent
//! (identity from the bearer token).

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use crewbus_domain::{RunId, Seq, Uuid};

use super::AppState;
use super::auth::Authenticated;
use super::extract::{ApiJson, ApiPath, ApiQuery};
use crate::edge::error::{ApiResult, ErrorBody};
use crate::edge::views::{RecordsQuery, RecordsView, RunView, SealRequest};

/// Admit a run for the caller: `RunAdmitted` is journaled and the operator's push destinations
/// are registered for it. If registering fails the run is sealed `failed` and the request fails.
#[utoipa::path(post, path = "/v1/runs", tag = "runs", operation_id = "start_run",
    responses((status = 201, body = RunView), (status = 401, description = "no, a malformed, an unknown or a revoked token", body = ErrorBody),
        (status = 503, description = "journal or push store unavailable (a run whose registration failed is sealed failed)", body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn admit(
    State(state): State<AppState>,
    Authenticated(agent): Authenticated,
) -> ApiResult<(StatusCode, Json<RunView>)> {
    let run = state.bus.admit_run(&agent).await?;
    Ok((StatusCode::CREATED, Json(run.into())))
}

/// One of the caller's runs.
#[utoipa::path(get, path = "/v1/runs/{id}", tag = "runs", operation_id = "get_run",
    params(("id" = Uuid, Path, description = "run id")),
    responses((status = 200, body = RunView), (status = 400, body = ErrorBody),
        (status = 401, description = "no, a malformed, an unknown or a revoked token", body = ErrorBody),
        (status = 403, description = "another agent's run", body = ErrorBody),
        (status = 404, description = "unknown or another team's", body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn get(
    State(state): State<AppState>,
    Authenticated(agent): Authenticated,
    ApiPath(id): ApiPath<Uuid>,
) -> ApiResult<Json<RunView>> {
    Ok(Json(state.bus.run_of(&agent, RunId(id)).await?.into()))
}

/// Resume the caller's open run (`RunResumed`); its push registrations are opened again without
/// rewinding any receiver's cursor. A registration failure fails the resume.
#[utoipa::path(post, path = "/v1/runs/{id}/resume", tag = "runs", operation_id = "resume_run",
    params(("id" = Uuid, Path, description = "run id")),
    responses((status = 200, body = RunView), (status = 400, body = ErrorBody),
        (status = 401, description = "no, a malformed, an unknown or a revoked token", body = ErrorBody),
        (status = 403, description = "another agent's run", body = ErrorBody),
        (status = 404, description = "unknown or another team's", body = ErrorBody),
        (status = 409, description = "the run is sealed", body = ErrorBody),
        (status = 503, description = "journal or push store unavailable", body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn resume(
    State(state): State<AppState>,
    Authenticated(agent): Authenticated,
    ApiPath(id): ApiPath<Uuid>,
) -> ApiResult<Json<RunView>> {
    Ok(Json(state.bus.resume_run(&agent, RunId(id)).await?.into()))
}

/// Seal the caller's run (the terminal record; nothing is appended after it).
#[utoipa::path(post, path = "/v1/runs/{id}/seal", tag = "runs", operation_id = "seal_run",
    params(("id" = Uuid, Path, description = "run id")),
    request_body = SealRequest,
    responses((status = 200, body = RunView), (status = 400, body = ErrorBody),
        (status = 401, description = "no, a malformed, an unknown or a revoked token", body = ErrorBody),
        (status = 403, description = "another agent's run", body = ErrorBody),
        (status = 404, description = "unknown or another team's", body = ErrorBody),
        (status = 409, description = "already sealed", body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn seal(
    State(state): State<AppState>,
    Authenticated(agent): Authenticated,
    ApiPath(id): ApiPath<Uuid>,
    ApiJson(req): ApiJson<SealRequest>,
) -> ApiResult<Json<RunView>> {
    let run = state
        .bus
        .seal_run(&agent, RunId(id), req.outcome.into(), &req.reason)
        .await?;
    Ok(Json(run.into()))
}

/// A page of the caller's run's journal, from `from_seq`.
#[utoipa::path(get, path = "/v1/runs/{id}/records", tag = "runs", operation_id = "read_run_records",
    params(("id" = Uuid, Path, description = "run id"), RecordsQuery),
    responses((status = 200, body = RecordsView), (status = 400, body = ErrorBody),
        (status = 401, description = "no, a malformed, an unknown or a revoked token", body = ErrorBody),
        (status = 403, description = "another agent's run", body = ErrorBody),
        (status = 404, description = "unknown or another team's", body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn records(
    State(state): State<AppState>,
    Authenticated(agent): Authenticated,
    ApiPath(id): ApiPath<Uuid>,
    ApiQuery(q): ApiQuery<RecordsQuery>,
) -> ApiResult<Json<RecordsView>> {
    let records = state
        .bus
        .run_records(&agent, RunId(id), Seq(q.from_seq), q.limit)
        .await?;
    Ok(Json(RecordsView::page(records, q.from_seq)))
}
