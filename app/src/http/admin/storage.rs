//! What each team keeps.

use axum::Json;
use axum::extract::State;

use super::auth::Operator;
use super::views::TeamStorageView;
use crate::edge::error::{ApiResult, ErrorBody};
use crate::http::AppState;

/// What each team of the operator's scope keeps: per body backend the stored bodies, their
/// bytes and pending publications (the ledger's count), and the team's JetStream streams
/// against their quotas when a broker is configured and answers.
#[utoipa::path(get, path = "/v1/admin/storage", tag = "admin", operation_id = "admin_storage",
    responses((status = 200, body = Vec<TeamStorageView>),
        (status = 401, description = "no, a malformed, an unknown or a revoked operator token (an agent's token included)", body = ErrorBody)),
    security(("operator" = [])))]
pub async fn storage(
    State(state): State<AppState>,
    Operator(operator): Operator,
) -> ApiResult<Json<Vec<TeamStorageView>>> {
    let teams = state.bus.admin_storage(&operator.scope).await?;
    Ok(Json(teams.into_iter().map(Into::into).collect()))
}
