//! A write's first answer carries the instants the store keeps: on the system clock (as
//! `crewbus serve` runs), a created conversation, a send and an admitted run answer the same
//! values, field by field, as every later read and repeat — on the memory store and on the
//! embedded store (SQLite, which keeps whole microseconds). Every instant answered has at most
//! six fractional digits.

use std::time::{Duration, Instant};

use crewbus::client::{ApiClient, uuid_of};
use crewbus::compose::compose_server;
use crewbus::config::{Config, StorageKind};
use crewbus::server::Server;
use crewbus::shutdown::Shutdown;
use reqwest::Method;
use serde_json::{Value, json};

/// A server on the system clock over `kind`, with agents alice and bob of one team.
struct App {
    server: Server,
    alice: ApiClient,
    bob_id: String,
    _dir: tempfile::TempDir,
}

async fn start(kind: StorageKind) -> App {
    let dir = tempfile::tempdir().unwrap();
    let mut config = Config {
        listen: "127.0.0.1:0".parse().unwrap(),
        ..Config::default()
    };
    config.storage.kind = Some(kind);
    config.storage.data_dir = Some(dir.path().to_owned());
    let composed = compose_server(&config).await.unwrap();
    let bus = composed.bus.clone();
    let team = bus.add_team("team-a", None, None).await.unwrap();
    let alice = bus.add_agent(team.id, "alice").await.unwrap();
    let bob = bus.add_agent(team.id, "bob").await.unwrap();
    let server = Server::start(bus, config.listen, Shutdown::new())
        .await
        .unwrap();
    let me = ApiClient::new(server.url(), Some(alice.token.clone()))
        .ok(Method::GET, "/v1/me", None)
        .await
        .unwrap();
    assert_eq!(uuid_of(&me["id"]), alice.agent.id);
    App {
        alice: ApiClient::new(server.url(), Some(alice.token)),
        bob_id: bob.agent.id.to_string(),
        server,
        _dir: dir,
    }
}

/// Every string of `v` that reads as an RFC 3339 instant has at most 6 fractional digits.
fn assert_whole_micros(v: &Value, what: &str) {
    match v {
        Value::String(s) if chrono::DateTime::parse_from_rfc3339(s).is_ok() => {
            let fraction = s
                .split_once('.')
                .map(|(_, f)| f.trim_end_matches(|c: char| !c.is_ascii_digit()))
                .unwrap_or("");
            let digits = fraction.chars().take_while(char::is_ascii_digit).count();
            assert!(digits <= 6, "{what}: {s} has {digits} fractional digits");
        }
        Value::Array(items) => items.iter().for_each(|i| assert_whole_micros(i, what)),
        Value::Object(fields) => fields.values().for_each(|f| assert_whole_micros(f, what)),
        _ => {}
    }
}

/// `first` and `later` are the same object, field by field (each differing field named).
fn assert_same_fields(first: &Value, later: &Value, what: &str) {
    let (Value::Object(a), Value::Object(b)) = (first, later) else {
        panic!("{what}: not objects: {first} / {later}");
    };
    let differing: Vec<String> = a
        .keys()
        .chain(b.keys())
        .filter(|k| a.get(*k) != b.get(*k))
        .map(|k| format!("{k}: {:?} then {:?}", a.get(k), b.get(k)))
        .collect();
    assert!(differing.is_empty(), "{what} differs: {differing:?}");
}

/// Polls the history until message `seq` 1 is stored; returns its item.
async fn stored_in_history(alice: &ApiClient, conv: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let page = alice
            .ok(
                Method::GET,
                &format!("/v1/conversations/{conv}/messages?after_seq=0&limit=10"),
                None,
            )
            .await
            .unwrap();
        if let Some(item) = page["messages"].as_array().and_then(|m| m.first())
            && item["message"]["publication"] == "stored"
        {
            return item.clone();
        }
        assert!(Instant::now() < deadline, "the message was never stored");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn first_answers_are_what_later_reads_give(kind: StorageKind) {
    let app = start(kind).await;
    let alice = &app.alice;

    // A conversation: the create's answer, then a read.
    let (status, created) = alice
        .call(
            Method::POST,
            "/v1/conversations",
            Some(json!({"title": "t42", "members": [app.bob_id]})),
        )
        .await
        .unwrap();
    assert_eq!(status, 201, "{created}");
    let conv = created["id"].as_str().unwrap().to_owned();
    let read = alice
        .ok(Method::GET, &format!("/v1/conversations/{conv}"), None)
        .await
        .unwrap();
    assert_same_fields(&created, &read, "the conversation");

    // A send: its answer, the repeat's, and the history's, once the body is stored.
    let path = format!("/v1/conversations/{conv}/messages");
    let send = json!({"request_id": "t42-1", "body": "the same each time"});
    let (status, sent) = alice
        .call(Method::POST, &path, Some(send.clone()))
        .await
        .unwrap();
    assert_eq!(status, 201, "{sent}");
    let item = stored_in_history(alice, &conv).await;
    let (status, again) = alice.call(Method::POST, &path, Some(send)).await.unwrap();
    assert_eq!((status, &again["created"]), (200, &json!(false)));
    assert_same_fields(
        &again["message"],
        &item["message"],
        "the repeat and the history",
    );
    let (mut first, mut later) = (sent["message"].clone(), item["message"].clone());
    if first["publication"] != "stored" {
        // Sent through the outbox (memory): stored since, which changes only these two.
        for moved in ["publication", "stored_at"] {
            first.as_object_mut().unwrap().remove(moved);
            later.as_object_mut().unwrap().remove(moved);
        }
    }
    assert_same_fields(&first, &later, "the send's answer and the history");

    // A run: its admission's answer, then a read.
    let (status, run) = alice.call(Method::POST, "/v1/runs", None).await.unwrap();
    assert_eq!(status, 201, "{run}");
    let read_run = alice
        .ok(
            Method::GET,
            &format!("/v1/runs/{}", run["id"].as_str().unwrap()),
            None,
        )
        .await
        .unwrap();
    assert_same_fields(&run, &read_run, "the run");

    for (what, v) in [
        ("conversation", &created),
        ("send", &sent),
        ("repeat", &again),
        ("run", &run),
    ] {
        assert_whole_micros(v, what);
    }
    app.server.stop().await;
}

#[tokio::test]
async fn on_the_memory_store_first_answers_are_what_later_reads_give() {
    first_answers_are_what_later_reads_give(StorageKind::Memory).await;
}

#[tokio::test]
async fn on_the_embedded_store_first_answers_are_what_later_reads_give() {
    first_answers_are_what_later_reads_give(StorageKind::Sqlite).await;
}
