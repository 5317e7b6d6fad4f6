//! The client of `POST /v1/inbox/watch` that `crewbus hook` and `crewbus mcp --channel` share:
//! one request ([`WatchClient::watch`]) and the rules around a series of them ([`Watcher`]).
//!
//! The watch hands out nothing: it answers how many messages wait for the agent (`pending`) and
//! those its cursor does not record as reported (`new`, at most 20, oldest first), with the
//! cursor that records them too; at once when there is news, else after the wait asked for.
//!
//! The rules, the same for both callers:
//! - **Long asks.** A request asks for up to [`MAX_WAIT`]; the server clamps it to its
//!   `bus.max_wait_ms`, which a client cannot know (a watch holds nothing, so waiting costs
//!   nothing).
//! - **A cursor is dropped only when the server refuses it**: a `400` whose error body names
//!   the field `after` (a cursor of another agent, another deployment, or damaged). That cursor
//!   is never sent again, and the watch is asked again at once without one: everything pending
//!   is news again, reported once more. Any other failure keeps the cursor.
//! - **Never a tight loop.** After a failed request the next one waits [`RETRY`] (1 s doubling
//!   to 30 s, jittered, or the server's `Retry-After` when longer); after an answer without news
//!   that came sooner than [`MIN_ROUND`] (a server with a tiny `bus.max_wait_ms`), the next one
//!   waits until [`MIN_ROUND`] after the last began.
//!
//! Errors are typed ([`WatchError`]): a caller tells a refused token or a server without the
//! route (nothing to retry) from the rest.

use std::time::Duration;

use crewbus_domain::{Backoff, Secret, Uuid};
use reqwest::header::{AUTHORIZATION, HeaderValue, RETRY_AFTER};
use serde::Deserialize;
use tokio::time::Instant;

/// The longest wait one request asks for: the servers' default `bus.max_wait_ms` (a server
/// configured lower clamps it).
pub const MAX_WAIT: Duration = Duration::from_secs(50);

/// The least time from one request's start to the next one's after an answer without news.
pub const MIN_ROUND: Duration = Duration::from_millis(250);

/// The pause after failed requests: 1 s doubling to 30 s (jittered to half of that at least).
pub const RETRY: Backoff = Backoff {
    base: Duration::from_secs(1),
    cap: Duration::from_secs(30),
    max_attempts: u32::MAX,
};

/// One message the watch reports as news. Every text here was written by an agent and cleaned
/// by the server; a caller cleans it again before a model sees it.
#[derive(Debug, Clone, Deserialize)]
pub struct News {
    /// Message id.
    pub message: Uuid,
    /// Conversation id.
    pub conversation: Uuid,
    /// The conversation's title.
    #[serde(default)]
    pub conversation_title: String,
    /// Sender id.
    pub sender: Uuid,
    /// The sender's name.
    #[serde(default)]
    pub sender_name: String,
    /// `agent` or `human`.
    #[serde(default)]
    pub sender_kind: String,
    /// The message's position in its conversation.
    #[serde(default)]
    pub seq: u64,
    /// The start of its body, at most 200 characters; empty when asked without previews.
    #[serde(default)]
    pub preview: String,
}

/// The watch's answer.
#[derive(Debug, Clone, Deserialize)]
pub struct WatchAnswer {
    /// How many messages wait for the agent now, reported or not.
    pub pending: u64,
    /// The news, oldest first.
    #[serde(default)]
    pub new: Vec<News>,
    /// The cursor recording everything reported so far plus `new` (opaque).
    pub cursor: String,
}

/// Why a watch gave no answer. Its `Display` is a stderr line's reason (never the token).
#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    /// 400 naming the field `after`: the cursor is not one of this agent on this deployment.
    #[error("crewbus refused the watch cursor (HTTP 400: not this agent's cursor)")]
    CursorRefused,
    /// Another 400: the request was refused (a server older than this client?).
    #[error("crewbus refused the watch request (HTTP 400)")]
    Refused,
    /// 401: no agent has this token (wrong or revoked).
    #[error("crewbus refused the token (HTTP 401: wrong or revoked)")]
    Unauthenticated,
    /// 404 or 405: the server has no watch route.
    #[error(
        "crewbus at {url} has no /v1/inbox/watch (HTTP {status}: an older server, or not crewbus)"
    )]
    NoRoute {
        /// The base URL.
        url: String,
        /// The status.
        status: u16,
    },
    /// Another status (`503` while the store does not answer, …).
    #[error("crewbus answered HTTP {status}")]
    Status {
        /// The status.
        status: u16,
        /// The server's `Retry-After`, when it sent one (whole seconds).
        retry_after: Option<Duration>,
    },
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

