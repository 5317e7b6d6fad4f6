//! Conversations and their members.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// A conversation of one team, with its members.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Conversation {
    /// Minted by the ledger.
    pub id: Uuid,
    /// The owning team; another team's callers get `NotFound`.
    pub team: Uuid,
    /// Display title (see [`crate::validate_name`]).
    pub title: String,
    /// The body backend name recorded at creation (the team's default then). Never changes:
    /// every message of the conversation goes to this backend.
    pub backend: String,
    /// When the conversation was created.
    pub created_at: DateTime<Utc>,
    /// Members ordered by `joined_at`, then agent id.
    pub members: Vec<Member>,
}

impl Conversation {
    /// Whether `agent` is a member.
    pub fn has_member(&self, agent: Uuid) -> bool {
        self.members.iter().any(|m| m.agent == agent)
    }
}

/// One agent's membership of a conversation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Member {
    /// The member agent.
    pub agent: Uuid,
    /// The agent's recipient key (copied for the relay and the reference worker).
    pub recipient_key: String,
    /// When the agent joined.
    pub joined_at: DateTime<Utc>,
}
