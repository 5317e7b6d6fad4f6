//! Leases end to end over HTTP: conflicts name the holders, a waiting acquire is granted when
//! the holder releases (on the memory store, and across two servers sharing one Postgres, woken
//! through `LISTEN/NOTIFY`), a fencing token goes stale once its lease lapses and another agent
//! takes the path, bad input is `400 invalid`, and operators list and release through the admin
//! API.

use crate::common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{MemoryApp, test_config};
use crewbus::client::{ApiClient, uuid_of};
use crewbus::compose::postgres_with_pool;
use crewbus_benches::kit::servers::Servers;
use crewbus_domain::Uuid;
use crewbus_ports::SystemClock;
use reqwest::Method;
use serde_json::{Value, json};

async fn acquire(client: &ApiClient, body: Value) -> (u16, Value) {
    client
        .call(Method::POST, "/v1/leases", Some(body))
        .await
        .unwrap()
}

async fn check(client: &ApiClient, path: &str, token: Option<u64>) -> bool {
    let mut body = json!({ "path": path });
    if let Some(t) = token {
        body["fencing_token"] = json!(t);
    }
    let (status, answer) = client
        .call(Method::POST, "/v1/leases/check", Some(body))
        .await
        .unwrap();
    assert_eq!(status, 200, "{answer}");
    answer["held"].as_bool().unwrap()
}

