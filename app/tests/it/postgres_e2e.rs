//! End to end on the Postgres combination (ledger, journal, inbox and bodies in Postgres) on a
//! real server (`DATABASE_URL`; a fresh database per test, dropped when the test passes). The
//! same scenarios as the memory combination, driven through the HTTP API.

use crate::common;

use common::*;

#[tokio::test]
async fn three_agents_converse_and_every_recipient_gets_every_message_exactly_once() {
    let app = TestApp::postgres("pg_three_agents", &["alice", "bob", "carol"]).await;
    scenarios::three_agents_converse_and_every_recipient_gets_every_message_exactly_once(&app)
        .await;
    app.finish_test().await;
}

#[tokio::test]
async fn an_unconfirmed_fetch_is_redelivered_after_the_grace_and_never_after_confirm() {
    let app = TestApp::postgres("pg_redelivery", &["alice", "bob"]).await;
    scenarios::an_unconfirmed_fetch_is_redelivered_after_the_grace_and_never_after_confirm(&app)
        .await;
    app.finish_test().await;
}

#[tokio::test]
async fn a_crash_between_commit_and_ack_redelivers_and_is_recognised() {
    let app = TestApp::postgres("pg_crash_commit_ack", &["alice", "bob"]).await;
    scenarios::a_crash_between_commit_and_ack_redelivers_and_is_recognised(&app).await;
    app.finish_test().await;
}

#[tokio::test]
async fn two_agents_may_use_one_request_id() {
    let app = TestApp::postgres("pg_one_request_id", &["alice", "bob"]).await;
    scenarios::two_agents_may_use_one_request_id(&app).await;
    app.finish_test().await;
}

#[tokio::test]
async fn bad_input_of_every_kind_gets_a_clear_error() {
    let app = TestApp::postgres("pg_bad_input", &["alice", "bob"]).await;
    scenarios::bad_input_of_every_kind_gets_a_clear_error(&app).await;
    app.finish_test().await;
}

#[tokio::test]
async fn sends_are_stored_in_the_send_transaction_and_history_reads_them_back() {
    let app = TestApp::postgres("pg_history", &["alice", "bob"]).await;
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
        .send(conv, "r1", "stored at once")
        .await
        .unwrap();
    assert_eq!(v["message"]["publication"], "stored");
    assert_eq!(v["message"]["backend"], "postgres");
    let h = bob.client.history(conv, 0, 10).await.unwrap();
    assert_eq!(h["messages"][0]["body"], "stored at once");
    assert_eq!(h["next_after_seq"], 1);
    let got = fetch_n(bob, 1).await;
    assert_eq!(got[0]["body"], "stored at once");
    app.finish_test().await;
}

#[tokio::test]
async fn runs_get_the_bus_records_of_send_confirm_and_acknowledge() {
    let app = TestApp::postgres("pg_runs", &["alice", "bob"]).await;
    scenarios::runs_get_the_bus_records_of_send_confirm_and_acknowledge(&app).await;
    app.finish_test().await;
}

#[tokio::test]
async fn a_postgres_restart_is_unhealthy_then_recovers_with_nothing_lost() {
    use crewbus_conformance::postgres::PgCluster;
    let mut cluster = PgCluster::start().await;
    let mut config = test_config();
    config.database = Some(crewbus::config::DatabaseConfig {
        url: crewbus_domain::Secret::new(cluster.url()),
        max_connections: 4,
        migrate_on_start: true,
        listen_url: None,
    });
    let clock = crewbus_memory::ManualClock::new(chrono::Utc::now());
    let composed = crewbus::compose::compose_as(
        &config,
        crewbus::compose::Opener::Operator,
        std::sync::Arc::new(clock.clone()),
    )
    .await
    .unwrap();
    let bus = composed.bus.clone();
    let team = bus.add_team("t", None, None).await.unwrap();
    let alice = bus.add_agent(team.id, "alice").await.unwrap();
    let bob = bus.add_agent(team.id, "bob").await.unwrap();
    let server = crewbus::server::Server::start(
        bus.clone(),
        "127.0.0.1:0".parse().unwrap(),
        crewbus::shutdown::Shutdown::new(),
    )
    .await
    .unwrap();
    let a = crewbus::client::ApiClient::new(server.url(), Some(alice.token.clone()));
    let b = crewbus::client::ApiClient::new(server.url(), Some(bob.token.clone()));
    let anon = crewbus::client::ApiClient::new(server.url(), None);
    let conv =
        crewbus::client::uuid_of(&a.create_conversation("c", &[bob.agent.id]).await.unwrap()["id"]);
    a.send(conv, "before", "before the restart").await.unwrap();

    cluster.stop(true).await; // an abort, as in a crash
    let (status, v) = anon
        .call(reqwest::Method::GET, "/health", None)
        .await
        .unwrap();
    assert_eq!((status, v["ledger"].as_str()), (503, Some("unavailable")));
    // Requests fail with a retryable error (503), never a wrong answer.
    let e = b.fetch(10).await.unwrap_err();
    assert_eq!(e.status, 503, "{}", e.message);
    assert!(
        matches!(e.code.as_str(), "unavailable" | "timeout"),
        "{}",
        e.code
    );

    cluster.restart().await;
    let v = eventually("the ledger back", 30, || async {
        let (status, v) = anon
            .call(reqwest::Method::GET, "/health", None)
            .await
            .unwrap();
        (status == 200).then_some(v)
    })
    .await;
    assert_eq!(v["ledger"], "ok");
    // The test's clock stands still, but the outage took time: a worker that leased the first
    // message's inbox event (or outbox slot) just before the abort never settled it, and only
    // the lease running out frees it. Time passes beyond the lease (and the top-up delay).
    clock.advance(std::time::Duration::from_millis(
        config.bus.relay_lease_ms + config.bus.topup_after_ms,
    ));
    let v = a.send(conv, "after", "after the restart").await.unwrap();
    assert_eq!(v["message"]["seq"], 2, "the committed message survived");
    let mut bodies: Vec<String> = Vec::new();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while bodies.len() < 2 {
        assert!(std::time::Instant::now() < deadline, "got only {bodies:?}");
        let got = b.fetch(10).await.unwrap();
        if got.is_empty() {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        bodies.extend(got.iter().map(|d| d["body"].as_str().unwrap().to_owned()));
    }
    bodies.sort();
    assert_eq!(bodies, vec!["after the restart", "before the restart"]);
    server.stop().await;
}
