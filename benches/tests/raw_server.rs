//! The raw same-work baseline (`crewbus-raw-server`) does the work it is measured for: driven
//! by `crewbus-load` it passes the zero-loss check, every body and reference is in JetStream,
//! every receipt is committed in Postgres, a repeated request id stores nothing twice, a
//! non-member is refused, and a retried confirm is answered `already_confirmed`. Needs
//! `DATABASE_URL` (a TCP URL: the test's database replaces its path) and a nats-server binary
//! (the conformance fixture), like every real-server test.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crewbus::client::{ApiClient, uuid_of};
use crewbus_benches::load::{self, LoadPlan};
use crewbus_conformance::child::SpawnTied;
use crewbus_conformance::nats::{NatsServer, free_port, provisioning_user};
use crewbus_conformance::postgres::TestDatabase;

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `DATABASE_URL` with its database replaced by `name`.
fn database_url(name: &str) -> String {
    let url = std::env::var("DATABASE_URL").expect("DATABASE_URL is set (the fixture checked)");
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b.to_owned(), format!("?{q}")),
        None => (url.clone(), String::new()),
    };
    let server = match base.rsplit_once('/') {
        Some((server, _)) if server.contains("://") && !server.ends_with('/') => server,
        _ => base.as_str(),
    };
    format!("{server}/{name}{query}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_raw_server_does_the_same_durable_work_and_loses_nothing() {
    let db = TestDatabase::create("raw_server", |_| async { Ok::<_, ()>(()) }).await;
    let nats = NatsServer::start();
    let user = provisioning_user();
    let nats_url = format!(
        "nats://{}:{}@127.0.0.1:{}",
        user.user,
        user.password,
        nats.port()
    );
    let dir = tempfile::tempdir().expect("temp dir");
    let tokens_file = dir.path().join("tokens");
    let port = free_port();
    let mut server = Killed(
        Command::new(env!("CARGO_BIN_EXE_crewbus-raw-server"))
            .args(["--database-url", &database_url(db.name())])
            .args(["--nats-url", &nats_url])
            .args(["--listen", &format!("127.0.0.1:{port}")])
            .arg("--tokens-file")
            .arg(&tokens_file)
            .stdin(Stdio::null())
            // Killed with the test binary even when it ends without dropping this.
            .spawn_tied()
            .expect("crewbus-raw-server starts"),
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    while !tokens_file.exists() {
        if let Ok(Some(status)) = server.0.try_wait() {
            panic!("crewbus-raw-server exited before it was ready: {status}");
        }
        assert!(
            Instant::now() < deadline,
            "crewbus-raw-server wrote no tokens file within 30 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let tokens: Vec<String> = std::fs::read_to_string(&tokens_file)
        .expect("tokens file")
        .lines()
        .map(str::to_owned)
        .collect();
    assert_eq!(tokens.len(), 4, "four agents by default");
    let url = format!("http://127.0.0.1:{port}");
    let teams = load::teams_of_tokens(std::slice::from_ref(&url), &tokens)
        .await
        .expect("every token is known to /v1/me");
    assert_eq!(teams.len(), 1);

    let plan = LoadPlan {
        conversations: 2,
        members: 4,
        messages: 200,
        rate: 0.0,
        senders: 8,
        body_bytes: (100, 400),
        fetch_limit: 50,
        retry_for: Duration::from_secs(20),
        drain_timeout: Duration::from_secs(30),
        progress: false,
        receive_after_send: false,
        transport: load::Transport::Http,
    };
    let report = load::run(plan, teams.clone()).await.expect("the load run");
    assert!(
        report.zero_loss.passed,
        "zero-loss check: {:?}",
        report.zero_loss.problems
    );
    assert_eq!(report.accepted, 200);
    assert_eq!(report.delivered, 600, "3 recipients each");

    // The durable work: 200 bodies and 600 references in JetStream, 600 receipts committed.
    let js = user.jetstream(&nats.url()).await;
    let mut bodies = js.get_stream("RAW_BODIES").await.expect("body stream");
    let mut inbox = js.get_stream("RAW_INBOX").await.expect("inbox stream");
    assert_eq!(bodies.info().await.expect("info").state.messages, 200);
    assert_eq!(inbox.info().await.expect("info").state.messages, 600);
    let delivered: i64 =
        sqlx::query_scalar("SELECT count(*) FROM raw_receipts WHERE delivered_at IS NOT NULL")
            .fetch_one(db.pool())
            .await
            .expect("count receipts");
    assert_eq!(delivered, 600);

    // A repeat answers the first message and stores nothing; another body is a conflict (its
    // body was published before the commit refused it: the raw server publishes bodies first).
    let agent = &teams[0].agents[0];
    let client: &ApiClient = &agent.client;
    let conv = client
        .create_conversation("repeats", &[teams[0].agents[1].id])
        .await
        .expect("a conversation");
    let conv = uuid_of(&conv["id"]);
    let first = client.send(conv, "r1", "hello").await.expect("first send");
    let again = client.send(conv, "r1", "hello").await.expect("repeat");
    assert_eq!(first["message"]["id"], again["message"]["id"]);
    assert_eq!(bodies.info().await.expect("info").state.messages, 201);
    let conflict = client
        .send(conv, "r1", "other")
        .await
        .expect_err("another body under the same request id");
    assert_eq!(conflict.status, 409);
    let history = client.history(conv, 0, 100).await.expect("history");
    assert_eq!(
        history["messages"].as_array().map(Vec::len),
        Some(1),
        "the repeat and the conflict added no message"
    );

    // Someone outside the conversation is refused.
    let outsider = &teams[0].agents[2].client;
    let refused = outsider
        .send(conv, "r2", "hello")
        .await
        .expect_err("not a member");
    assert_eq!(refused.status, 403);

    // The recipient fetches the message; confirming twice answers `confirmed`, then
    // `already_confirmed`.
    let recipient = &teams[0].agents[1].client;
    let deadline = Instant::now() + Duration::from_secs(10);
    let delivery = loop {
        let page = recipient.fetch(10).await.expect("fetch");
        if let Some(d) = page.first() {
            assert_eq!(d["message"]["id"], first["message"]["id"]);
            assert_eq!(d["message"]["body"], "hello");
            break uuid_of(&d["delivery_id"]);
        }
        assert!(
            Instant::now() < deadline,
            "the message was not handed out within 10 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    for outcome in ["confirmed", "already_confirmed"] {
        let results = recipient.confirm(&[delivery]).await.expect("confirm");
        assert_eq!(results[0]["outcome"], outcome);
    }

    drop(server);
    db.passed().await;
}
