//! The vocabulary of the push transport port: one request, its answer, or why it was not sent.

use std::fmt;
use std::time::Duration;

use crate::{Secret, redact_url};

/// One push request: a signed POST of one event.
#[derive(Clone)]
pub struct PushRequest {
    /// Where to POST.
    pub url: String,
    /// Headers besides `Authorization` (`content-type`, `webhook-id`, `webhook-timestamp`,
    /// `webhook-signature`, …), in order.
    pub headers: Vec<(String, String)>,
    /// The full `Authorization` header value (`<scheme> <credentials>`), if any.
    pub authorization: Option<Secret>,
    /// The request body (JSON bytes).
    pub body: Vec<u8>,
}

impl fmt::Debug for PushRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PushRequest")
            .field("url", &redact_url(&self.url))
            .field("headers", &self.headers)
            .field("authorization", &self.authorization)
            .field("body_bytes", &self.body.len())
            .finish()
    }
}

/// The receiver's answer to the original POST (no redirect is ever followed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PushResponse {
    /// HTTP status code. Only 2xx acknowledges.
    pub status: u16,
    /// `Retry-After` in seconds, when the receiver sent one as a number.
    pub retry_after: Option<Duration>,
}

impl PushResponse {
    /// Whether the receiver acknowledged the event (2xx).
    pub fn acknowledged(&self) -> bool {
        (200..300).contains(&self.status)
    }
}

/// Why a push request got no HTTP answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TransportError {
    /// No answer within the transport's timeout.
    #[error("the receiver did not answer in time")]
    Timeout,
    /// The connection could not be made or broke before an answer.
    #[error("could not connect to the receiver")]
    Connect,
    /// The request cannot be sent (bad URL, bad header value).
    #[error("the request cannot be sent: {0}")]
    Invalid(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_2xx_acknowledges() {
        let r = |status| PushResponse {
            status,
            retry_after: None,
        };
        assert!(r(200).acknowledged() && r(204).acknowledged());
        for s in [199, 300, 302, 404, 410, 500] {
            assert!(!r(s).acknowledged(), "{s}");
        }
    }

    #[test]
    fn debug_hides_the_credential() {
        let req = PushRequest {
            url: "https://u:p@x.example/h?k=v".into(),
            headers: vec![],
            authorization: Some(Secret::new("Bearer sekrit")),
            body: b"{}".to_vec(),
        };
        let text = format!("{req:?}");
        assert!(!text.contains("sekrit") && !text.contains("k=v") && !text.contains("u:p"));
    }
}
