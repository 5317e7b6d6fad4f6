//! Presence end to end over HTTP, on the memory store and on Postgres: an agent sets its status
//! line (`PUT /v1/me/status`), its team sees it in `GET /v1/agents` beside its current run and
//! last activity, the empty line clears it, bad input is `400 invalid` and leaves the line as
//! it was, and the console feed hears each change (the team page updates live on it).

use crate::common;

use std::time::Duration;

use common::{MemoryApp, TestApp};
use crewbus::client::{ApiClient, uuid_of};
use crewbus_domain::{FeedKind, FeedUpdate};
use reqwest::Method;
use serde_json::{Value, json};

async fn set(client: &ApiClient, status: &str) -> (u16, Value) {
    client
        .call(
            Method::PUT,
            "/v1/me/status",
            Some(json!({ "status": status })),
        )
        .await
        .unwrap()
}

/// `name` as `GET /v1/agents` lists it to `client`.
async fn listed(client: &ApiClient, name: &str) -> Value {
    let (status, agents) = client.call(Method::GET, "/v1/agents", None).await.unwrap();
    assert_eq!(status, 200, "{agents}");
    agents
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["name"] == name)
        .cloned()
        .unwrap_or_else(|| panic!("{name} not listed: {agents}"))
}

async fn status_lines_are_set_listed_and_cleared(app: TestApp) {
    let (alice, bob) = (&app.agents[0].client, &app.agents[1].client);
    let mut feed = app.bus.watch_feed().await;

    let seen = listed(bob, "alice").await;
    assert_eq!(seen["status"], Value::Null);
    assert_eq!(seen["current_run"], Value::Null);

    let line = "reviewing PR 12 — <b>not markup</b>";
    let (status, me) = set(alice, line).await;
    assert_eq!(status, 200, "{me}");
    assert_eq!(me["name"], "alice");
    assert_eq!(me["status"], line);
    assert!(me["status_set_at"].is_string(), "{me}");

    // The console feed heard it, for alice.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    'heard: loop {
        let update = tokio::time::timeout_at(deadline, feed.recv())
            .await
            .expect("no status_changed event within 10 s")
            .unwrap();
        if let FeedUpdate::Events(events) = update {
            for e in events {
                if e.kind == FeedKind::StatusChanged {
                    assert_eq!(e.agent, Some(app.agents[0].id));
                    assert_eq!(e.team, app.team.id);
                    break 'heard;
                }
            }
        }
    }

    let (status, run) = alice.call(Method::POST, "/v1/runs", None).await.unwrap();
    assert_eq!(status, 201, "{run}");
    let seen = listed(bob, "alice").await;
    assert_eq!(seen["status"], line);
    assert_eq!(seen["status_set_at"], me["status_set_at"]);
    assert_eq!(uuid_of(&seen["current_run"]), uuid_of(&run["id"]));
    assert_eq!(listed(bob, "bob").await["status"], Value::Null);

    // Refused, and the line stays.
    for bad in [
        "x".repeat(201),
        "two\nlines".to_owned(),
        "tab\there".to_owned(),
    ] {
        let (status, refused) = set(alice, &bad).await;
        assert_eq!(
            (status, refused["code"].as_str()),
            (400, Some("invalid")),
            "{bad:?}"
        );
    }
    let (status, refused) = alice
        .call(Method::PUT, "/v1/me/status", Some(json!({ "status": 12 })))
        .await
        .unwrap();
    assert_eq!((status, refused["code"].as_str()), (400, Some("invalid")));
    assert_eq!(listed(bob, "alice").await["status"], line);
    // 200 characters of four bytes each fit.
    let (status, me) = set(alice, &"🦀".repeat(200)).await;
    assert_eq!(status, 200, "{me}");

    let (status, me) = set(alice, "").await;
    assert_eq!(status, 200, "{me}");
    assert_eq!(me["status"], Value::Null);
    assert_eq!(me["status_set_at"], Value::Null);
    assert_eq!(listed(bob, "alice").await["status"], Value::Null);

    let (status, _) = ApiClient::new(app.server.url(), None)
        .call(Method::PUT, "/v1/me/status", Some(json!({ "status": "x" })))
        .await
        .unwrap();
    assert_eq!(status, 401);
    app.finish_test().await;
}

#[tokio::test]
async fn status_lines_on_the_memory_store() {
    status_lines_are_set_listed_and_cleared(MemoryApp::start(&["alice", "bob"]).await).await;
}

#[tokio::test]
async fn status_lines_on_postgres() {
    status_lines_are_set_listed_and_cleared(TestApp::postgres("presence", &["alice", "bob"]).await)
        .await;
}
