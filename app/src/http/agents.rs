//! `GET /v1/me`, `GET /v1/agents` (the team with its presence), `PUT /v1/me/status`.

use axum::Json;
use axum::extract::State;

use super::AppState;
use super::auth::Authenticated;
use super::extract::ApiJson;
use crate::edge::error::{ApiResult, ErrorBody};
use crate::edge::views::{AgentView, SetStatus, TeamAgentView};

/// The calling agent.
#[utoipa::path(get, path = "/v1/me", tag = "agents", operation_id = "whoami",
    responses((status = 200, body = AgentView), (status = 401, description = "no, a malformed, an unknown or a revoked token", body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn me(Authenticated(agent): Authenticated) -> Json<AgentView> {
    Json(agent.into())
}

/// The agents of the caller's team (ids to put in a conversation), by name, each with its
/// status line, current run and last activity.
#[utoipa::path(get, path = "/v1/agents", tag = "agents", operation_id = "list_agents",
    responses((status = 200, body = Vec<TeamAgentView>), (status = 401, description = "no, a malformed, an unknown or a revoked token", body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn list(
    State(state): State<AppState>,
    Authenticated(agent): Authenticated,
) -> ApiResult<Json<Vec<TeamAgentView>>> {
    let agents = state.bus.team_presence(&agent).await?;
    Ok(Json(agents.into_iter().map(Into::into).collect()))
}

/// Sets the caller's status line (what it is doing, shown beside it wherever the team's agents
/// are listed); the empty string clears it. Answers the caller as `GET /v1/agents` lists it.
#[utoipa::path(put, path = "/v1/me/status", tag = "agents", operation_id = "set_status",
    request_body = SetStatus,
    responses((status = 200, body = TeamAgentView),
        (status = 400, description = "over 200 characters, or a control character", body = ErrorBody),
        (status = 401, description = "no, a malformed, an unknown or a revoked token", body = ErrorBody),
        (status = 403, description = "the agent was revoked meanwhile", body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn set_status(
    State(state): State<AppState>,
    Authenticated(agent): Authenticated,
    ApiJson(req): ApiJson<SetStatus>,
) -> ApiResult<Json<TeamAgentView>> {
    let me = state.bus.set_status(&agent, &req.status).await?;
    Ok(Json(me.into()))
}
