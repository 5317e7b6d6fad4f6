//! `POST /v1/inbox/fetch` with `max_bytes`, on the memory combination driven through the real
//! HTTP API: one answer carries at most `max_bytes` of bodies and the rest comes with the very
//! next call (no clock advance: the fetch remembers what it left); a body larger than
//! `max_bytes` is answered alone and whole; without `max_bytes` an answer carries at most
//! 4 MiB; bad values are `400 invalid`. Every message arrives exactly once.

use crate::common;

use std::collections::HashMap;

use common::{MemoryApp, TestAgent, eventually};
use crewbus::client::uuid_of;
use crewbus_domain::Uuid;
use reqwest::Method;
use serde_json::{Value, json};

/// One `POST /v1/inbox/fetch` with `body`: the status and the answer.
async fn fetch(agent: &TestAgent, body: Value) -> (u16, Value) {
    agent
        .client
        .call(Method::POST, "/v1/inbox/fetch", Some(body))
        .await
        .unwrap()
}

/// The deliveries of a `200` fetch.
async fn deliveries(agent: &TestAgent, body: Value) -> Vec<Value> {
    let (status, answer) = fetch(agent, body).await;
    assert_eq!(status, 200, "{answer}");
    answer["deliveries"].as_array().unwrap().clone()
}

/// Waits until `agent`'s inbox holds `n` references not yet handed out.
async fn pending(agent: &TestAgent, n: u64) {
    eventually("references in the inbox", 10, || async {
        let (_, s) = agent
            .client
            .call(Method::GET, "/v1/inbox/status", None)
            .await
            .unwrap();
        (s["pending"] == n).then_some(())
    })
    .await;
}

/// Confirms `ds` and counts each message in `seen`; every confirm must be the first.
async fn confirm_once(agent: &TestAgent, ds: &[Value], seen: &mut HashMap<Uuid, usize>) {
    let ids: Vec<Uuid> = ds.iter().map(|d| uuid_of(&d["delivery_id"])).collect();
    let outcomes = agent.client.confirm(&ids).await.unwrap();
    assert_eq!(outcomes.len(), ids.len());
    for o in &outcomes {
        assert_eq!(o["outcome"], "confirmed", "{o}");
    }
    for d in ds {
        assert_eq!(d["redelivered"], false, "{d}");
        *seen.entry(uuid_of(&d["message"]["id"])).or_default() += 1;
    }
}

