//! Bearer-token authentication: identity always comes from the token, never from the request.

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use crewbus_domain::{Agent, BusError};

use super::AppState;
use crate::edge::auth::bearer_token;
use crate::edge::error::ApiError;

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
