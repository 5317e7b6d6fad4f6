//! A server cut from its database answers within its request deadline (`bus.request_timeout_ms`)
//! and loses nothing: found by the partition test (issue 20), where a server whose packets to
//! Postgres were dropped held every request until the heal, because its pooled connections
//! waited on a peer that had gone silent (TCP gives up only after minutes).
//!
//! The cut is made on loopback by a proxy between the server and Postgres that, while cut,
//! forwards nothing in either direction and holds every connection open (nothing is refused or
//! reset: a silent peer, as a dropped link is); at the heal it forwards what it held, as TCP
//! retransmits it. While cut, a send, a waiting fetch and a read are each answered `503
//! timeout` within their bound; after the heal, the send retried with its `request_id` is
//! stored once, and every message is delivered and confirmed exactly once.

use crate::common;

use std::time::{Duration, Instant};

use common::{TestApp, counter, test_config};
use crewbus::client::uuid_of;
use reqwest::Method;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use uuid::Uuid;

/// The request deadline of the server under test, ms.
const REQUEST_TIMEOUT_MS: u64 = 1_500;
/// How much later than its bound an answer may come (scheduling on a loaded 2-core box).
const SLACK: Duration = Duration::from_millis(2_500);
/// How long a condition after the heal may take.
const DEADLINE: Duration = Duration::from_secs(30);

/// A loopback proxy to Postgres that can be cut (see the module docs).
struct CutProxy {
    port: u16,
    cut: watch::Sender<bool>,
}

impl CutProxy {
    async fn start(upstream: (String, u16)) -> CutProxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let (cut, _) = watch::channel(false);
        let cuts = cut.clone();
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let cut = cuts.subscribe();
                let upstream = upstream.clone();
                tokio::spawn(async move {
                    // A connection opened while cut is held unanswered until the heal.
                    let mut waiting = cut.clone();
                    if waiting.wait_for(|cut| !*cut).await.is_err() {
                        return;
                    }
                    let Ok(server) = TcpStream::connect((upstream.0.as_str(), upstream.1)).await
                    else {
                        return;
                    };
                    let (client_read, client_write) = client.into_split();
                    let (server_read, server_write) = server.into_split();
                    tokio::spawn(pump(client_read, server_write, cut.clone()));
                    tokio::spawn(pump(server_read, client_write, cut));
                });
            }
        });
        CutProxy { port, cut }
    }

    fn set_cut(&self, cut: bool) {
        self.cut.send_replace(cut);
    }
}

