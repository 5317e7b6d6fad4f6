//! The shared conformance suite on JetStream: fresh teams on the suite's broker through the
//! registry, and the `StreamAdmin` behaviours on a server of their own per test (exact account
//! arithmetic).

use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream;
use async_trait::async_trait;
use crewbus_conformance::nats::{self, NatsOptions, NatsServer};
use crewbus_conformance::stream_admin::{self, AdminFixture, AdminFixtureFactory};
use crewbus_conformance::{
    BodyFixture, Capabilities, FixtureError, FixtureFactory, InboxFixture, Namespace, TeamFixture,
};
use crewbus_domain::{BusError, BusResult, Quotas, StreamKind, Uuid};
use crewbus_jetstream::{Config, JetStreamAdmin, JetStreamBackend, JetStreamBackends};
use crewbus_ports::{Backends, Inbox, MessagingBackend, StreamAdmin};

use super::Harness;
use super::support::*;

/// Hands out fresh teams on the suite's broker, through the registry (one shared connection),
/// configured with short windows; declares exactly those limits as capabilities.
pub(crate) struct JetStreamFactory {
    prov: Config,
    registry: JetStreamBackends,
    admin: jetstream::Context,
    capabilities: Capabilities,
}

/// Small quotas a test can fill: 6 bodies / 3 MiB (the body floor is 2 MiB), 16 references.
const SUITE_BODY_QUOTA: Quotas = Quotas {
    max_messages: 6,
    max_bytes: 3 * MIB,
};
const SUITE_INBOX_QUOTA: Quotas = Quotas {
    max_messages: 16,
    max_bytes: MIB,
};
const SUITE_MAX_DELIVER: u32 = 3;
/// Added to every `advance` on the real-time server (see `JetStreamFixture::advance`).
const ADVANCE_MARGIN: Duration = Duration::from_millis(250);

impl JetStreamFactory {
    pub(crate) async fn start(h: &Harness) -> JetStreamFactory {
        let mut prov = h.prov();
        prov.body_quotas = SUITE_BODY_QUOTA;
        prov.inbox_quotas = SUITE_INBOX_QUOTA;
        prov.max_deliver = SUITE_MAX_DELIVER;
        let mut rt = h.rt();
        rt.max_deliver = SUITE_MAX_DELIVER;
        let (client, admin) = raw_h(h, &nats::provisioning_user()).await;
        // The effective body limit the adapters will have (BUS.md §1).
        let max_payload = client.server_info().max_payload as u64;
        let body_limit = rt
            .body_limit
            .min(max_payload - crewbus_jetstream::HEADER_ALLOWANCE);
        let capabilities = Capabilities {
            backend_name: JetStreamBackend::NAME,
            body_limit_bytes: body_limit,
            body_quota: Some(SUITE_BODY_QUOTA),
            body_duplicate_window: Some(rt.duplicate_window),
            ack_wait: rt.ack_wait,
            max_deliver: Some(u64::from(SUITE_MAX_DELIVER)),
            inbox_overflow_limit: Some(SUITE_INBOX_QUOTA.max_messages),
            inbox_dedup_for_life: false,
            inbox_duplicate_window: Some(rt.duplicate_window),
            delete_consumer: true,
            instant_advance: false,
            settle_timeout: Duration::from_secs(15),
        };
        JetStreamFactory {
            prov,
            registry: JetStreamBackends::new(rt).expect("registry"),
            admin,
            capabilities,
        }
    }
}

#[async_trait]
impl FixtureFactory for JetStreamFactory {
    fn capabilities(&self) -> Capabilities {
        self.capabilities.clone()
    }

