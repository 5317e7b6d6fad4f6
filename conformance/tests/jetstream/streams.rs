//! JetStream-only tests of credentials, quotas and storage: the runtime credential, quota
//! decreases against the contents, paused intake, the 2.9 eviction, the account budget, an R3
//! cluster.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_nats::jetstream;
use bytes::Bytes;
use crewbus_conformance::nats::{self, NatsCluster, NatsOptions, NatsServer};
use crewbus_conformance::trial::Behaviour;
use crewbus_conformance::wait::until;
use crewbus_domain::{BusError, Envelope, Locator, Published, StreamKind, Uuid};
use crewbus_jetstream::JetStreamBackend;
use crewbus_ports::MessagingBackend;

use super::support::*;
use super::{Harness, Needs};

/// The tests of this file, in order.
pub(crate) const TESTS: &[Behaviour<Arc<Harness>, Needs>] = tests![
    Credentials => runtime_credential_cannot_change_streams_but_runs_the_bus,
    Any => quota_decrease_below_contents_is_refused_and_loses_nothing,
    Any => quota_decrease_racing_a_publisher_loses_no_acknowledged_body,
    Any => paused_intake_answers_publishers_with_a_retryable_error,
    Credentials => lowering_a_limit_evicts_on_2_9_and_not_on_the_current_line,
    OwnServer => account_budget_refuses_a_stream_that_does_not_fit,
    Cluster => r3_cluster_keeps_accepting_and_serving_with_one_node_stopped,
];

async fn runtime_credential_cannot_change_streams_but_runs_the_bus(h: &Harness) {
    let (team, b) = new_team(h).await;
    let (_, prov_js) = raw(&h.url, &nats::provisioning_user()).await;
    let before = stream_info(&prov_js, b.stream()).await.config;
    let (_, rt_js) = raw(&h.url, &nats::runtime_user()).await;
    // Permission violations are answered asynchronously: the requests fail (time out), and the
    // proof is the streams being unchanged afterwards.
    let mut changed = before.clone();
    changed.max_messages = 1;
    assert!(rt_js.update_stream(changed).await.is_err());
    assert!(rt_js.delete_stream(b.stream()).await.is_err());
    let new_name = format!("RT_MADE_{}", team.simple());
    assert!(
        rt_js
            .create_stream(jetstream::stream::Config {
                name: new_name.clone(),
                subjects: vec![format!("crewbus.{}.x", team.simple())],
                ..Default::default()
            })
            .await
            .is_err()
    );
    assert!(
        JetStreamBackend::provision(&h.rt(), Uuid::new_v4())
            .await
            .is_err()
    );
    assert_eq!(stream_info(&prov_js, b.stream()).await.config, before);
    assert!(
        prov_js.get_stream(&new_name).await.is_err(),
        "no stream was created"
    );
    // …but publishes, fetches, acks and retains.
    let e = envelope(team, "runtime");
    let (loc, _) = confirmed(&b.publish(e.clone()).await);
    assert!(b.fetch(&loc, e.message_id).await.expect("fetch").is_some());
    confirmed(&b.publish_reference("frank", Uuid::new_v4(), "{}").await);
    let refs = b.fetch_references("frank", 5).await.expect("fetch refs");
    b.ack_reference(&refs[0].ack_subject).await.expect("ack");
    let cut = chrono::Utc::now();
    until(Duration::from_secs(1), "clock past cut", || async {
        (chrono::Utc::now() > cut).then_some(())
    })
    .await;
    assert_eq!(b.retain(cut).await.expect("retain"), 1);
}

