//! Messages, their publication state, and what a send asks and answers.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use uuid::Uuid;

use crate::{AgentKind, BusError, BusResult, Locator, RunId};

/// Where a message's body stands.
///
/// "Uncertain" is never a message state: it belongs to the outbox slot (the attempt may or may
/// not have landed); the message stays `PendingPublication` until reconcile settles it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Publication {
    /// The body backend confirmed the body; `Message::locator` is set.
    Stored,
    /// Recorded in the ledger, body not yet confirmed by the backend (an outbox slot exists).
    PendingPublication,
    /// The backend refused the body for good (`Fatal`); the slot is kept as evidence.
    Failed,
}

impl Publication {
    /// The snake_case name used in JSON and in the database (`stored`, `pending_publication`,
    /// `failed`).
    pub fn as_str(self) -> &'static str {
        match self {
            Publication::Stored => "stored",
            Publication::PendingPublication => "pending_publication",
            Publication::Failed => "failed",
        }
    }

    /// The state named `name` as a store keeps it ([`Publication::as_str`]). Errors: any other
    /// name → [`crate::BusError::Invalid`].
    pub fn from_stored(name: &str) -> crate::BusResult<Publication> {
        [
            Publication::Stored,
            Publication::PendingPublication,
            Publication::Failed,
        ]
        .into_iter()
        .find(|p| p.as_str() == name)
        .ok_or_else(|| crate::BusError::invalid("stored publication state is unknown"))
    }
}

/// One message of a conversation, as the ledger records it (the body itself lives in the body
/// backend; see `locator`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Message {
    /// Minted by the ledger at send.
    pub id: Uuid,
    /// The owning team.
    pub team: Uuid,
    /// The conversation.
    pub conversation: Uuid,
    /// Position in the conversation: gap-free, from 1, in commit order of the sends.
    pub seq: u64,
    /// The sending agent.
    pub sender: Uuid,
    /// The sender's idempotency key: unique per sender in the conversation ([`RequestKey`]).
    pub request_id: String,
    /// SHA-256 of the body's UTF-8 bytes, 64 lowercase hex digits ([`body_sha256`]).
    pub body_sha256: String,
    /// Length of the body, in bytes.
    pub body_len: u64,
    /// The body backend name (the conversation's).
    pub backend: String,
    /// Where the backend keeps the body; `Some` exactly when the body was confirmed stored
    /// (also after retention removed it).
    pub locator: Option<Locator>,
    /// Publication state.
    pub publication: Publication,
    /// When the ledger committed the send (the caller's `at`).
    pub sent_at: DateTime<Utc>,
    /// When the ledger recorded the body as stored (the settling caller's `at`).
    pub stored_at: Option<DateTime<Utc>>,
    /// When retention removed the body (the message stays `Stored`, with its locator).
    pub retained_at: Option<DateTime<Utc>>,
    /// Why publication failed: the bus's own error code (`BusError::code`), never backend text.
    pub failure: Option<String>,
    /// The sender's kind when it sent: [`AgentKind::Human`] for a message an operator posted as
    /// the team's human member (agents see it marked as from a human).
    pub sender_kind: AgentKind,
}

impl Message {
    /// The message `send` records for `request`: number `seq` of its conversation, kept by
    /// `backend`, its body hashed to `body_sha256`, sent at `at`, pending publication (no locator,
    /// not stored, retained or failed yet).
    pub fn pending(
        id: Uuid,
        request: &SendRequest,
        seq: u64,
        backend: String,
        body_sha256: String,
        at: DateTime<Utc>,
    ) -> Message {
        Message {
            id,
            team: request.team,
            conversation: request.conversation,
            seq,
            sender: request.sender,
            request_id: request.request_id.clone(),
            body_sha256,
            body_len: request.body.len() as u64,
            backend,
            locator: None,
            publication: Publication::PendingPublication,
            sent_at: at,
            stored_at: None,
            retained_at: None,
            failure: None,
            sender_kind: AgentKind::Agent,
        }
    }
}

