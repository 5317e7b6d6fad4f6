//! Slow and greedy clients on raw sockets against the server in-process (memory store,
//! 127.0.0.1:0): request heads that never finish are closed after `bus.header_read_timeout_ms`,
//! a trickled body is cut at `bus.request_body_timeout_ms` however steadily it arrives, neither
//! bound cuts a waiting fetch or an MCP SSE answer, and connections beyond
//! `bus.max_http_connections` are closed at once while the others keep working.

use crate::common;

use std::time::{Duration, Instant};

use common::*;
use crewbus::client::uuid_of;
use crewbus::config::Config;
use crewbus_memory::MemoryConfig;
use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The app on the memory store with `tune` applied to the test configuration.
async fn app_with(tune: impl FnOnce(&mut Config), agents: &[&str]) -> TestApp {
    let mut config = test_config();
    tune(&mut config);
    let memory: MemoryConfig = crewbus::compose::memory_config(&config);
    MemoryApp::start_with(config, memory, agents).await
}

async fn connect(app: &TestApp) -> TcpStream {
    TcpStream::connect(app.server.addr()).await.unwrap()
}

/// Reads until the peer closes the connection; returns how long that took. Fails when it is
/// still open after `within`. Bytes that arrive first (an error answer) are skipped.
async fn closed_within(stream: &mut (impl AsyncRead + Unpin), within: Duration) -> Duration {
    let started = Instant::now();
    let mut buf = [0u8; 1024];
    loop {
        match tokio::time::timeout_at((started + within).into(), stream.read(&mut buf)).await {
            Err(_) => panic!("the connection is still open after {within:?}"),
            Ok(Ok(0)) | Ok(Err(_)) => return started.elapsed(),
            Ok(Ok(_)) => {}
        }
    }
}

/// One HTTP/1.1 answer read off a raw socket (bodies with `Content-Length` only).
struct Answer {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&self.body)))
    }

    fn closes(&self) -> bool {
        self.header("connection")
            .is_some_and(|v| v.eq_ignore_ascii_case("close"))
    }
}

/// Reads one answer within `within` (fails the test otherwise).
async fn read_answer(stream: &mut (impl AsyncRead + Unpin), within: Duration) -> Answer {
    tokio::time::timeout(within, read_answer_unbounded(stream))
        .await
        .unwrap_or_else(|_| panic!("no answer within {within:?}"))
}

async fn read_answer_unbounded(stream: &mut (impl AsyncRead + Unpin)) -> Answer {
    let mut buf = Vec::new();
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let mut chunk = [0u8; 4096];
        let n = stream.read(&mut chunk).await.expect("the answer is read");
        assert!(
            n > 0,
            "connection closed before an answer: {:?}",
            String::from_utf8_lossy(&buf)
        );
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8(buf[..head_end].to_vec()).unwrap();
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .unwrap()
        .split(' ')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let headers: Vec<(String, String)> = lines
        .filter(|l| !l.is_empty())
        .map(|l| {
            let (k, v) = l.split_once(':').unwrap();
            (k.trim().to_owned(), v.trim().to_owned())
        })
        .collect();
    let length: usize = headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
        .map(|(_, v)| v.parse().unwrap())
        .unwrap_or(0);
    let mut body = buf[head_end..].to_vec();
    while body.len() < length {
        let mut chunk = vec![0u8; length - body.len()];
        let n = stream.read(&mut chunk).await.expect("the body is read");
        assert!(n > 0, "connection closed inside the answer's body");
        body.extend_from_slice(&chunk[..n]);
    }
    Answer {
        status,
        headers,
        body,
    }
}

