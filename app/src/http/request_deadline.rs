//! The request deadline (`bus.request_timeout_ms`) around every route of the API (agents',
//! operators', `/metrics`; not `/health`, which has its own bound and says what is down): a request is answered within it, counted from the moment
//! its body has been read (or, without a body, from its head), whatever the stores do — a
//! handler still running then is dropped and the answer is `503 timeout`
//! ([`Bus::within_deadline`], which says why dropping is safe). `POST /v1/inbox/fetch` gets
//! `bus.max_wait_ms` (at least 1 s) more; its use case bounds it exactly (its own `wait_ms`).
//!
//! Why the clock starts at the body's end: reading the body has its own deadline
//! (`bus.request_body_timeout_ms`, [`super::body_deadline`]), longer by default, and a slow
//! upload is a client's matter, answered `400`, not a store's. A handler that answers without
//! reading its body starts the clock when it drops the body. Authentication, which runs before
//! the body is read, is bounded by the same deadline in its use case
//! ([`Bus::authenticate`], [`Bus::authenticate_operator`]).
//!
//! Only the handler is bounded: an answer that streams (a fetch's held answer) streams on after
//! the handler returned it.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http_body::{Body as _, Frame, SizeHint};
use tokio::sync::oneshot;

use super::error::ApiError;
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
    let answer = next.run(Request::from_parts(parts, Body::new(watched)));
    let mut answer: Pin<Box<dyn Future<Output = Response> + Send>> = Box::pin(answer);
    tokio::select! {
        response = &mut answer => return response,
        // Sent or dropped: either way the body is no longer being read.
        _ = body_read => {}
    }
    match deadline
        .bus
        .within_deadline(deadline.extra, async { Ok(answer.await) })
        .await
    {
        Ok(response) => response,
        Err(error) => ApiError(error).into_response(),
    }
}
