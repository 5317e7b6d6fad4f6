//! The MCP endpoint's identity: the agent's bearer token, exactly as on the HTTP API, checked
//! before the request reaches the MCP service. Tools read the [`Agent`] this inserts into the
//! request's extensions (rmcp hands the request's `http::request::Parts` to every handler); no
//! tool takes an identity argument.

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use crewbus_domain::BusError;

use crate::edge::auth::bearer_token;
use crate::edge::error::ApiError;
use crate::usecases::bus::Bus;

/// Authenticates the request's `Authorization: Bearer <token>` with [`Bus::authenticate`] and
/// passes it on with the [`crewbus_domain::Agent`] in its extensions. No token, or a malformed,
/// unknown or revoked one: `401` with the API's JSON error and `WWW-Authenticate: Bearer` (the
/// MCP service is not reached); the ledger failing: its JSON error (`503`).
pub(crate) async fn authenticate(State(bus): State<Bus>, mut req: Request, next: Next) -> Response {
    let Some(token) = bearer_token(req.headers()) else {
        return ApiError(BusError::Unauthenticated).into_response();
    };
    match bus.authenticate(token).await {
        Ok(agent) => {
            req.extensions_mut().insert(agent);
            next.run(req).await
        }
        Err(e) => ApiError(e).into_response(),
    }
}
