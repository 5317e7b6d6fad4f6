//! Bearer-token authentication: identity always comes from the token, never from the request.

use axum::extract::FromRequestParts;
use axum::http::HeaderMap;
use axum::http::header::AUTHORIZATION;
use axum::http::request::Parts;
use crewbus_domain::{Agent, BusError};

use super::AppState;
use super::error::ApiError;

/// The agent presenting the request's `Authorization: Bearer <token>`.
/// Missing, malformed, unknown or revoked → `401 unauthenticated`.
pub struct Authenticated(pub Agent);

impl FromRequestParts<AppState> for Authenticated {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let token = bearer_token(&parts.headers).ok_or(ApiError(BusError::Unauthenticated))?;
        let agent = state.bus.authenticate(token).await?;
        Ok(Authenticated(agent))
    }
}

/// The token of an `Authorization: Bearer <token>` header (scheme case-insensitive), if the
/// request has one. The HTTP API and the MCP endpoint read it the same way.
pub(crate) fn bearer_token(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            let (scheme, token) = v.split_once(' ')?;
            scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
        })
}
