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
    Capabilities, FixtureError, FixtureFactory, TeamFixture, TeamPorts, Time,
};
use crewbus_domain::{BusError, Quotas, StreamKind, Uuid};
use crewbus_jetstream::{Config, JetStreamAdmin, JetStreamBackend, JetStreamBackends};
use crewbus_ports::{MessagingBackend, StreamAdmin};

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
/// Added to every `advance` on the real-time server: the server's timers are the behaviour under
/// test, so `advance` waits the real duration, plus a margin for the server's timer to fire on
/// a loaded machine (its ack-wait check runs on its own schedule; without the margin a fetch
/// right at `ack_wait` may still see the reference as in flight).
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
        let (admin, inbox_stream) = (
            self.admin.clone(),
            self.prov.stream_name(team, StreamKind::Inbox),
        );
        TeamPorts::from_registry(
            &self.registry,
            (team, other_team),
            self.capabilities.clone(),
            Time::Wall {
                margin: ADVANCE_MARGIN,
            },
            move |recipient| {
                let (admin, inbox_stream) = (admin.clone(), inbox_stream.clone());
                async move {
                    admin
                        .delete_consumer_from_stream(recipient, &inbox_stream)
                        .await
                        .map(|_| true)
                        .map_err(|e| BusError::unavailable_from("deleting a consumer", e))
                }
            },
            Box::new(()),
        )
        .await
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
