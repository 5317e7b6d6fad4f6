//! The lease routes: acquire (optionally waiting), renew, release, list, read one with its
//! history, and the fencing check. Their request and answer types are the edge's
//! ([`crate::edge::leases`]). Every lease is of the calling agent's team (identity from the
//! bearer token); renew and release only the caller's own.

use axum::Json;
use axum::extract::State;
use crewbus_domain::{FencingToken, RunId, Uuid};
use std::time::Duration;

use super::AppState;
use super::auth::Authenticated;
use super::extract::{ApiJson, ApiPath, ApiQuery};
use crate::edge::error::{ApiResult, ErrorBody};
use crate::edge::leases::{
    AcquireLease, AcquireView, CheckLease, CheckView, LeaseHistoryView, LeaseView, LeasesQuery,
    LeasesView, MAX_FENCING_TOKEN, RenewLease, claim_of, ms,
};

/// Take a lease on a pattern: granted, or the conflicting holders. With `wait_ms` it waits for
/// the conflicts to end (woken when they are released or expire) up to that long.
#[utoipa::path(post, path = "/v1/leases", tag = "leases", operation_id = "acquire_lease",
    request_body = AcquireLease,
    responses((status = 200, description = "granted, or not with the conflicting leases", body = AcquireView),
        (status = 400, description = "a bad pattern, TTL, wait or body", body = ErrorBody),
        (status = 401, description = "no, a malformed, an unknown or a revoked token", body = ErrorBody),
        (status = 403, description = "the run is another agent's, or the caller was revoked (a token still cached for up to bus.token_cache_ms)", body = ErrorBody),
        (status = 404, description = "unknown run", body = ErrorBody),
        (status = 409, description = "the run is sealed, or the caller holds 64 leases already", body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn acquire(
    State(state): State<AppState>,
    Authenticated(agent): Authenticated,
    ApiJson(req): ApiJson<AcquireLease>,
) -> ApiResult<Json<AcquireView>> {
    let claim = claim_of(&req.pattern, req.mode)?;
    let answer = state
        .bus
        .acquire_lease(
            &agent,
            &claim,
            ms(req.ttl_ms),
            req.run.map(RunId),
            Duration::from_millis(req.wait_ms),
        )
        .await?;
    Ok(Json(answer.into()))
}

/// The team's live leases, by token: all, one agent's, or those overlapping a pattern.
#[utoipa::path(get, path = "/v1/leases", tag = "leases", operation_id = "list_leases",
    params(LeasesQuery),
    responses((status = 200, body = LeasesView),
        (status = 400, description = "a bad pattern or query", body = ErrorBody),
        (status = 401, description = "no, a malformed, an unknown or a revoked token", body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn list(
    State(state): State<AppState>,
    Authenticated(agent): Authenticated,
    ApiQuery(q): ApiQuery<LeasesQuery>,
) -> ApiResult<Json<LeasesView>> {
    let leases = state.bus.leases_for(&agent, &q.filter()?).await?;
    Ok(Json(LeasesView {
        leases: leases.into_iter().map(Into::into).collect(),
    }))
}

/// One lease of the team, live or ended, with its history.
#[utoipa::path(get, path = "/v1/leases/{id}", tag = "leases", operation_id = "get_lease",
    params(("id" = Uuid, Path, description = "lease id")),
    responses((status = 200, body = LeaseHistoryView), (status = 400, body = ErrorBody),
        (status = 401, description = "no, a malformed, an unknown or a revoked token", body = ErrorBody),
        (status = 404, description = "unknown or another team's", body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn get(
    State(state): State<AppState>,
    Authenticated(agent): Authenticated,
    ApiPath(id): ApiPath<Uuid>,
) -> ApiResult<Json<LeaseHistoryView>> {
    let (lease, events) = state.bus.lease_history(&agent, id).await?;
    Ok(Json(LeaseHistoryView {
        lease: lease.into(),
        events: events.into_iter().map(Into::into).collect(),
    }))
}

/// Renew one of the caller's live leases from now (its fencing token stays).
#[utoipa::path(post, path = "/v1/leases/{id}/renew", tag = "leases", operation_id = "renew_lease",
    params(("id" = Uuid, Path, description = "lease id")),
    request_body = RenewLease,
    responses((status = 200, body = LeaseView), (status = 400, description = "a bad TTL or body", body = ErrorBody),
        (status = 401, description = "no, a malformed, an unknown or a revoked token", body = ErrorBody),
        (status = 404, description = "unknown, another team's or another agent's", body = ErrorBody),
        (status = 409, description = "ended or lapsed: acquire it again", body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn renew(
    State(state): State<AppState>,
    Authenticated(agent): Authenticated,
    ApiPath(id): ApiPath<Uuid>,
    ApiJson(req): ApiJson<RenewLease>,
) -> ApiResult<Json<LeaseView>> {
    Ok(Json(
        state
            .bus
            .renew_lease(&agent, id, ms(req.ttl_ms))
            .await?
            .into(),
    ))
}

/// Release one of the caller's leases (idempotent: an ended one comes back as it ended).
#[utoipa::path(post, path = "/v1/leases/{id}/release", tag = "leases", operation_id = "release_lease",
    params(("id" = Uuid, Path, description = "lease id")),
    responses((status = 200, body = LeaseView), (status = 400, body = ErrorBody),
        (status = 401, description = "no, a malformed, an unknown or a revoked token", body = ErrorBody),
        (status = 404, description = "unknown, another team's or another agent's", body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn release(
    State(state): State<AppState>,
    Authenticated(agent): Authenticated,
    ApiPath(id): ApiPath<Uuid>,
) -> ApiResult<Json<LeaseView>> {
    Ok(Json(state.bus.release_lease(&agent, id).await?.into()))
}

/// Whether the caller holds a path now — with a fencing token, whether that token is its live
/// lease covering the path (a stale token is `held: false`).
#[utoipa::path(post, path = "/v1/leases/check", tag = "leases", operation_id = "check_lease",
    request_body = CheckLease,
    responses((status = 200, body = CheckView),
        (status = 400, description = "not a concrete path, or a bad body", body = ErrorBody),
        (status = 401, description = "no, a malformed, an unknown or a revoked token", body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn check(
    State(state): State<AppState>,
    Authenticated(agent): Authenticated,
    ApiJson(req): ApiJson<CheckLease>,
) -> ApiResult<Json<CheckView>> {
    if req
        .fencing_token
        .is_some_and(|t| t == 0 || t > MAX_FENCING_TOKEN)
    {
        return Err(crewbus_domain::BusError::invalid(format!(
            "fencing_token must be between 1 and {MAX_FENCING_TOKEN}"
        ))
        .into());
    }
    let held = state
        .bus
        .check_lease(&agent, req.fencing_token.map(FencingToken), &req.path)
        .await?;
    Ok(Json(CheckView {
        held: held.is_some(),
        lease: held.map(Into::into),
    }))
}