/// `GET /health` on a kept-alive connection: its answer.
async fn health(stream: &mut TcpStream) -> Answer {
    stream
        .write_all(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        .await
        .unwrap();
    read_answer(stream, Duration::from_secs(5)).await
}

#[tokio::test]
async fn request_heads_that_never_finish_are_closed_after_the_header_read_timeout() {
    let timeout = Duration::from_millis(500);
    let app = app_with(|c| c.bus.header_read_timeout_ms = 500, &["alice"]).await;

    // Nothing sent at all.
    let mut silent = connect(&app).await;
    // Half a request head, then nothing.
    let mut partial = connect(&app).await;
    partial
        .write_all(b"POST /v1/inbox/fetch HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Ty")
        .await
        .unwrap();
    // A head trickled one byte every 50 ms: it never stops arriving, it never ends in time.
    let mut trickled = connect(&app).await;
    let (mut trickle_read, mut trickle_write) = trickled.split();
    let trickle = async move {
        let head = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Padding: ".iter();
        for byte in head.chain(std::iter::repeat(&b'a')) {
            if trickle_write.write_all(&[*byte]).await.is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    let watch = async move {
        let started = Instant::now();
        let mut buf = [0u8; 256];
        loop {
            match tokio::time::timeout(Duration::from_secs(5), trickle_read.read(&mut buf)).await {
                Err(_) => panic!("the trickled head's connection is still open after 5 s"),
                Ok(Ok(0)) | Ok(Err(_)) => return started.elapsed(),
                Ok(Ok(_)) => {}
            }
        }
    };
    let (_, trickled_for) = tokio::join!(trickle, watch);
    // A complete request is answered, and the kept-alive connection idles into the same bound.
    let mut idle = connect(&app).await;
    assert_eq!(health(&mut idle).await.status, 200);

    let bound = timeout + Duration::from_secs(2);
    for (what, stream) in [
        ("silent", &mut silent),
        ("partial", &mut partial),
        ("idle", &mut idle),
    ] {
        let took = closed_within(stream, bound).await;
        assert!(took < bound, "{what}: closed after {took:?}");
    }
    assert!(
        trickled_for < bound,
        "trickled head closed after {trickled_for:?}"
    );
    // The bound applies to heads only: a fresh connection is served.
    let mut fresh = connect(&app).await;
    assert_eq!(health(&mut fresh).await.status, 200);
    app.finish_test().await;
}

#[tokio::test]
async fn a_trickled_body_is_cut_at_the_body_deadline_with_400_invalid_and_connection_close() {
    let deadline = Duration::from_millis(1_000);
    let app = app_with(|c| c.bus.request_body_timeout_ms = 1_000, &["alice"]).await;
    let token = app.agents[0].token.clone();
    let mut stream = connect(&app).await;
    // 100 bytes of valid JSON, one byte every 100 ms: each gap is far below the deadline, the
    // whole body (10 s) far above it.
    let body = format!("{:<100}", r#"{"limit": 1}"#);
    let head = format!(
        "POST /v1/inbox/fetch HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    // Taken before the head is written, so the server's clock starts no earlier.
    let sent_head = Instant::now();
    stream.write_all(head.as_bytes()).await.unwrap();
    let (mut read, mut write) = stream.into_split();
    let trickle = tokio::spawn(async move {
        for byte in body.bytes() {
            if write.write_all(&[byte]).await.is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    let answer = read_answer(&mut read, Duration::from_secs(5)).await;
    let answered_after = sent_head.elapsed();
    assert_eq!(answer.status, 400);
    assert_eq!(answer.json()["code"], "invalid");
    assert!(
        answer.closes(),
        "no Connection: close: {:?}",
        answer.headers
    );
    assert!(
        answered_after >= deadline && answered_after < deadline + Duration::from_secs(1),
        "cut after {answered_after:?}, the deadline is {deadline:?}"
    );
    closed_within(&mut read, Duration::from_secs(2)).await;
    trickle.abort();
    // The agent's next request, on a new connection, is served.
    assert!(app.agents[0].client.fetch(1).await.unwrap().is_empty());
    app.finish_test().await;
}

#[tokio::test]
async fn the_request_deadline_counts_from_the_end_of_the_body_not_its_start() {
    // A body that takes 2.4 s to arrive, within its own deadline (5 s), to a server whose
    // deadline for a fetch is 1.3 s (300 ms plus the longest wait, 100 ms, at least 1 s): the
    // deadline bounds the handler once it has its body, never the client's upload, so the
    // fetch is answered 200.
    let app = app_with(
        |c| {
            c.bus.request_body_timeout_ms = 5_000;
            c.bus.request_timeout_ms = 300;
            c.bus.max_wait_ms = 100;
        },
        &["alice"],
    )
    .await;
    let token = app.agents[0].token.clone();
    let mut stream = connect(&app).await;
    let body = format!("{:<24}", r#"{"limit":1}"#);
    let head = format!(
        "POST /v1/inbox/fetch HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    let (mut read, mut write) = stream.into_split();
    // The pace is the premise of the test (a slow upload), not a wait for a condition.
    let trickle = tokio::spawn(async move {
        for byte in body.bytes() {
            tokio::time::sleep(Duration::from_millis(100)).await;
            write.write_all(&[byte]).await.unwrap();
        }
        write
    });
    let answer = read_answer(&mut read, Duration::from_secs(5)).await;
    assert_eq!(answer.status, 200, "{:?}", answer.json());
    assert_eq!(answer.json()["deliveries"], json!([]));
    drop(trickle.await.unwrap());
    app.finish_test().await;
}

/// Alice's conversation with Bob: its id.
async fn conversation(app: &TestApp) -> crewbus_domain::Uuid {
    let members = [app.agents[1].id];
    uuid_of(
        &app.agents[0]
            .client
            .create_conversation("slow", &members)
            .await
            .unwrap()["id"],
    )
}

#[tokio::test]
async fn a_waiting_fetch_and_a_waiting_mcp_tool_call_outlive_short_head_and_body_bounds() {
    let app = app_with(
        |c| {
            c.bus.request_body_timeout_ms = 200;
            c.bus.header_read_timeout_ms = 200;
        },
        &["alice", "bob"],
    )
    .await;
    let conv = conversation(&app).await;
    // Each wait is held well past both bounds before a message arrives: the hold is the premise
    // of the test (the message is sent once `held` has passed), not a wait for a condition.
    let held = Duration::from_millis(1_500);

    // The HTTP API's waiting fetch.
    let bob = app.agents[1].client.clone();
    let started = Instant::now();
    let waiting = tokio::spawn(async move { bob.fetch_waiting(10, 10_000).await.unwrap() });
    eventually("bob waiting", 10, || async {
        (app.bus.waiting_fetches() == 1).then_some(())
    })
    .await;
    tokio::time::sleep_until((started + held).into()).await;
    app.agents[0]
        .client
        .send(conv, "r1", "after the bounds")
        .await
        .unwrap();
    let (status, page) = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .expect("the waiting fetch answers")
        .unwrap();
    assert_eq!(status, 200, "{page}");
    assert_eq!(page["deliveries"][0]["body"], "after the bounds", "{page}");
    assert!(started.elapsed() >= held);
    let delivery = uuid_of(&page["deliveries"][0]["delivery_id"]);
    app.agents[1].client.confirm(&[delivery]).await.unwrap();

    // MCP: fetch_inbox waiting, answered as server-sent events.
    let url = format!("{}/mcp", app.server.url());
    let token = app.agents[1].token.clone();
    let started = Instant::now();
    let waiting = tokio::spawn(async move {
        let call = json!({
            "jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "fetch_inbox", "arguments": {"wait_seconds": 10}},
        });
        let resp = reqwest::Client::new()
            .post(url)
            .bearer_auth(token)
            .header("accept", "application/json, text/event-stream")
            .header("content-type", "application/json")
            .header("mcp-protocol-version", "2025-11-25")
            .body(call.to_string())
            .send()
            .await
            .unwrap();
        let status = resp.status().as_u16();
        let sse = resp
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/event-stream"));
        (status, sse, resp.text().await.unwrap())
    });
    eventually("bob waiting in fetch_inbox", 10, || async {
        (app.bus.waiting_fetches() == 1).then_some(())
    })
    .await;
    tokio::time::sleep_until((started + held).into()).await;
    app.agents[0]
        .client
        .send(conv, "r2", "mcp after the bounds")
        .await
        .unwrap();
    let (status, sse, text) = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .expect("the MCP call answers")
        .unwrap();
    assert_eq!(status, 200, "{text}");
    assert!(sse, "not an SSE answer: {text}");
    let message: Value = text
        .split("\n\n")
        .filter_map(|event| {
            let data: String = event
                .lines()
                .filter_map(|l| l.strip_prefix("data:"))
                .map(str::trim_start)
                .collect();
            serde_json::from_str(&data).ok()
        })
        .last()
        .unwrap_or_else(|| panic!("no JSON-RPC message in {text:?}"));
    let deliveries = &message["result"]["structuredContent"]["deliveries"];
    assert_eq!(deliveries[0]["body"], "mcp after the bounds", "{message}");
    assert!(started.elapsed() >= held);
    app.finish_test().await;
}

#[tokio::test]
async fn connections_beyond_the_bound_are_closed_at_once_and_the_others_keep_working() {
    let app = app_with(|c| c.bus.max_http_connections = 3, &["alice"]).await;
    // Three kept-alive connections, each answered once (so the server holds all three).
    let mut open = Vec::new();
    for _ in 0..3 {
        let mut s = connect(&app).await;
        assert_eq!(health(&mut s).await.status, 200);
        open.push(s);
    }
    // The fourth is closed at once, before it sends anything.
    let mut extra = connect(&app).await;
    let took = closed_within(&mut extra, Duration::from_secs(2)).await;
    assert!(took < Duration::from_secs(2), "{took:?}");
    // The three still work.
    for s in &mut open {
        let answer = health(s).await;
        assert_eq!(answer.status, 200);
        assert!(!answer.closes());
    }
    // Once one closes, a new connection is served again.
    drop(open.pop());
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let mut s = connect(&app).await;
        let wrote = s
            .write_all(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            .await;
        let mut first = [0u8; 12];
        let read = tokio::time::timeout(Duration::from_secs(2), s.read_exact(&mut first)).await;
        if wrote.is_ok() && matches!(read, Ok(Ok(_))) {
            assert_eq!(&first, b"HTTP/1.1 200");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no connection served after one of the three closed"
        );
        tokio::task::yield_now().await;
    }
    app.finish_test().await;
}

#[tokio::test]
async fn an_answer_given_before_the_body_was_read_says_connection_close() {
    let app = app_with(|_| {}, &["alice"]).await;
    let token = app.agents[0].token.clone();
    let body = r#"{"limit": 1}"#;

    // No token: 401 before the body is read; the answer says the connection closes, and it does.
    let mut s = connect(&app).await;
    s.write_all(
        format!(
            "POST /v1/inbox/fetch HTTP/1.1\r\nHost: 127.0.0.1\r\n\
             Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    let answer = read_answer(&mut s, Duration::from_secs(5)).await;
    assert_eq!(answer.status, 401);
    assert_eq!(answer.json()["code"], "unauthenticated");
    assert!(
        answer.closes(),
        "no Connection: close: {:?}",
        answer.headers
    );
    closed_within(&mut s, Duration::from_secs(2)).await;

    // With a token the body is read: the connection stays open for the next request.
    let mut s = connect(&app).await;
    for _ in 0..2 {
        s.write_all(
            format!(
                "POST /v1/inbox/fetch HTTP/1.1\r\nHost: 127.0.0.1\r\n\
                 Authorization: Bearer {token}\r\nContent-Type: application/json\r\n\
                 Content-Length: {}\r\n\r\n{body}",
                body.len()
            )
            .as_bytes(),
        )
        .await
        .unwrap();
        let answer = read_answer(&mut s, Duration::from_secs(5)).await;
        assert_eq!(answer.status, 200);
        assert!(!answer.closes(), "{:?}", answer.headers);
    }
    app.finish_test().await;
}

/// Sends `head` on a fresh connection and reads the answer.
async fn answer_to(app: &TestApp, head: &str) -> Answer {
    let mut stream = connect(app).await;
    stream.write_all(head.as_bytes()).await.unwrap();
    read_answer(&mut stream, Duration::from_secs(5)).await
}

#[tokio::test]
async fn every_route_refuses_two_hosts_a_missing_host_and_a_foreign_name() {
    let app = app_with(|_| {}, &["alice"]).await;
    for path in [
        "/health",
        "/v1/me",
        "/mcp",
        "/console",
        "/openapi.json",
        "/nowhere",
    ] {
        // Two Host headers, the loopback one first: 400 (RFC 9112 §3.2).
        let two = answer_to(
            &app,
            &format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nHost: evil.example\r\n\r\n"),
        )
        .await;
        assert_eq!(two.status, 400, "{path}");
        // None on HTTP/1.1: 400.
        let none = answer_to(&app, &format!("GET {path} HTTP/1.1\r\n\r\n")).await;
        assert_eq!(none.status, 400, "{path}");
        // A foreign name: 403.
        let foreign = answer_to(
            &app,
            &format!("GET {path} HTTP/1.1\r\nHost: evil.example\r\n\r\n"),
        )
        .await;
        assert_eq!(foreign.status, 403, "{path}");
        // The absolute form names the authority the request is for: a foreign one is 403
        // whatever the Host says.
        let absolute = answer_to(
            &app,
            &format!("GET http://evil.example{path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"),
        )
        .await;
        assert_eq!(absolute.status, 403, "{path}");
    }
    // One loopback Host is served.
    let ok = answer_to(&app, "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n").await;
    assert_eq!(ok.status, 200);
}

/// One MCP `tools/call` on `stream` (kept alive), its SSE answer read to the end of its chunked
/// body: how long the answer took, from the request's first byte to the body's last.
async fn mcp_call_on(stream: &mut TcpStream, token: &str, id: u64) -> Duration {
    let call = json!({
        "jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": "inbox_status", "arguments": {}},
    })
    .to_string();
    let request = format!(
        "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\n\
         Accept: application/json, text/event-stream\r\nContent-Type: application/json\r\n\
         MCP-Protocol-Version: 2025-11-25\r\nContent-Length: {}\r\n\r\n{call}",
        call.len()
    );
    let started = Instant::now();
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    let mut chunk = [0u8; 4096];
    // The SSE answer is chunked: it ends with the zero-length chunk.
    while !answer.ends_with(b"\r\n0\r\n\r\n") {
        let n = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut chunk))
            .await
            .expect("the MCP answer ends within 5 s")
            .unwrap();
        assert!(
            n > 0,
            "closed inside the answer: {:?}",
            String::from_utf8_lossy(&answer)
        );
        answer.extend_from_slice(&chunk[..n]);
    }
    let took = started.elapsed();
    let text = String::from_utf8_lossy(&answer);
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert!(
        text.to_ascii_lowercase()
            .contains("transfer-encoding: chunked"),
        "{text}"
    );
    assert!(text.contains(&format!("\"id\":{id}")), "{text}");
    took
}

#[tokio::test]
async fn mcp_answers_on_a_kept_alive_connection_never_wait_for_the_clients_delayed_ack() {
    let app = app_with(|_| {}, &["alice"]).await;
    let token = app.agents[0].token.clone();
    let mut stream = connect(&app).await;
    let mut took = Vec::new();
    for id in 1..=10 {
        took.push(mcp_call_on(&mut stream, &token, id).await);
    }
    // An SSE answer goes out in several small writes: with Nagle's algorithm on the accepted
    // socket, each write after the first waits for the client's ACK of the one before, which a
    // client reading an answer delays (Linux: at least 40 ms). Every answer after the first then
    // takes 40 ms or more; with TCP_NODELAY the fastest of them takes a few milliseconds even on
    // a loaded machine, so the fastest is the robust witness.
    let fastest = took[1..].iter().min().unwrap();
    assert!(
        *fastest < Duration::from_millis(30),
        "every MCP answer after the first waited: {took:?}"
    );
    let total: Duration = took.iter().sum();
    assert!(total < Duration::from_millis(400), "{took:?}");
    app.finish_test().await;
}
