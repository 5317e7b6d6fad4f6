//! What the relay hands a body backend.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::{BusError, BusResult};

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

    /// Checks the envelope before a body backend of `team` with a limit of `max_body_bytes`
    /// (bytes) stores anything. Errors: another team's envelope → [`BusError::Forbidden`]; a body
    /// above the limit → [`BusError::TooLarge`].
    pub fn check_for(&self, team: Uuid, max_body_bytes: u64) -> BusResult<()> {
        if self.team_id != team {
            return Err(BusError::forbidden("the envelope belongs to another team"));
        }
        if self.body_len() > max_body_bytes {
            return Err(BusError::TooLarge {
                size: self.body_len(),
                limit: max_body_bytes,
            });
        }
        Ok(())
    }

    /// The rule for a body store that found bodies already held under this envelope's message
    /// id or publish key, `held` as `(message id, team, publish key)` each: `Ok` (a duplicate of
    /// this very publish) when exactly one is held and it is this envelope's. Errors: anything
    /// else → [`BusError::Conflict`].
    pub fn check_held(&self, held: &[(Uuid, Uuid, Uuid)]) -> BusResult<()> {
        match held {
            [(message, team, key)]
                if *message == self.message_id
                    && *team == self.team_id
                    && *key == self.publish_key =>
            {
                Ok(())
            }
            _ => Err(BusError::conflict(
                "the message id or publish key is already held under another key or message",
            )),
        }
    }
}

/// A body as a body backend of `team` read it back, `stored` as `(owning team, UTF-8 bytes)`;
/// `None` when nothing is stored. Errors: another team's body → [`BusError::Forbidden`]; bytes
/// that are not UTF-8 → [`BusError::Invalid`].
pub fn stored_body(team: Uuid, stored: Option<(Uuid, Vec<u8>)>) -> BusResult<Option<String>> {
    match stored {
        None => Ok(None),
        Some((owner, _)) if owner != team => {
            Err(BusError::forbidden("the body belongs to another team"))
        }
        Some((_, body)) => String::from_utf8(body)
            .map(Some)
            .map_err(|_| BusError::invalid("body fetch: stored body is not UTF-8")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn envelope(team: Uuid) -> Envelope {
        Envelope {
            message_id: Uuid::new_v4(),
            conversation_id: Uuid::new_v4(),
            team_id: team,
            body: "four".into(),
            publish_key: Uuid::new_v4(),
        }
    }

    #[test]
    fn checks_team_and_size() {
        let team = Uuid::new_v4();
        let env = envelope(team);
        assert!(env.check_for(team, 4).is_ok());
        assert!(matches!(
            env.check_for(team, 3),
            Err(BusError::TooLarge { size: 4, limit: 3 })
        ));
        assert!(matches!(
            env.check_for(Uuid::new_v4(), 4),
            Err(BusError::Forbidden { .. })
        ));
    }

    #[test]
    fn a_held_body_is_a_duplicate_only_when_it_is_this_one() {
        let env = envelope(Uuid::new_v4());
        let this = (env.message_id, env.team_id, env.publish_key);
        assert!(env.check_held(&[this]).is_ok());
        let other_key = (env.message_id, env.team_id, Uuid::new_v4());
        for held in [vec![], vec![other_key], vec![this, other_key]] {
            assert!(matches!(
                env.check_held(&held),
                Err(BusError::Conflict { .. })
            ));
        }
    }

    #[test]
    fn stored_bodies_are_read_for_their_team_only() {
        let team = Uuid::new_v4();
        assert_eq!(stored_body(team, None).unwrap(), None);
        assert_eq!(
            stored_body(team, Some((team, b"hi".to_vec()))).unwrap(),
            Some("hi".to_owned())
        );
        assert!(matches!(
            stored_body(team, Some((Uuid::new_v4(), b"hi".to_vec()))),
            Err(BusError::Forbidden { .. })
        ));
        assert!(matches!(
            stored_body(team, Some((team, vec![0xff]))),
            Err(BusError::Invalid { .. })
        ));
    }
}
