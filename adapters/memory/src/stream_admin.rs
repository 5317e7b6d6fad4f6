//! `MemoryStreamAdmin`: stream administration over the memory adapters, with the semantics of
//! the JetStream one (existing limits kept, refusal above the contents, a storage account with
//! an optional budget and reservations).

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use async_trait::async_trait;
use crewbus_domain::{
    BusError, BusResult, Provisioned, QuotaChange, Quotas, Reservation, StorageAccount, StreamKind,
};
use crewbus_ports::StreamAdmin;
use uuid::Uuid;

use crate::backends::MemoryBackends;

/// What a [`MemoryStreamAdmin`] asks for and the deployment it administers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryAdminConfig {
    /// Quotas asked for the body stream (floors as JetStream's: ≥ 2 MiB, ≥ 1 message).
    pub body_quotas: Quotas,
    /// Quotas asked for the inbox stream (floors: ≥ 1 MiB, ≥ 1 message).
    pub inbox_quotas: Quotas,
    /// Replicas each reserved byte is counted on (≥ 1).
    pub replicas: u32,
    /// The account's storage budget in bytes (`None`: unlimited).
    pub budget: Option<u64>,
}

impl Default for MemoryAdminConfig {
    /// The default stream quotas (the JetStream adapter's too), one replica, no budget.
    fn default() -> Self {
        MemoryAdminConfig {
            body_quotas: Quotas::DEFAULT_BODIES,
            inbox_quotas: Quotas::DEFAULT_INBOX,
            replicas: 1,
            budget: None,
        }
    }
}

impl MemoryAdminConfig {
    /// Errors: [`BusError::Invalid`] for quotas below their floors or zero replicas.
    pub fn validate(&self) -> BusResult<()> {
        self.body_quotas.validate(StreamKind::Bodies)?;
        self.inbox_quotas.validate(StreamKind::Inbox)?;
        if self.replicas == 0 {
            return Err(BusError::invalid("replicas must be at least 1"));
        }
        Ok(())
    }

    fn quotas(&self, kind: StreamKind) -> Quotas {
        match kind {
            StreamKind::Bodies => self.body_quotas,
            StreamKind::Inbox => self.inbox_quotas,
        }
    }
}

/// The provisioned streams of a deployment: limits per (team, kind). Shared by every admin of
/// the deployment, whatever quotas each asks for.
#[derive(Default)]
struct Table {
    streams: HashMap<(Uuid, StreamKind), Quotas>,
}

/// [`StreamAdmin`] over a [`MemoryBackends`] registry.
///
/// Provisioning records a team's stream with the asked quotas and applies them to the team's
/// memory body store (discard-new quota) or inbox (overflow limit); an existing stream keeps its
/// limits. Quota changes are checked against the contents and applied atomically with respect
/// to publishes, so nothing stored is ever evicted. The storage account counts used bytes
/// (Σ stored body/payload bytes of provisioned streams), reservations (Σ max_bytes × replicas)
/// and the configured budget. Clones, and admins made by [`MemoryStreamAdmin::asking`], share
/// the deployment.
#[derive(Clone)]
pub struct MemoryStreamAdmin {
    registry: MemoryBackends,
    config: MemoryAdminConfig,
    table: Arc<Mutex<Table>>,
}