impl WatchError {
    /// Whether asking again cannot help: the token is refused, or the server has no watch.
    pub fn is_final(&self) -> bool {
        matches!(
            self,
            WatchError::Unauthenticated | WatchError::NoRoute { .. }
        )
    }

    fn retry_after(&self) -> Option<Duration> {
        match self {
            WatchError::Status { retry_after, .. } => *retry_after,
            _ => None,
        }
    }
}

/// What an error answer says, as far as the client reads it (`ErrorBody`).
#[derive(Deserialize)]
struct ErrorAnswer {
    #[serde(default)]
    code: String,
    #[serde(default)]
    field: Option<String>,
}

/// One agent's watch requests to one server.
pub struct WatchClient {
    http: reqwest::Client,
    base: String,
    endpoint: String,
    authorization: HeaderValue,
}

impl WatchClient {
    /// A client of the server at `url` (its base URL, or its MCP endpoint `…/mcp`) with the
    /// agent's `token`. Errors (a message): `url` is not http(s), the token cannot be a header
    /// value, the HTTP client cannot be built.
    pub fn new(url: &str, token: &Secret, connect_timeout: Duration) -> Result<Self, String> {
        let base = url.trim_end_matches('/');
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

    /// `…/v1/inbox/watch`.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// One request: `after` the cursor, waiting up to `wait` for news (the server clamps it),
    /// with or without `previews`; the whole call bounded by `wait + grace`. Errors: see
    /// [`WatchError`].
    pub async fn watch(
        &self,
        after: Option<&str>,
        wait: Duration,
        previews: bool,
        grace: Duration,
    ) -> Result<WatchAnswer, WatchError> {
        let wait_ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX);
        let mut body = serde_json::json!({ "wait_ms": wait_ms, "previews": previews });
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
            .timeout(wait.saturating_add(grace))
            .send()
            .await
            .map_err(unreachable)?;
        let status = response.status().as_u16();
        let retry_after = response
            .headers()
            .get(RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(Duration::from_secs);
        match status {
            200 => {
                let bytes = response.bytes().await.map_err(unreachable)?;
                serde_json::from_slice(&bytes).map_err(|_| WatchError::Answer)
            }
            400 => {
                let bytes = response.bytes().await.unwrap_or_default();
                match serde_json::from_slice::<ErrorAnswer>(&bytes) {
                    Ok(e) if e.code == "invalid" && e.field.as_deref() == Some("after") => {
                        Err(WatchError::CursorRefused)
                    }
                    _ => Err(WatchError::Refused),
                }
            }
            401 => Err(WatchError::Unauthenticated),
            404 | 405 => Err(WatchError::NoRoute {
                url: self.base.clone(),
                status,
            }),
            _ => Err(WatchError::Status {
                status,
                retry_after,
            }),
        }
    }
}

/// An answer, and whether the cursor asked with was refused and dropped to get it (the answer
/// is then after no cursor: everything pending is news).
#[derive(Debug)]
pub struct Answered {
    /// The answer.
    pub answer: WatchAnswer,
    /// The cursor passed was refused (and will never be sent again).
    pub dropped_cursor: bool,
}

/// A series of watches by one caller (see the module docs): drops a cursor the server refuses,
/// paces answers without news, backs off after failures.
pub struct Watcher {
    client: WatchClient,
    previews: bool,
    /// The cursor the server refused: never sent again.
    refused: Option<String>,
    /// Failed requests in a row.
    failures: u32,
    /// The next request starts no earlier.
    not_before: Option<Instant>,
    seed: u64,
}

impl Watcher {
    /// Watches through `client`, with or without `previews`.
    pub fn new(client: WatchClient, previews: bool) -> Self {
        Watcher {
            client,
            previews,
            refused: None,
            failures: 0,
            not_before: None,
            seed: rand::random(),
        }
    }

    /// The client.
    pub fn client(&self) -> &WatchClient {
        &self.client
    }

