//! End to end on the memory combination (ledger, bodies and inbox in memory): the app on
//! 127.0.0.1:0, driven through its HTTP API, with a manual clock for hand-out grace and ack wait.

mod common;

use std::collections::HashSet;
use std::time::Duration;

use common::scenarios;
use common::*;
use crewbus::client::uuid_of;
use crewbus_domain::Uuid;
use crewbus_ports::Inbox;
use reqwest::Method;
#[tokio::test]
async fn three_agents_converse_and_every_recipient_gets_every_message_exactly_once() {
    let app = MemoryApp::start(&["alice", "bob", "carol"]).await;
    scenarios::three_agents_converse_and_every_recipient_gets_every_message_exactly_once(&app)
        .await;
    app.finish_test().await;
}

#[tokio::test]
async fn an_unconfirmed_fetch_is_redelivered_after_the_grace_and_never_after_confirm() {
    let app = MemoryApp::start(&["alice", "bob"]).await;
    scenarios::an_unconfirmed_fetch_is_redelivered_after_the_grace_and_never_after_confirm(&app)
        .await;
    app.finish_test().await;
}

#[tokio::test]
async fn a_crash_between_commit_and_ack_redelivers_and_is_recognised() {
    let app = MemoryApp::start(&["alice", "bob"]).await;
    scenarios::a_crash_between_commit_and_ack_redelivers_and_is_recognised(&app).await;
    app.finish_test().await;
}

#[tokio::test]
async fn a_deleted_consumer_is_reported_absent_and_delivery_continues() {
    let app = MemoryApp::start(&["alice", "bob"]).await;
    let [alice, bob] = &app.agents[..] else {
        unreachable!()
    };
    let conv = uuid_of(
        &alice
            .client
            .create_conversation("c", &[bob.id])
            .await
            .unwrap()["id"],
    );
    alice.client.send(conv, "r1", "one").await.unwrap();
    let got = fetch_n(bob, 1).await; // creates the consumer
    bob.client.confirm(&delivery_ids(&got)).await.unwrap();
    for k in 2..=4 {
        alice
            .client
            .send(conv, &format!("r{k}"), "more")
            .await
            .unwrap();
    }
    eventually("references published", 10, || async {
        let s = app
            .parts
            .backends
            .team_inbox(app.team.id)
            .inbox_status(&bob.recipient_key)
            .await
            .unwrap();
        (s.pending == 3).then_some(())
    })
    .await;
    assert!(
        app.parts
            .backends
            .team_inbox(app.team.id)
            .delete_consumer(&bob.recipient_key)
    );
    let (status, v) = bob
        .client
        .call(Method::GET, "/v1/inbox/status", None)
        .await
        .unwrap();
    assert_eq!(status, 200);
    assert_eq!(v["present"], false, "{v}");
    let got = fetch_n(bob, 3).await;
    let ids: HashSet<Uuid> = message_ids(&got).into_iter().collect();
    assert_eq!(ids.len(), 3);
    let r = bob.client.confirm(&delivery_ids(&got)).await.unwrap();
    assert!(r.iter().all(|r| r["outcome"] == "confirmed"));
    app.advance(Duration::from_secs(120));
    assert!(bob.client.fetch(10).await.unwrap().is_empty());
}

