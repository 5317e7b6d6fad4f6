//! One [`Backends`] answering for several names: the composition root hands it each adapter's
//! registry, and it dispatches by the name a conversation (or team) recorded.

use std::sync::Arc;

use async_trait::async_trait;
use crewbus_domain::{BusError, BusResult, Uuid};
use crewbus_ports::{Backends, Inbox, MessagingBackend};

/// Registries combined by name. The first registry answering for a name wins.
pub struct CombinedBackends {
    registries: Vec<Arc<dyn Backends>>,
}

impl CombinedBackends {
    /// Combines `registries` (each answers for [`Backends::name`]).
    pub fn new(registries: Vec<Arc<dyn Backends>>) -> Self {
        CombinedBackends { registries }
    }

    /// The names served, in order.
    pub fn names(&self) -> Vec<&'static str> {
        self.registries.iter().map(|r| r.name()).collect()
    }

    fn registry(&self, name: &str) -> BusResult<&Arc<dyn Backends>> {
        self.registries
            .iter()
            .find(|r| r.name() == name)
            .ok_or_else(|| BusError::NotProvisioned {
                what: format!("backend `{name}` is not configured in this deployment"),
                remedy: "configure it ([database] for postgres, [nats] for jetstream) or \
                             change the team's backend"
                    .to_owned(),
            })
    }
}

#[async_trait]
impl Backends for CombinedBackends {
    fn name(&self) -> &'static str {
        "combined"
    }

    async fn body_backend(&self, team: Uuid, name: &str) -> BusResult<Arc<dyn MessagingBackend>> {
        self.registry(name)?.body_backend(team, name).await
    }

    async fn inbox(&self, team: Uuid, name: &str) -> BusResult<Arc<dyn Inbox>> {
        self.registry(name)?.inbox(team, name).await
    }
}
