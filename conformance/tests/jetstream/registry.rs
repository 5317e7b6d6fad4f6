//! JetStream-only tests of the registry (one connection, cached and evicted teams) and of the
//! admin port and configured limits.

use std::sync::Arc;
use std::time::Duration;

use crewbus_conformance::nats::{self};
use crewbus_conformance::trial::Behaviour;
use crewbus_domain::{BusError, Published, StreamKind, Uuid};
use crewbus_jetstream::{JetStreamAdmin, JetStreamBackend, JetStreamBackends};
use crewbus_ports::{Backends, MessagingBackend, StreamAdmin};

use super::support::*;
use super::{Harness, Needs};

/// The tests of this file, in order.
pub(crate) const TESTS: &[Behaviour<Arc<Harness>, Needs>] = tests![
    Any => registry_shares_one_connection_and_caches_teams,
    Any => registry_evicts_a_team_whose_streams_vanished,
    Any => registry_serves_bodies_while_the_inbox_stream_is_missing,
    Any => admin_port_runs_the_associated_functions,
    Any => configured_body_limit_below_the_server_is_the_effective_limit,
];

async fn registry_shares_one_connection_and_caches_teams(h: &Harness) {
    let registry = JetStreamBackends::new(h.rt()).expect("registry");
    assert_eq!(
        registry.connections_opened(),
        0,
        "nothing contacted before the first lookup"
    );
    let mut teams = Vec::new();
    for _ in 0..12 {
        teams.push(new_team(h).await.0);
    }
    for team in &teams {
        let bodies = registry
            .body_backend(*team, JetStreamBackend::NAME)
            .await
            .expect("body backend");
        assert_eq!(bodies.name(), JetStreamBackend::NAME);
        let inbox = registry
            .inbox(*team, JetStreamBackend::NAME)
            .await
            .expect("inbox");
        confirmed(&inbox.publish_reference("gina", Uuid::new_v4(), "{}").await);
        let e = envelope(*team, "via registry");
        let (loc, _) = confirmed(&bodies.publish(e.clone()).await);
        assert!(
            bodies
                .fetch(&loc, e.message_id)
                .await
                .expect("fetch")
                .is_some()
        );
    }
    assert_eq!(
        registry.connections_opened(),
        1,
        "one connection for every team"
    );
    assert_eq!(registry.cached_teams(), teams.len());
    assert!(matches!(
        registry.body_backend(teams[0], "postgres").await,
        Err(BusError::NotFound { .. })
    ));
    assert!(matches!(
        registry.inbox(Uuid::new_v4(), JetStreamBackend::NAME).await,
        Err(BusError::NotProvisioned { .. })
    ));
}

async fn registry_evicts_a_team_whose_streams_vanished(h: &Harness) {
    let registry = JetStreamBackends::with_revalidation(h.rt(), Duration::ZERO).expect("registry");
    let (team, _) = new_team(h).await;
    registry
        .body_backend(team, JetStreamBackend::NAME)
        .await
        .expect("served");
    assert_eq!(registry.cached_teams(), 1);
    JetStreamBackend::deprovision(&h.prov(), team)
        .await
        .expect("deprovision");
    assert!(matches!(
        registry.body_backend(team, JetStreamBackend::NAME).await,
        Err(BusError::NotProvisioned { .. })
    ));
    assert_eq!(registry.cached_teams(), 0, "evicted, not served stale");
}

async fn registry_serves_bodies_while_the_inbox_stream_is_missing(h: &Harness) {
    let registry = JetStreamBackends::with_revalidation(h.rt(), Duration::ZERO).expect("registry");
    let (team, b) = new_team(h).await;
    let bodies = registry
        .body_backend(team, JetStreamBackend::NAME)
        .await
        .expect("served");
    let e = envelope(team, "kept");
    let (loc, _) = confirmed(&bodies.publish(e.clone()).await);
    let inbox = registry
        .inbox(team, JetStreamBackend::NAME)
        .await
        .expect("inbox");
    confirmed(&inbox.publish_reference("hana", e.message_id, "{}").await);
    assert_eq!(
        inbox.fetch_references("hana", 5).await.expect("refs").len(),
        1
    );
    let (_, js) = raw_h(h, &nats::provisioning_user()).await;
    assert!(
        js.delete_stream(b.inbox_stream())
            .await
            .expect("delete")
            .success
    );
    // The inbox is reported missing (naming the inbox stream); the bodies stay readable.
    match registry.inbox(team, JetStreamBackend::NAME).await {
        Err(BusError::NotProvisioned { what, .. }) => assert!(what.contains(b.inbox_stream())),
        Err(other) => panic!("expected NotProvisioned, got {other:?}"),
        Ok(_) => panic!("a missing inbox stream was served"),
    }
    let bodies = registry
        .body_backend(team, JetStreamBackend::NAME)
        .await
        .expect("bodies still served");
    assert_eq!(
        bodies
            .fetch(&loc, e.message_id)
            .await
            .expect("fetch")
            .as_deref(),
        Some("kept")
    );
    assert_eq!(registry.cached_teams(), 1);
    // Provisioned again: the inbox is served again, with a fresh consumer.
    JetStreamBackend::provision_inbox(&h.prov(), team)
        .await
        .expect("provision inbox");
    let inbox = registry
        .inbox(team, JetStreamBackend::NAME)
        .await
        .expect("inbox again");
    confirmed(&inbox.publish_reference("hana", e.message_id, "{}").await);
    assert_eq!(
        inbox.fetch_references("hana", 5).await.expect("refs").len(),
        1
    );
}

async fn admin_port_runs_the_associated_functions(h: &Harness) {
    let admin: Arc<dyn StreamAdmin> = Arc::new(JetStreamAdmin::new(h.prov()));
    assert!(admin.reachable().await);
    let team = Uuid::new_v4();
    let bodies = admin.provision(team).await.expect("provision");
    let inbox = admin.provision_inbox(team).await.expect("provision inbox");
    assert!(bodies.created && inbox.created);
    assert_eq!(bodies.kind, StreamKind::Bodies);
    assert_eq!(inbox.kind, StreamKind::Inbox);
    let change = admin
        .check_update(team, StreamKind::Inbox)
        .await
        .expect("check");
    assert!(change.is_noop());
    let same = admin
        .apply_update(team, StreamKind::Inbox, &change)
        .await
        .expect("apply no-op");
    assert_eq!(same.limits, inbox.limits);
    admin.storage_account().await.expect("account");
    admin.deprovision(team).await.expect("deprovision");
    assert!(matches!(
        admin.check_update(team, StreamKind::Bodies).await,
        Err(BusError::NotProvisioned { .. })
    ));
    let unreachable = JetStreamAdmin::new(base_config(&format!(
        "nats://127.0.0.1:{}",
        nats::free_port()
    )));
    assert!(!unreachable.reachable().await);
}

async fn configured_body_limit_below_the_server_is_the_effective_limit(h: &Harness) {
    let mut rt = h.rt();
    rt.body_limit = 1000;
    let team = Uuid::new_v4();
    JetStreamBackend::provision(&h.prov(), team)
        .await
        .expect("provision");
    let b = JetStreamBackend::connect(&rt, team).await.expect("connect");
    assert_eq!(b.body_limit(), 1000);
    confirmed(&b.publish(envelope(team, "z".repeat(1000))).await);
    assert!(matches!(
        b.publish(envelope(team, "z".repeat(1001))).await,
        Published::Fatal(BusError::TooLarge {
            size: 1001,
            limit: 1000
        })
    ));
}
