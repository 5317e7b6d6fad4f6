//! Reading the bearer token: identity always comes from the token, never from the request.

use axum::http::HeaderMap;
use axum::http::header::AUTHORIZATION;

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