async fn quota_decrease_below_contents_is_refused_and_loses_nothing(h: &Harness) {
    let (team, b) = new_team(h).await;
    let bodies: Vec<Envelope> = (0..30).map(|i| envelope(team, format!("q {i}"))).collect();
    for e in &bodies {
        confirmed(&b.publish(e.clone()).await);
    }
    let mut lower = h.prov();
    lower.body_quotas.max_messages = 20;
    assert!(matches!(
        JetStreamBackend::check_update(&lower, team, StreamKind::Bodies).await,
        Err(BusError::Conflict { .. })
    ));
    assert!(matches!(
        JetStreamBackend::update_quotas(&lower, team, StreamKind::Bodies).await,
        Err(BusError::Conflict { .. })
    ));
    let (_, js) = raw_h(h, &nats::provisioning_user()).await;
    let info = stream_info(&js, b.stream()).await;
    assert_eq!(info.state.messages, 30);
    assert_eq!(info.config.max_messages, 10_000, "limits unchanged");
    assert_eq!(
        info.config.subjects,
        vec![format!("crewbus.{}.b.>", team.simple())]
    );
    // A decrease that fits goes through and keeps accepting bodies.
    let mut fits = h.prov();
    fits.body_quotas.max_messages = 40;
    let change = JetStreamBackend::check_update(&fits, team, StreamKind::Bodies)
        .await
        .expect("check");
    assert!(change.is_decrease());
    let done = JetStreamBackend::apply_update(&fits, team, StreamKind::Bodies, &change)
        .await
        .expect("apply");
    assert_eq!(done.limits.max_messages, 40);
    assert_eq!(done.messages, 30);
    confirmed(&b.publish(envelope(team, "after")).await);
}

async fn quota_decrease_racing_a_publisher_loses_no_acknowledged_body(h: &Harness) {
    let (team, b) = new_team(h).await;
    let mut stored: Vec<(Envelope, Locator)> = Vec::new();
    for i in 0..30 {
        let e = envelope(team, format!("pre {i}"));
        let l = confirmed(&b.publish(e.clone()).await).0;
        stored.push((e, l));
    }
    let stop = Arc::new(AtomicBool::new(false));
    let racer = {
        let (b, stop) = (b.clone(), stop.clone());
        tokio::spawn(async move {
            let mut acked = Vec::new();
            let mut refused = 0u32;
            let mut i = 0;
            while !stop.load(Ordering::SeqCst) {
                let e = envelope(team, format!("race {i}"));
                i += 1;
                match b.publish(e.clone()).await {
                    Published::Confirmed { locator, .. } => acked.push((e, locator)),
                    Published::Retryable(_) => refused += 1,
                    other => panic!("a racing publisher got {other:?}"),
                }
            }
            (acked, refused)
        })
    };
    let mut lower = h.prov();
    lower.body_quotas.max_messages = 45;
    // Let the racer get going before the decrease.
    until(Duration::from_secs(5), "racer running", || async {
        (stream_info(&raw_h(h, &nats::provisioning_user()).await.1, b.stream())
            .await
            .state
            .messages
            > 32)
            .then_some(())
    })
    .await;
    let outcome = JetStreamBackend::update_quotas(&lower, team, StreamKind::Bodies).await;
    stop.store(true, Ordering::SeqCst);
    let (acked, _refused) = racer.await.expect("racer");
    match &outcome {
        Ok(p) => assert_eq!(p.limits.max_messages, 45),
        Err(e) => assert!(matches!(e, BusError::Conflict { .. }), "{e:?}"),
    }
    stored.extend(acked);
    for (e, l) in &stored {
        assert_eq!(
            b.fetch(l, e.message_id).await.expect("fetch").as_deref(),
            Some(e.body.as_str()),
            "acknowledged body lost ({})",
            h.version
        );
    }
    let (_, js) = raw_h(h, &nats::provisioning_user()).await;
    assert_eq!(
        stream_info(&js, b.stream()).await.state.messages,
        stored.len() as u64
    );
}

