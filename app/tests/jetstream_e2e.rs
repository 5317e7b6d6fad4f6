//! End to end on Postgres ledger + JetStream bodies and inbox, on real servers (`DATABASE_URL`,
//! and `NATS_URL` or nats://127.0.0.1:4222). The team's streams are provisioned per test (named
//! after its random team id) and removed afterwards.

mod common;

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
