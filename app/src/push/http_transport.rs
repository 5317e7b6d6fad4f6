//! `HttpTransport`: the push transport over HTTP(S) with reqwest (rustls), no redirects, no proxy.

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;
use crewbus_domain::{PushRequest, PushResponse, TransportError};
use crewbus_ports::PushTransport;
use reqwest::header::{AUTHORIZATION, HeaderMap, HeaderName, HeaderValue, RETRY_AFTER};

/// Largest part of a response body read (and discarded) so the connection can be reused, bytes.
const DRAIN_LIMIT: usize = 64 * 1024;

/// A [`PushTransport`] over HTTP/1.1 and TLS (rustls, the platform's root certificates).
///
/// Follows **no redirect** (a 3xx is returned as the answer, which does not acknowledge), uses
/// **no proxy** (environment proxy variables are ignored), and bounds every request — connect,
/// send and the response head — by `timeout`. `Retry-After` is read when it is a whole number of
/// seconds (an HTTP-date is ignored). Error mapping: timeout → [`TransportError::Timeout`]; a
/// request reqwest cannot build (bad URL, bad header) → `Invalid`; every other failure (refused,
/// reset, TLS) → `Connect`. The authorization header is marked sensitive and never logged; no
/// reqwest error text (which may contain the URL) is kept.
#[derive(Clone)]
pub struct HttpTransport {
    client: reqwest::Client,
    timeout: Duration,
}

impl fmt::Debug for HttpTransport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpTransport")
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl HttpTransport {
    /// A transport whose requests each end within `timeout`.
    /// Errors: the TLS backend cannot start → [`TransportError::Invalid`].
    pub fn new(timeout: Duration) -> Result<Self, TransportError> {
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .timeout(timeout)
            .connect_timeout(timeout)
            .user_agent(concat!("crewbus/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|_| TransportError::Invalid("the HTTP client cannot be built".into()))?;
        Ok(HttpTransport { client, timeout })
    }

    /// The per-request timeout.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }
}

fn headers_of(request: &PushRequest) -> Result<HeaderMap, TransportError> {
    let mut headers = HeaderMap::with_capacity(request.headers.len() + 1);
    for (name, value) in &request.headers {
        let name = HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| TransportError::Invalid(format!("header name {name:?} is invalid")))?;
        let value = HeaderValue::from_str(value)
            .map_err(|_| TransportError::Invalid(format!("header {name} has an invalid value")))?;
        headers.append(name, value);
    }
    if let Some(authorization) = &request.authorization {
        let mut value = HeaderValue::from_str(authorization.expose()).map_err(|_| {
            TransportError::Invalid("the authorization header value is invalid".into())
        })?;
        value.set_sensitive(true);
        headers.insert(AUTHORIZATION, value);
    }
    Ok(headers)
}

fn map_error(error: &reqwest::Error) -> TransportError {
    if error.is_timeout() {
        TransportError::Timeout
    } else if error.is_builder() {
        TransportError::Invalid("the request cannot be built".into())
    } else {
        TransportError::Connect
    }
}

#[async_trait]
impl PushTransport for HttpTransport {
    async fn deliver(&self, request: PushRequest) -> Result<PushResponse, TransportError> {
        let url = reqwest::Url::parse(&request.url)
            .map_err(|_| TransportError::Invalid("the URL does not parse".into()))?;
        let headers = headers_of(&request)?;
        let mut response = self
            .client
            .post(url)
            .headers(headers)
            .body(request.body)
            .send()
            .await
            .map_err(|e| map_error(&e))?;
        let status = response.status().as_u16();
        let retry_after = response
            .headers()
            .get(RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(Duration::from_secs);
        // Read a bounded part of the body so a keep-alive connection can be reused; a body that
        // fails or is longer changes nothing (the status is the answer).
        let mut read = 0usize;
        while read < DRAIN_LIMIT {
            match response.chunk().await {
                Ok(Some(chunk)) => read += chunk.len(),
                _ => break,
            }
        }
        Ok(PushResponse {
            status,
            retry_after,
        })
    }
}
