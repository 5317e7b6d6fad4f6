//! The load generator's one retry rule: [`transient`] says what is worth retrying and [`retry`]
//! retries it with a growing pause until a deadline.

use std::future::Future;
use std::time::{Duration, Instant};

use crewbus::client::ApiFailure;
use serde_json::Value;

/// `true` for what is worth retrying: no answer (status 0), 408, 429, and 5xx but 501, 505 and
/// 507 (those answer the same however often they are asked).
pub fn transient(f: &ApiFailure) -> bool {
    matches!(f.status, 0 | 408 | 429 | 500 | 502 | 503 | 504)
}

/// The first pause of [`retry`]; it doubles after each retry up to [`RETRY_PAUSE_MAX`].
pub const RETRY_PAUSE_FIRST: Duration = Duration::from_millis(20);

/// The longest pause of [`retry`].
pub const RETRY_PAUSE_MAX: Duration = Duration::from_millis(500);

/// The one retry rule: calls `call` until it answers `Ok`, answers a failure that is not
/// [`transient`], or `until` has passed; between tries it calls `on_retry` with the failure and
/// pauses [`RETRY_PAUSE_FIRST`], doubling up to [`RETRY_PAUSE_MAX`]. Returns the last answer.
/// Retrying is safe for the API's requests the load generator makes: sends carry a `request_id` and confirm
/// is idempotent.
pub async fn retry<F, Fut>(
    until: Instant,
    mut on_retry: impl FnMut(&ApiFailure),
    mut call: F,
) -> Result<Value, ApiFailure>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Value, ApiFailure>>,
{
    let mut pause = RETRY_PAUSE_FIRST;
    loop {
        match call().await {
            Err(f) if transient(&f) && Instant::now() < until => {
                on_retry(&f);
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(RETRY_PAUSE_MAX);
            }
            other => return other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_unanswered_throttled_and_server_errors_are_retried() {
        let f = |status| ApiFailure {
            status,
            code: String::new(),
            message: String::new(),
        };
        for s in [0, 408, 429, 500, 502, 503, 504] {
            assert!(transient(&f(s)), "{s}");
        }
        for s in [400, 401, 403, 404, 409, 413, 507] {
            assert!(!transient(&f(s)), "{s}");
        }
    }
}
