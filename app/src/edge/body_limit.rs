//! The request size limit both edges share: the largest request body, and the check that
//! refuses a request declaring more before any of its body is read.

use axum::extract::Request;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use crewbus_domain::BusError;

use super::error::ApiError;

/// Largest HTTP request body, in bytes: room for a 1 MiB message body even when every character
/// is JSON-escaped (`\u0000` is six bytes). The message body itself is checked against the team
/// backend's limit after parsing (also 413). The MCP endpoint's limit is the same.
pub const REQUEST_LIMIT_BYTES: usize = 7 * 1024 * 1024;

/// Answers a request whose `Content-Length` declares more than
/// [`REQUEST_LIMIT_BYTES`] with `413 too_large` at once, before any of the body is
/// read (`DefaultBodyLimit` alone only refuses once that many bytes have arrived).
pub(crate) async fn refuse_declared_oversize(req: Request, next: Next) -> Response {
    let declared = req
        .headers()
        .get(axum::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    match declared {
        Some(size) if size > REQUEST_LIMIT_BYTES as u64 => ApiError(BusError::TooLarge {
            size,
            limit: REQUEST_LIMIT_BYTES as u64,
        })
        .into_response(),
        _ => next.run(req).await,
    }
}