/// Waits until `n` acquires wait on `bus`, failing after 20 s.
async fn until_waiting(bus: &crewbus::bus::Bus, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while bus.waiting_acquires() < n {
        assert!(Instant::now() < deadline, "{n} acquires never waited");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

#[tokio::test]
async fn a_conflict_names_the_holder_and_a_waiting_acquire_gets_the_released_lease() {
    let app = MemoryApp::start(&["alice", "bob"]).await;
    let (alice, bob) = (&app.agents[0].client, &app.agents[1].client);
    let (status, held) = acquire(alice, json!({ "pattern": "src/**", "ttl_ms": 60_000 })).await;
    assert_eq!(status, 200, "{held}");
    assert_eq!(held["granted"], true);
    let lease = &held["lease"];
    assert_eq!(lease["agent_name"], "alice");
    assert_eq!(lease["mode"], "exclusive");
    let (status, refused) = acquire(bob, json!({ "pattern": "src/a.rs", "mode": "shared" })).await;
    assert_eq!(status, 200, "{refused}");
    assert_eq!(refused["granted"], false);
    assert_eq!(refused["conflicts"][0]["id"], lease["id"]);
    assert_eq!(refused["conflicts"][0]["agent_name"], "alice");
    assert_eq!(refused["conflicts"][0]["pattern"], "src/**");

    let waiter = {
        let bob = ApiClient::new(app.server.url(), Some(app.agents[1].token.clone()));
        tokio::spawn(async move {
            acquire(&bob, json!({ "pattern": "src/a.rs", "wait_ms": 20_000 })).await
        })
    };
    until_waiting(&app.bus, 1).await;
    let id = uuid_of(&lease["id"]);
    let (status, released) = alice
        .call(Method::POST, &format!("/v1/leases/{id}/release"), None)
        .await
        .unwrap();
    assert_eq!(status, 200, "{released}");
    assert_eq!(released["end_reason"], "released");
    let (status, got) = waiter.await.unwrap();
    assert_eq!(status, 200, "{got}");
    assert_eq!(got["granted"], true, "{got}");
    assert!(
        got["lease"]["fencing_token"].as_u64() > lease["fencing_token"].as_u64(),
        "{got}"
    );
    // The listing and the history say the same.
    let (_, listed) = bob
        .call(Method::GET, "/v1/leases?overlapping=src/a.rs", None)
        .await
        .unwrap();
    assert_eq!(listed["leases"].as_array().unwrap().len(), 1, "{listed}");
    assert_eq!(listed["leases"][0]["agent_name"], "bob");
    let (_, history) = alice
        .call(Method::GET, &format!("/v1/leases/{id}"), None)
        .await
        .unwrap();
    let kinds: Vec<&str> = history["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["granted", "ended"], "{history}");
    app.finish_test().await;
}

#[tokio::test]
async fn a_lapsed_lease_leaves_a_stale_fencing_token() {
    let app = MemoryApp::start(&["alice", "bob"]).await;
    let (alice, bob) = (&app.agents[0].client, &app.agents[1].client);
    let (_, first) = acquire(alice, json!({ "pattern": "docs/*.md", "ttl_ms": 5_000 })).await;
    let old = first["lease"]["fencing_token"].as_u64().unwrap();
    assert!(check(alice, "docs/a.md", Some(old)).await);
    assert!(check(alice, "docs/a.md", None).await);
    assert!(!check(bob, "docs/a.md", None).await, "not bob's");
    assert!(!check(alice, "src/a.md", Some(old)).await, "not covered");
    // Renewal keeps the token; then the lease lapses (the manual clock) and bob takes it.
    let id = uuid_of(&first["lease"]["id"]);
    let (status, renewed) = alice
        .call(
            Method::POST,
            &format!("/v1/leases/{id}/renew"),
            Some(json!({ "ttl_ms": 10_000 })),
        )
        .await
        .unwrap();
    assert_eq!(status, 200, "{renewed}");
    assert_eq!(renewed["fencing_token"].as_u64(), Some(old));
    app.advance(Duration::from_secs(11));
    let (_, second) = acquire(bob, json!({ "pattern": "docs/a.md" })).await;
    assert_eq!(second["granted"], true, "{second}");
    let new = second["lease"]["fencing_token"].as_u64().unwrap();
    assert!(new > old);
    assert!(!check(alice, "docs/a.md", Some(old)).await, "a stale token");
    assert!(check(bob, "docs/a.md", Some(new)).await);
    let (status, err) = alice
        .call(
            Method::POST,
            &format!("/v1/leases/{id}/renew"),
            Some(json!({})),
        )
        .await
        .unwrap();
    assert_eq!(
        (status, err["code"].as_str()),
        (409, Some("conflict")),
        "{err}"
    );
    app.finish_test().await;
}

#[tokio::test]
async fn bad_lease_input_is_invalid() {
    let app = MemoryApp::start(&["alice"]).await;
    let alice = &app.agents[0].client;
    for body in [
        json!({ "pattern": "src/**.rs" }),
        json!({ "pattern": "../etc" }),
        json!({ "pattern": "a?" }),
        json!({ "pattern": "" }),
        json!({ "pattern": "a", "ttl_ms": 10 }),
        json!({ "pattern": "a", "ttl_ms": 3_600_001 }),
        json!({ "pattern": "a", "wait_ms": 60_001 }),
        json!({ "pattern": "a", "mode": "mine" }),
        // Valid JSON whose field does not fit (issue 33 item 7: was "not valid JSON").
        json!({ "pattern": "q/**", "mode": null }),
        json!({ "pattern": "q/**", "mode": 1 }),
        json!({ "pattern": "a", "colour": "red" }),
    ] {
        let (status, err) = acquire(alice, body.clone()).await;
        assert_eq!(status, 400, "{body}: {err}");
        assert_eq!(err["code"], "invalid", "{body}: {err}");
    }
    let (status, err) = alice
        .call(
            Method::POST,
            "/v1/leases/check",
            Some(json!({ "path": "src/*" })),
        )
        .await
        .unwrap();
    assert_eq!((status, err["code"].as_str()), (400, Some("invalid")));
    let (status, _) = alice
        .call(Method::GET, &format!("/v1/leases/{}", Uuid::new_v4()), None)
        .await
        .unwrap();
    assert_eq!(status, 404);
    let (status, _) = alice
        .call(Method::GET, "/v1/leases?overlapping=a//b", None)
        .await
        .unwrap();
    assert_eq!(status, 400);
    app.finish_test().await;
}

#[tokio::test]
async fn operators_list_and_release_any_holders_lease() {
    let app = MemoryApp::start(&["alice", "bob"]).await;
    let (alice, bob) = (&app.agents[0].client, &app.agents[1].client);
    let (_, held) = acquire(alice, json!({ "pattern": "src/**" })).await;
    let op = app.bus.add_operator("ops", &[]).await.unwrap();
    let admin = ApiClient::new(app.server.url(), Some(op.token.clone()));
    let team = app.team.id;
    let (status, listed) = admin
        .call(Method::GET, &format!("/v1/admin/teams/{team}/leases"), None)
        .await
        .unwrap();
    assert_eq!(status, 200, "{listed}");
    assert_eq!(listed["leases"][0]["id"], held["lease"]["id"]);
    // An agent's token is refused on the admin route.
    let (status, _) = alice
        .call(Method::GET, &format!("/v1/admin/teams/{team}/leases"), None)
        .await
        .unwrap();
    assert_eq!(status, 401);
    let id = uuid_of(&held["lease"]["id"]);
    let (status, released) = admin
        .call(
            Method::POST,
            &format!("/v1/admin/teams/{team}/leases/{id}/release"),
            None,
        )
        .await
        .unwrap();
    assert_eq!(status, 200, "{released}");
    assert_eq!(released["end_reason"], "released");
    let (_, got) = acquire(bob, json!({ "pattern": "src/a.rs" })).await;
    assert_eq!(got["granted"], true, "{got}");
    let (status, _) = admin
        .call(
            Method::POST,
            &format!("/v1/admin/teams/{}/leases/{id}/release", Uuid::new_v4()),
            None,
        )
        .await
        .unwrap();
    assert_eq!(status, 404);
    app.finish_test().await;
}

/// Two servers on one Postgres: a release through one wakes the acquire waiting on the other
/// (through `LISTEN/NOTIFY`) well before the 1 s re-check.
#[tokio::test]
async fn postgres_a_release_on_one_server_wakes_an_acquire_waiting_on_another() {
    let config = test_config();
    let db = crewbus_benches::kit::postgres::database("leases::two_servers").await;
    let mut buses = Vec::new();
    for _ in 0..2 {
        let composed = postgres_with_pool(&config, db.pool().clone(), Arc::new(SystemClock))
            .await
            .unwrap();
        buses.push(composed.bus);
    }
    let Servers {
        servers, agents, ..
    } = Servers::start(&config, &buses, "team-l", None, &["alice", "bob"]).await;
    let alice = &agents[0].client;
    let bob = agents[1].client_on(&servers[1].url());
    let (_, held) = acquire(alice, json!({ "pattern": "**" })).await;
    assert_eq!(held["granted"], true, "{held}");
    let waiter = tokio::spawn(async move {
        let got = acquire(&bob, json!({ "pattern": "x/y", "wait_ms": 20_000 })).await;
        (got, Instant::now())
    });
    until_waiting(&buses[1], 1).await;
    let id = uuid_of(&held["lease"]["id"]);
    let released_at = Instant::now();
    let (status, _) = alice
        .call(Method::POST, &format!("/v1/leases/{id}/release"), None)
        .await
        .unwrap();
    assert_eq!(status, 200);
    let ((status, got), granted_at) = waiter.await.unwrap();
    assert_eq!(status, 200, "{got}");
    assert_eq!(got["granted"], true, "{got}");
    let after = granted_at - released_at;
    assert!(
        after < Duration::from_millis(500),
        "granted {after:?} after the release: woken by the re-check, not the wake-up"
    );
    for s in servers {
        s.stop().await;
    }
    db.passed().await;
}
