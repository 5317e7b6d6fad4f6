//! The conformance suite on the memory adapters, every behaviour its own test.
//!
//! Two configurations run the whole list, both through trait objects handed out by the
//! `Backends` registry (`Arc<dyn MessagingBackend>`, `Arc<dyn Inbox>`), which is the path the
//! application uses:
//! - `memory::…` — the defaults that matter (1 MiB bodies, dedup for the life of the inbox) with
//!   small quotas a test can fill; every capability declared.
//! - `memory_windowed::…` — configured like a JetStream deployment: a lower body limit, an inbox
//!   duplicate window, a short ack wait and `max_deliver` of 2. It exercises the window code and
//!   lacks `inbox_dedup_for_life`, so that behaviour is reported as ignored with its capability.
//! - `memory::ledger::…`, `memory::journal::…`, `memory::operators::…`, `memory::oversight::…` —
//!   the `Ledger`, `Journal`, `Operators` and `Oversight` behaviours on a fresh `MemoryLedger`
//!   (and its journal) per test, as trait objects;
//! - `memory::wakeups::…`, `memory::feed::…` — `MemoryWakeups` and `MemoryFeed` on two clones of
//!   one value.
//! - `memory::push_store::…` — the `PushStore` behaviours on `MemoryPushStore` (`memory/push.rs`,
//!   until issue 34 the `memory_push` target).

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use crewbus_conformance::stream_admin::{self, AdminFixture, AdminFixtureFactory};
use crewbus_conformance::{
    Capabilities, FixtureError, FixtureFactory, LedgerFixture, LedgerFixtureFactory, LedgerPorts,
    TeamFixture, TeamPorts, Time,
};
use crewbus_domain::{MAX_BODY_BYTES, Quotas, TenantId};
use crewbus_memory::{
    BodiesConfig, InboxConfig, ManualClock, MemoryAdminConfig, MemoryBackends, MemoryConfig,
    MemoryLedger, MemoryStreamAdmin,
};
use crewbus_ports::{Backends, MessagingBackend, StreamAdmin};
use uuid::Uuid;

#[path = "memory/push.rs"]
mod push;

/// Builds a registry with its own manual clock per test.
struct MemoryFactory {
    config: MemoryConfig,
    capabilities: Capabilities,
}

impl MemoryFactory {
    fn new(config: MemoryConfig, dedup_window_is_life: bool) -> Self {
        let capabilities = Capabilities {
            backend_name: MemoryBackends::NAME,
            body_limit_bytes: config.bodies.max_body_bytes,
            body_quota: Some(config.bodies.quota),
            body_duplicate_window: None,
            ack_wait: config.inbox.ack_wait,
            max_deliver: Some(config.inbox.max_deliver),
            inbox_overflow_limit: Some(config.inbox.max_messages),
            inbox_dedup_for_life: dedup_window_is_life,
            inbox_duplicate_window: config.inbox.duplicate_window,
            delete_consumer: true,
            instant_advance: true,
            settle_timeout: Duration::from_secs(5),
        };
        MemoryFactory {
            config,
            capabilities,
        }
    }

    fn full() -> Self {
        let config = MemoryConfig {
            bodies: BodiesConfig {
                max_body_bytes: MAX_BODY_BYTES,
                quota: Quotas {
                    max_messages: 8,
                    max_bytes: 4 * MAX_BODY_BYTES,
                },
            },
            inbox: InboxConfig {
                ack_wait: Duration::from_secs(30),
                max_deliver: 4,
                max_messages: 16,
                duplicate_window: None,
            },
        };
        Self::new(config, true)
    }

    fn windowed() -> Self {
        let config = MemoryConfig {
            bodies: BodiesConfig {
                max_body_bytes: 64 * 1024,
                quota: Quotas {
                    max_messages: 5,
                    max_bytes: 256 * 1024,
                },
            },
            inbox: InboxConfig {
                ack_wait: Duration::from_secs(1),
                max_deliver: 2,
                max_messages: 4,
                duplicate_window: Some(Duration::from_secs(2)),
            },
        };
        Self::new(config, false)
    }
}

#[async_trait]
impl FixtureFactory for MemoryFactory {
    fn capabilities(&self) -> Capabilities {
        self.capabilities.clone()
    }

    /// One test's namespace: a registry of its own, its clock, and two teams' ports.
    async fn fixture(&self) -> Result<Box<dyn TeamFixture>, FixtureError> {
        let clock = ManualClock::default();
        let registry = MemoryBackends::new(self.config.clone(), Arc::new(clock.clone()))?;
        let team = Uuid::new_v4();
        let consumers = registry.team_inbox(team);
        TeamPorts::from_registry(
            &registry,
            (team, Uuid::new_v4()),
            self.capabilities.clone(),
            Time::manual(clock, ManualClock::advance),
            move |recipient| {
                let deleted = consumers.delete_consumer(&recipient);
                async move { Ok(deleted) }
            },
            Box::new(registry.clone()),
        )
        .await
    }
}

