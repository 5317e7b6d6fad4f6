//! Test data: envelopes, payloads and recipient keys, fresh per call.

use crewbus_domain::Envelope;
use uuid::Uuid;

/// An envelope of `team` with fresh message, conversation and publish-key ids.
pub fn envelope(team: Uuid, body: impl Into<String>) -> Envelope {
    Envelope {
        message_id: Uuid::new_v4(),
        conversation_id: Uuid::new_v4(),
        team_id: team,
        body: body.into(),
        publish_key: Uuid::new_v4(),
    }
}

/// A body of exactly `len` bytes (ASCII).
pub fn body_of(len: u64) -> String {
    "b".repeat(usize::try_from(len).expect("body length fits in memory"))
}

/// A reference payload naming a message (JSON, ids only, never a body).
pub fn payload(message_id: Uuid) -> String {
    serde_json::json!({ "message_id": message_id }).to_string()
}

/// A fresh, valid recipient key (`agent-<12 hex>`).
pub fn recipient() -> String {
    format!("agent-{}", &Uuid::new_v4().simple().to_string()[..12])
}
