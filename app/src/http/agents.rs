//! `GET /v1/me`, `GET /v1/agents`.

use axum::Json;
use axum::extract::State;

use super::AppState;
use super::auth::Authenticated;
use super::error::{ApiResult, ErrorBody};
use super::views::AgentView;

/// The calling agent.
#[utoipa::path(get, path = "/v1/me", tag = "agents", operation_id = "whoami",
    responses((status = 200, body = AgentView), (status = 401, description = "no, a malformed, an unknown or a revoked token", body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn me(Authenticated(agent): Authenticated) -> Json<AgentView> {
    Json(agent.into())
}

/// The agents of the caller's team (ids to put in a conversation).
#[utoipa::path(get, path = "/v1/agents", tag = "agents", operation_id = "list_agents",
    responses((status = 200, body = Vec<AgentView>), (status = 401, description = "no, a malformed, an unknown or a revoked token", body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn list(
    State(state): State<AppState>,
    Authenticated(agent): Authenticated,
) -> ApiResult<Json<Vec<AgentView>>> {
    let agents = state.bus.team_agents(&agent).await?;
    Ok(Json(agents.into_iter().map(Into::into).collect()))
}