/// A fresh memory deployment per `StreamAdmin` test: a registry and an admin with a budget.
struct MemoryAdminFactory;

struct MemoryAdminFixture {
    registry: MemoryBackends,
    admin: MemoryStreamAdmin,
}

#[async_trait]
impl AdminFixtureFactory for MemoryAdminFactory {
    async fn fixture(&self) -> Result<Box<dyn AdminFixture>, FixtureError> {
        let registry =
            MemoryBackends::new(MemoryConfig::default(), Arc::new(ManualClock::default()))?;
        let admin = MemoryStreamAdmin::new(
            registry.clone(),
            MemoryAdminConfig {
                body_quotas: stream_admin::BODY_QUOTAS,
                inbox_quotas: stream_admin::INBOX_QUOTAS,
                replicas: 1,
                budget: Some(stream_admin::ADMIN_BUDGET),
            },
        )?;
        Ok(Box::new(MemoryAdminFixture { registry, admin }))
    }
}

#[async_trait]
impl AdminFixture for MemoryAdminFixture {
    fn admin(&self, bodies: Quotas, inbox: Quotas) -> Arc<dyn StreamAdmin> {
        Arc::new(self.admin.asking(bodies, inbox).expect("valid quotas"))
    }
    async fn bodies(&self, team: Uuid) -> Arc<dyn MessagingBackend> {
        self.registry
            .body_backend(team, MemoryBackends::NAME)
            .await
            .expect("memory body backend")
    }
    fn replicas(&self) -> u32 {
        1
    }
}

/// A fresh memory ledger (and the journal sharing its state) per test. One process holds a
/// memory store: the "other server" is a clone over the same state.
struct MemoryLedgerFactory;

#[async_trait]
impl LedgerFixtureFactory for MemoryLedgerFactory {
    async fn fixture(&self) -> Result<Box<dyn LedgerFixture>, FixtureError> {
        let ledger = MemoryLedger::new(TenantId::default());
        let journal = Arc::new(ledger.journal());
        Ok(LedgerPorts::of(
            ledger.clone(),
            journal,
            ledger,
            Box::new(()),
        ))
    }
}

fn main() {
    let args = libtest_mimic::Arguments::from_args();
    let runtime = crewbus_conformance::runtime();
    let mut trials =
        crewbus_conformance::trials("memory", Arc::new(MemoryFactory::full()), &runtime);
    trials.extend(crewbus_conformance::trials(
        "memory_windowed",
        Arc::new(MemoryFactory::windowed()),
        &runtime,
    ));
    trials.extend(stream_admin::admin_trials(
        "memory",
        Arc::new(MemoryAdminFactory),
        &runtime,
    ));
    trials.extend(crewbus_conformance::ledger_trials(
        "memory",
        Arc::new(MemoryLedgerFactory),
        &runtime,
    ));
    trials.extend(crewbus_conformance::wakeups::wakeups_trials(
        "memory",
        Arc::new(MemoryWakeupsFactory),
        &runtime,
    ));
    trials.extend(crewbus_conformance::feed::feed_trials(
        "memory",
        Arc::new(MemoryFeedFactory),
        &runtime,
    ));
    trials.extend(push::trials(&runtime));
    libtest_mimic::run(&args, trials).exit();
}

/// Two handles of one in-process deployment: clones of one `MemoryFeed`.
struct MemoryFeedFactory;

#[async_trait]
impl crewbus_conformance::feed::FeedFactory for MemoryFeedFactory {
    async fn pair(&self) -> Result<crewbus_conformance::feed::FeedPair, FixtureError> {
        let feed = crewbus_memory::MemoryFeed::new();
        Ok(crewbus_conformance::feed::FeedPair {
            a: Arc::new(feed.clone()),
            b: Arc::new(feed),
            keep: Box::new(()),
        })
    }
}

/// Two handles of one in-process deployment: clones of one `MemoryWakeups`.
struct MemoryWakeupsFactory;

#[async_trait::async_trait]
impl crewbus_conformance::wakeups::WakeupsFactory for MemoryWakeupsFactory {
    async fn pair(
        &self,
    ) -> Result<crewbus_conformance::wakeups::WakeupsPair, crewbus_conformance::FixtureError> {
        let w = crewbus_memory::MemoryWakeups::new();
        Ok(crewbus_conformance::wakeups::WakeupsPair {
            a: Arc::new(w.clone()),
            b: Arc::new(w),
            keep: Box::new(()),
        })
    }
}
