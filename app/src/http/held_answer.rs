//! A JSON answer that keeps the room its message bodies hold
//! ([`HeldBodies`], `bus.max_body_bytes_in_flight`) until the connection has taken its last
//! byte, so the room bounds the bodies in memory for as long as the server holds them — also
//! when a client reads its answer slowly. The room counts each body at its size as a JSON
//! string in this answer (escapes included: a control character is six bytes here), which is
//! what the buffer holds, not at its UTF-8 length.
//!
//! The answer is serialised once into one buffer sized for it (no reallocation while writing),
//! the deliveries' strings are freed, and the buffer is handed to the connection in
//! [`CHUNK`]-byte frames; the room goes back when the last frame is taken (or the connection is
//! dropped).

use std::pin::Pin;
use std::task::{Context, Poll};

use axum::body::{Body, Bytes};
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use http_body::{Frame, SizeHint};
use serde::Serialize;

use crate::usecases::body_room::HeldBodies;

/// Bytes per frame handed to the connection.
pub(crate) const CHUNK: usize = 64 * 1024;

/// Bytes reserved for an answer's JSON beyond its bodies, per delivery (ids, the message's
/// fields, field names): a guess that only sizes the buffer.
const PER_ITEM: usize = 1024;

/// The body of a held answer: `bytes` in [`CHUNK`]-byte frames, then the room released.
struct HeldBody {
    bytes: Bytes,
    held: Option<HeldBodies>,
}

impl http_body::Body for HeldBody {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = self.get_mut();
        if this.bytes.is_empty() {
            this.held = None;
            return Poll::Ready(None);
        }
        let frame = this.bytes.split_to(CHUNK.min(this.bytes.len()));
        if this.bytes.is_empty() {
            // The last frame: the connection holds what is left of the answer.
            this.held = None;
        }
        Poll::Ready(Some(Ok(Frame::data(frame))))
    }

    fn is_end_stream(&self) -> bool {
        self.bytes.is_empty()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.bytes.len() as u64)
    }
}

/// `200` with `view` as JSON (`Content-Length` set), holding `held` until the last frame is
/// taken. `bodies` (bytes, the bodies' sum as JSON: [`HeldBodies::bytes`]) and `items` size
/// the buffer.
pub(crate) fn json<T: Serialize>(
    view: T,
    bodies: usize,
    items: usize,
    held: HeldBodies,
) -> Response {
    let mut out = Vec::with_capacity(bodies.saturating_add(items.saturating_mul(PER_ITEM)));
    if let Err(error) = serde_json::to_writer(&mut out, &view) {
        // Serialising plain views into memory does not fail; if it did, nothing of it is sent.
        tracing::error!(error = %error, "serialising an answer failed");
        return crate::edge::error::ApiError(crewbus_domain::BusError::unavailable(
            "the answer could not be written",
        ))
        .into_response();
    }
    drop(view);
    let mut response = Response::new(Body::new(HeldBody {
        bytes: Bytes::from(out),
        held: Some(held),
    }));
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

#[cfg(test)]
mod tests {
    use futures_util::StreamExt;
    use http_body::Body as _;
    use prometheus_client::metrics::gauge::Gauge;
    use tokio::time::Instant;

    use super::*;
    use crate::metrics::Metrics;
    use crate::shutdown::Shutdown;
    use crate::usecases::body_room::BodyRoom;

    #[tokio::test]
    async fn the_room_is_held_until_the_last_frame_is_taken() {
        let gauge = Gauge::default();
        let room = BodyRoom::new(1 << 20, gauge.clone());
        let mut held = HeldBodies::default();
        let body = "x".repeat(3 * CHUNK);
        let kept = room
            .reserve(
                &mut held,
                &[body.len() as u64],
                Instant::now(),
                &Shutdown::new(),
                &Metrics::default(),
            )
            .await;
        assert_eq!(kept, 1);
        let response = json(serde_json::json!({ "body": body }), 3 * CHUNK, 1, held);
        assert_eq!(response.headers()[header::CONTENT_TYPE], "application/json");
        let body = response.into_body();
        let exact = body.size_hint().exact().unwrap();
        let mut frames = body.into_data_stream();
        let mut taken = 0;
        while let Some(data) = frames.next().await {
            let data = data.unwrap();
            assert!(data.len() <= CHUNK);
            taken += data.len() as u64;
            if taken < exact {
                assert_eq!(gauge.get(), 3 * CHUNK as i64, "released before the end");
            }
        }
        assert_eq!(taken, exact);
        assert_eq!(gauge.get(), 0);
        assert_eq!(room.free(), 1 << 20);
    }
}
