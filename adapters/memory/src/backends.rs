//! `MemoryBackends`: the registry handing out each team's memory body store and inbox.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use crewbus_domain::BusResult;
use crewbus_ports::{Backends, Clock, Inbox, MessagingBackend, check_backend_name};
use uuid::Uuid;

use crate::bodies::MemoryBackend;
use crate::config::MemoryConfig;
use crate::inbox::MemoryInbox;

/// The memory [`Backends`] registry (`name() == "memory"`).
///
/// Creates one [`MemoryBackend`] and one [`MemoryInbox`] per team on first request and caches
/// them for the life of the registry, so every caller of a team sees the same bodies and
/// references. Every adapter shares the registry's configuration and clock. Asked for any other
/// backend name, it answers `NotFound`. Memory needs no provisioning: every team is served.
#[derive(Clone)]
pub struct MemoryBackends {
    shared: Arc<Shared>,
}

struct Shared {
    config: MemoryConfig,
    clock: Arc<dyn Clock>,
    bodies: Mutex<HashMap<Uuid, MemoryBackend>>,
    inboxes: Mutex<HashMap<Uuid, MemoryInbox>>,
}

impl MemoryBackends {
    /// The name this registry answers for.
    pub const NAME: &'static str = MemoryBackend::NAME;

    /// A registry of memory adapters limited by `config`, reading time from `clock`.
    /// Errors: [`BusError::Invalid`] from [`MemoryConfig::validate`].
    pub fn new(config: MemoryConfig, clock: Arc<dyn Clock>) -> BusResult<Self> {
        config.validate()?;
        Ok(MemoryBackends {
            shared: Arc::new(Shared {
                config,
                clock,
                bodies: Mutex::new(HashMap::new()),
                inboxes: Mutex::new(HashMap::new()),
            }),
        })
    }

    /// The configuration every adapter of this registry uses.
    pub fn config(&self) -> &MemoryConfig {
        &self.shared.config
    }

    /// The team's body store as its concrete type (for its [`crate::Faults`] handle), created on
    /// first use; the same store [`Backends::body_backend`] hands out.
    pub fn bodies(&self, team: Uuid) -> MemoryBackend {
        let mut map = self
            .shared
            .bodies
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        map.entry(team)
            .or_insert_with(|| {
                MemoryBackend::new(team, self.shared.config.bodies, self.shared.clock.clone())
            })
            .clone()
    }

    /// The team's inbox as its concrete type (for [`MemoryInbox::delete_consumer`]), created on
    /// first use; the same inbox [`Backends::inbox`] hands out.
    pub fn team_inbox(&self, team: Uuid) -> MemoryInbox {
        let mut map = self
            .shared
            .inboxes
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        map.entry(team)
            .or_insert_with(|| {
                MemoryInbox::new(team, self.shared.config.inbox, self.shared.clock.clone())
            })
            .clone()
    }
}

impl fmt::Debug for MemoryBackends {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryBackends")
            .field("config", &self.shared.config)
            .finish_non_exhaustive()
    }
}

#[async_trait]
impl Backends for MemoryBackends {
    fn name(&self) -> &'static str {
        Self::NAME
    }

    async fn body_backend(&self, team: Uuid, name: &str) -> BusResult<Arc<dyn MessagingBackend>> {
        check_backend_name(name, Self::NAME)?;
        Ok(Arc::new(self.bodies(team)))
    }

    async fn inbox(&self, team: Uuid, name: &str) -> BusResult<Arc<dyn Inbox>> {
        check_backend_name(name, Self::NAME)?;
        Ok(Arc::new(self.team_inbox(team)))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crewbus_domain::{BusError, Envelope, Published};

    use super::*;
    use crate::ManualClock;

    fn envelope(team: Uuid) -> Envelope {
        Envelope {
            message_id: Uuid::new_v4(),
            conversation_id: Uuid::new_v4(),
            team_id: team,
            body: "x".into(),
            publish_key: Uuid::new_v4(),
        }
    }

    fn registry(clock: &ManualClock) -> MemoryBackends {
        MemoryBackends::new(MemoryConfig::default(), Arc::new(clock.clone())).unwrap()
    }

    #[tokio::test]
    async fn caches_one_body_store_and_one_inbox_per_team() {
        let registry = registry(&ManualClock::default());
        let (team, other) = (Uuid::new_v4(), Uuid::new_v4());
        let first = registry.body_backend(team, "memory").await.unwrap();
        let second = registry.body_backend(team, "memory").await.unwrap();
        let env = envelope(team);
        let locator = first.publish(env.clone()).await.locator().unwrap().clone();
        assert_eq!(
            second
                .fetch(&locator, env.message_id)
                .await
                .unwrap()
                .as_deref(),
            Some("x")
        );
        assert_eq!(registry.bodies(team).stored_messages(), 1);
        assert_eq!(registry.bodies(other).stored_messages(), 0);

        let inbox = registry.inbox(team, "memory").await.unwrap();
        let event = Uuid::new_v4();
        assert!(
            inbox
                .publish_reference("a", event, "{}")
                .await
                .is_confirmed()
        );
        let again = registry.inbox(team, "memory").await.unwrap();
        let refs = again.fetch_references("a", 10).await.unwrap();
        assert_eq!(refs.len(), 1);
        assert_eq!(registry.team_inbox(team).stored_references(), 1);
        assert_eq!(registry.team_inbox(other).stored_references(), 0);
    }

    #[tokio::test]
    async fn answers_only_for_its_own_name() {
        let registry = registry(&ManualClock::default());
        assert_eq!(registry.name(), "memory");
        let team = Uuid::new_v4();
        for name in ["postgres", "jetstream", "", "MEMORY"] {
            assert!(matches!(
                registry.body_backend(team, name).await,
                Err(BusError::NotFound { .. })
            ));
            assert!(matches!(
                registry.inbox(team, name).await,
                Err(BusError::NotFound { .. })
            ));
        }
    }

    #[test]
    fn refuses_an_invalid_configuration() {
        let mut config = MemoryConfig::default();
        config.inbox.ack_wait = Duration::ZERO;
        assert!(matches!(
            MemoryBackends::new(config, Arc::new(ManualClock::default())),
            Err(BusError::Invalid { .. })
        ));
    }

    #[tokio::test]
    async fn every_team_shares_the_registry_clock() {
        let clock = ManualClock::default();
        let registry = registry(&clock);
        let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
        for team in [a, b] {
            let bodies = registry.body_backend(team, "memory").await.unwrap();
            assert!(matches!(
                bodies.publish(envelope(team)).await,
                Published::Confirmed { .. }
            ));
        }
        clock.advance(Duration::from_secs(1));
        for team in [a, b] {
            let bodies = registry.body_backend(team, "memory").await.unwrap();
            assert_eq!(bodies.retain(clock.now()).await.unwrap(), 1);
        }
    }
}
