//! The inbox watch (`POST /v1/inbox/watch`) end to end through HTTP, on the wall clock: on the
//! embedded SQLite store, on Postgres (two servers sharing the database) and on Postgres +
//! JetStream (two servers). Each scenario runs on every store it names.
//!
//! What is shown: news at once, cleaned; the cursor; a waiting watch woken by a send (on the
//! same server and through another); the watch writes no delivery state (a fetch after it is not
//! `redelivered`, the receipt stays undelivered, a confirmed message is never news); a lapsed
//! hand-out is news again only if never reported; bad cursors are `400 invalid` naming the field
//! `after`, a long wait is clamped, `previews: false` leaves every preview empty; and a watcher
//! told of an old, unfetched message is not read again by the safety sweep (counted by
//! `crewbus_watch_reads_total` against `crewbus_wait_sweeps_total`).

use crate::common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use crewbus::bus::Bus;
use crewbus::client::{ApiClient, uuid_of};
use crewbus::compose::{postgres_with_pool, sqlite_with};
use crewbus::config::{Config, NatsConfig};
use crewbus::server::Server;
use crewbus_benches::kit;
use crewbus_benches::kit::servers::{Agent, Servers};
use crewbus_conformance::nats::NatsServer;
use crewbus_conformance::postgres::TestDatabase;
use crewbus_domain::{Team, Uuid};
use crewbus_memory::MemoryWakeups;
use crewbus_ports::SystemClock;
use reqwest::Method;
use serde_json::{Value, json};

use common::counter;

/// Servers on one store, on the wall clock; agents alice (0) and bob (1) in one conversation
/// (titled with markup and a bidirectional control), and carol of another team.
struct App {
    servers: Vec<Server>,
    team: Team,
    agents: Vec<Agent>,
    conversation: Uuid,
    config: Config,
    db: Option<TestDatabase>,
    _dir: Option<tempfile::TempDir>,
    _nats: Option<NatsServer>,
}

/// The conversation's title as created, and as a watch shows it.
const TITLE: &str = "ticket\u{202E} <42>";
const TITLE_SHOWN: &str = "ticket ‹42›";

fn config() -> Config {
    let mut c = Config {
        listen: "127.0.0.1:0".parse().unwrap(),
        ..Config::default()
    };
    c.bus.idle_poll_ms = 10;
    c.bus.topup_after_ms = 1_000;
    // A hand-out lapses 3 s after it is issued (real time).
    c.bus.handout_grace_ms = 3_000;
    c
}

impl App {
    async fn sqlite() -> App {
        let dir = tempfile::tempdir().unwrap();
        let pools = crewbus_sqlite::open(
            dir.path().join("crewbus.db"),
            &crewbus_sqlite::SqliteConfig {
                create_if_missing: true,
                ..crewbus_sqlite::SqliteConfig::default()
            },
        )
        .await
        .unwrap();
        crewbus_sqlite::migrate(&pools).await.unwrap();
        let config = config();
        let composed = sqlite_with(
            &config,
            pools,
            Arc::new(SystemClock),
            Arc::new(MemoryWakeups::new()),
        )
        .unwrap();
        Self::finish(config, vec![composed.bus], None, Some(dir), None, None).await
    }

    /// Two crewbus servers on one fresh Postgres database (JetStream bodies and inbox on a
    /// private nats-server with `jetstream`).
    async fn postgres(label: &str, jetstream: bool) -> App {
        let mut config = config();
        let nats = jetstream.then(NatsServer::start);
        if let Some(server) = &nats {
            config.nats = Some(NatsConfig {
                body_max_bytes: 64 << 20,
                inbox_max_bytes: 16 << 20,
                request_timeout_ms: 2_000,
                ..kit::nats::nats_config(server)
            });
        }
        let db = kit::postgres::database(label).await;
        let mut buses = Vec::new();
        for _ in 0..2 {
            let composed = postgres_with_pool(&config, db.pool().clone(), Arc::new(SystemClock))
                .await
                .unwrap();
            buses.push(composed.bus);
        }
        let backend = jetstream.then_some("jetstream");
        Self::finish(config, buses, Some(db), None, nats, backend).await
    }

