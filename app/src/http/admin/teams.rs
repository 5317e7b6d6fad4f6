//! `GET /v1/admin/me`, `/v1/admin/overview`, `/v1/admin/teams`, a team's agents, and adding and
//! revoking an agent.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use crewbus_domain::Uuid;

use super::auth::Operator;
use super::views::{
    AddAgent, AdminAgentView, AgentActivityView, NewAgentView, OperatorView, TeamOverviewView,
    TeamView,
};
use crate::edge::error::{ApiResult, ErrorBody};
use crate::http::AppState;
use crate::http::extract::{ApiJson, ApiPath};

/// The calling operator and its scope.
#[utoipa::path(get, path = "/v1/admin/me", tag = "admin", operation_id = "admin_whoami",
    responses((status = 200, body = OperatorView),
        (status = 401, description = "no, a malformed, an unknown or a revoked operator token (an agent's token included)", body = ErrorBody)),
    security(("operator" = [])))]
pub async fn me(Operator(operator): Operator) -> Json<OperatorView> {
    Json(operator.into())
}

/// Every team of the operator's scope at a glance: the last hour's sends and confirmed
/// deliveries per minute, pending deliveries and the oldest one's age, parked push
/// registrations, agents.
#[utoipa::path(get, path = "/v1/admin/overview", tag = "admin", operation_id = "admin_overview",
    responses((status = 200, body = Vec<TeamOverviewView>),
        (status = 401, description = "no, a malformed, an unknown or a revoked operator token (an agent's token included)", body = ErrorBody)),
    security(("operator" = [])))]
pub async fn overview(
    State(state): State<AppState>,
    Operator(operator): Operator,
) -> ApiResult<Json<Vec<TeamOverviewView>>> {
    let teams = state.bus.admin_overview(&operator.scope).await?;
    let now = state.bus.now();
    Ok(Json(
        teams
            .into_iter()
            .map(|t| TeamOverviewView::new(t, now))
            .collect(),
    ))
}

/// The teams of the operator's scope, by name.
#[utoipa::path(get, path = "/v1/admin/teams", tag = "admin", operation_id = "admin_list_teams",
    responses((status = 200, body = Vec<TeamView>),
        (status = 401, description = "no, a malformed, an unknown or a revoked operator token (an agent's token included)", body = ErrorBody)),
    security(("operator" = [])))]
pub async fn teams(
    State(state): State<AppState>,
    Operator(operator): Operator,
) -> ApiResult<Json<Vec<TeamView>>> {
    let teams = state.bus.admin_teams(&operator.scope).await?;
    Ok(Json(teams.into_iter().map(Into::into).collect()))
}

/// A team's agents (revoked ones and human members included), by name, with their last
/// activity, pending deliveries and the age of the oldest.
#[utoipa::path(get, path = "/v1/admin/teams/{team}/agents", tag = "admin",
    operation_id = "admin_list_agents",
    params(("team" = Uuid, Path, description = "team id")),
    responses((status = 200, body = Vec<AgentActivityView>),
        (status = 400, description = "bad id", body = ErrorBody),
        (status = 401, description = "no, a malformed, an unknown or a revoked operator token (an agent's token included)", body = ErrorBody),
        (status = 404, description = "unknown team, or outside the operator's scope", body = ErrorBody)),
    security(("operator" = [])))]
pub async fn agents(
    State(state): State<AppState>,
    Operator(operator): Operator,
    ApiPath(team): ApiPath<Uuid>,
) -> ApiResult<Json<Vec<AgentActivityView>>> {
    let agents = state.bus.admin_agents(&operator.scope, team).await?;
    let now = state.bus.now();
    Ok(Json(
        agents
            .into_iter()
            .map(|a| AgentActivityView::new(a, now))
            .collect(),
    ))
}

/// Add an agent to a team: `201` with its bearer token, shown this once.
#[utoipa::path(post, path = "/v1/admin/teams/{team}/agents", tag = "admin",
    operation_id = "admin_add_agent",
    params(("team" = Uuid, Path, description = "team id")),
    request_body = AddAgent,
    responses((status = 201, body = NewAgentView),
        (status = 400, description = "bad id or name", body = ErrorBody),
        (status = 401, description = "no, a malformed, an unknown or a revoked operator token (an agent's token included)", body = ErrorBody),
        (status = 404, description = "unknown team, or outside the operator's scope", body = ErrorBody),
        (status = 409, description = "the team has an agent of that name", body = ErrorBody)),
    security(("operator" = [])))]
pub async fn add_agent(
    State(state): State<AppState>,
    Operator(operator): Operator,
    ApiPath(team): ApiPath<Uuid>,
    ApiJson(req): ApiJson<AddAgent>,
) -> ApiResult<(StatusCode, Json<NewAgentView>)> {
    let new = state
        .bus
        .admin_add_agent(&operator.scope, team, &req.name)
        .await?;
    Ok((
        StatusCode::CREATED,
        Json(NewAgentView {
            agent: new.agent.into(),
            token: new.token,
        }),
    ))
}

/// Revoke an agent: its token is refused from now on (on every server within
/// `bus.token_cache_ms`, at most 1 s) and its waiting fetches end. Idempotent.
#[utoipa::path(post, path = "/v1/admin/teams/{team}/agents/{agent}/revoke", tag = "admin",
    operation_id = "admin_revoke_agent",
    params(("team" = Uuid, Path, description = "team id"), ("agent" = Uuid, Path, description = "agent id")),
    responses((status = 200, body = AdminAgentView),
        (status = 400, description = "bad id", body = ErrorBody),
        (status = 401, description = "no, a malformed, an unknown or a revoked operator token (an agent's token included)", body = ErrorBody),
        (status = 404, description = "unknown agent or team, another team's agent, or outside the operator's scope", body = ErrorBody)),
    security(("operator" = [])))]
pub async fn revoke_agent(
    State(state): State<AppState>,
    Operator(operator): Operator,
    ApiPath((team, agent)): ApiPath<(Uuid, Uuid)>,
) -> ApiResult<Json<AdminAgentView>> {
    let agent = state
        .bus
        .admin_revoke_agent(&operator.scope, team, agent)
        .await?;
    Ok(Json(agent.into()))
}
