//! The push transport port: deliver one request.

use async_trait::async_trait;
use crewbus_domain::{PushRequest, PushResponse, TransportError};

/// Sends one push request and reports the receiver's answer.
///
/// Follows no redirect (a 3xx is returned as the answer, which is not an acknowledgement), uses
/// no proxy, and bounds each request by a timeout. `Ok` carries any HTTP status; only a 2xx
/// acknowledges. Errors: no answer in time → [`TransportError::Timeout`]; connection refused or
/// broken → `Connect`; a request that cannot be sent → `Invalid`. Never logs the authorization.
#[cfg_attr(feature = "mock", mockall::automock)]
#[async_trait]
pub trait PushTransport: Send + Sync {
    /// POSTs `request.body` to `request.url` with its headers and authorization.
    async fn deliver(&self, request: PushRequest) -> Result<PushResponse, TransportError>;
}