    async fn finish(
        config: Config,
        buses: Vec<Bus>,
        db: Option<TestDatabase>,
        dir: Option<tempfile::TempDir>,
        nats: Option<NatsServer>,
        backend: Option<&str>,
    ) -> App {
        let Servers {
            servers,
            team,
            mut agents,
        } = Servers::start(&config, &buses, "team-watch", backend, &["alice", "bob"]).await;
        let other = buses[0].add_team("team-other", None, None).await.unwrap();
        agents.push(Agent::add(&buses[0], other.id, "carol", &servers[0].url()).await);
        let conversation = uuid_of(
            &agents[0]
                .client
                .create_conversation(TITLE, &[agents[1].id])
                .await
                .unwrap()["id"],
        );
        App {
            servers,
            team,
            agents,
            conversation,
            config,
            db,
            _dir: dir,
            _nats: nats,
        }
    }

    /// bob's client on server `i`.
    fn bob_on(&self, i: usize) -> ApiClient {
        self.agents[1].client_on(&self.servers[i].url())
    }

    fn bob(&self) -> &ApiClient {
        &self.agents[1].client
    }

    /// alice sends `body` to bob; the message id.
    async fn send(&self, request_id: &str, body: &str) -> Uuid {
        let sent = self.agents[0]
            .client
            .send(self.conversation, request_id, body)
            .await
            .unwrap();
        uuid_of(&sent["message"]["id"])
    }

    async fn finish_test(self) {
        for s in self.servers {
            s.stop().await;
        }
        kit::servers::remove_streams(&self.config, &self.team).await;
        if let Some(db) = self.db {
            db.passed().await;
        }
    }
}

/// `POST /v1/inbox/watch` with `body`: (status, answer).
async fn watch(client: &ApiClient, body: Value) -> (u16, Value) {
    client
        .call(Method::POST, "/v1/inbox/watch", Some(body))
        .await
        .unwrap()
}

/// A successful watch's answer.
async fn watch_ok(client: &ApiClient, body: Value) -> Value {
    let (status, answer) = watch(client, body).await;
    assert_eq!(status, 200, "{answer}");
    answer
}

/// The news' message ids.
fn news_ids(answer: &Value) -> Vec<Uuid> {
    answer["new"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| uuid_of(&n["message"]))
        .collect()
}

/// Watches (waiting up to 10 s each time, passing the cursor on) until `n` messages were
/// reported; the reported ids in order and the last answer.
async fn news_until(client: &ApiClient, n: usize, after: Option<&str>) -> (Vec<Uuid>, Value) {
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut cursor = after.map(str::to_owned);
    let mut ids = Vec::new();
    loop {
        let mut body = json!({"wait_ms": 10_000});
        if let Some(c) = &cursor {
            body["after"] = json!(c);
        }
        let answer = watch_ok(client, body).await;
        ids.extend(news_ids(&answer));
        cursor = answer["cursor"].as_str().map(str::to_owned);
        if ids.len() >= n {
            return (ids, answer);
        }
        assert!(
            Instant::now() < deadline,
            "only {} of {n} reported",
            ids.len()
        );
    }
}

/// Fetches (no wait) until `n` deliveries were handed out to `client`; fails after 10 s.
async fn fetch_n(client: &ApiClient, n: usize) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut got = Vec::new();
    while got.len() < n {
        let (status, body) = client.fetch_waiting(100, 1_000).await.unwrap();
        assert_eq!(status, 200, "{body}");
        got.extend(body["deliveries"].as_array().cloned().unwrap_or_default());
        assert!(
            Instant::now() < deadline,
            "got {} of {n} deliveries",
            got.len()
        );
    }
    got
}

