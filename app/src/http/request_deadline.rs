//! The request deadline (`bus.request_timeout_ms`) around every route of the API (agents',
//! operators', `/metrics`; not `/health`, which has its own bound and says what is down): a request is answered within it, counted from the moment
//! its body has been read (or, without a body, from its head), whatever the stores do — a
//! handler still running then is answered `503 timeout` and runs on in its own task to its end
//! ([`Bus::finish_within_deadline`]). `POST /v1/inbox/fetch` gets
//! `bus.max_wait_ms` (at least 1 s) more; its use case bounds it exactly (its own `wait_ms`).
//!
//! Why the clock starts at the body's end: reading the body has its own deadline
//! (`bus.request_body_timeout_ms`, [`super::body_deadline`]), longer by default, and a slow
//! upload is a client's matter, answered `400`, not a store's. A handler that answers without
//! reading its body starts the clock when it drops the body. Authentication, which runs before
//! the body is read, has a deadline of the same length of its own in its use case
//! ([`Bus::authenticate`], [`Bus::authenticate_operator`]): a request with a body whose token
//! lookup and handler both stall is answered after at most twice the deadline.
//!
//! Not bounded: the console (`/console`, its own HTML pages; a page waits for its store), `/mcp`
//! itself (each tool call is bounded in `crate::mcp::tools::call`), `/health` (its own
//! `bus.health_timeout_ms`).
//!
//! Only the handler is bounded: an answer that streams (a fetch's held answer) streams on after
//! the handler returned it.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use crewbus_domain::BusError;
use http_body::{Body as _, Frame, SizeHint};
use tokio::sync::oneshot;

use crate::edge::error::ApiError;
use crate::usecases::bus::Bus;

/// The deadline of a group of routes: `bus.request_timeout_ms` plus `extra`.
#[derive(Clone)]
pub(crate) struct Deadline {
    /// The bus whose settings and metrics the deadline uses.
    pub(crate) bus: Bus,
    /// Added to `bus.request_timeout_ms` (a fetch's longest wait).
    pub(crate) extra: Duration,
}

/// A request body that reports when it has been read to its end, failed, or was dropped.
struct Watched {
    inner: Body,
    done: Option<oneshot::Sender<()>>,
}

impl Watched {
    fn finish(&mut self) {
        if let Some(done) = self.done.take() {
            let _ = done.send(());
        }
    }
}

impl Drop for Watched {
    fn drop(&mut self) {
        self.finish();
    }
}

impl http_body::Body for Watched {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_frame(cx);
        match &polled {
            Poll::Ready(None) | Poll::Ready(Some(Err(_))) => this.finish(),
            Poll::Ready(Some(Ok(_))) if this.inner.is_end_stream() => this.finish(),
            _ => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// Runs the rest of the stack for `req`, answering `503 timeout` when the handler has not
/// answered within the deadline counted from the end of the request's body.
pub(crate) async fn enforce(
    State(deadline): State<Deadline>,
    req: Request,
    next: Next,
) -> Response {
    let (parts, body) = req.into_parts();
    let (done, body_read) = oneshot::channel();
    let mut watched = Watched {
        inner: body,
        done: Some(done),
    };
    if watched.inner.is_end_stream() {
        watched.finish();
    }
    // The handler runs in a task of its own: when the deadline passes, the client is answered
    // and the handler runs on to its end (see `Bus::finish_within_deadline`).
    let mut answer = tokio::spawn(next.run(Request::from_parts(parts, Body::new(watched))));
    let ended = |joined: Result<Response, tokio::task::JoinError>| match joined {
        Ok(response) => response,
        Err(_) => {
            ApiError(BusError::unavailable("the request ended without an answer")).into_response()
        }
    };
    tokio::select! {
        joined = &mut answer => return ended(joined),
        // Sent or dropped: either way the body is no longer being read.
        _ = body_read => {}
    }
    let bound = deadline
        .bus
        .settings()
        .request_timeout
        .saturating_add(deadline.extra);
    match tokio::time::timeout(bound, answer).await {
        Ok(joined) => ended(joined),
        // The join handle is dropped: the handler's task runs on.
        Err(_) => ApiError(deadline.bus.timed_out(bound)).into_response(),
    }
}
