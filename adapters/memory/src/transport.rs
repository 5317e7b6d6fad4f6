//! `RecordingTransport`: a push transport for tests that records requests and answers from a
//! script.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;
use crewbus_domain::{PushRequest, PushResponse, TransportError};
use crewbus_ports::PushTransport;

type Answer = Result<PushResponse, TransportError>;

#[derive(Default)]
struct State {
    requests: Vec<PushRequest>,
    scripts: HashMap<String, VecDeque<Answer>>,
}

/// A [`PushTransport`] that records every request and answers each URL from a script of answers
/// (then 200 once the script is used up). Clones share state.
#[derive(Clone, Default)]
pub struct RecordingTransport {
    state: Arc<Mutex<State>>,
}

impl RecordingTransport {
    /// A transport that answers 200 to everything.
    pub fn new() -> Self {
        Self::default()
    }

    /// Queues `answers` for requests to `url`, in order.
    pub fn script(&self, url: &str, answers: impl IntoIterator<Item = Answer>) {
        self.lock()
            .scripts
            .entry(url.to_owned())
            .or_default()
            .extend(answers);
    }

    /// Every request delivered so far, in order.
    pub fn requests(&self) -> Vec<PushRequest> {
        self.lock().requests.clone()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl std::fmt::Debug for RecordingTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RecordingTransport")
    }
}

#[async_trait]
impl PushTransport for RecordingTransport {
    async fn deliver(&self, request: PushRequest) -> Result<PushResponse, TransportError> {
        let mut state = self.lock();
        let answer = state
            .scripts
            .get_mut(&request.url)
            .and_then(VecDeque::pop_front)
            .unwrap_or(Ok(PushResponse {
                status: 200,
                retry_after: None,
            }));
        state.requests.push(request);
        answer
    }
}
