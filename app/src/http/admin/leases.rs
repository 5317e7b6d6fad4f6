//! A team's leases: list the live ones, release any holder's.

use axum::Json;
use axum::extract::State;
use crewbus_domain::Uuid;

use super::auth::Operator;
use crate::edge::error::{ApiResult, ErrorBody};
use crate::edge::leases::{LeaseView, LeasesQuery, LeasesView};
use crate::http::AppState;
use crate::http::extract::{ApiPath, ApiQuery};

/// A team's live leases, by token: all, one agent's, or those overlapping a pattern.
#[utoipa::path(get, path = "/v1/admin/teams/{team}/leases", tag = "admin",
    operation_id = "admin_list_leases",
    params(("team" = Uuid, Path, description = "team id"), LeasesQuery),
    responses((status = 200, body = LeasesView),
        (status = 400, description = "bad id, pattern or query", body = ErrorBody),
        (status = 401, description = "no, a malformed, an unknown or a revoked operator token (an agent's token included)", body = ErrorBody),
        (status = 404, description = "unknown team, or outside the operator's scope", body = ErrorBody)),
    security(("operator" = [])))]
pub async fn list(
    State(state): State<AppState>,
    Operator(operator): Operator,
    ApiPath(team): ApiPath<Uuid>,
    ApiQuery(q): ApiQuery<LeasesQuery>,
) -> ApiResult<Json<LeasesView>> {
    let leases = state
        .bus
        .admin_leases(&operator.scope, team, &q.filter()?)
        .await?;
    Ok(Json(LeasesView {
        leases: leases.into_iter().map(Into::into).collect(),
    }))
}

/// Release a lease of the team, whoever holds it (idempotent); acquires waiting on it are woken.
#[utoipa::path(post, path = "/v1/admin/teams/{team}/leases/{lease}/release", tag = "admin",
    operation_id = "admin_release_lease",
    params(("team" = Uuid, Path, description = "team id"), ("lease" = Uuid, Path, description = "lease id")),
    responses((status = 200, body = LeaseView),
        (status = 400, description = "bad id", body = ErrorBody),
        (status = 401, description = "no, a malformed, an unknown or a revoked operator token (an agent's token included)", body = ErrorBody),
        (status = 404, description = "unknown team or lease, another team's lease, or outside the operator's scope", body = ErrorBody)),
    security(("operator" = [])))]
pub async fn release(
    State(state): State<AppState>,
    Operator(operator): Operator,
    ApiPath((team, lease)): ApiPath<(Uuid, Uuid)>,
) -> ApiResult<Json<LeaseView>> {
    Ok(Json(
        state
            .bus
            .admin_release_lease(&operator.scope, team, lease)
            .await?
            .into(),
    ))
}
