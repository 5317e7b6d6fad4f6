//! `GET /v1/search`: full-text search over the history the caller may read. Its query and
//! answer are the edge's ([`crate::edge::search`]).

use axum::Json;
use axum::extract::State;

use super::AppState;
use super::auth::Authenticated;
use super::extract::ApiQuery;
use crate::edge::error::{ApiResult, ErrorBody};
use crate::edge::search::SearchParams;
pub use crate::edge::search::SearchView;

/// Searches the messages of the caller's conversations (full text over bodies and titles),
/// best match first, paged, the matched words marked in each snippet.
#[utoipa::path(get, path = "/v1/search", tag = "search", operation_id = "search_messages",
    params(SearchParams),
    responses((status = 200, body = SearchView),
        (status = 400, description = "a bad query: empty, too long, a bad limit or offset", body = ErrorBody),
        (status = 401, description = "no, a malformed, an unknown or a revoked token", body = ErrorBody),
        (status = 404, description = "`conversation` unknown, another team's, or not the caller's", body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn search(
    State(state): State<AppState>,
    Authenticated(agent): Authenticated,
    ApiQuery(params): ApiQuery<SearchParams>,
) -> ApiResult<Json<SearchView>> {
    let page = state.bus.search(&agent, &params.query()).await?;
    Ok(Json(page.into()))
}
