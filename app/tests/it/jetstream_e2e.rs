//! End to end on Postgres ledger + JetStream bodies and inbox, on real servers (`DATABASE_URL`,
//! and `NATS_URL` or a private nats-server per test). The team's streams are provisioned per test (named
//! after its random team id) and removed afterwards.

use crate::common;

use common::*;

#[tokio::test]
async fn three_agents_converse_and_every_recipient_gets_every_message_exactly_once() {
    let app = TestApp::postgres_jetstream("js_three_agents", &["alice", "bob", "carol"]).await;
    scenarios::three_agents_converse_and_every_recipient_gets_every_message_exactly_once(&app)
        .await;
    app.finish_test().await;
}

#[tokio::test]
async fn an_unconfirmed_fetch_is_redelivered_after_the_grace_and_never_after_confirm() {
    let app = TestApp::postgres_jetstream("js_redelivery", &["alice", "bob"]).await;
    scenarios::an_unconfirmed_fetch_is_redelivered_after_the_grace_and_never_after_confirm(&app)
        .await;
    app.finish_test().await;
}

#[tokio::test]
async fn a_crash_between_commit_and_ack_redelivers_and_is_recognised() {
    let app = TestApp::postgres_jetstream("js_crash_commit_ack", &["alice", "bob"]).await;
    scenarios::a_crash_between_commit_and_ack_redelivers_and_is_recognised(&app).await;
    app.finish_test().await;
}

#[tokio::test]
async fn bad_input_of_every_kind_gets_a_clear_error() {
    let app = TestApp::postgres_jetstream("js_bad_input", &["alice", "bob"]).await;
    scenarios::bad_input_of_every_kind_gets_a_clear_error(&app).await;
    app.finish_test().await;
}

#[tokio::test]
async fn health_reports_the_broker_and_bodies_are_stored_by_the_relay() {
    let app = TestApp::postgres_jetstream("js_health", &["alice", "bob"]).await;
    let h = app.bus.health().await;
    assert_eq!((h.status, h.broker), ("ok", "ok"));
    let [alice, bob] = &app.agents[..] else {
        unreachable!()
    };
    let conv = crewbus::client::uuid_of(
        &alice
            .client
            .create_conversation("c", &[bob.id])
            .await
            .unwrap()["id"],
    );
    let v = alice
        .client
        .send(conv, "r1", "via jetstream")
        .await
        .unwrap();
    assert_eq!(v["message"]["backend"], "jetstream");
    let got = fetch_n(bob, 1).await;
    assert_eq!(got[0]["body"], "via jetstream");
    let h = bob.client.history(conv, 0, 10).await.unwrap();
    assert_eq!(h["messages"][0]["body"], "via jetstream");
    app.finish_test().await;
}

