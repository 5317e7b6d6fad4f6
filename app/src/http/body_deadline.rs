//! The request body deadline (`bus.request_body_timeout_ms`): a request's whole body must arrive
//! within it, counted from the moment the request head was read. A body still arriving then,
//! however steadily it trickles, is cut: the handler's read fails, and the answer is replaced by
//! `400 invalid` (JSON `{code, message}`) with `Connection: close`.
//!
//! Only reading the body is bounded: a handler that has its body runs as long as it needs (a
//! waiting fetch), and a streamed answer (MCP's SSE) streams on. The same wrapper tells whether a
//! handler answered before reading its body to the end; such an answer carries
//! `Connection: close`, because hyper closes a connection whose request body was not drained, and
//! a client must not send its next request on it.
//!
//! Why `400 invalid` rather than `408`: the API's error codes and every operation's documented
//! statuses already cover a body that could not be read with `400 invalid`, so clients and the
//! OpenAPI document need nothing new; the message names the deadline and its key.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderValue, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use crewbus_domain::BusError;
use http_body::{Frame, SizeHint};
use tokio::time::{Instant, Sleep};

use crate::edge::error::ApiError;

/// The body is still being read (or was never read to its end).
const READING: u8 = 0;
/// The body was read to its end (or had none).
const FINISHED: u8 = 1;
/// The deadline passed while the body was still arriving.
const CUT: u8 = 2;

/// The error a cut body's read fails with (the handler's rejection is replaced anyway).
#[derive(Debug, thiserror::Error)]
#[error("the request body did not arrive within its deadline")]
struct DeadlinePassed;

/// A request body that fails once `deadline` has passed before its end, and records how it
/// ended in `state`.
struct DeadlineBody {
    inner: Body,
    deadline: Instant,
    sleep: Pin<Box<Sleep>>,
    state: Arc<AtomicU8>,
}

impl DeadlineBody {
    fn cut(&self) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        self.state.store(CUT, Ordering::Release);
        Poll::Ready(Some(Err(axum::Error::new(DeadlinePassed))))
    }
}

impl http_body::Body for DeadlineBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let this = &mut *self;
        match this.state.load(Ordering::Acquire) {
            CUT => return this.cut(),
            FINISHED => return Poll::Ready(None),
            _ => {}
        }
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(None) => {
                this.state.store(FINISHED, Ordering::Release);
                Poll::Ready(None)
            }
            Poll::Ready(Some(Ok(frame))) => {
                if this.inner.is_end_stream() {
                    // The last frame: the body arrived, even if it is read after the deadline.
                    this.state.store(FINISHED, Ordering::Release);
                    Poll::Ready(Some(Ok(frame)))
                } else if Instant::now() >= this.deadline {
                    this.cut()
                } else {
                    Poll::Ready(Some(Ok(frame)))
                }
            }
            Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(e))),
            Poll::Pending => match this.sleep.as_mut().poll(cx) {
                Poll::Ready(()) => this.cut(),
                Poll::Pending => Poll::Pending,
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        self.state.load(Ordering::Acquire) == FINISHED || self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// Middleware (outermost, so the clock starts when the request head has been read): wraps the
/// body in the deadline `limit`; answers a cut body with `400 invalid` and `Connection: close`,
/// and adds `Connection: close` to any answer given before the body was read to its end.
pub(crate) async fn enforce(State(limit): State<Duration>, req: Request, next: Next) -> Response {
    let deadline = Instant::now() + limit;
    let (parts, body) = req.into_parts();
    let state = Arc::new(AtomicU8::new(if http_body::Body::is_end_stream(&body) {
        FINISHED
    } else {
        READING
    }));
    let body = Body::new(DeadlineBody {
        inner: body,
        deadline,
        sleep: Box::pin(tokio::time::sleep_until(deadline)),
        state: state.clone(),
    });
    let mut response = next.run(Request::from_parts(parts, body)).await;
    match state.load(Ordering::Acquire) {
        FINISHED => {}
        CUT => {
            response = ApiError(BusError::invalid(format!(
                "the request body did not arrive within {} ms of its headers \
                 (bus.request_body_timeout_ms)",
                limit.as_millis()
            )))
            .into_response();
            close(&mut response);
        }
        _ => close(&mut response),
    }
    response
}

/// Marks `response` as the connection's last: hyper closes the connection after it.
fn close(response: &mut Response) {
    response
        .headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
}
