//! Shared pieces of the push tests: a real HTTP receiver on 127.0.0.1:0, journals, outboxes.
#![allow(dead_code)]

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};
use crewbus::push::{Destination, HttpTransport};
use crewbus_domain::{PushAuthentication, RunId, Secret, TenantId, Uuid};
use crewbus_memory::{ManualClock, MemoryJournal, MemoryLedger};
use crewbus_ports::Journal;

/// Signing secrets (Standard Webhooks form) used across the tests.
pub const KEY_OLD: &str = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD";
pub const KEY_NEW: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
/// The bearer credential receivers at `/auth/...` require.
pub const TOKEN: &str = "tok-very-secret-4711";

/// One request the receiver got.
#[derive(Debug, Clone)]
pub struct Hit {
    pub method: Method,
    pub path: String,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Hit {
    pub fn header(&self, name: &str) -> Option<String> {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    }
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).expect("the body is JSON")
    }
}

#[derive(Default)]
struct ReceiverState {
    hits: Vec<Hit>,
    /// path → scripted answers (status, Retry-After seconds); 200 once used up.
    scripts: HashMap<String, VecDeque<(u16, Option<u64>)>>,
    /// How long a `/slow/` request takes: the clock the sender reads is moved by this much
    /// before the answer (a receiver that is slow on the sender's clock, without a real wait).
    slow: Option<(ManualClock, Duration)>,
}

/// A real HTTP server on 127.0.0.1:0. Paths:
/// - `/ok/<any>`: 200, or the scripted answers for that path first;
/// - `/redirect`: 302 to `/page`; `/page`: 200 (a redirect that is followed shows up as a hit
///   on `/page`);
/// - `/hang/<any>`: never answers;
/// - `/slow/<any>`: like `/ok/`, but first moves the clock given to [`Receiver::slow`] forward;
/// - `/auth/<any>`: 200 with `Authorization: Bearer <TOKEN>`, else 401.
#[derive(Clone)]
pub struct Receiver {
    pub base: String,
    state: Arc<Mutex<ReceiverState>>,
}

async fn handle(
    State(state): State<Arc<Mutex<ReceiverState>>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let path = uri.path().to_owned();
    let scripted = {
        let mut st = state.lock().unwrap();
        st.hits.push(Hit {
            method,
            path: path.clone(),
            headers: headers.clone(),
            body,
        });
        st.scripts.get_mut(&path).and_then(VecDeque::pop_front)
    };
    if path.starts_with("/hang/") {
        std::future::pending::<()>().await;
    }
    if path.starts_with("/slow/") {
        let slow = state.lock().unwrap().slow.clone();
        if let Some((clock, by)) = slow {
            clock.advance(by);
        }
    }
    if path == "/redirect" {
        return (StatusCode::FOUND, [(header::LOCATION, "/page")]).into_response();
    }
    if path.starts_with("/auth/") {
        let expected = format!("Bearer {TOKEN}");
        let ok = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            == Some(expected.as_str());
        if !ok {
            return StatusCode::UNAUTHORIZED.into_response();
        }
    }
    match scripted {
        Some((status, retry_after)) => {
            let mut response = StatusCode::from_u16(status).unwrap().into_response();
            if let Some(secs) = retry_after {
                response
                    .headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from(secs));
            }
            response
        }
        None => StatusCode::OK.into_response(),
    }
}

impl Receiver {
    pub async fn start() -> Receiver {
        let state = Arc::new(Mutex::new(ReceiverState::default()));
        let app = Router::new()
            .fallback(handle)
            .with_state(Arc::clone(&state));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Receiver { base, state }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    pub fn script(&self, path: &str, answers: impl IntoIterator<Item = (u16, Option<u64>)>) {
        self.state
            .lock()
            .unwrap()
            .scripts
            .entry(path.to_owned())
            .or_default()
            .extend(answers);
    }

    /// Makes every `/slow/` request take `by` on `clock` (moved before the answer is sent).
    pub fn slow(&self, clock: &ManualClock, by: Duration) {
        self.state.lock().unwrap().slow = Some((clock.clone(), by));
    }

    pub fn hits(&self, path: &str) -> Vec<Hit> {
        self.state
            .lock()
            .unwrap()
            .hits
            .iter()
            .filter(|h| h.path == path)
            .cloned()
            .collect()
    }

    pub fn all_hits(&self) -> Vec<Hit> {
        self.state.lock().unwrap().hits.clone()
    }
}

pub fn tenant(name: &str) -> TenantId {
    TenantId::new(name).unwrap()
}

pub fn journal(tenant: &TenantId) -> MemoryJournal {
    MemoryLedger::new(tenant.clone()).journal()
}

pub fn transport(timeout: Duration) -> Arc<HttpTransport> {
    Arc::new(HttpTransport::new(timeout).unwrap())
}

pub fn destination(name: &str, url: &str) -> Destination {
    Destination {
        name: name.into(),
        url: url.into(),
        authentication: None,
        signing_keys: vec![Secret::new(KEY_OLD)],
    }
}

pub fn with_token(mut d: Destination) -> Destination {
    d.authentication = Some(PushAuthentication {
        scheme: "Bearer".into(),
        credentials: Secret::new(TOKEN),
    });
    d
}

/// Admits a run and appends `notes` notes: records 1 (admitted) to `1 + notes`.
pub async fn run_with_notes(journal: &dyn Journal, notes: usize, at: DateTime<Utc>) -> RunId {
    let run = journal
        .admit(Uuid::new_v4(), Uuid::new_v4(), at)
        .await
        .unwrap();
    for i in 0..notes {
        journal.note(run, &format!("note {i}"), at).await.unwrap();
    }
    run
}

/// Polls `check` until it holds or `deadline` passes (then panics with `what`).
pub async fn eventually(what: &str, deadline: Duration, mut check: impl FnMut() -> bool) {
    let end = tokio::time::Instant::now() + deadline;
    while !check() {
        assert!(
            tokio::time::Instant::now() < end,
            "timed out waiting for: {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
