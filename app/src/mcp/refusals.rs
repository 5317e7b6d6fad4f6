//! The MCP endpoint's refusals in the API's error shape: what rmcp answers before a request
//! reaches a tool (another method, a missing `Accept`, a body that is not JSON-RPC, an
//! unsupported revision header) comes as plain text; this middleware turns it into the JSON
//! `{code, message}` every other crewbus error has, with a message that says what to change.
//! JSON-RPC answers (`application/json`, `text/event-stream`) pass unchanged. A foreign `Host`
//! or `Origin` never gets here: the listener's check ([`crate::edge::allow`]) refused it.

use axum::extract::Request;
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::edge::error::ErrorBody;

/// Longest plain-text refusal read to decide the message, bytes (rmcp's are one line).
const TEXT_LIMIT: usize = 4096;

/// Rewrites rmcp's plain-text refusals (see the module docs). The status stays, but for a
/// request declared `application/json` whose body does not parse: rmcp answers 415, this
/// answers `400 invalid` (the media type was right; the JSON was not).
pub(crate) async fn json_refusals(req: Request, next: Next) -> Response {
    let declared_json = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim_start().starts_with("application/json"));
    let response = next.run(req).await;
    let status = response.status();
    let is_text = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_none_or(|v| v.starts_with("text/plain"));
    if !(status.is_client_error() && is_text) {
        return response;
    }
    let text = match axum::body::to_bytes(response.into_body(), TEXT_LIMIT).await {
        Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
        Err(_) => String::new(),
    };
    let (status, code, message) = refusal(status, declared_json, &text);
    let mut refused = (
        status,
        axum::Json(ErrorBody {
            code: code.to_owned(),
            message,
            retry_after_seconds: None,
            field: None,
        }),
    )
        .into_response();
    if status == StatusCode::METHOD_NOT_ALLOWED {
        // RFC 9110 §15.5.6: a 405 names the methods the resource takes, as the /v1 routes do.
        refused
            .headers_mut()
            .insert(header::ALLOW, header::HeaderValue::from_static("POST"));
    }
    refused
}

/// The status, stable code and message for one of rmcp's refusals (`text` is its body).
fn refusal(
    status: StatusCode,
    declared_json: bool,
    text: &str,
) -> (StatusCode, &'static str, String) {
    match status {
        StatusCode::METHOD_NOT_ALLOWED => (
            status,
            "invalid",
            "/mcp takes POST only: it is stateless (no GET event stream, no DELETE of a session)"
                .to_owned(),
        ),
        StatusCode::NOT_ACCEPTABLE => (
            status,
            "invalid",
            "send `Accept: application/json, text/event-stream` (answers come as server-sent \
             events)"
                .to_owned(),
        ),
        StatusCode::UNSUPPORTED_MEDIA_TYPE if declared_json => (
            StatusCode::BAD_REQUEST,
            "invalid",
            "the request body is not one JSON-RPC message (JSON syntax, or a batch, which MCP \
             does not take)"
                .to_owned(),
        ),
        StatusCode::UNSUPPORTED_MEDIA_TYPE => (
            status,
            "invalid",
            "send `Content-Type: application/json`".to_owned(),
        ),
        StatusCode::PAYLOAD_TOO_LARGE => (
            status,
            "too_large",
            format!(
                "the request body is larger than {} bytes",
                crate::edge::body_limit::REQUEST_LIMIT_BYTES
            ),
        ),
        _ => {
            // rmcp's own one-line reason (an unsupported MCP-Protocol-Version, a missing
            // routing header): about the request's headers, never a secret.
            let reason = text
                .trim()
                .trim_start_matches("Bad Request:")
                .trim()
                .chars()
                .take(300)
                .collect::<String>();
            let reason = if reason.is_empty() {
                "the request does not fit the MCP Streamable HTTP transport".to_owned()
            } else {
                reason
            };
            (status, "invalid", reason)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_refusal_has_a_code_and_says_what_to_change() {
        let (s, code, _) = refusal(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            true,
            "fail to deserialize",
        );
        assert_eq!((s, code), (StatusCode::BAD_REQUEST, "invalid"));
        let (s, _, _) = refusal(StatusCode::UNSUPPORTED_MEDIA_TYPE, false, "");
        assert_eq!(s, StatusCode::UNSUPPORTED_MEDIA_TYPE);
        let (s, code, m) = refusal(
            StatusCode::BAD_REQUEST,
            true,
            "Bad Request: Unsupported MCP-Protocol-Version: 1999-01-01",
        );
        assert_eq!((s, code), (StatusCode::BAD_REQUEST, "invalid"));
        assert_eq!(m, "Unsupported MCP-Protocol-Version: 1999-01-01");
    }
}
