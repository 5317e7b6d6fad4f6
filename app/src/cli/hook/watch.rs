//! The hook's HTTP call: `POST {url}/v1/inbox/watch` with the agent's bearer token.
//!
//! The watch hands out nothing: it answers how many messages wait for the agent (`pending`) and
//! the ones its cursor does not record as reported (`new`, at most 20, oldest first), with the
//! cursor that records them too; it answers at once when there is news, else after `wait_ms`
//! (at most the server's `bus.max_wait_ms`). Only the fields the hook prints are read: never a
//! preview.

use std::path::Path;
use std::time::Duration;

use crewbus_domain::Secret;
use reqwest::header::{AUTHORIZATION, HeaderValue};
use serde::Deserialize;
use uuid::Uuid;

/// One message the watch reports as news (the fields the hook uses).
#[derive(Debug, Clone, Deserialize)]
pub struct NewMessage {
    /// Message id.
    pub message: Uuid,
    /// Conversation id.
    pub conversation: Uuid,
    /// The conversation's title (cleaned by the server; cleaned again before it is printed).
    #[serde(default)]
    pub conversation_title: String,
    /// Sender id.
    pub sender: Uuid,
    /// The sender's name (cleaned by the server; cleaned again before it is printed).
    #[serde(default)]
    pub sender_name: String,
    /// `agent` or `human`.
    #[serde(default)]
    pub sender_kind: String,
}

/// The watch's answer.
#[derive(Debug, Clone, Deserialize)]
pub struct WatchAnswer {
    /// How many messages wait for the agent now, reported or not.
    pub pending: u64,
    /// The news, oldest first.
    #[serde(default)]
    pub new: Vec<NewMessage>,
    /// The cursor recording everything reported so far plus `new` (opaque).
    pub cursor: String,
}

/// Why a watch gave no answer. Its `Display` is the stderr line's reason (never the token).
#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    /// 400: the request (its cursor, or a wait above the server's maximum) was refused.
    #[error("crewbus refused the watch request (HTTP 400)")]
    Invalid,
    /// 401: no agent has this token (wrong or revoked).
    #[error("crewbus refused the token (HTTP 401: wrong or revoked)")]
    Unauthenticated,
    /// 404: the server has no watch route.
    #[error("crewbus at {0} has no /v1/inbox/watch (HTTP 404: an older server, or not crewbus)")]
    NoRoute(String),
    /// Another status.
    #[error("crewbus answered HTTP {0}")]
    Status(u16),
    /// The server could not be reached, or did not answer in time.
    #[error("cannot reach crewbus at {url}: {reason}")]
    Unreachable {
        /// The base URL.
        url: String,
        /// What failed (connection refused, timed out, …).
        reason: String,
    },
    /// A 200 whose body is not a watch answer.
    #[error("crewbus answered something that is not a watch answer")]
    Answer,
}

/// The watch client of one agent on one server.
pub struct WatchClient {
    http: reqwest::Client,
    base: String,
    endpoint: String,
    authorization: HeaderValue,
}