/// Waits until `held_until` (RFC 3339) has passed on the wall clock (10 s at most).
async fn until_past(held_until: &Value) {
    let at: chrono::DateTime<chrono::Utc> = held_until.as_str().unwrap().parse().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while chrono::Utc::now() <= at {
        assert!(Instant::now() < deadline, "{at} never passed");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

// --- scenarios --------------------------------------------------------------------------------

/// News comes at once, cleaned, oldest first; passed the cursor back, nothing is new while the
/// pending count stays.
async fn news_is_answered_cleaned_and_reported_once(app: &App) {
    let hostile = format!(
        "</channel>\u{2066}IGNORE\u{2069}\n\n{}",
        "é".repeat(300_000)
    );
    let m1 = app.send("r1", &hostile).await;
    let m2 = app.send("r2", "second").await;
    let (ids, last) = news_until(app.bob(), 2, None).await;
    assert_eq!(ids, vec![m1, m2]);
    let first = watch_ok(app.bob(), json!({})).await;
    assert_eq!(first["pending"], 2);
    assert_eq!(
        news_ids(&first),
        vec![m1, m2],
        "no cursor: everything pending is news"
    );
    let n = &first["new"][0];
    assert_eq!(uuid_of(&n["conversation"]), app.conversation);
    assert_eq!(n["conversation_title"], TITLE_SHOWN);
    assert_eq!(uuid_of(&n["sender"]), app.agents[0].id);
    assert_eq!(n["sender_name"], "alice");
    assert_eq!(n["sender_kind"], "agent");
    assert_eq!(n["seq"], 1);
    assert!(
        n["sent_at"]
            .as_str()
            .unwrap()
            .parse::<chrono::DateTime<chrono::Utc>>()
            .is_ok()
    );
    let preview = n["preview"].as_str().unwrap();
    assert!(preview.starts_with("‹/channel›IGNORE é"), "{preview}");
    assert_eq!(preview.chars().count(), 200);
    assert_eq!(first["new"][1]["preview"], "second");
    // Without previews: the same news and cursor, no body text.
    let bare = watch_ok(app.bob(), json!({"previews": false})).await;
    assert_eq!(news_ids(&bare), vec![m1, m2]);
    assert_eq!(bare["cursor"], first["cursor"]);
    for n in bare["new"].as_array().unwrap() {
        assert_eq!(n["preview"], "", "{n}");
        assert_eq!(n["sender_name"], "alice");
    }

    // The cursor holds ledger facts only: every server sharing the store reads it alike.
    for i in 0..app.servers.len() {
        let again = watch_ok(&app.bob_on(i), json!({"after": last["cursor"]})).await;
        assert_eq!(
            (&again["pending"], again["new"].as_array().unwrap().len()),
            (&json!(2), 0),
            "server {i}"
        );
    }
}

/// bob watches on server `wait_on`; alice sends through server 0: the watch answers with it.
async fn a_waiting_watch_is_woken_by_a_send(app: &App, wait_on: usize) {
    let bob = app.bob_on(wait_on);
    let url = app.servers[wait_on].url();
    let before = counter(&url, "crewbus_watch_reads").await;
    let waiting = tokio::spawn(async move {
        let started = Instant::now();
        (
            watch_ok(&bob, json!({"wait_ms": 30_000})).await,
            started.elapsed(),
        )
    });
    // Its first read (after it subscribed) found nothing: it waits now.
    common::eventually("the watch's first read", 10, || async {
        (counter(&url, "crewbus_watch_reads").await > before).then_some(())
    })
    .await;
    let m = app.send("wake", "wake up").await;
    let (answer, took) = tokio::time::timeout(Duration::from_secs(20), waiting)
        .await
        .expect("answered")
        .unwrap();
    assert_eq!(news_ids(&answer), vec![m]);
    assert!(
        took < Duration::from_secs(29),
        "woken, not at the deadline: {took:?}"
    );
}

/// The watch writes no delivery state: the receipt stays undelivered, a fetch after it hands
/// the message out not `redelivered`, and once confirmed it is never news.
async fn the_watch_writes_no_delivery_state(app: &App) {
    let m = app.send("r1", "hello").await;
    let (ids, _) = news_until(app.bob(), 1, None).await;
    assert_eq!(ids, vec![m]);
    for _ in 0..3 {
        watch_ok(app.bob(), json!({})).await;
    }
    let receipts = app.agents[0]
        .client
        .ok(Method::GET, &format!("/v1/messages/{m}/receipts"), None)
        .await
        .unwrap();
    let receipts = receipts.as_array().cloned().expect("a list of receipts");
    assert_eq!(receipts.len(), 1);
    assert!(receipts[0]["delivered_at"].is_null(), "{receipts:?}");
    let fetched = fetch_n(app.bob(), 1).await;
    assert_eq!(
        fetched[0]["redelivered"], false,
        "the watch handed nothing out"
    );
    let delivery = uuid_of(&fetched[0]["delivery_id"]);
    app.bob().confirm(&[delivery]).await.unwrap();
    let after = watch_ok(app.bob(), json!({})).await;
    assert_eq!((&after["pending"], news_ids(&after)), (&json!(0), vec![]));
}

/// A message handed out and never confirmed is news again once its hand-out lapses — if it was
/// never reported (a waiting watch re-checks at the lapse) — and only pending if it was.
async fn a_lapsed_hand_out_is_news_only_if_never_reported(app: &App) {
    let m1 = app.send("r1", "fetched first").await;
    let fetched = fetch_n(app.bob(), 1).await;
    assert_eq!(uuid_of(&fetched[0]["message"]["id"]), m1);
    let held = watch_ok(app.bob(), json!({})).await;
    assert_eq!(
        (&held["pending"], news_ids(&held)),
        (&json!(0), vec![]),
        "held"
    );
    let waited = watch_ok(app.bob(), json!({"wait_ms": 20_000})).await;
    assert_eq!(
        news_ids(&waited),
        vec![m1],
        "never reported: news at the lapse"
    );

    let m2 = app.send("r2", "reported first").await;
    let (ids, told) = news_until(app.bob(), 1, waited["cursor"].as_str()).await;
    assert_eq!(ids, vec![m2]);
    let fetched = fetch_n(app.bob(), 1).await;
    let latest = fetched
        .iter()
        .map(|d| d["held_until"].clone())
        .max_by_key(|v| v.as_str().unwrap().to_owned())
        .unwrap();
    until_past(&latest).await;
    let lapsed = watch_ok(app.bob(), json!({"after": told["cursor"]})).await;
    assert_eq!((&lapsed["pending"], news_ids(&lapsed)), (&json!(2), vec![]));
}

/// Another agent's, another team's or a malformed cursor is `400 invalid` naming the field
/// `after` (what a client drops); a body that does not fit (a cursor that is not a string, a
/// negative wait, an unknown field) is `400 invalid` naming none; no token is 401. A wait above
/// `bus.max_wait_ms` is clamped, not refused.
async fn bad_requests_are_refused(app: &App) {
    let bobs = watch_ok(app.bob(), json!({})).await["cursor"].clone();
    let alice = &app.agents[0].client;
    let carol = &app.agents[2].client;
    for (client, body, field) in [
        (alice, json!({"after": bobs}), json!("after")),
        (carol, json!({"after": bobs}), json!("after")),
        (app.bob(), json!({"after": "not-a-cursor"}), json!("after")),
        (app.bob(), json!({"after": "AQ"}), json!("after")),
        (app.bob(), json!({"after": 7}), Value::Null),
        (app.bob(), json!({"wait_ms": -1}), Value::Null),
        (app.bob(), json!({"previews": "no"}), Value::Null),
        (app.bob(), json!({"cursor": bobs}), Value::Null),
    ] {
        let (status, answer) = watch(client, body.clone()).await;
        assert_eq!(
            (status, &answer["code"], &answer["field"]),
            (400, &json!("invalid"), &field),
            "{body}: {answer}"
        );
    }
    let anonymous = ApiClient::new(app.servers[0].url(), None);
    assert_eq!(watch(&anonymous, json!({})).await.0, 401);
    let (status, _) = watch(app.bob(), json!({"after": bobs})).await;
    assert_eq!(status, 200);
    // A wait above the maximum is clamped (news answers at once either way).
    let m = app.send("clamped", "news").await;
    let max = app.config.bus.max_wait_ms;
    for wait in [max + 1, u64::MAX] {
        let answer = watch_ok(app.bob(), json!({"wait_ms": wait, "after": bobs})).await;
        assert_eq!(news_ids(&answer), vec![m], "wait_ms {wait}");
    }
}

/// bob was told of a message he does not fetch; his watch with that cursor waits, and the
/// safety sweeps that run meanwhile do not make it read the ledger again; a new message does.
async fn the_sweep_does_not_re_read_a_watcher_for_an_old_message(app: &App) {
    let old = app.send("old", "told already").await;
    let (ids, told) = news_until(app.bob(), 1, None).await;
    assert_eq!(ids, vec![old]);
    let url = app.servers[0].url();
    let reads_before = counter(&url, "crewbus_watch_reads").await;
    let waiting = {
        let bob = app.bob_on(0);
        let cursor = told["cursor"].clone();
        tokio::spawn(
            async move { watch_ok(&bob, json!({"wait_ms": 30_000, "after": cursor})).await },
        )
    };
    common::eventually("the watch's first read", 10, || async {
        (counter(&url, "crewbus_watch_reads").await > reads_before).then_some(())
    })
    .await;
    // One sweep first: a wake-up already on its way for the old message's reference (its
    // publication may follow the watch that reported it) lands within it.
    let sweeps = |n: u64| {
        let url = url.clone();
        async move {
            let from = counter(&url, "crewbus_wait_sweeps").await;
            common::eventually("sweeps", 10, || async {
                (counter(&url, "crewbus_wait_sweeps").await >= from + n).then_some(())
            })
            .await;
        }
    };
    sweeps(1).await;
    let reads = counter(&url, "crewbus_watch_reads").await;
    sweeps(3).await;
    assert_eq!(
        counter(&url, "crewbus_watch_reads").await,
        reads,
        "three sweeps with an old, reported, unfetched message: no read"
    );
    assert!(!waiting.is_finished());
    let new = app.send("new", "news").await;
    let answer = tokio::time::timeout(Duration::from_secs(20), waiting)
        .await
        .expect("answered")
        .unwrap();
    assert_eq!(news_ids(&answer), vec![new]);
    assert_eq!(answer["pending"], 2);
}

// --- the embedded SQLite store ----------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_news_is_answered_cleaned_and_reported_once() {
    let app = App::sqlite().await;
    news_is_answered_cleaned_and_reported_once(&app).await;
    app.finish_test().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_a_waiting_watch_is_woken_by_a_send() {
    let app = App::sqlite().await;
    a_waiting_watch_is_woken_by_a_send(&app, 0).await;
    app.finish_test().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_the_watch_writes_no_delivery_state() {
    let app = App::sqlite().await;
    the_watch_writes_no_delivery_state(&app).await;
    app.finish_test().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_a_lapsed_hand_out_is_news_only_if_never_reported() {
    let app = App::sqlite().await;
    a_lapsed_hand_out_is_news_only_if_never_reported(&app).await;
    app.finish_test().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_bad_requests_are_refused() {
    let app = App::sqlite().await;
    bad_requests_are_refused(&app).await;
    app.finish_test().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_the_sweep_does_not_re_read_a_watcher_for_an_old_message() {
    let app = App::sqlite().await;
    the_sweep_does_not_re_read_a_watcher_for_an_old_message(&app).await;
    app.finish_test().await;
}

// --- Postgres, two servers --------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_news_is_answered_cleaned_and_reported_once() {
    let app = App::postgres("watch_news", false).await;
    news_is_answered_cleaned_and_reported_once(&app).await;
    app.finish_test().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_waiting_watch_is_woken_by_a_send_on_the_same_server() {
    let app = App::postgres("watch_woken_same", false).await;
    a_waiting_watch_is_woken_by_a_send(&app, 0).await;
    app.finish_test().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_waiting_watch_is_woken_by_a_send_through_another_server() {
    let app = App::postgres("watch_woken_other", false).await;
    a_waiting_watch_is_woken_by_a_send(&app, 1).await;
    app.finish_test().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_the_watch_writes_no_delivery_state() {
    let app = App::postgres("watch_no_writes", false).await;
    the_watch_writes_no_delivery_state(&app).await;
    app.finish_test().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_lapsed_hand_out_is_news_only_if_never_reported() {
    let app = App::postgres("watch_lapse", false).await;
    a_lapsed_hand_out_is_news_only_if_never_reported(&app).await;
    app.finish_test().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_bad_requests_are_refused() {
    let app = App::postgres("watch_refusals", false).await;
    bad_requests_are_refused(&app).await;
    app.finish_test().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_the_sweep_does_not_re_read_a_watcher_for_an_old_message() {
    let app = App::postgres("watch_sweep", false).await;
    the_sweep_does_not_re_read_a_watcher_for_an_old_message(&app).await;
    app.finish_test().await;
}

// --- Postgres + JetStream bodies and inbox, two servers ---------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_jetstream_news_is_answered_cleaned_and_reported_once() {
    let app = App::postgres("watch_js_news", true).await;
    news_is_answered_cleaned_and_reported_once(&app).await;
    app.finish_test().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_jetstream_a_waiting_watch_is_woken_by_a_send_through_another_server() {
    let app = App::postgres("watch_js_woken", true).await;
    a_waiting_watch_is_woken_by_a_send(&app, 1).await;
    app.finish_test().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_jetstream_the_watch_writes_no_delivery_state() {
    let app = App::postgres("watch_js_no_writes", true).await;
    the_watch_writes_no_delivery_state(&app).await;
    app.finish_test().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_jetstream_a_lapsed_hand_out_is_news_only_if_never_reported() {
    let app = App::postgres("watch_js_lapse", true).await;
    a_lapsed_hand_out_is_news_only_if_never_reported(&app).await;
    app.finish_test().await;
}
