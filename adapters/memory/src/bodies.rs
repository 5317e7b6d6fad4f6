//! `MemoryBackend`: one team's body store, with the semantics of a discard-new body stream.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use crewbus_domain::{BusError, BusResult, Envelope, Locator, Published, Quotas};
use crewbus_ports::{Clock, MessagingBackend};
use uuid::Uuid;

use crate::config::BodiesConfig;
use crate::faults::{Faults, PublishFault};
use crate::locator::{self, Store};
use crate::lock::lock;

/// The in-memory body backend of one team (`name() == "memory"`).
///
/// Faithful to the bus contract (BUS.md §2):
/// - `publish` is idempotent on `publish_key` for the life of the body: a repeat answers
///   `Confirmed { duplicate: true }` with the first locator and stores nothing. The same
///   `message_id` under another key is `Fatal(Conflict)`; an envelope of another team is
///   `Fatal(Forbidden)`; a body above [`BodiesConfig::max_body_bytes`] is `Fatal(TooLarge)`; a
///   body that does not fit the discard-new [`BodiesConfig::quota`] is
///   `Retryable(QuotaExceeded)`. A duplicate is answered before the quota is looked at, so a full
///   store still confirms a repeat.
/// - Locators are `memory:<team hex>:bodies:<seq>`, `seq` counting from 1 per team and never
///   reused. `fetch` answers another scheme or an unparsable rest with `Invalid`, another team or
///   store with `Forbidden`, a body of another message with `Forbidden`, and an unknown or
///   retained position with `Ok(None)`.
/// - Each body's store time is read from the injected [`Clock`] at publish; `retain(before)`
///   removes bodies stored strictly before `before`, which also forgets their publish keys (a key
///   presented again afterwards stores the body anew, as a per-subject limit would).
///
/// Clones share the store and its [`Faults`].
#[derive(Clone)]
pub struct MemoryBackend {
    shared: Arc<Shared>,
}

struct Shared {
    team: Uuid,
    config: BodiesConfig,
    clock: Arc<dyn Clock>,
    faults: Faults,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Last sequence issued (0: none yet).
    last_seq: u64,
    bodies: BTreeMap<u64, Stored>,
    by_key: HashMap<Uuid, u64>,
    by_message: HashMap<Uuid, u64>,
    /// Σ body lengths of `bodies`, in bytes.
    bytes: u64,
    /// Quota set by a stream administrator, replacing [`BodiesConfig::quota`].
    quota: Option<Quotas>,
}

struct Stored {
    message_id: Uuid,
    team_id: Uuid,
    publish_key: Uuid,
    body: String,
    stored_at: DateTime<Utc>,
}

/// What storing an envelope came to, before any fault rewrites the answer.
enum Outcome {
    Stored { locator: Locator, duplicate: bool },
    Refused(BusError),
}

impl MemoryBackend {
    /// The backend name, recorded on conversations and outbox rows.
    pub const NAME: &'static str = "memory";

    /// An empty body store for `team`, reading time from `clock`. `config` is used as given
    /// (check it with [`BodiesConfig::validate`]).
    pub fn new(team: Uuid, config: BodiesConfig, clock: Arc<dyn Clock>) -> Self {
        MemoryBackend {
            shared: Arc::new(Shared {
                team,
                config,
                clock,
                faults: Faults::default(),
                state: Mutex::new(State::default()),
            }),
        }
    }

    /// The team this store serves.
    pub fn team(&self) -> Uuid {
        self.shared.team
    }

    /// The limits in force.
    pub fn config(&self) -> &BodiesConfig {
        &self.shared.config
    }

    /// The fault-injection handle shared by every clone of this store.
    pub fn faults(&self) -> Faults {
        self.shared.faults.clone()
    }

    /// Bodies stored now (count).
    pub fn stored_messages(&self) -> u64 {
        self.state().bodies.len() as u64
    }

    /// Body bytes stored now (Σ body lengths, bytes).
    pub fn stored_bytes(&self) -> u64 {
        self.state().bytes
    }

    /// The discard-new quota in force (the configured one unless an administrator changed it).
    pub fn quota(&self) -> Quotas {
        self.state().quota.unwrap_or(self.shared.config.quota)
    }

