//! Inbox events: the ledger's queue of references still to be published to inboxes.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// One reference to publish: message `message` for the recipient `recipient_key`, on the inbox
/// named `inbox`. Unique per (message, recipient). Leased to a reference worker, which calls
/// `Inbox::publish_reference(recipient_key, id, payload)` and then marks it published.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InboxEvent {
    /// The event id: the inbox's dedup key (stable across retries).
    pub id: Uuid,
    /// The team.
    pub team: Uuid,
    /// The inbox name (the team's inbox when the event was enqueued).
    pub inbox: String,
    /// The message.
    pub message: Uuid,
    /// The recipient agent.
    pub recipient: Uuid,
    /// The recipient's key (the inbox subject token).
    pub recipient_key: String,
    /// JSON of [`ReferencePayload`]; never a body.
    pub payload: String,
    /// When the event was enqueued.
    pub created_at: DateTime<Utc>,
}

/// The JSON a reference carries (ids only, never a body).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReferencePayload {
    /// The message.
    pub message: Uuid,
    /// Its conversation.
    pub conversation: Uuid,
    /// Its position in the conversation.
    pub seq: u64,
}

impl ReferencePayload {
    /// The JSON text (`{"message":"…","conversation":"…","seq":n}`).
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("a struct of uuids and an integer always serializes")
    }

    /// Parses a reference payload. Errors: [`crate::BusError::Invalid`].
    pub fn from_json(text: &str) -> crate::BusResult<Self> {
        serde_json::from_str(text)
            .map_err(|_| crate::BusError::invalid("inbox reference payload is not a bus reference"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payload_round_trips_and_refuses_junk() {
        let p = ReferencePayload {
            message: Uuid::new_v4(),
            conversation: Uuid::new_v4(),
            seq: 7,
        };
        assert_eq!(ReferencePayload::from_json(&p.to_json()).unwrap(), p);
        assert!(ReferencePayload::from_json("{}").is_err());
    }
}