    /// One watch after `after` (sent unless the server refused that cursor before), waiting up
    /// to `wait`, the call bounded by `wait + grace`. It first waits out the pause the last
    /// one called for (a failure's backoff, or [`MIN_ROUND`] after an answer without news).
    /// Errors: [`WatchError`]; a refused cursor is dropped and asked again without, never
    /// returned (but when no cursor was sent).
    pub async fn watch(
        &mut self,
        after: Option<&str>,
        wait: Duration,
        grace: Duration,
    ) -> Result<Answered, WatchError> {
        if let Some(at) = self.not_before.take() {
            tokio::time::sleep_until(at).await;
        }
        let mut after = after.filter(|c| self.refused.as_deref() != Some(*c));
        let mut dropped_cursor = false;
        let started = Instant::now();
        let result = loop {
            match self.client.watch(after, wait, self.previews, grace).await {
                Err(WatchError::CursorRefused) if after.is_some() => {
                    self.refused = after.map(str::to_owned);
                    after = None;
                    dropped_cursor = true;
                }
                other => break other,
            }
        };
        match &result {
            Ok(answer) => {
                self.failures = 0;
                if answer.new.is_empty() {
                    self.not_before = Some(started + MIN_ROUND);
                }
            }
            Err(e) => {
                self.failures = self.failures.saturating_add(1);
                let pause = RETRY.delay_with_hint(self.failures, self.seed, e.retry_after());
                self.not_before = Some(Instant::now() + pause);
            }
        }
        result.map(|answer| Answered {
            answer,
            dropped_cursor,
        })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use axum::Json;
    use axum::extract::State;
    use axum::http::StatusCode;
    use axum::response::{IntoResponse, Response};
    use serde_json::{Value, json};

    use super::*;

    /// What the fake watch answers, and the requests it saw (the body and when).
    #[derive(Default)]
    struct Fake {
        answers: Mutex<Vec<(u16, Value)>>,
        seen: Mutex<Vec<(Value, Instant)>>,
    }

    async fn fake_watch(State(fake): State<Arc<Fake>>, Json(body): Json<Value>) -> Response {
        fake.seen.lock().unwrap().push((body, Instant::now()));
        let mut answers = fake.answers.lock().unwrap();
        let (status, answer) = if answers.len() > 1 {
            answers.remove(0)
        } else {
            answers[0].clone()
        };
        let mut response = (StatusCode::from_u16(status).unwrap(), Json(answer)).into_response();
        if status == 503 {
            response
                .headers_mut()
                .insert(RETRY_AFTER, HeaderValue::from_static("1"));
        }
        response
    }

    /// A loopback server whose watch answers `answers` in turn (the last one from then on).
    async fn serve(answers: Vec<(u16, Value)>) -> (Watcher, Arc<Fake>) {
        let fake = Arc::new(Fake {
            answers: Mutex::new(answers),
            ..Fake::default()
        });
        let app = axum::Router::new()
            .route("/v1/inbox/watch", axum::routing::post(fake_watch))
            .with_state(fake.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        let client = WatchClient::new(&url, &Secret::new("cbt_x"), Duration::from_secs(1)).unwrap();
        (Watcher::new(client, false), fake)
    }

    fn answer(cursor: &str, news: usize) -> (u16, Value) {
        let new: Vec<Value> = (0..news)
            .map(|_| {
                json!({"message": Uuid::new_v4(), "conversation": Uuid::new_v4(),
                             "sender": Uuid::new_v4(), "seq": 1, "preview": ""})
            })
            .collect();
        (200, json!({"pending": news, "new": new, "cursor": cursor}))
    }

    const GRACE: Duration = Duration::from_secs(5);

    #[test]
    fn only_http_urls_are_accepted_and_the_mcp_endpoint_names_the_server() {
        let t = Secret::new("cbt_x");
        assert!(WatchClient::new("ftp://h", &t, Duration::from_secs(1)).is_err());
        let c = WatchClient::new("http://127.0.0.1:1/", &t, Duration::from_secs(1)).unwrap();
        assert_eq!(c.endpoint(), "http://127.0.0.1:1/v1/inbox/watch");
        let c = WatchClient::new("http://h/bus/mcp", &t, Duration::from_secs(1)).unwrap();
        assert_eq!(c.endpoint(), "http://h/bus/v1/inbox/watch");
        assert!(
            WatchClient::new("http://h", &Secret::new("a\nb"), Duration::from_secs(1)).is_err()
        );
    }

    #[tokio::test]
    async fn statuses_become_typed_errors_and_only_a_400_naming_after_is_a_refused_cursor() {
        let cases = [
            (
                (
                    400,
                    json!({"code": "invalid", "message": "m", "field": "after"}),
                ),
                "cursor",
            ),
            ((400, json!({"code": "invalid", "message": "m"})), "refused"),
            (
                (
                    400,
                    json!({"code": "invalid", "message": "m", "field": "wait_ms"}),
                ),
                "refused",
            ),
            ((401, json!({"code": "unauthenticated"})), "token"),
            ((404, json!({})), "route"),
            ((503, json!({"code": "unavailable"})), "status"),
            ((200, json!({"nope": 1})), "answer"),
        ];
        for ((status, body), want) in cases {
            let (watcher, _) = serve(vec![(status, body.clone())]).await;
            let got = watcher
                .client()
                .watch(Some("c"), Duration::ZERO, false, GRACE)
                .await
                .unwrap_err();
            let kind = match &got {
                WatchError::CursorRefused => "cursor",
                WatchError::Refused => "refused",
                WatchError::Unauthenticated => "token",
                WatchError::NoRoute { .. } => "route",
                WatchError::Status {
                    status: 503,
                    retry_after: Some(d),
                } if *d == Duration::from_secs(1) => "status",
                WatchError::Answer => "answer",
                other => panic!("{status} {body}: {other:?}"),
            };
            assert_eq!(kind, want, "{status} {body}");
            assert_eq!(got.is_final(), matches!(want, "token" | "route"), "{got:?}");
        }
    }

    #[tokio::test]
    async fn a_refused_cursor_is_dropped_once_and_never_sent_again() {
        let refused = (
            400,
            json!({"code": "invalid", "message": "m", "field": "after"}),
        );
        let (mut watcher, fake) = serve(vec![refused, answer("c1", 1), answer("c2", 0)]).await;
        let first = watcher
            .watch(Some("bad"), Duration::ZERO, GRACE)
            .await
            .unwrap();
        assert!(first.dropped_cursor);
        assert_eq!(
            (first.answer.cursor.as_str(), first.answer.new.len()),
            ("c1", 1)
        );
        // The refused cursor again (a caller's stale record): not sent; another one is.
        let again = watcher
            .watch(Some("bad"), Duration::ZERO, GRACE)
            .await
            .unwrap();
        assert!(!again.dropped_cursor);
        watcher
            .watch(Some("c1"), Duration::ZERO, GRACE)
            .await
            .unwrap();
        let afters: Vec<Value> = fake
            .seen
            .lock()
            .unwrap()
            .iter()
            .map(|(b, _)| b["after"].clone())
            .collect();
        assert_eq!(
            afters,
            [json!("bad"), Value::Null, Value::Null, json!("c1")]
        );
        let (body, _) = &fake.seen.lock().unwrap()[0];
        assert_eq!(body["previews"], false);
    }

    #[tokio::test]
    async fn a_failing_server_is_asked_again_only_after_a_growing_pause() {
        let (mut watcher, fake) = serve(vec![(503, json!({"code": "unavailable"}))]).await;
        for _ in 0..3 {
            let e = watcher
                .watch(Some("c"), Duration::ZERO, GRACE)
                .await
                .unwrap_err();
            assert!(matches!(e, WatchError::Status { status: 503, .. }), "{e:?}");
        }
        let seen: Vec<Instant> = fake.seen.lock().unwrap().iter().map(|(_, t)| *t).collect();
        assert_eq!(seen.len(), 3);
        // After the first failure at least Retry-After (1 s); after the second at least the
        // backoff's half (1 s of 2 s), or Retry-After.
        for pair in seen.windows(2) {
            let gap = pair[1] - pair[0];
            assert!(gap >= Duration::from_millis(990), "{gap:?}");
        }
        // The cursor is kept through failures.
        assert!(
            fake.seen
                .lock()
                .unwrap()
                .iter()
                .all(|(b, _)| b["after"] == "c")
        );
    }

    #[tokio::test]
    async fn answers_without_news_are_paced() {
        let (mut watcher, fake) = serve(vec![answer("c", 0)]).await;
        for _ in 0..4 {
            watcher
                .watch(Some("c"), Duration::ZERO, GRACE)
                .await
                .unwrap();
        }
        let seen: Vec<Instant> = fake.seen.lock().unwrap().iter().map(|(_, t)| *t).collect();
        for pair in seen.windows(2) {
            assert!(pair[1] - pair[0] >= MIN_ROUND - Duration::from_millis(5));
        }
    }
}