#[tokio::test]
async fn an_overflowed_inbox_is_topped_up_from_the_ledger() {
    let config = test_config();
    let mut memory = crewbus::compose::memory_config(&config);
    memory.inbox.max_messages = 3; // discard-old beyond 3 references
    let app = MemoryApp::start_with(config, memory, &["alice", "bob"]).await;
    let [alice, bob] = &app.agents[..] else {
        unreachable!()
    };
    let conv = uuid_of(
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
    // Wait until every message is stored and its reference was published (7 were discarded).
    eventually("references published", 10, || async {
        let h = app.bus.health().await;
        (h.publication_pending == Some(0) && h.inbox_events_pending == Some(0)).then_some(())
    })
    .await;
    assert_eq!(
        app.parts
            .backends
            .team_inbox(app.team.id)
            .stored_references(),
        3
    );
    // The inbox has 3; past the top-up delay the ledger hands out the other 7.
    app.advance(Duration::from_secs(3));
    let got = fetch_n(bob, 10).await;
    let bodies: HashSet<String> = got
        .iter()
        .map(|d| d["body"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(bodies.len(), 10, "every message exactly once");
    bob.client.confirm(&delivery_ids(&got)).await.unwrap();
    app.advance(Duration::from_secs(120));
    assert!(bob.client.fetch(100).await.unwrap().is_empty());
}

#[tokio::test]
async fn history_stops_before_a_pending_message_and_an_outage_queues_sends() {
    let app = MemoryApp::start(&["alice", "bob"]).await;
    let [alice, bob] = &app.agents[..] else {
        unreachable!()
    };
    let conv = uuid_of(
        &alice
            .client
            .create_conversation("c", &[bob.id])
            .await
            .unwrap()["id"],
    );
    alice.client.send(conv, "r1", "one").await.unwrap();
    eventually("first stored", 10, || async {
        let h = alice.client.history(conv, 0, 10).await.unwrap();
        (h["messages"][0]["absence"].is_null() && h["messages"][0]["body"] == "one").then_some(())
    })
    .await;
    // The body backend goes down: sends are still accepted and queued in the outbox.
    app.parts
        .backends
        .bodies(app.team.id)
        .faults()
        .fail_next_publishes(1_000);
    let v = alice.client.send(conv, "r2", "two").await.unwrap();
    assert_eq!(v["message"]["publication"], "pending_publication");
    eventually("a failed attempt", 10, || async {
        let h = app.bus.health().await;
        (app.bus
            .metrics()
            .relay_retried
            .load(std::sync::atomic::Ordering::Relaxed)
            > 0
            && h.publication_pending == Some(1))
        .then_some(())
    })
    .await;
    let h = bob.client.history(conv, 0, 10).await.unwrap();
    let items = h["messages"].as_array().unwrap();
    assert_eq!(items.len(), 2, "{h}");
    assert_eq!(items[1]["absence"], "pending");
    assert!(items[1]["body"].is_null());
    assert_eq!(
        h["next_after_seq"], 1,
        "the cursor stays before the pending message"
    );
    // The outage ends: after the backoff the relay stores it and history moves on.
    app.parts.backends.bodies(app.team.id).faults().clear();
    app.advance(Duration::from_secs(5));
    let h = eventually("second stored", 10, || async {
        app.advance(Duration::from_secs(1));
        let h = bob.client.history(conv, 1, 10).await.unwrap();
        (h["messages"][0]["body"] == "two").then_some(h)
    })
    .await;
    assert_eq!(h["next_after_seq"], 2);
    let got = fetch_n(bob, 2).await;
    assert_eq!(got.len(), 2);
}

#[tokio::test]
async fn a_lost_puback_is_reconciled_not_duplicated() {
    let app = MemoryApp::start(&["alice", "bob"]).await;
    let [alice, bob] = &app.agents[..] else {
        unreachable!()
    };
    let conv = uuid_of(
        &alice
            .client
            .create_conversation("c", &[bob.id])
            .await
            .unwrap()["id"],
    );
    let bodies = app.parts.backends.bodies(app.team.id);
    bodies.faults().lose_next_confirmations(1);
    alice.client.send(conv, "r1", "one").await.unwrap();
    let got = eventually("stored after reconcile", 10, || async {
        app.advance(Duration::from_secs(1));
        let got = bob.client.fetch(10).await.unwrap();
        (!got.is_empty()).then_some(got)
    })
    .await;
    assert_eq!(got[0]["body"], "one");
    assert_eq!(bodies.stored_messages(), 1, "the body was stored once");
}

#[tokio::test]
async fn health_metrics_and_openapi() {
    let app = MemoryApp::start(&["alice"]).await;
    let anon = app.anonymous();
    let (status, v) = anon.call(Method::GET, "/health", None).await.unwrap();
    assert_eq!((status, v["status"].as_str()), (200, Some("ok")));
    assert_eq!(v["broker"], "not_configured");
    app.parts.ledger.set_unavailable(true);
    let (status, v) = anon.call(Method::GET, "/health", None).await.unwrap();
    assert_eq!((status, v["ledger"].as_str()), (503, Some("unavailable")));
    app.parts.ledger.set_unavailable(false);
    let (status, doc) = anon.call(Method::GET, "/openapi.json", None).await.unwrap();
    assert_eq!(status, 200);
    for path in [
        "/v1/conversations/{id}/messages",
        "/v1/inbox/fetch",
        "/v1/inbox/confirm",
        "/health",
    ] {
        assert!(doc["paths"][path].is_object(), "{path} missing");
    }
    assert!(doc["components"]["securitySchemes"]["bearer"].is_object());
    let resp = reqwest::get(format!("{}/metrics", app.server.url()))
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let text = resp.text().await.unwrap();
    for name in [
        "crewbus_publication_pending",
        "crewbus_publication_failed",
        "crewbus_publication_oldest_pending_age_seconds",
        "crewbus_deliveries_total",
        "crewbus_relay_latency_seconds_bucket",
        "crewbus_delivery_latency_seconds_bucket",
        "crewbus_inbox_fetch_latency_seconds_bucket",
    ] {
        assert!(text.contains(name), "{name} missing");
    }
}

#[tokio::test]
async fn bad_input_of_every_kind_gets_a_clear_error() {
    let app = MemoryApp::start(&["alice", "bob"]).await;
    scenarios::bad_input_of_every_kind_gets_a_clear_error(&app).await;
    app.finish_test().await;
}

#[tokio::test]
async fn one_teams_unsendable_messages_never_block_another_team() {
    let app = MemoryApp::start(&["alice", "bob"]).await;
    let [alice, bob] = &app.agents[..] else {
        unreachable!()
    };
    let conv = uuid_of(
        &alice
            .client
            .create_conversation("c", &[bob.id])
            .await
            .unwrap()["id"],
    );
    // Team A's body store refuses everything for now.
    app.parts
        .backends
        .bodies(app.team.id)
        .faults()
        .fail_next_publishes(1_000_000);
    for k in 0..20 {
        alice
            .client
            .send(conv, &format!("a{k}"), "stuck")
            .await
            .unwrap();
    }
    // Team B keeps flowing.
    let carol = app.other_team_agent("carol").await;
    let team_b = app.bus.find_team("team-carol").await.unwrap();
    let dave = app.bus.add_agent(team_b.id, "dave").await.unwrap();
    let dave_client = crewbus::client::ApiClient::new(app.server.url(), Some(dave.token.clone()));
    let conv_b = uuid_of(
        &carol
            .client
            .create_conversation("b", &[dave.agent.id])
            .await
            .unwrap()["id"],
    );
    for k in 0..5 {
        carol
            .client
            .send(conv_b, &format!("b{k}"), "flows")
            .await
            .unwrap();
    }
    let dave_agent = TestAgent {
        name: "dave".into(),
        id: dave.agent.id,
        recipient_key: dave.agent.recipient_key.clone(),
        token: dave.token.clone(),
        client: dave_client,
    };
    let got = fetch_n(&dave_agent, 5).await;
    assert!(got.iter().all(|d| d["body"] == "flows"));
    // Team A's messages are still pending, not failed, and nothing reached bob.
    let h = bob.client.history(conv, 0, 100).await.unwrap();
    assert_eq!(h["messages"][0]["absence"], "pending");
    assert!(bob.client.fetch(10).await.unwrap().is_empty());
    app.finish_test().await;
}

#[tokio::test]
async fn runs_get_the_bus_records_of_send_confirm_and_acknowledge() {
    let app = MemoryApp::start(&["alice", "bob"]).await;
    scenarios::runs_get_the_bus_records_of_send_confirm_and_acknowledge(&app).await;
    app.finish_test().await;
}

#[tokio::test]
async fn retention_removes_old_bodies_and_history_explains_them() {
    let mut config = test_config();
    config.bus.retention_days = 1;
    let memory = crewbus::compose::memory_config(&config);
    let app = MemoryApp::start_with(config, memory, &["alice", "bob"]).await;
    let [alice, bob] = &app.agents[..] else {
        unreachable!()
    };
    let conv = uuid_of(
        &alice
            .client
            .create_conversation("c", &[bob.id])
            .await
            .unwrap()["id"],
    );
    alice.client.send(conv, "old", "old news").await.unwrap();
    eventually("stored", 10, || async {
        (app.bus.health().await.publication_pending == Some(0)).then_some(())
    })
    .await;
    app.advance(Duration::from_secs(2 * 86_400));
    alice.client.send(conv, "new", "fresh").await.unwrap();
    eventually("stored", 10, || async {
        (app.bus.health().await.publication_pending == Some(0)).then_some(())
    })
    .await;
    let run = app.bus.retention_run().await.unwrap();
    assert_eq!((run.removed, run.marked, run.failed), (1, 1, 0));
    let h = bob.client.history(conv, 0, 10).await.unwrap();
    assert_eq!(h["messages"][0]["absence"], "retained");
    assert!(h["messages"][0]["body"].is_null());
    assert_eq!(h["messages"][1]["body"], "fresh");
    assert_eq!(
        h["next_after_seq"], 2,
        "retained messages do not stop the cursor"
    );
    // A second run removes nothing.
    assert_eq!(app.bus.retention_run().await.unwrap().removed, 0);
    app.finish_test().await;
}
