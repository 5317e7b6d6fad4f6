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
    /// The conversation the message was sent in.
    pub conversation_id: Uuid,
    /// The team that owns the conversation; a backend refuses another team's envelope.
    pub team_id: Uuid,
    /// The body, UTF-8 text, at most the backend's effective maximum in bytes.
    pub body: String,
    /// Idempotency key of this body, stable across retries.
    pub publish_key: Uuid,
}

impl Envelope {
    /// Size of the body in bytes (what body limits are measured in).
    pub fn body_len(&self) -> u64 {
        self.body.len() as u64
    }
}