    /// Sets the quota to `quota` if the contents fit it, atomically with respect to publishes
    /// (nothing stored is ever evicted). Errors: the contents `(messages, bytes)` that exceed it.
    pub(crate) fn relimit(&self, quota: Quotas) -> Result<(), (u64, u64)> {
        let mut state = self.state();
        let contents = (state.bodies.len() as u64, state.bytes);
        if quota.exceeded_by(contents.0, contents.1) {
            return Err(contents);
        }
        state.quota = Some(quota);
        Ok(())
    }

    /// Drops every body and restores the configured quota (the stream was deleted).
    pub(crate) fn clear(&self) {
        *self.state() = State::default();
    }

    fn state(&self) -> MutexGuard<'_, State> {
        lock(&self.shared.state)
    }

    /// Stores `envelope` or says why not; the heart of `publish` and `reconcile`.
    fn store(&self, envelope: &Envelope) -> Outcome {
        let team = self.shared.team;
        if let Err(e) = envelope.check_for(team, self.shared.config.max_body_bytes) {
            return Outcome::Refused(e);
        }
        let size = envelope.body_len();
        let now = self.shared.clock.now();
        let mut state = self.state();
        if let Some(seq) = state.by_key.get(&envelope.publish_key).copied() {
            let same_message = state
                .bodies
                .get(&seq)
                .is_some_and(|b| b.message_id == envelope.message_id);
            if !same_message {
                return Outcome::Refused(BusError::conflict(
                    "the publish key is already used by another message",
                ));
            }
            return Outcome::Stored {
                locator: locator::issue(team, Store::Bodies, seq),
                duplicate: true,
            };
        }
        if state.by_message.contains_key(&envelope.message_id) {
            return Outcome::Refused(BusError::conflict(
                "the message is already stored under another publish key",
            ));
        }
        let quota = state.quota.unwrap_or(self.shared.config.quota);
        let messages = state.bodies.len() as u64 + 1;
        let bytes = state.bytes.saturating_add(size);
        if quota.exceeded_by(messages, bytes) {
            return Outcome::Refused(BusError::quota_exceeded(format!(
                "memory body store of team {} ({} messages / {} bytes)",
                team.simple(),
                quota.max_messages,
                quota.max_bytes
            )));
        }
        state.last_seq += 1;
        let seq = state.last_seq;
        state.bodies.insert(
            seq,
            Stored {
                message_id: envelope.message_id,
                team_id: envelope.team_id,
                publish_key: envelope.publish_key,
                body: envelope.body.clone(),
                stored_at: now,
            },
        );
        state.by_key.insert(envelope.publish_key, seq);
        state.by_message.insert(envelope.message_id, seq);
        state.bytes = bytes;
        Outcome::Stored {
            locator: locator::issue(team, Store::Bodies, seq),
            duplicate: false,
        }
    }
}

impl fmt::Debug for MemoryBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryBackend")
            .field("team", &self.shared.team)
            .field("config", &self.shared.config)
            .field("stored_messages", &self.stored_messages())
            .finish_non_exhaustive()
    }
}