/// Copies `from` to `to`; while cut, what arrives is held (not forwarded, not dropped) and sent
/// at the heal.
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut cut: watch::Receiver<bool>,
) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if cut.wait_for(|cut| !*cut).await.is_err() {
            return;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

/// Runs `call`, which must answer `503 timeout` within `bound` (plus [`SLACK`]).
async fn answers_timeout_within<F>(what: &str, bound: Duration, call: F)
where
    F: std::future::Future<Output = (u16, Value)>,
{
    let started = Instant::now();
    let answer = tokio::time::timeout(bound + SLACK, call).await;
    let took = started.elapsed();
    let (status, body) =
        answer.unwrap_or_else(|_| panic!("{what}: no answer within {:?}", bound + SLACK));
    assert_eq!(
        (status, body["code"].as_str()),
        (503, Some("timeout")),
        "{what}: {body} after {took:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_cut_from_postgres_answers_within_its_deadline_and_loses_nothing() {
    let url = std::env::var("DATABASE_URL").expect("DATABASE_URL must name the test Postgres");
    let upstream: sqlx::postgres::PgConnectOptions = url.parse().expect("DATABASE_URL parses");
    let proxy = CutProxy::start((upstream.get_host().to_owned(), upstream.get_port())).await;
    let mut config = test_config();
    config.bus.request_timeout_ms = REQUEST_TIMEOUT_MS;
    let app =
        TestApp::postgres_reached_by("pg_database_cut", config, &["alice", "bob", "carol"], |o| {
            sqlx::postgres::PgPoolOptions::new()
                .max_connections(8)
                .acquire_timeout(Duration::from_secs(5))
                .connect_lazy_with(o.host("127.0.0.1").port(proxy.port))
        })
        .await;
    let [alice, bob, carol] = &app.agents[..] else {
        unreachable!()
    };
    let url = app.server.url();
    let conv = uuid_of(
        &alice
            .client
            .create_conversation("across the cut", &[bob.id])
            .await
            .unwrap()["id"],
    );
    let before = uuid_of(
        &alice
            .client
            .send(conv, "before", "sent before the cut")
            .await
            .unwrap()["message"]["id"],
    );
    let timeouts_before = counter(&url, "crewbus_request_timeouts").await;
    let bound = Duration::from_millis(REQUEST_TIMEOUT_MS);

    // Each request below is made right after its agent's token was looked up through the
    // healed store (the token cache keeps it up to 1 s), so the request itself, not its token
    // lookup, meets the cut: the route's deadline answers it.
    let cut_after_warming = |agent: &common::TestAgent| {
        let client = agent.client.clone();
        let proxy = &proxy;
        async move {
            proxy.set_cut(false);
            common::eventually("the healed store to answer", DEADLINE.as_secs(), || async {
                let (status, _) = client.call(Method::GET, "/v1/me", None).await.ok()?;
                (status == 200).then_some(())
            })
            .await;
            proxy.set_cut(true);
        }
    };
    let send_path = format!("/v1/conversations/{conv}/messages");
    cut_after_warming(alice).await;
    answers_timeout_within("a send", bound, async {
        alice
            .client
            .call(
                Method::POST,
                &send_path,
                Some(serde_json::json!({"request_id": "during", "body": "sent during the cut"})),
            )
            .await
            .unwrap()
    })
    .await;
    // A fetch's bound is the deadline plus its wait (its use case's bound).
    cut_after_warming(bob).await;
    answers_timeout_within("a waiting fetch", bound + Duration::from_secs(1), async {
        bob.client.fetch_waiting(10, 1_000).await.unwrap()
    })
    .await;
    cut_after_warming(bob).await;
    answers_timeout_within("a read", bound, async {
        bob.client
            .call(Method::GET, "/v1/conversations", None)
            .await
            .unwrap()
    })
    .await;
    // Carol's token was never looked up: her first request meets the cut in the token lookup,
    // which has a deadline of its own.
    answers_timeout_within("a token lookup", bound, async {
        carol
            .client
            .call(Method::GET, "/v1/me", None)
            .await
            .unwrap()
    })
    .await;
    // /health has its own, shorter bound and says why.
    let (status, health) = tokio::time::timeout(
        bound + SLACK,
        app.anonymous().call(Method::GET, "/health", None),
    )
    .await
    .expect("/health answers while cut")
    .unwrap();
    assert_eq!(
        (status, health["ledger"].as_str()),
        (503, Some("unavailable"))
    );

    proxy.set_cut(false);
    // The send retried with its request_id: stored once, whether or not the cut one was.
    let during = common::eventually(
        "the retried send to be answered",
        DEADLINE.as_secs(),
        || async {
            alice
                .client
                .send(conv, "during", "sent during the cut")
                .await
                .ok()
        },
    )
    .await;
    let during = uuid_of(&during["message"]["id"]);
    assert_ne!(during, before);
    let again = alice
        .client
        .send(conv, "during", "sent during the cut")
        .await
        .unwrap();
    assert_eq!(
        (uuid_of(&again["message"]["id"]), again["created"].as_bool()),
        (during, Some(false))
    );

    // A fetch answered `timeout` may have handed a message out after all (its transaction
    // reached Postgres at the heal): it comes back, redelivered, once its grace has passed.
    app.advance(Duration::from_millis(
        app.config.bus.handout_grace_ms + 1_000,
    ));
    // Every message reaches bob exactly once, and is never handed out again after its confirm.
    let mut seen: Vec<Uuid> = Vec::new();
    let started = Instant::now();
    while seen.len() < 2 {
        assert!(
            started.elapsed() < DEADLINE,
            "bob got {seen:?} of 2 messages"
        );
        let (status, page) = bob.client.fetch_waiting(10, 500).await.unwrap();
        if status != 200 {
            continue;
        }
        let deliveries = page["deliveries"].as_array().cloned().unwrap_or_default();
        let ids: Vec<Uuid> = deliveries
            .iter()
            .map(|d| uuid_of(&d["delivery_id"]))
            .collect();
        for d in &deliveries {
            seen.push(uuid_of(&d["message"]["id"]));
        }
        if !ids.is_empty() {
            bob.client.confirm(&ids).await.unwrap();
        }
    }
    seen.sort();
    let mut expected = vec![before, during];
    expected.sort();
    assert_eq!(seen, expected, "each message once");
    let (status, page) = bob.client.fetch_waiting(10, 200).await.unwrap();
    assert_eq!(
        (status, page["deliveries"].as_array().map(Vec::len)),
        (200, Some(0))
    );
    let history = alice.client.history(conv, 0, 100).await.unwrap();
    assert_eq!(
        history["messages"].as_array().map(Vec::len),
        Some(2),
        "two messages stored: {history}"
    );
    assert!(
        counter(&url, "crewbus_request_timeouts").await >= timeouts_before + 4,
        "the timeouts are counted"
    );
    app.finish_test().await;
}