fn bodies(ds: &[Value]) -> Vec<String> {
    ds.iter()
        .map(|d| d["body"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn max_bytes_bounds_one_answer_the_rest_comes_next_and_a_larger_body_comes_alone() {
    let app = MemoryApp::start(&["alice", "bob"]).await;
    let (alice, bob) = (&app.agents[0], &app.agents[1]);
    let conv = alice
        .client
        .create_conversation("t", &[bob.id])
        .await
        .unwrap();
    let conv = uuid_of(&conv["id"]);
    // An empty first fetch creates bob's consumer, so the inbox counts his references.
    assert!(deliveries(bob, json!({})).await.is_empty());
    let mut sent = Vec::new();
    for (i, c) in ["a", "b", "c"].iter().enumerate() {
        let m = alice
            .client
            .send(conv, &format!("r{i}"), &c.repeat(100))
            .await
            .unwrap();
        sent.push(uuid_of(&m["message"]["id"]));
    }
    pending(bob, 3).await;
    let mut seen = HashMap::new();

    // 250 bytes hold two of the 100-byte bodies; the third is not handed out now.
    let first = deliveries(bob, json!({"limit": 10, "max_bytes": 250})).await;
    assert_eq!(bodies(&first), ["a".repeat(100), "b".repeat(100)]);
    confirm_once(bob, &first, &mut seen).await;
    // The very next call gets it (the clock has not moved: neither the hand-out grace nor the
    // ledger top-up's delay has passed), handed out for the first time.
    let next = deliveries(bob, json!({"limit": 10, "max_bytes": 250})).await;
    assert_eq!(bodies(&next), ["c".repeat(100)]);
    confirm_once(bob, &next, &mut seen).await;
    assert!(deliveries(bob, json!({"max_bytes": 250})).await.is_empty());

    // A body larger than max_bytes is answered alone and whole; the one after it waits.
    let big = "é".repeat(150); // 300 bytes
    for (id, body) in [("big", big.as_str()), ("small", &"d".repeat(100))] {
        let m = alice.client.send(conv, id, body).await.unwrap();
        sent.push(uuid_of(&m["message"]["id"]));
    }
    pending(bob, 2).await;
    let alone = deliveries(bob, json!({"limit": 10, "max_bytes": 101})).await;
    assert_eq!(bodies(&alone), [big]);
    assert_eq!(alone[0]["message"]["body_len"], 300);
    assert!(alone[0].get("truncated").is_none(), "{}", alone[0]);
    confirm_once(bob, &alone, &mut seen).await;
    let after = deliveries(bob, json!({"limit": 10, "max_bytes": 101})).await;
    assert_eq!(bodies(&after), ["d".repeat(100)]);
    confirm_once(bob, &after, &mut seen).await;

    let expected: HashMap<Uuid, usize> = sent.iter().map(|m| (*m, 1)).collect();
    assert_eq!(seen, expected, "every message exactly once");
    app.finish_test().await;
}

#[tokio::test]
async fn without_max_bytes_an_answer_carries_at_most_4_mib_of_bodies() {
    let app = MemoryApp::start(&["alice", "bob"]).await;
    let (alice, bob) = (&app.agents[0], &app.agents[1]);
    let conv = alice
        .client
        .create_conversation("t", &[bob.id])
        .await
        .unwrap();
    let conv = uuid_of(&conv["id"]);
    assert!(deliveries(bob, json!({})).await.is_empty());
    let mib = 1 << 20;
    let mut sent = Vec::new();
    for i in 0..5 {
        let body = char::from(b'a' + i).to_string().repeat(mib);
        let m = alice
            .client
            .send(conv, &format!("r{i}"), &body)
            .await
            .unwrap();
        sent.push(uuid_of(&m["message"]["id"]));
    }
    pending(bob, 5).await;
    let mut seen = HashMap::new();
    // Four 1 MiB bodies fill the default 4 MiB exactly; the fifth comes with the next call.
    let first = deliveries(bob, json!({"limit": 10})).await;
    assert_eq!(first.len(), 4, "{} deliveries", first.len());
    assert!(
        first
            .iter()
            .all(|d| d["body"].as_str().unwrap().len() == mib)
    );
    confirm_once(bob, &first, &mut seen).await;
    let rest = deliveries(bob, json!({"limit": 10})).await;
    assert_eq!(rest.len(), 1);
    assert_eq!(rest[0]["body"].as_str().unwrap(), "e".repeat(mib));
    confirm_once(bob, &rest, &mut seen).await;
    let expected: HashMap<Uuid, usize> = sent.iter().map(|m| (*m, 1)).collect();
    assert_eq!(seen, expected, "every message exactly once");
    app.finish_test().await;
}

#[tokio::test]
async fn a_max_bytes_outside_1_to_the_servers_bound_is_400_invalid() {
    let app = MemoryApp::start(&["alice"]).await;
    let alice = &app.agents[0];
    let bound = app.config.bus.max_fetch_bytes;
    for bad in [
        json!({"max_bytes": 0}),
        json!({"max_bytes": bound + 1}),
        json!({"max_bytes": -1}),
        json!({"max_bytes": 1.5}),
        json!({"max_bytes": "4096"}),
        json!({"max_bytes": null}),
        json!({"max_bytes": 1, "wait_ms": 1000, "limit": 0}),
    ] {
        let (status, answer) = fetch(alice, bad.clone()).await;
        assert_eq!(
            (status, answer["code"].as_str()),
            (400, Some("invalid")),
            "{bad}"
        );
    }
    for good in [json!({"max_bytes": 1}), json!({"max_bytes": bound})] {
        let (status, answer) = fetch(alice, good.clone()).await;
        assert_eq!(status, 200, "{good}: {answer}");
    }
    // The served document states the same bound.
    let doc: Value = reqwest::get(format!("{}/openapi.json", app.server.url()))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let max_bytes = &doc["components"]["schemas"]["FetchRequest"]["properties"]["max_bytes"];
    assert_eq!(
        (&max_bytes["minimum"], &max_bytes["maximum"]),
        (&json!(1), &json!(bound))
    );
    app.finish_test().await;
}
