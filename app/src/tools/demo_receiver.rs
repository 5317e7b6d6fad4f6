//! The demo's webhook receiver: a tiny axum server on 127.0.0.1:0, in-process, that records the
//! CloudEvents the push outbox POSTs to it and checks each Standard Webhooks signature with the
//! demo's signing key. Answers 200 to every POST.

use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use crewbus_domain::{BusError, BusResult};
use tokio::task::JoinHandle;

use crate::push::{Signer, WEBHOOK_ID, WEBHOOK_SIGNATURE, WEBHOOK_TIMESTAMP};

/// One event the receiver got.
#[derive(Debug, Clone)]
pub(crate) struct Received {
    /// The CloudEvents `type` without the `dev.crewbus.run.` prefix (`run_admitted`, …).
    pub(crate) kind: String,
    /// The CloudEvents `source` (`/crewbus/<tenant>/runs/<run>`).
    pub(crate) source: String,
    /// The journal seq (the CloudEvents `subject`).
    pub(crate) seq: u64,
    /// Whether `webhook-signature` matched the demo key.
    pub(crate) signature_ok: bool,
}

struct ReceiverState {
    signer: Signer,
    received: Mutex<Vec<Received>>,
}

/// The running receiver.
pub(crate) struct DemoReceiver {
    pub(crate) url: String,
    state: Arc<ReceiverState>,
    task: JoinHandle<()>,
}

async fn handle(
    State(state): State<Arc<ReceiverState>>,
    headers: HeaderMap,
    body: Bytes,
) -> StatusCode {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let signature_ok = match (
        header(WEBHOOK_ID),
        header(WEBHOOK_TIMESTAMP).and_then(|t| t.parse::<i64>().ok()),
        header(WEBHOOK_SIGNATURE),
    ) {
        (Some(id), Some(ts), Some(sig)) => {
            let expected = state.signer.sign(&id, ts, &body);
            sig.split(' ').any(|s| expected.split(' ').any(|e| e == s))
        }
        _ => false,
    };
    let Ok(event) = serde_json::from_slice::<serde_json::Value>(&body) else {
        return StatusCode::BAD_REQUEST;
    };
    let kind = event["type"]
        .as_str()
        .unwrap_or("?")
        .trim_start_matches("dev.crewbus.run.")
        .to_owned();
    let received = Received {
        kind,
        source: event["source"].as_str().unwrap_or("").to_owned(),
        seq: event["subject"]
            .as_str()
            .and_then(|s| s.parse().ok())
            .unwrap_or(0),
        signature_ok,
    };
    state.received.lock().expect("receiver lock").push(received);
    StatusCode::OK
}

impl DemoReceiver {
    /// Binds 127.0.0.1:0 and serves until dropped. Errors: cannot bind → `Unavailable`.
    pub(crate) async fn start(signer: Signer) -> BusResult<DemoReceiver> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(|e| BusError::unavailable_from("demo receiver", e))?;
        let addr = listener
            .local_addr()
            .map_err(|e| BusError::unavailable_from("demo receiver", e))?;
        let state = Arc::new(ReceiverState {
            signer,
            received: Mutex::new(Vec::new()),
        });
        let app = Router::new()
            .fallback(handle)
            .with_state(Arc::clone(&state));
        let task = tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, app).await {
                tracing::warn!(error = %e, "demo receiver stopped");
            }
        });
        Ok(DemoReceiver {
            url: format!("http://{addr}/events"),
            state,
            task,
        })
    }

    /// Everything received so far, in arrival order.
    pub(crate) fn received(&self) -> Vec<Received> {
        self.state.received.lock().expect("receiver lock").clone()
    }
}

impl Drop for DemoReceiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}