async fn paused_intake_answers_publishers_with_a_retryable_error(h: &Harness) {
    let (team, b) = new_team(h).await;
    let (_, js) = raw_h(h, &nats::provisioning_user()).await;
    let mut config = stream_info(&js, b.stream()).await.config;
    let original = config.clone();
    config.subjects = vec![format!("crewbus.{}.paused.bodies", team.simple())];
    js.update_stream(config).await.expect("pause");
    let p = b.publish(envelope(team, "paused")).await;
    assert!(
        matches!(p, Published::Retryable(BusError::Unavailable { .. })),
        "{p:?}"
    );
    js.update_stream(original).await.expect("restore");
    confirmed(&b.publish(envelope(team, "resumed")).await);
}

async fn lowering_a_limit_evicts_on_2_9_and_not_on_the_current_line(h: &Harness) {
    // The broker behaviour that makes the pause necessary, pinned per server line.
    let (_, js) = raw_h(h, &nats::provisioning_user()).await;
    let name = format!("EVICT_{}", Uuid::new_v4().simple());
    let subject = format!("evict.{}", Uuid::new_v4().simple());
    let config = jetstream::stream::Config {
        name: name.clone(),
        subjects: vec![format!("{subject}.>")],
        discard: jetstream::stream::DiscardPolicy::New,
        max_messages: 100,
        ..Default::default()
    };
    js.create_stream(config.clone()).await.expect("create");
    for i in 0..60 {
        js.publish(format!("{subject}.{i}"), Bytes::from_static(b"x"))
            .await
            .expect("publish")
            .await
            .expect("ack");
    }
    let lowered = jetstream::stream::Config {
        max_messages: 14,
        ..config
    };
    let updated = js.update_stream(lowered).await;
    let messages = stream_info(&js, &name).await.state.messages;
    if h.is_2_9() {
        assert!(updated.is_ok());
        assert_eq!(
            messages, 14,
            "2.9.x evicts the oldest messages on a lowered max_msgs"
        );
    } else {
        assert_eq!(
            messages, 60,
            "the current line keeps the contents ({updated:?})"
        );
    }
    js.delete_stream(&name).await.expect("cleanup");
}

async fn account_budget_refuses_a_stream_that_does_not_fit(_h: &Harness) {
    let server = NatsServer::start_with(&NatsOptions {
        account_max_file: Some(20 * MIB),
        ..NatsOptions::default()
    });
    let mut prov = prov_for(&server.url());
    prov.body_quotas.max_bytes = 8 * MIB;
    prov.inbox_quotas.max_bytes = 2 * MIB;
    let account = JetStreamBackend::storage_account(&prov)
        .await
        .expect("account");
    assert_eq!(account.budget, Some(20 * MIB));
    assert_eq!(account.reserved, 0);
    let t1 = Uuid::new_v4();
    JetStreamBackend::provision(&prov, t1)
        .await
        .expect("8 MiB fits");
    JetStreamBackend::provision_inbox(&prov, t1)
        .await
        .expect("2 MiB fits");
    let t2 = Uuid::new_v4();
    JetStreamBackend::provision(&prov, t2)
        .await
        .expect("8 more fit");
    let account = JetStreamBackend::storage_account(&prov)
        .await
        .expect("account");
    assert_eq!(account.reserved, 18 * MIB, "Σ max_bytes × replicas");
    let t3 = Uuid::new_v4();
    let refused = JetStreamBackend::provision(&prov, t3).await;
    match refused {
        Err(BusError::InsufficientStorage {
            extra,
            per_replica,
            replicas,
            reserved,
            budget,
            ..
        }) => {
            assert_eq!(extra, 8 * MIB);
            assert_eq!((per_replica, replicas), (8 * MIB, 1));
            assert_eq!(reserved, 18 * MIB);
            assert_eq!(budget, Some(20 * MIB));
        }
        other => panic!("expected InsufficientStorage, got {other:?}"),
    }
    assert!(matches!(
        JetStreamBackend::connect(&prov, t3).await,
        Err(BusError::NotProvisioned { .. })
    ));
    // What the broker itself answers to a reservation beyond the budget: error code 10047,
    // the code the adapter maps to InsufficientStorage.
    let (_, js) = raw(&server.url(), &nats::provisioning_user()).await;
    let refused = js
        .create_stream(jetstream::stream::Config {
            name: format!("TOO_BIG_{}", t3.simple()),
            subjects: vec![format!("too-big.{}", t3.simple())],
            max_bytes: 64 * MIB as i64,
            storage: jetstream::stream::StorageType::File,
            ..Default::default()
        })
        .await
        .expect_err("beyond the account budget");
    match refused.kind() {
        jetstream::context::CreateStreamErrorKind::JetStream(e) => {
            assert_eq!(e.error_code().0, 10047, "{e}")
        }
        other => panic!("expected a JetStream API error, got {other:?}"),
    }
    // A raise the account cannot reserve is refused by check_update and update_quotas alike.
    let mut raise = prov.clone();
    raise.body_quotas.max_bytes = 16 * MIB;
    assert!(matches!(
        JetStreamBackend::check_update(&raise, t1, StreamKind::Bodies).await,
        Err(BusError::InsufficientStorage { .. })
    ));
    assert!(matches!(
        JetStreamBackend::update_quotas(&raise, t1, StreamKind::Bodies).await,
        Err(BusError::InsufficientStorage { .. })
    ));
    // A raise that fits goes through.
    let mut small_raise = prov.clone();
    small_raise.body_quotas.max_bytes = 10 * MIB;
    let p = JetStreamBackend::update_quotas(&small_raise, t1, StreamKind::Bodies)
        .await
        .expect("raise by 2 MiB");
    assert_eq!(p.limits.max_bytes, 10 * MIB);
    JetStreamBackend::deprovision(&prov, t1)
        .await
        .expect("deprovision");
    JetStreamBackend::deprovision(&prov, t1)
        .await
        .expect("deprovision twice: not found is success");
    let account = JetStreamBackend::storage_account(&prov)
        .await
        .expect("account");
    assert_eq!(account.reserved, 8 * MIB);
}

