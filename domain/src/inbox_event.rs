//! Inbox events: the references the ledger still has to see published to inboxes.
//!
//! The ledger keeps **one marker per stored message** whose references are not yet confirmed
//! published (not one row per recipient); a reference worker leases markers and gets one
//! [`InboxEvent`] per recipient whose receipt is not delivered. The event id is derived from
//! (message, recipient) ([`InboxEvent::id_for`]), so every publication of one reference — a
//! retry after a lapsed lease, a second server, a recovery after a crash between the commit and
//! the publication — carries one id and the inbox deduplicates it.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// One reference to publish: message `message` for the recipient `recipient_key`, on the inbox
/// named `inbox`. Unique per (message, recipient). Leased (with the other references of its
/// message) to a reference worker, which calls `Inbox::publish_reference(recipient_key, id,
/// payload)` and, once every reference of the message is confirmed, marks the message's
/// references published.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InboxEvent {
    /// The event id: the inbox's dedup key, [`InboxEvent::id_for`]`(message, recipient)` (one id
    /// for every publication of this reference).
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
    /// When the message's body was stored (its references became due).
    pub created_at: DateTime<Utc>,
}

impl InboxEvent {
    /// The event id of the reference of `message` for `recipient`: a version-8 UUID made of the
    /// first 16 bytes of SHA-256(`"crewbus.reference\0"` ‖ message ‖ recipient). The same pair
    /// always gives the same id and two pairs collide with probability 2⁻¹²² (the version and
    /// variant bits are fixed), so the inbox's dedup on the event id drops a re-publish.
    pub fn id_for(message: Uuid, recipient: Uuid) -> Uuid {
        use sha2::{Digest, Sha256};
        let mut hash = Sha256::new();
        hash.update(b"crewbus.reference\0");
        hash.update(message.as_bytes());
        hash.update(recipient.as_bytes());
        let digest = hash.finalize();
        let mut bytes = [0u8; 16];
        bytes.copy_from_slice(&digest[..16]);
        uuid::Builder::from_custom_bytes(bytes).into_uuid()
    }
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

    #[test]
    fn an_event_id_is_one_per_message_and_recipient() {
        let (m, r) = (Uuid::new_v4(), Uuid::new_v4());
        let id = InboxEvent::id_for(m, r);
        assert_eq!(id, InboxEvent::id_for(m, r));
        assert_eq!(id.get_version_num(), 8);
        assert_ne!(id, InboxEvent::id_for(r, m));
        assert_ne!(id, InboxEvent::id_for(m, Uuid::new_v4()));
        assert_ne!(id, InboxEvent::id_for(Uuid::new_v4(), r));
    }
}
