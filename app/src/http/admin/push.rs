//! Push registrations with their attempts logs, the parked ones, and un-parking.

use axum::Json;
use axum::extract::State;
use crewbus_domain::{BusError, RunId, Uuid};

use super::auth::Operator;
use super::views::{PushQuery, PushRegistrationView, RunPushView, UnparkedView};
use crate::edge::error::{ApiResult, ErrorBody};
use crate::http::AppState;
use crate::http::extract::{ApiPath, ApiQuery};

/// The push registrations of a team's newest runs, each with its delivery state and attempts
/// log (URLs without userinfo or query, the authentication scheme only).
#[utoipa::path(get, path = "/v1/admin/teams/{team}/push", tag = "admin",
    operation_id = "admin_team_push",
    params(("team" = Uuid, Path, description = "team id"), PushQuery),
    responses((status = 200, body = Vec<RunPushView>),
        (status = 400, description = "bad id or run count", body = ErrorBody),
        (status = 401, description = "no, a malformed, an unknown or a revoked operator token (an agent's token included)", body = ErrorBody),
        (status = 404, description = "unknown team, or outside the operator's scope", body = ErrorBody)),
    security(("operator" = [])))]
pub async fn team(
    State(state): State<AppState>,
    Operator(operator): Operator,
    ApiPath(team): ApiPath<Uuid>,
    ApiQuery(q): ApiQuery<PushQuery>,
) -> ApiResult<Json<Vec<RunPushView>>> {
    let runs = state.bus.admin_push(&operator.scope, team, q.runs).await?;
    Ok(Json(runs.into_iter().map(Into::into).collect()))
}

/// The parked (dead-lettered) push registrations of the operator's teams, oldest parked first
/// (at most 1000), each with the reason (`last_error`) and its attempts log.
#[utoipa::path(get, path = "/v1/admin/push/parked", tag = "admin",
    operation_id = "admin_parked_push",
    responses((status = 200, body = Vec<PushRegistrationView>),
        (status = 401, description = "no, a malformed, an unknown or a revoked operator token (an agent's token included)", body = ErrorBody)),
    security(("operator" = [])))]
pub async fn parked(
    State(state): State<AppState>,
    Operator(operator): Operator,
) -> ApiResult<Json<Vec<PushRegistrationView>>> {
    let parked = state.bus.admin_parked(&operator.scope).await?;
    Ok(Json(parked.into_iter().map(Into::into).collect()))
}

/// Un-park a registration: due now, its failed attempts reset, resuming from its cursor.
#[utoipa::path(post, path = "/v1/admin/runs/{run}/push/{id}/unpark", tag = "admin",
    operation_id = "admin_unpark_push",
    params(("run" = Uuid, Path, description = "run id"),
        ("id" = String, Path, min_length = 1, description = "registration id (`operator:<destination name>`)")),
    responses((status = 200, body = UnparkedView),
        (status = 400, description = "bad run id", body = ErrorBody),
        (status = 401, description = "no, a malformed, an unknown or a revoked operator token (an agent's token included)", body = ErrorBody),
        (status = 404, description = "unknown run, outside the operator's scope, or no parked registration with that id", body = ErrorBody)),
    security(("operator" = [])))]
pub async fn unpark(
    State(state): State<AppState>,
    Operator(operator): Operator,
    ApiPath((run, id)): ApiPath<(Uuid, String)>,
) -> ApiResult<Json<UnparkedView>> {
    if state
        .bus
        .admin_unpark(&operator.scope, RunId(run), &id)
        .await?
    {
        Ok(Json(UnparkedView { unparked: true }))
    } else {
        Err(BusError::not_found(format!("parked push registration {id} of run {run}")).into())
    }
}