#[async_trait]
impl MessagingBackend for MemoryBackend {
    fn name(&self) -> &'static str {
        Self::NAME
    }

    async fn publish(&self, envelope: Envelope) -> Published {
        let lose_confirmation = match self.shared.faults.take_publish() {
            Some(PublishFault::Refuse(error)) => return Published::from_error(error),
            Some(PublishFault::LoseConfirmation) => true,
            None => false,
        };
        let outcome = self.store(&envelope);
        if lose_confirmation {
            return Published::Uncertain(BusError::timeout(
                "memory body store confirmation (injected fault: lost)",
            ));
        }
        match outcome {
            Outcome::Stored { locator, duplicate } => Published::Confirmed { locator, duplicate },
            Outcome::Refused(error) => Published::from_error(error),
        }
    }

    async fn fetch(&self, locator: &Locator, message_id: Uuid) -> BusResult<Option<String>> {
        let team = self.shared.team;
        let seq = locator::body_seq(locator, team)?;
        let state = self.state();
        let Some(stored) = state.bodies.get(&seq) else {
            return Ok(None);
        };
        if stored.message_id != message_id || stored.team_id != team {
            return Err(BusError::forbidden(
                "the locator holds the body of another message",
            ));
        }
        Ok(Some(stored.body.clone()))
    }

    async fn retain(&self, before: DateTime<Utc>) -> BusResult<u64> {
        let mut state = self.state();
        let doomed: Vec<u64> = state
            .bodies
            .iter()
            .filter(|(_, b)| b.stored_at < before)
            .map(|(seq, _)| *seq)
            .collect();
        for seq in &doomed {
            if let Some(b) = state.bodies.remove(seq) {
                state.by_key.remove(&b.publish_key);
                state.by_message.remove(&b.message_id);
                state.bytes = state.bytes.saturating_sub(b.body.len() as u64);
            }
        }
        Ok(doomed.len() as u64)
    }

    async fn reconcile(&self, envelope: &Envelope) -> BusResult<Option<Locator>> {
        if let Some(error) = self.shared.faults.take_reconcile() {
            return Err(error);
        }
        match self.store(envelope) {
            Outcome::Stored { locator, .. } => Ok(Some(locator)),
            Outcome::Refused(error) if error.is_retryable() => Ok(None),
            Outcome::Refused(error) => Err(error),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::ManualClock;
    use crate::test_support::envelope;
    use crewbus_domain::Quotas;

    #[tokio::test]
    async fn retention_frees_bytes_and_forgets_keys() {
        let clock = ManualClock::default();
        let bodies = MemoryBackend::new(
            Uuid::new_v4(),
            BodiesConfig {
                quota: Quotas {
                    max_messages: 10,
                    max_bytes: 10,
                },
                ..BodiesConfig::default()
            },
            Arc::new(clock.clone()),
        );
        let env = envelope(bodies.team(), "12345");
        let first = bodies.publish(env.clone()).await.locator().unwrap().clone();
        assert_eq!(bodies.stored_bytes(), 5);
        assert!(matches!(
            bodies.publish(envelope(bodies.team(), "123456")).await,
            Published::Retryable(BusError::QuotaExceeded { .. })
        ));
        clock.advance(Duration::from_secs(1));
        assert_eq!(bodies.retain(clock.now()).await.unwrap(), 1);
        assert_eq!((bodies.stored_messages(), bodies.stored_bytes()), (0, 0));
        // The key was forgotten with the body: presented again it is stored anew, elsewhere.
        let Published::Confirmed { locator, duplicate } = bodies.publish(env).await else {
            panic!("expected Confirmed");
        };
        assert!(!duplicate);
        assert_ne!(locator, first);
    }

    #[tokio::test]
    async fn retain_removes_strictly_before_the_instant() {
        let clock = ManualClock::default();
        let bodies = MemoryBackend::new(
            Uuid::new_v4(),
            BodiesConfig::default(),
            Arc::new(clock.clone()),
        );
        let stored_at = clock.now();
        assert!(
            bodies
                .publish(envelope(bodies.team(), "x"))
                .await
                .is_confirmed()
        );
        assert_eq!(bodies.retain(stored_at).await.unwrap(), 0);
        let just_after = stored_at + chrono::TimeDelta::nanoseconds(1);
        assert_eq!(bodies.retain(just_after).await.unwrap(), 1);
    }

    #[tokio::test]
    async fn a_key_reused_by_another_message_is_conflict() {
        let bodies = MemoryBackend::new(
            Uuid::new_v4(),
            BodiesConfig::default(),
            Arc::new(ManualClock::default()),
        );
        let env = envelope(bodies.team(), "x");
        assert!(bodies.publish(env.clone()).await.is_confirmed());
        let other = Envelope {
            message_id: Uuid::new_v4(),
            ..env
        };
        assert!(matches!(
            bodies.publish(other).await,
            Published::Fatal(BusError::Conflict { .. })
        ));
    }

    #[test]
    fn debug_names_the_team_and_never_the_bodies() {
        let bodies = MemoryBackend::new(
            Uuid::nil(),
            BodiesConfig::default(),
            Arc::new(ManualClock::default()),
        );
        let text = format!("{bodies:?}");
        assert!(text.contains("MemoryBackend") && text.contains("stored_messages"));
    }
}
