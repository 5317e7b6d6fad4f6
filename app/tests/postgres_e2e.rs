//! End to end on the Postgres combination (ledger, journal, inbox and bodies in Postgres) on a
//! real server (`DATABASE_URL`; a fresh database per test, dropped when the test passes). The
//! same scenarios as the memory combination, driven through the HTTP API.

mod common;

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