/// What a sender asks the ledger's `send` to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SendRequest {
    /// The sender's team (from its credential).
    pub team: Uuid,
    /// The conversation to send in.
    pub conversation: Uuid,
    /// The sending agent (from its credential).
    pub sender: Uuid,
    /// Idempotency key chosen by the sender ([`validate_request_id`]); a send is repeated by the
    /// same sender sending it again in the same conversation ([`RequestKey`]).
    pub request_id: String,
    /// The body: any UTF-8 text (U+0000 included), at most the backend's effective maximum in
    /// bytes — the caller checks the size, the ledger stores what it is given faithfully.
    pub body: String,
    /// The acting run, which receives the `MessageSent` record.
    pub run: Option<RunId>,
}

/// The idempotency key of a send: `(conversation, sender, request_id)`. A request id is the
/// caller's own: two senders of one conversation may both use `t42-1`, and each gets a message
/// of its own; the same sender using it again in the same conversation repeats its send.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RequestKey {
    /// The conversation sent in.
    pub conversation: Uuid,
    /// The sending agent.
    pub sender: Uuid,
    /// The sender's request id.
    pub request_id: String,
}

impl From<&SendRequest> for RequestKey {
    fn from(request: &SendRequest) -> Self {
        RequestKey {
            conversation: request.conversation,
            sender: request.sender,
            request_id: request.request_id.clone(),
        }
    }
}

impl From<&Message> for RequestKey {
    fn from(message: &Message) -> Self {
        RequestKey {
            conversation: message.conversation,
            sender: message.sender,
            request_id: message.request_id.clone(),
        }
    }
}

/// What a send came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sent {
    /// The message with its current state (for a repeat: the original, as it stands now).
    pub message: Message,
    /// `true` when this call created the message; `false` for an idempotent repeat.
    pub created: bool,
}

/// SHA-256 of a body's UTF-8 bytes as 64 lowercase hex digits.
pub fn body_sha256(body: &str) -> String {
    hex::encode(Sha256::digest(body.as_bytes()))
}

/// Longest accepted request id, in bytes.
pub const MAX_REQUEST_ID_LEN: usize = 128;

/// Validates a request id: 1–128 visible ASCII characters (`!` to `~`, no spaces). A UUID's text
/// form passes. Errors: [`BusError::Invalid`].
pub fn validate_request_id(id: &str) -> BusResult<()> {
    if id.is_empty() || id.len() > MAX_REQUEST_ID_LEN {
        return Err(BusError::invalid(format!(
            "request id must be 1 to {MAX_REQUEST_ID_LEN} characters"
        )));
    }
    if !id.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(BusError::invalid(
            "request id may hold only visible ASCII characters",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn publication_states_read_back_by_name() {
        for p in [
            Publication::Stored,
            Publication::PendingPublication,
            Publication::Failed,
        ] {
            assert_eq!(Publication::from_stored(p.as_str()).unwrap(), p);
        }
        assert!(matches!(
            Publication::from_stored("stored "),
            Err(crate::BusError::Invalid { .. })
        ));
    }

    #[test]
    fn sha256_of_a_body() {
        assert_eq!(
            body_sha256(""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        assert_ne!(body_sha256("a"), body_sha256("a\u{0}"));
    }

    #[test]
    fn request_ids() {
        assert!(validate_request_id(&Uuid::new_v4().to_string()).is_ok());
        assert!(validate_request_id("req-1").is_ok());
        for bad in ["", "a b", "é", &"x".repeat(129)] {
            assert!(matches!(
                validate_request_id(bad),
                Err(BusError::Invalid { .. })
            ));
        }
    }

    #[test]
    fn publication_names() {
        assert_eq!(
            Publication::PendingPublication.as_str(),
            "pending_publication"
        );
        assert_eq!(
            serde_json_name(Publication::Stored),
            "\"stored\"".to_owned()
        );
    }

    fn serde_json_name(p: Publication) -> String {
        serde_json::to_string(&p).unwrap()
    }
}