    async fn fixture(&self) -> Result<Box<dyn TeamFixture>, FixtureError> {
        let (team, other_team) = (Uuid::new_v4(), Uuid::new_v4());
        for t in [team, other_team] {
            JetStreamBackend::provision(&self.prov, t).await?;
            JetStreamBackend::provision_inbox(&self.prov, t).await?;
        }
        let name = JetStreamBackend::NAME;
        Ok(Box::new(JetStreamFixture {
            capabilities: self.capabilities.clone(),
            team,
            other_team,
            bodies: self.registry.body_backend(team, name).await?,
            other_bodies: self.registry.body_backend(other_team, name).await?,
            inbox: self.registry.inbox(team, name).await?,
            other_inbox: self.registry.inbox(other_team, name).await?,
            admin: self.admin.clone(),
            inbox_stream: self.prov.stream_name(team, StreamKind::Inbox),
        }))
    }
}

struct JetStreamFixture {
    capabilities: Capabilities,
    team: Uuid,
    other_team: Uuid,
    bodies: Arc<dyn MessagingBackend>,
    other_bodies: Arc<dyn MessagingBackend>,
    inbox: Arc<dyn Inbox>,
    other_inbox: Arc<dyn Inbox>,
    admin: jetstream::Context,
    inbox_stream: String,
}

#[async_trait]
impl Namespace for JetStreamFixture {
    fn capabilities(&self) -> &Capabilities {
        &self.capabilities
    }
    fn team(&self) -> Uuid {
        self.team
    }
    fn other_team(&self) -> Uuid {
        self.other_team
    }
    /// The server's timers are the behaviour under test: wait the real duration, plus a margin
    /// for the server's timer to fire on a loaded machine (its ack-wait check runs on its own
    /// schedule; without the margin a fetch right at `ack_wait` may still see the reference as
    /// in flight).
    async fn advance(&self, by: Duration) {
        tokio::time::sleep(by + ADVANCE_MARGIN).await;
    }
    async fn now(&self) -> chrono::DateTime<chrono::Utc> {
        chrono::Utc::now()
    }
}

impl BodyFixture for JetStreamFixture {
    fn bodies(&self) -> Arc<dyn MessagingBackend> {
        self.bodies.clone()
    }
    fn other_bodies(&self) -> Arc<dyn MessagingBackend> {
        self.other_bodies.clone()
    }
}

#[async_trait]
impl InboxFixture for JetStreamFixture {
    fn inbox(&self) -> Arc<dyn Inbox> {
        self.inbox.clone()
    }
    fn other_inbox(&self) -> Arc<dyn Inbox> {
        self.other_inbox.clone()
    }
    async fn delete_consumer(&self, recipient: &str) -> BusResult<()> {
        self.admin
            .delete_consumer_from_stream(recipient, &self.inbox_stream)
            .await
            .map(|_| ())
            .map_err(|e| BusError::unavailable_from("deleting a consumer", e))
    }
}

// ---------------------------------------------------------------------------------------------
// StreamAdmin behaviours: a server of its own per test (exact account arithmetic)
// ---------------------------------------------------------------------------------------------

pub(crate) struct JetStreamAdminFactory;

struct JetStreamAdminFixture {
    server: NatsServer,
}

#[async_trait]
impl AdminFixtureFactory for JetStreamAdminFactory {
    async fn fixture(&self) -> Result<Box<dyn AdminFixture>, FixtureError> {
        let server = tokio::task::spawn_blocking(|| {
            NatsServer::start_with(&NatsOptions {
                account_max_file: Some(stream_admin::ADMIN_BUDGET),
                ..NatsOptions::default()
            })
        })
        .await?;
        Ok(Box::new(JetStreamAdminFixture { server }))
    }
}

#[async_trait]
impl AdminFixture for JetStreamAdminFixture {
    fn admin(&self, bodies: Quotas, inbox: Quotas) -> Arc<dyn StreamAdmin> {
        let mut prov = prov_for(&self.server.url());
        prov.body_quotas = bodies;
        prov.inbox_quotas = inbox;
        Arc::new(JetStreamAdmin::new(prov))
    }
    async fn bodies(&self, team: Uuid) -> Arc<dyn MessagingBackend> {
        Arc::new(
            JetStreamBackend::connect(&rt_for(&self.server.url()), team)
                .await
                .expect("connect"),
        )
    }
    fn replicas(&self) -> u32 {
        1
    }
}