impl fmt::Debug for MemoryStreamAdmin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryStreamAdmin")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl MemoryStreamAdmin {
    /// An admin of the teams `registry` serves. Errors: `Invalid` config.
    pub fn new(registry: MemoryBackends, config: MemoryAdminConfig) -> BusResult<Self> {
        config.validate()?;
        Ok(MemoryStreamAdmin {
            registry,
            config,
            table: Arc::new(Mutex::new(Table::default())),
        })
    }

    /// An admin of the same deployment asking for other quotas (as another provisioning
    /// configuration would). Errors: `Invalid` quotas.
    pub fn asking(&self, body_quotas: Quotas, inbox_quotas: Quotas) -> BusResult<Self> {
        let config = MemoryAdminConfig {
            body_quotas,
            inbox_quotas,
            ..self.config
        };
        config.validate()?;
        Ok(MemoryStreamAdmin {
            config,
            ..self.clone()
        })
    }

    fn table(&self) -> MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn name(team: Uuid, kind: StreamKind) -> String {
        format!("memory:{kind}:{}", team.simple())
    }

    /// Stored (messages, bytes) of a team's stream.
    fn contents(&self, team: Uuid, kind: StreamKind) -> (u64, u64) {
        match kind {
            StreamKind::Bodies => {
                let b = self.registry.bodies(team);
                (b.stored_messages(), b.stored_bytes())
            }
            StreamKind::Inbox => {
                let i = self.registry.team_inbox(team);
                (i.stored_references(), i.stored_bytes())
            }
        }
    }

    /// Applies `quota` to the memory store if the contents fit it.
    fn relimit(&self, team: Uuid, kind: StreamKind, quota: Quotas) -> Result<(), (u64, u64)> {
        match kind {
            StreamKind::Bodies => self.registry.bodies(team).relimit(quota),
            StreamKind::Inbox => self.registry.team_inbox(team).relimit(quota),
        }
    }

    fn provisioned(
        &self,
        team: Uuid,
        kind: StreamKind,
        limits: Quotas,
        created: bool,
    ) -> Provisioned {
        let (messages, bytes) = self.contents(team, kind);
        Provisioned {
            name: Self::name(team, kind),
            kind,
            created,
            limits,
            messages,
            bytes,
        }
    }

    fn account_of(&self, table: &Table) -> StorageAccount {
        let replicas = u64::from(self.config.replicas);
        let mut used: u64 = 0;
        let mut reserved: u64 = 0;
        for ((team, kind), limits) in &table.streams {
            used = used.saturating_add(self.contents(*team, *kind).1);
            reserved = reserved.saturating_add(limits.max_bytes.saturating_mul(replicas));
        }
        StorageAccount {
            used,
            reserved,
            budget: self.config.budget,
        }
    }

    fn provision_kind(&self, team: Uuid, kind: StreamKind) -> BusResult<Provisioned> {
        let mut table = self.table();
        if let Some(limits) = table.streams.get(&(team, kind)).copied() {
            return Ok(self.provisioned(team, kind, limits, false));
        }
        let wanted = self.config.quotas(kind);
        let reservation = Reservation::new(wanted.max_bytes, self.config.replicas);
        let account = self.account_of(&table);
        if !account.fits(reservation.bytes()) {
            return Err(account.refuse(reservation));
        }
        if let Err(contents) = self.relimit(team, kind, wanted) {
            // Contents left by an earlier life of the stream exceed the new limits.
            return Err(BusError::conflict(format!(
                "{kind} stream {} holds {} messages / {} bytes, more than {} messages / {} bytes",
                Self::name(team, kind),
                contents.0,
                contents.1,
                wanted.max_messages,
                wanted.max_bytes
            )));
        }
        table.streams.insert((team, kind), wanted);
        Ok(self.provisioned(team, kind, wanted, true))
    }

    fn change(
        &self,
        table: &Table,
        team: Uuid,
        kind: StreamKind,
        wanted: Quotas,
    ) -> BusResult<QuotaChange> {
        let Some(current) = table.streams.get(&(team, kind)).copied() else {
            return Err(BusError::NotProvisioned {
                what: format!("{kind} stream {}", Self::name(team, kind)),
                remedy: "provision the team's streams first".to_owned(),
            });
        };
        let (messages, bytes) = self.contents(team, kind);
        let change = QuotaChange {
            name: Self::name(team, kind),
            kind,
            current,
            wanted,
            messages,
            bytes,
            replicas: self.config.replicas,
        };
        if change.below_contents() {
            return Err(change.below_contents_error());
        }
        let account = self.account_of(table);
        let extra = change.additional_bytes();
        if extra > 0 && !account.fits(extra) {
            return Err(account.refuse(change.reservation()));
        }
        Ok(change)
    }

    fn apply(&self, team: Uuid, kind: StreamKind, change: &QuotaChange) -> BusResult<Provisioned> {
        change.wanted.validate(kind)?;
        let mut table = self.table();
        let live = self.change(&table, team, kind, change.wanted)?;
        if let Err((messages, bytes)) = self.relimit(team, kind, live.wanted) {
            // A publisher raced the check: refuse, nothing changed.
            return Err(QuotaChange {
                messages,
                bytes,
                ..live
            }
            .below_contents_error());
        }
        table.streams.insert((team, kind), live.wanted);
        Ok(self.provisioned(team, kind, live.wanted, false))
    }
}

#[async_trait]
impl StreamAdmin for MemoryStreamAdmin {
    async fn provision(&self, team: Uuid) -> BusResult<Provisioned> {
        self.provision_kind(team, StreamKind::Bodies)
    }

    async fn provision_inbox(&self, team: Uuid) -> BusResult<Provisioned> {
        self.provision_kind(team, StreamKind::Inbox)
    }

    async fn stream_status(&self, team: Uuid, kind: StreamKind) -> BusResult<Provisioned> {
        let table = self.table();
        let Some(limits) = table.streams.get(&(team, kind)).copied() else {
            return Err(BusError::NotProvisioned {
                what: format!("{kind} stream {}", Self::name(team, kind)),
                remedy: "provision the team's streams first".to_owned(),
            });
        };
        Ok(self.provisioned(team, kind, limits, false))
    }

    async fn check_update(&self, team: Uuid, kind: StreamKind) -> BusResult<QuotaChange> {
        let table = self.table();
        self.change(&table, team, kind, self.config.quotas(kind))
    }

    async fn update_quotas(&self, team: Uuid, kind: StreamKind) -> BusResult<Provisioned> {
        let change = self.check_update(team, kind).await?;
        self.apply(team, kind, &change)
    }

    async fn apply_update(
        &self,
        team: Uuid,
        kind: StreamKind,
        change: &QuotaChange,
    ) -> BusResult<Provisioned> {
        self.apply(team, kind, change)
    }

    async fn storage_account(&self) -> BusResult<StorageAccount> {
        let table = self.table();
        Ok(self.account_of(&table))
    }

    async fn deprovision(&self, team: Uuid) -> BusResult<()> {
        let mut table = self.table();
        for kind in [StreamKind::Bodies, StreamKind::Inbox] {
            if table.streams.remove(&(team, kind)).is_some() {
                match kind {
                    StreamKind::Bodies => self.registry.bodies(team).clear(),
                    StreamKind::Inbox => self.registry.team_inbox(team).clear(),
                }
            }
        }
        Ok(())
    }

    async fn reachable(&self) -> bool {
        true
    }
}
