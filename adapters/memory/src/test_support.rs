//! What the memory adapters' unit tests share.

use crewbus_domain::Envelope;
use uuid::Uuid;

/// An envelope of `team` holding `body`, with fresh message, conversation and publish key.
pub(crate) fn envelope(team: Uuid, body: &str) -> Envelope {
    Envelope {
        message_id: Uuid::new_v4(),
        conversation_id: Uuid::new_v4(),
        team_id: team,
        body: body.to_owned(),
        publish_key: Uuid::new_v4(),
    }
}