async fn r3_cluster_keeps_accepting_and_serving_with_one_node_stopped(_h: &Harness) {
    let mut cluster = tokio::task::spawn_blocking(NatsCluster::start)
        .await
        .expect("cluster");
    let urls = cluster.urls();
    let mut prov = prov_for(&urls[0]);
    prov.servers = urls.clone();
    prov.replicas = 3;
    prov.request_timeout = Duration::from_secs(5);
    let mut rt = rt_for(&urls[0]);
    rt.servers = urls.clone();
    rt.replicas = 3;
    let team = Uuid::new_v4();
    // The meta leader is elected shortly after the nodes are ready.
    until(Duration::from_secs(30), "R3 provision", || {
        let prov = prov.clone();
        async move {
            (JetStreamBackend::provision(&prov, team).await.is_ok()
                && JetStreamBackend::provision_inbox(&prov, team).await.is_ok())
            .then_some(())
        }
    })
    .await;
    let b = JetStreamBackend::connect(&rt, team).await.expect("connect");
    let mut stored = Vec::new();
    for i in 0..20 {
        let e = envelope(team, format!("r3 {i}"));
        let l = settle(&b, &e, Duration::from_secs(20)).await;
        assert_eq!(
            b.fetch(&l, e.message_id)
                .await
                .expect("read after ack")
                .as_deref(),
            Some(e.body.as_str())
        );
        stored.push((e, l));
    }
    cluster.node(0).kill();
    for i in 0..20 {
        let e = envelope(team, format!("r3 after {i}"));
        let l = settle(&b, &e, Duration::from_secs(30)).await;
        stored.push((e, l));
    }
    for (e, l) in &stored {
        let got = until(
            Duration::from_secs(20),
            "fetch on the surviving nodes",
            || {
                let b = b.clone();
                async move {
                    match b.fetch(l, e.message_id).await {
                        Ok(body) => Some(body),
                        Err(err) => {
                            assert!(err.is_retryable(), "{err:?}");
                            None
                        }
                    }
                }
            },
        )
        .await;
        assert_eq!(got.as_deref(), Some(e.body.as_str()));
    }
}
