//! `StreamAdmin` over JetStream: a provisioning [`Config`] calling the associated functions.

use async_trait::async_trait;
use crewbus_domain::{BusResult, Provisioned, QuotaChange, StorageAccount, StreamKind, Uuid};
use crewbus_ports::StreamAdmin;

use crate::backend::JetStreamBackend;
use crate::config::Config;

/// Operator actions on teams' streams with the provisioning credential held in `config`.
/// Each call opens and closes its own connection (operator commands are rare).
#[derive(Debug, Clone)]
pub struct JetStreamAdmin {
    /// The provisioning configuration (quotas asked for, credential).
    pub config: Config,
}

impl JetStreamAdmin {
    /// Wraps a provisioning configuration.
    pub fn new(config: Config) -> Self {
        JetStreamAdmin { config }
    }
}

#[async_trait]
impl StreamAdmin for JetStreamAdmin {
    async fn provision(&self, team: Uuid) -> BusResult<Provisioned> {
        JetStreamBackend::provision(&self.config, team).await
    }

    async fn provision_inbox(&self, team: Uuid) -> BusResult<Provisioned> {
        JetStreamBackend::provision_inbox(&self.config, team).await
    }

    async fn stream_status(&self, team: Uuid, kind: StreamKind) -> BusResult<Provisioned> {
        JetStreamBackend::stream_status(&self.config, team, kind).await
    }

    async fn check_update(&self, team: Uuid, kind: StreamKind) -> BusResult<QuotaChange> {
        JetStreamBackend::check_update(&self.config, team, kind).await
    }

    async fn update_quotas(&self, team: Uuid, kind: StreamKind) -> BusResult<Provisioned> {
        JetStreamBackend::update_quotas(&self.config, team, kind).await
    }

    async fn apply_update(
        &self,
        team: Uuid,
        kind: StreamKind,
        change: &QuotaChange,
    ) -> BusResult<Provisioned> {
        JetStreamBackend::apply_update(&self.config, team, kind, change).await
    }

    async fn storage_account(&self) -> BusResult<StorageAccount> {
        JetStreamBackend::storage_account(&self.config).await
    }

    async fn deprovision(&self, team: Uuid) -> BusResult<()> {
        JetStreamBackend::deprovision(&self.config, team).await
    }

    async fn reachable(&self) -> bool {
        JetStreamBackend::reachable(&self.config).await
    }
}