impl WatchClient {
    /// A client of `url`. Errors (a message): `url` is not http(s), the token cannot be a
    /// header value, the HTTP client cannot be built.
    pub fn new(url: &str, token: &Secret, connect_timeout: Duration) -> Result<Self, String> {
        let base = url.trim_end_matches('/');
        // The MCP endpoint's URL names the same server.
        let base = base.strip_suffix("/mcp").unwrap_or(base);
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            return Err(format!(
                "--url must be an http:// or https:// URL, not {base:?}"
            ));
        }
        let mut authorization = HeaderValue::from_str(&format!("Bearer {}", token.expose()))
            .map_err(|_| "the token holds characters a header cannot carry".to_owned())?;
        authorization.set_sensitive(true);
        let http = reqwest::Client::builder()
            .connect_timeout(connect_timeout)
            .build()
            .map_err(|e| format!("cannot build the HTTP client: {e}"))?;
        Ok(WatchClient {
            http,
            base: base.to_owned(),
            endpoint: format!("{base}/v1/inbox/watch"),
            authorization,
        })
    }

    /// One watch: `after` the cursor, waiting up to `wait` for news; the whole call bounded by
    /// `wait + grace`. Errors: see [`WatchError`].
    pub async fn watch(
        &self,
        after: Option<&str>,
        wait: Duration,
        grace: Duration,
    ) -> Result<WatchAnswer, WatchError> {
        let wait_ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX);
        let mut body = serde_json::json!({ "wait_ms": wait_ms });
        if let Some(cursor) = after {
            body["after"] = cursor.into();
        }
        let unreachable = |e: reqwest::Error| WatchError::Unreachable {
            url: self.base.clone(),
            reason: if e.is_timeout() {
                "no answer in time".to_owned()
            } else if e.is_connect() {
                "connection refused or failed".to_owned()
            } else {
                "the connection failed".to_owned()
            },
        };
        let response = self
            .http
            .post(&self.endpoint)
            .header(AUTHORIZATION, self.authorization.clone())
            .json(&body)
            .timeout(wait + grace)
            .send()
            .await
            .map_err(unreachable)?;
        match response.status().as_u16() {
            200 => {
                let bytes = response.bytes().await.map_err(unreachable)?;
                serde_json::from_slice(&bytes).map_err(|_| WatchError::Answer)
            }
            400 => Err(WatchError::Invalid),
            401 => Err(WatchError::Unauthenticated),
            404 => Err(WatchError::NoRoute(self.base.clone())),
            other => Err(WatchError::Status(other)),
        }
    }
}

/// The token from `file` when given, else from [`super::TOKEN_ENV`], trimmed. Errors (a
/// message naming the source, never the value): neither set, an unreadable or empty file.
pub fn token(file: Option<&Path>) -> Result<Secret, String> {
    let (text, source) = match file {
        Some(path) => match std::fs::read_to_string(path) {
            Ok(text) => (text, format!("the token file {}", path.display())),
            Err(e) => {
                return Err(format!(
                    "cannot read the token file {}: {e}",
                    path.display()
                ));
            }
        },
        None => match std::env::var(super::TOKEN_ENV) {
            Ok(text) => (text, format!("${}", super::TOKEN_ENV)),
            Err(_) => {
                return Err(format!(
                    "no token: pass --token-file PATH or set ${} to the agent's bearer token",
                    super::TOKEN_ENV
                ));
            }
        },
    };
    let token = Secret::new(text.trim());
    if token.is_empty() {
        return Err(format!(
            "{source} is empty: it must hold the agent's bearer token"
        ));
    }
    Ok(token)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_comes_from_the_file_and_is_never_shown() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("t");
        std::fs::write(&file, "  cbt_secret\n").unwrap();
        assert_eq!(token(Some(&file)).unwrap().expose(), "cbt_secret");
        std::fs::write(&file, "\n").unwrap();
        let empty = token(Some(&file)).err().unwrap();
        assert!(empty.contains("empty") && !empty.contains("cbt"), "{empty}");
        assert!(token(Some(&dir.path().join("none"))).is_err());
    }

    #[test]
    fn only_http_urls_are_accepted() {
        let t = Secret::new("cbt_x");
        assert!(WatchClient::new("ftp://h", &t, Duration::from_secs(1)).is_err());
        let c = WatchClient::new("http://127.0.0.1:1/", &t, Duration::from_secs(1)).unwrap();
        assert_eq!(c.endpoint, "http://127.0.0.1:1/v1/inbox/watch");
        let c = WatchClient::new("http://h/bus/mcp", &t, Duration::from_secs(1)).unwrap();
        assert_eq!(c.endpoint, "http://h/bus/v1/inbox/watch");
        assert!(
            WatchClient::new("http://h", &Secret::new("a\nb"), Duration::from_secs(1)).is_err()
        );
    }
}
