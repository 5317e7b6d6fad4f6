//! Teams and their agents, and the rules for agent credentials and recipient keys.

use std::fmt;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use uuid::Uuid;

/// A team: the unit that owns conversations, body streams and an inbox.
///
/// `body_backend` and `inbox` are changed only by an operator command; a conversation keeps the
/// body backend it was created with whatever the team's default becomes later.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Team {
    /// Minted by the ledger.
    pub id: Uuid,
    /// Display name, unique within the tenant (1–128 characters, see [`validate_name`]).
    pub name: String,
    /// Name of the body backend new conversations of this team use (`"memory"`, `"postgres"`,
    /// `"jetstream"`): what `Backends::body_backend` is asked for.
    pub body_backend: String,
    /// Name of the inbox the team's references go to: what `Backends::inbox` is asked for.
    pub inbox: String,
    /// When the team was created.
    pub created_at: DateTime<Utc>,
}

/// An agent of a team. Its identity on the bus; the credential itself is never stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Agent {
    /// Minted by the ledger.
    pub id: Uuid,
    /// The team the agent belongs to (for life).
    pub team: Uuid,
    /// Display name, unique within the team (see [`validate_name`]).
    pub name: String,
    /// The agent's inbox subject token, derived from its id by [`recipient_key_for`]; always
    /// passes [`crate::validate_recipient_key`].
    pub recipient_key: String,
    /// SHA-256 of the agent's bearer token.
    pub token_hash: TokenHash,
    /// When the agent was created.
    pub created_at: DateTime<Utc>,
    /// When the agent was revoked; a revoked agent never authenticates again.
    pub revoked_at: Option<DateTime<Utc>>,
    /// An agent proper, or a team's human member (an operator posting in the console).
    pub kind: AgentKind,
}

/// What kind of member an agent row is.
///
/// A **human** member stands for an operator in one team: created by the ledger when that
/// operator first posts into a conversation of the team, it has no token (its stored hash is
/// of a random value nobody holds, and the ledger refuses it at `agent_by_token` whatever the
/// hash), gets no receipts (nothing is delivered to it: it reads in the console), and agents see
/// its messages marked as from a human.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AgentKind {
    /// An agent: authenticates with its token and receives messages.
    #[default]
    Agent,
    /// A team's human member (see the type's docs).
    Human,
}

impl AgentKind {
    /// The stored name: `agent` or `human`.
    pub fn as_str(self) -> &'static str {
        match self {
            AgentKind::Agent => "agent",
            AgentKind::Human => "human",
        }
    }

    /// The kind a store's `kind` column names. Errors: another name → `Invalid`.
    pub fn from_stored(name: &str) -> crate::BusResult<Self> {
        match name {
            "agent" => Ok(AgentKind::Agent),
            "human" => Ok(AgentKind::Human),
            other => Err(crate::BusError::invalid(format!(
                "stored agent kind `{other}` is not agent or human"
            ))),
        }
    }
}

impl Agent {
    /// Whether the agent has been revoked.
    pub fn revoked(&self) -> bool {
        self.revoked_at.is_some()
    }

    /// Whether the row is a team's human member (no token, no receipts).
    pub fn is_human(&self) -> bool {
        self.kind == AgentKind::Human
    }

    /// The ledger's check of a delivery call's recipient (`hand_out`, `undelivered`,
    /// `confirm`): `Ok` while active; revoked → `Unauthenticated`, the answer its token gets at
    /// the door, so a token still cached by the app fetches and confirms nothing.
    pub fn ensure_active(&self) -> crate::BusResult<()> {
        if self.revoked() {
            return Err(crate::BusError::Unauthenticated);
        }
        Ok(())
    }
}

/// The recipient key of the agent with id `agent`: `a` followed by the id's 32 lowercase hex
/// digits (33 bytes, subject-safe). One rule for every ledger, so keys never depend on display
/// names.
pub fn recipient_key_for(agent: Uuid) -> String {
    format!("a{}", agent.simple())
}

/// SHA-256 of an agent's bearer token (32 bytes).
///
/// Tokens are random and shown once at creation; only this hash is stored, and agents are found
/// by it. `Debug` prints only a short prefix so a hash never fills a log line.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TokenHash(pub [u8; 32]);

impl TokenHash {
    /// Hashes a bearer token.
    pub fn of(token: &str) -> Self {
        TokenHash(Sha256::digest(token.as_bytes()).into())
    }

    /// The hash of a fresh random value nobody keeps (32 bytes from two v4 UUIDs' random bits):
    /// the token hash of a human member, which no bearer token can match.
    pub fn held_by_nobody() -> Self {
        let mut secret = [0u8; 32];
        secret[..16].copy_from_slice(Uuid::new_v4().as_bytes());
        secret[16..].copy_from_slice(Uuid::new_v4().as_bytes());
        TokenHash(Sha256::digest(secret).into())
    }

    /// A hash read back from a store's bytes. Errors: not 32 bytes → [`crate::BusError::Invalid`].
    pub fn from_stored(bytes: Vec<u8>) -> crate::BusResult<Self> {
        let hash: [u8; 32] = bytes
            .try_into()
            .map_err(|_| crate::BusError::invalid("stored token hash is not 32 bytes"))?;
        Ok(TokenHash(hash))
    }
}

impl fmt::Debug for TokenHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TokenHash({}…)", hex::encode(&self.0[..4]))
    }
}

/// Longest accepted team, agent or conversation-title name, in characters.
pub const MAX_NAME_LEN: usize = 128;

/// Validates a display name (team, agent, conversation title): 1–128 characters, not only
/// whitespace, no control characters. Errors: [`crate::BusError::Invalid`] naming the rule.
pub fn validate_name(what: &str, name: &str) -> crate::BusResult<()> {
    if name.trim().is_empty() {
        return Err(crate::BusError::invalid(format!("{what} is empty")));
    }
    if name.chars().count() > MAX_NAME_LEN {
        return Err(crate::BusError::invalid(format!(
            "{what} is longer than {MAX_NAME_LEN} characters"
        )));
    }
    if name.chars().any(char::is_control) {
        return Err(crate::BusError::invalid(format!(
            "{what} contains a control character"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{BusError, validate_recipient_key};

    #[test]
    fn stored_token_hashes_are_32_bytes() {
        let hash = TokenHash::of("t");
        assert_eq!(TokenHash::from_stored(hash.0.to_vec()).unwrap(), hash);
        assert!(matches!(
            TokenHash::from_stored(vec![0; 31]),
            Err(BusError::Invalid { .. })
        ));
    }

    #[test]
    fn recipient_keys_are_subject_safe_and_stable() {
        let id = Uuid::new_v4();
        let key = recipient_key_for(id);
        assert!(validate_recipient_key(&key).is_ok());
        assert_eq!(key, recipient_key_for(id));
        assert_ne!(key, recipient_key_for(Uuid::new_v4()));
    }

    #[test]
    fn token_hash_is_sha256_and_debug_is_short() {
        let h = TokenHash::of("abc");
        assert_eq!(
            hex::encode(h.0),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(format!("{h:?}"), "TokenHash(ba7816bf…)");
    }

    #[test]
    fn names() {
        assert!(validate_name("team name", "ops").is_ok());
        for bad in ["", "  ", "a\nb", &"x".repeat(129)] {
            assert!(matches!(
                validate_name("team name", bad),
                Err(BusError::Invalid { .. })
            ));
        }
    }
}