#[tokio::test]
async fn a_broker_outage_queues_sends_and_they_are_stored_after_it_returns() {
    let mut nats = crewbus_conformance::nats::NatsServer::start();
    let app = TestApp::postgres_private_jetstream("js_outage", &["alice", "bob"], &nats).await;
    let [alice, bob] = &app.agents[..] else {
        unreachable!()
    };
    let conv = crewbus::client::uuid_of(
        &alice
            .client
            .create_conversation("c", &[bob.id])
            .await
            .unwrap()["id"],
    );
    // A 1 MiB body fits a server with max_payload 2 MB.
    let max = "m".repeat(1024 * 1024);
    alice.client.send(conv, "big", &max).await.unwrap();
    let got = fetch_n(bob, 1).await;
    assert_eq!(got[0]["body"].as_str().unwrap().len(), 1024 * 1024);
    bob.client.confirm(&delivery_ids(&got)).await.unwrap();

    nats.kill();
    for k in 0..3 {
        let v = alice
            .client
            .send(
                conv,
                &format!("during-{k}"),
                &format!("sent during the outage {k}"),
            )
            .await
            .unwrap();
        assert_eq!(v["message"]["publication"], "pending_publication");
    }
    let health = app.bus.health().await;
    assert_eq!((health.status, health.broker), ("ok", "unreachable"));
    eventually("a failed relay attempt", 15, || async {
        (app.bus.metrics().relay_retried.get() > 0).then_some(())
    })
    .await;

    // History during the outage: the stored body is an explained absence, never a failed page,
    // and the page stops at the first pending message.
    let h = bob.client.history(conv, 0, 10).await.unwrap();
    let items = h["messages"].as_array().unwrap();
    assert_eq!(items[0]["absence"], "unavailable", "{h}");
    assert!(items[0]["body"].is_null());
    assert_eq!(items[1]["absence"], "pending");
    assert_eq!(h["next_after_seq"], 1);

    nats.restart();
    let mut bodies = std::collections::HashSet::new();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while bodies.len() < 3 {
        assert!(
            std::time::Instant::now() < deadline,
            "only {} queued sends arrived after the broker returned",
            bodies.len()
        );
        app.advance(std::time::Duration::from_secs(5)); // past the relay's backoff
        let got = bob.client.fetch(10).await.unwrap();
        if got.is_empty() {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            continue;
        }
        for d in &got {
            assert!(
                bodies.insert(d["body"].as_str().unwrap().to_owned()),
                "delivered twice"
            );
        }
        bob.client.confirm(&delivery_ids(&got)).await.unwrap();
    }
    let h = bob.client.history(conv, 0, 10).await.unwrap();
    assert_eq!(h["next_after_seq"], 4, "{h}");
    assert_eq!(app.bus.health().await.broker, "ok");
    app.finish_test().await;
}

#[tokio::test]
async fn a_body_above_the_servers_effective_limit_is_413_not_a_failed_message() {
    let nats = crewbus_conformance::nats::NatsServer::start_with(
        &crewbus_conformance::nats::NatsOptions {
            max_payload: Some("1MB".into()),
            ..Default::default()
        },
    );
    let app = TestApp::postgres_private_jetstream("js_payload", &["alice", "bob"], &nats).await;
    let [alice, bob] = &app.agents[..] else {
        unreachable!()
    };
    let conv = crewbus::client::uuid_of(
        &alice
            .client
            .create_conversation("c", &[bob.id])
            .await
            .unwrap()["id"],
    );
    // 1 MiB fits the bus contract but not a server with max_payload 1 MB plus headers.
    let e = alice
        .client
        .send(conv, "big", &"x".repeat(1024 * 1024))
        .await
        .unwrap_err();
    assert_eq!(
        (e.status, e.code.as_str()),
        (413, "too_large"),
        "{}",
        e.message
    );
    // A body that fits is stored and delivered.
    let fits = "y".repeat(512 * 1024);
    alice.client.send(conv, "fits", &fits).await.unwrap();
    let got = fetch_n(bob, 1).await;
    assert_eq!(got[0]["body"].as_str().unwrap().len(), fits.len());
    let h = bob.client.history(conv, 0, 10).await.unwrap();
    assert_eq!(
        h["messages"].as_array().unwrap().len(),
        1,
        "nothing recorded for the 413"
    );
    app.finish_test().await;
}

