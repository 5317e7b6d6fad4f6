//! A team's runs and a run's journal.

use axum::Json;
use axum::extract::State;
use crewbus_domain::{RunId, Seq, Uuid};

use super::auth::Operator;
use super::views::{RunRecordsView, RunsQuery};
use crate::edge::error::{ApiResult, ErrorBody};
use crate::edge::views::{RecordsQuery, RecordsView, RunView};
use crate::http::AppState;
use crate::http::extract::{ApiPath, ApiQuery};

/// A team's runs, newest admitted first.
#[utoipa::path(get, path = "/v1/admin/teams/{team}/runs", tag = "admin",
    operation_id = "admin_list_runs",
    params(("team" = Uuid, Path, description = "team id"), RunsQuery),
    responses((status = 200, body = Vec<RunView>),
        (status = 400, description = "bad id or paging", body = ErrorBody),
        (status = 401, description = "no, a malformed, an unknown or a revoked operator token (an agent's token included)", body = ErrorBody),
        (status = 404, description = "unknown team, or outside the operator's scope", body = ErrorBody)),
    security(("operator" = [])))]
pub async fn list(
    State(state): State<AppState>,
    Operator(operator): Operator,
    ApiPath(team): ApiPath<Uuid>,
    ApiQuery(q): ApiQuery<RunsQuery>,
) -> ApiResult<Json<Vec<RunView>>> {
    let runs = state
        .bus
        .admin_runs(&operator.scope, team, q.before, q.limit)
        .await?;
    Ok(Json(runs.into_iter().map(Into::into).collect()))
}

/// A run of a team and a page of its journal, from `from_seq`.
#[utoipa::path(get, path = "/v1/admin/teams/{team}/runs/{run}/records", tag = "admin",
    operation_id = "admin_read_run_records",
    params(("team" = Uuid, Path, description = "team id"), ("run" = Uuid, Path, description = "run id"), RecordsQuery),
    responses((status = 200, body = RunRecordsView),
        (status = 400, description = "bad id or paging", body = ErrorBody),
        (status = 401, description = "no, a malformed, an unknown or a revoked operator token (an agent's token included)", body = ErrorBody),
        (status = 404, description = "unknown team or run, another team's run, or outside the operator's scope", body = ErrorBody)),
    security(("operator" = [])))]
pub async fn records(
    State(state): State<AppState>,
    Operator(operator): Operator,
    ApiPath((team, run)): ApiPath<(Uuid, Uuid)>,
    ApiQuery(q): ApiQuery<RecordsQuery>,
) -> ApiResult<Json<RunRecordsView>> {
    let (run, records) = state
        .bus
        .admin_run(&operator.scope, team, RunId(run), Seq(q.from_seq), q.limit)
        .await?;
    let page = RecordsView::page(records, q.from_seq);
    Ok(Json(RunRecordsView {
        run: run.into(),
        records: page.records,
        next_from_seq: page.next_from_seq,
    }))
}
