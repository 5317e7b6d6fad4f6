//! What the relay hands a body backend.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// One message body on its way to a body backend.
///
/// `publish_key` is created once per message, when the ledger enqueues it, and reused by every
/// retry and reconcile: it is what makes a publish idempotent for the life of the body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Envelope {
    /// The message this body belongs to (the ledger's id).
    pub message_id: Uuid,
    /// The conversation the message was sent in. An adapter may use it to place the body (a
    /// subject); it never decides access.
    pub conversation_id: Uuid,
    /// The team that owns the conversation; a backend refuses another team's envelope.
    pub team_id: Uuid,
    /// The body, UTF-8 text, at most the backend's effective maximum in bytes
    /// ([`Envelope::body_len`]). Stored and read back byte for byte.
    pub body: String,
    /// Idempotency key of this body, stable across retries and reconciles, and never shared by
    /// two messages (a key held by another message is [`crate::BusError::Conflict`]).
    pub publish_key: Uuid,
}

impl Envelope {
    /// Size of the body in bytes, UTF-8 encoded (what body limits and
    /// [`crate::BusError::TooLarge`] are measured in; no headers or framing).
    pub fn body_len(&self) -> u64 {
        self.body.len() as u64
    }
}