#[tokio::test]
async fn an_overflowed_inbox_stream_is_topped_up_from_the_ledger() {
    let nats = crewbus_conformance::nats::NatsServer::start();
    let app = TestApp::postgres_private_jetstream_with(
        "js_overflow",
        &["alice", "bob"],
        &nats,
        |n| n.inbox_max_messages = 3, // discard-old beyond 3 references
    )
    .await;
    let [alice, bob] = &app.agents[..] else {
        unreachable!()
    };
    let conv = crewbus::client::uuid_of(
        &alice
            .client
            .create_conversation("c", &[bob.id])
            .await
            .unwrap()["id"],
    );
    for k in 0..10 {
        alice
            .client
            .send(conv, &format!("r{k}"), &format!("m{k}"))
            .await
            .unwrap();
    }
    eventually(
        "every body stored and every reference published",
        20,
        || async {
            let h = app.bus.health().await;
            (h.publication_pending == Some(0) && h.inbox_events_pending == Some(0)).then_some(())
        },
    )
    .await;
    let inbox =
        crewbus_ports::Backends::inbox(&*app.bus.ports().backends, app.team.id, "jetstream")
            .await
            .unwrap();
    let status = inbox.inbox_status(&bob.recipient_key).await.unwrap();
    assert!(
        status.pending <= 3,
        "the inbox stream keeps at most 3: {status:?}"
    );
    app.advance(std::time::Duration::from_secs(3)); // past the top-up delay
    let got = fetch_n(bob, 10).await;
    let bodies: std::collections::HashSet<_> = got
        .iter()
        .map(|d| d["body"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(bodies.len(), 10, "every message exactly once");
    bob.client.confirm(&delivery_ids(&got)).await.unwrap();
    app.advance(std::time::Duration::from_secs(120));
    assert!(bob.client.fetch(100).await.unwrap().is_empty());
    app.finish_test().await;
}

#[tokio::test]
async fn a_deleted_consumer_is_reported_absent_and_rebuilt() {
    let nats = crewbus_conformance::nats::NatsServer::start();
    let app =
        TestApp::postgres_private_jetstream("js_deleted_consumer", &["alice", "bob"], &nats).await;
    let [alice, bob] = &app.agents[..] else {
        unreachable!()
    };
    let conv = crewbus::client::uuid_of(
        &alice
            .client
            .create_conversation("c", &[bob.id])
            .await
            .unwrap()["id"],
    );
    alice.client.send(conv, "r0", "before").await.unwrap();
    let got = fetch_n(bob, 1).await; // creates bob's consumer
    bob.client.confirm(&delivery_ids(&got)).await.unwrap();
    for k in 1..=3 {
        alice
            .client
            .send(conv, &format!("r{k}"), "after")
            .await
            .unwrap();
    }
    eventually("references published", 20, || async {
        (app.bus.health().await.inbox_events_pending == Some(0)).then_some(())
    })
    .await;
    // An operator (or an accident) deletes bob's consumer.
    let js = crewbus_conformance::nats::provisioning_user()
        .jetstream(&nats.url())
        .await;
    let stream = format!("CREWBUS_I_{}", app.team.id.simple());
    js.get_stream(&stream)
        .await
        .unwrap()
        .delete_consumer(&bob.recipient_key)
        .await
        .unwrap();
    let (status, v) = bob
        .client
        .call(reqwest::Method::GET, "/v1/inbox/status", None)
        .await
        .unwrap();
    assert_eq!((status, v["present"].as_bool()), (200, Some(false)), "{v}");
    // Fetching rebuilds it; every message arrives exactly once.
    app.advance(std::time::Duration::from_secs(3));
    let got = fetch_n(bob, 3).await;
    let ids: std::collections::HashSet<_> = message_ids(&got).into_iter().collect();
    assert_eq!(ids.len(), 3);
    bob.client.confirm(&delivery_ids(&got)).await.unwrap();
    app.advance(std::time::Duration::from_secs(120));
    assert!(bob.client.fetch(100).await.unwrap().is_empty());
    app.finish_test().await;
}

#[tokio::test]
async fn a_deleted_inbox_stream_keeps_deliveries_flowing_from_the_ledger() {
    let nats = crewbus_conformance::nats::NatsServer::start();
    let app =
        TestApp::postgres_private_jetstream("js_deleted_inbox", &["alice", "bob"], &nats).await;
    let [alice, bob] = &app.agents[..] else {
        unreachable!()
    };
    let conv = crewbus::client::uuid_of(
        &alice
            .client
            .create_conversation("c", &[bob.id])
            .await
            .unwrap()["id"],
    );
    alice.client.send(conv, "r0", "before").await.unwrap();
    let got = fetch_n(bob, 1).await; // creates bob's consumer
    bob.client.confirm(&delivery_ids(&got)).await.unwrap();
    // An operator (or an accident) deletes the team's inbox stream.
    let js = crewbus_conformance::nats::provisioning_user()
        .jetstream(&nats.url())
        .await;
    let stream = format!("CREWBUS_I_{}", app.team.id.simple());
    assert!(js.delete_stream(&stream).await.unwrap().success);
    // Once the registry revalidates the team (every 5 s), it reports the inbox missing.
    eventually("the inbox reported not provisioned", 20, || async {
        matches!(
            crewbus_ports::Backends::inbox(&*app.bus.ports().backends, app.team.id, "jetstream")
                .await,
            Err(crewbus_domain::BusError::NotProvisioned { .. })
        )
        .then_some(())
    })
    .await;
    for k in 1..=3 {
        alice
            .client
            .send(conv, &format!("r{k}"), &format!("during {k}"))
            .await
            .unwrap();
    }
    eventually("every body stored", 20, || async {
        (app.bus.health().await.publication_pending == Some(0)).then_some(())
    })
    .await;
    // Before anyone provisions the inbox again: the bodies are readable and the ledger tops
    // bob up with every message, once.
    app.advance(std::time::Duration::from_secs(3)); // past the top-up delay
    let got = fetch_n(bob, 3).await;
    let mut bodies: Vec<_> = got
        .iter()
        .map(|d| d["body"].as_str().unwrap().to_owned())
        .collect();
    bodies.sort();
    assert_eq!(bodies, ["during 1", "during 2", "during 3"]);
    let failures = app.bus.metrics().inbox_fetch_failures.get();
    assert!(failures > 0, "the inbox failure is counted");
    // Receipts are committed (no reference to ack: nothing fails).
    let results = bob.client.confirm(&delivery_ids(&got)).await.unwrap();
    assert!(
        results.iter().all(|r| r["outcome"] == "confirmed"),
        "{results:?}"
    );
    assert!(js.get_stream(&stream).await.is_err(), "still missing");
    // Provisioned again: the late references are recognised, never delivered twice.
    crewbus::compose::stream_admin(&app.config)
        .unwrap()
        .provision_inbox(app.team.id)
        .await
        .unwrap();
    app.advance(std::time::Duration::from_secs(120));
    eventually("references settled", 20, || async {
        (app.bus.health().await.inbox_events_pending == Some(0)).then_some(())
    })
    .await;
    assert!(bob.client.fetch(100).await.unwrap().is_empty());
    alice.client.send(conv, "r4", "after").await.unwrap();
    let got = fetch_n(bob, 1).await;
    assert_eq!(got[0]["body"], "after");
    app.finish_test().await;
}

#[tokio::test]
async fn team_add_on_jetstream_needs_provision_and_provisions_before_moving() {
    use crewbus::cli::{BackendChoice, TeamCommand};
    use crewbus_domain::{BusError, StreamKind};
    let app = TestApp::postgres_jetstream("js_team_add", &["alice"]).await;
    let pg = crewbus_conformance::postgres::database_url_options();
    let mut config = app.config.clone();
    config.database = Some(crewbus::config::DatabaseConfig {
        url: crewbus_domain::Secret::new(format!(
            "postgres://{}@{}:{}/{}",
            pg.get_username(),
            pg.get_host(),
            pg.get_port(),
            app.db.as_ref().unwrap().name()
        )),
        max_connections: 2,
        migrate_on_start: false,
        listen_url: None,
    });
    let add = |name: &str, backend: Option<BackendChoice>, provision: bool| TeamCommand::Add {
        name: name.into(),
        backend,
        inbox: backend,
        provision,
    };
    let refused = crewbus::commands::team(
        config.clone(),
        add("js-refused", Some(BackendChoice::Jetstream), false),
        true,
    )
    .await;
    assert!(
        matches!(refused, Err(BusError::NotProvisioned { .. })),
        "{refused:?}"
    );
    assert!(matches!(
        app.bus.find_team("js-refused").await,
        Err(BusError::NotFound { .. })
    ));
    let refused = crewbus::commands::team(
        config.clone(),
        add("pg-provision", Some(BackendChoice::Postgres), true),
        true,
    )
    .await;
    assert!(
        matches!(refused, Err(BusError::Invalid { .. })),
        "{refused:?}"
    );
    crewbus::commands::team(
        config.clone(),
        add("js-provisioned", Some(BackendChoice::Jetstream), true),
        true,
    )
    .await
    .unwrap();
    let team = app.bus.find_team("js-provisioned").await.unwrap();
    assert_eq!(
        (team.body_backend.as_str(), team.inbox.as_str()),
        ("jetstream", "jetstream")
    );
    let admin = crewbus::compose::stream_admin(&app.config).unwrap();
    for kind in [StreamKind::Bodies, StreamKind::Inbox] {
        admin.check_update(team.id, kind).await.unwrap();
    }
    admin.deprovision(team.id).await.unwrap();
    app.finish_test().await;
}

#[tokio::test]
async fn the_operators_storage_view_shows_the_teams_streams_against_their_quotas() {
    let app = TestApp::postgres_jetstream("js_admin_storage", &["alice", "bob"]).await;
    let [alice, bob] = &app.agents[..] else {
        unreachable!()
    };
    let conv = crewbus::client::uuid_of(
        &alice
            .client
            .create_conversation("c", &[bob.id])
            .await
            .unwrap()["id"],
    );
    alice
        .client
        .send(conv, "r1", "kept by jetstream")
        .await
        .unwrap();
    fetch_n(bob, 1).await;
    let scope = crewbus_domain::OperatorScope::Everything;
    let storage = app.bus.admin_storage(&scope).await.unwrap();
    let team = storage
        .iter()
        .find(|t| t.team.id == app.team.id)
        .expect("the team is listed");
    // The ledger's count: one body on jetstream.
    let js = team
        .uses
        .iter()
        .find(|u| u.backend == "jetstream")
        .expect("jetstream use");
    assert_eq!(js.messages, 1);
    assert_eq!(js.bytes, "kept by jetstream".len() as u64);
    // The broker's streams: both, with their limits and what they hold.
    let kinds: Vec<_> = team.streams.iter().map(|s| s.kind).collect();
    assert!(
        kinds.contains(&crewbus_domain::StreamKind::Bodies)
            && kinds.contains(&crewbus_domain::StreamKind::Inbox),
        "{:?}",
        team.streams
    );
    let bodies = team
        .streams
        .iter()
        .find(|s| s.kind == crewbus_domain::StreamKind::Bodies)
        .unwrap();
    assert!(
        bodies.limits.max_bytes > 0 && bodies.messages >= 1,
        "{bodies:?}"
    );
    app.finish_test().await;
}

/// Bodies kept in JetStream are indexed by the index worker (read back from the streams) and
/// found by a member, within the stated lag bound (about 2 s; polled up to 20 s under load).
#[tokio::test]
async fn bodies_kept_in_jetstream_are_indexed_and_found() {
    let app = TestApp::postgres_jetstream("js_search", &["alice", "bob", "carol"]).await;
    let [alice, bob, carol] = &app.agents[..] else {
        unreachable!()
    };
    let conv = crewbus::client::uuid_of(
        &alice
            .client
            .create_conversation("release train", &[bob.id])
            .await
            .unwrap()["id"],
    );
    let v = alice
        .client
        .send(conv, "r1", "the canary rolled back at noon")
        .await
        .unwrap();
    assert_eq!(v["message"]["backend"], "jetstream");
    let ledger = &app.bus.ports().ledger;
    let reader = ledger.agent(app.team.id, bob.id).await.unwrap();
    let outsider = ledger.agent(app.team.id, carol.id).await.unwrap();
    let query = crewbus_domain::SearchQuery::new("\"rolled back\" canary");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let page = loop {
        let page = app.bus.search(&reader, &query).await.unwrap();
        if !page.hits.is_empty() {
            break page;
        }
        assert!(std::time::Instant::now() < deadline, "never indexed");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    assert_eq!(page.hits.len(), 1);
    assert_eq!(page.hits[0].conversation_title, "release train");
    let marked: Vec<&str> = page.hits[0]
        .snippet
        .iter()
        .filter(|s| s.matched)
        .map(|s| s.text.as_str())
        .collect();
    assert_eq!(marked, ["canary", "rolled", "back"]);
    assert!(
        app.bus
            .search(&outsider, &query)
            .await
            .unwrap()
            .hits
            .is_empty()
    );
    app.finish_test().await;
}
