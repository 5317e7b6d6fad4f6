//! The admin API's authentication: an operator's bearer token (`cbo_…`), never an agent's.

use axum::Json;
use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use crewbus_domain::BusError;

use crate::edge::auth::bearer_token;
use crate::edge::error::{ApiError, ErrorBody};
use crate::http::AppState;

/// The operator presenting the request's `Authorization: Bearer <operator token>`, looked up
/// in the ledger on every request (never cached: a revocation holds at once). Missing,
/// malformed, unknown or revoked — or an agent's token — → `401 unauthenticated` with
/// `WWW-Authenticate: Bearer`; a ledger that does not answer → `503`.
pub struct Operator(pub crewbus_domain::Operator);

/// Why an admin request was refused before its handler ran.
pub enum OperatorRejection {
    /// No operator token that works.
    Unauthenticated,
    /// The lookup failed (the ledger did not answer).
    Failed(ApiError),
}

impl IntoResponse for OperatorRejection {
    fn into_response(self) -> Response {
        match self {
            OperatorRejection::Unauthenticated => {
                let mut response = (
                    StatusCode::UNAUTHORIZED,
                    Json(ErrorBody {
                        code: BusError::Unauthenticated.code().to_owned(),
                        message: "unauthenticated: the admin API takes `Authorization: Bearer \
                                  <operator token>` with an active operator's token (`cbo_…`, \
                                  printed once by `crewbus operator add NAME`); an agent's token \
                                  is refused here"
                            .to_owned(),
                        retry_after_seconds: None,
                        field: None,
                    }),
                )
                    .into_response();
                response
                    .headers_mut()
                    .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
                response
            }
            OperatorRejection::Failed(e) => e.into_response(),
        }
    }
}

impl FromRequestParts<AppState> for Operator {
    type Rejection = OperatorRejection;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, OperatorRejection> {
        let token = bearer_token(&parts.headers).ok_or(OperatorRejection::Unauthenticated)?;
        match state.bus.authenticate_operator(token).await {
            Ok(operator) => Ok(Operator(operator)),
            Err(BusError::Unauthenticated) => Err(OperatorRejection::Unauthenticated),
            Err(e) => Err(OperatorRejection::Failed(ApiError(e))),
        }
    }
}
