//! The waiting fetch (`POST /v1/inbox/fetch {wait_ms}`) end to end, on the wall clock (its bounds
//! are real time): on the memory store, on Postgres (one and two servers sharing the database)
//! and on Postgres + JetStream. Each scenario runs on every store it names.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crewbus::bus::Bus;
use crewbus::client::{ApiClient, uuid_of};
use crewbus::compose::{memory_config, memory_with_wakeups, postgres_with_pool};
use crewbus::config::{Config, NatsConfig};
use crewbus::server::Server;
use crewbus::shutdown::Shutdown;
use crewbus_benches::kit;
use crewbus_benches::kit::servers::{Agent, Servers};
use crewbus_conformance::nats::NatsServer;
use crewbus_conformance::postgres::TestDatabase;
use crewbus_domain::{Team, Uuid};
use crewbus_memory::MemoryWakeups;
use crewbus_ports::{SystemClock, Wakeups};
use serde_json::Value;

/// Servers on one store, on the wall clock.
struct App {
    servers: Vec<Server>,
    buses: Vec<Bus>,
    team: Team,
    agents: Vec<Agent>,
    config: Config,
    db: Option<TestDatabase>,
    _nats: Option<NatsServer>,
}

fn config() -> Config {
    let mut c = Config {
        listen: "127.0.0.1:0".parse().unwrap(),
        ..Config::default()
    };
    c.bus.idle_poll_ms = 10;
    c.bus.topup_after_ms = 1_000;
    c.bus.handout_grace_ms = 30_000;
    c
}

impl App {
    async fn memory(agents: &[&str]) -> App {
        Self::memory_with(config(), Arc::new(MemoryWakeups::new()), agents).await
    }

    async fn memory_with(config: Config, wakeups: Arc<dyn Wakeups>, agents: &[&str]) -> App {
        let memory = memory_config(&config);
        let (composed, _) =
            memory_with_wakeups(&config, Arc::new(SystemClock), memory, wakeups).unwrap();
        Self::finish(config, vec![composed.bus], None, None, None, agents).await
    }

    /// `servers` crewbus servers on one fresh Postgres database.
    async fn postgres(label: &str, servers: usize, agents: &[&str]) -> App {
        Self::postgres_with(label, config(), servers, None, agents).await
    }

    async fn postgres_with(
        label: &str,
        config: Config,
        servers: usize,
        nats: Option<NatsServer>,
        agents: &[&str],
    ) -> App {
        let db = kit::postgres::database(label).await;
        let mut buses = Vec::new();
        for _ in 0..servers {
            let composed = postgres_with_pool(&config, db.pool().clone(), Arc::new(SystemClock))
                .await
                .unwrap();
            buses.push(composed.bus);
        }
        let backend = nats.as_ref().map(|_| "jetstream");
        Self::finish(config, buses, Some(db), nats, backend, agents).await
    }

    /// Postgres ledger, JetStream bodies and inbox on a private nats-server.
    async fn postgres_jetstream(label: &str, servers: usize, agents: &[&str]) -> App {
        let server = NatsServer::start();
        let mut config = config();
        config.nats = Some(NatsConfig {
            body_max_bytes: 64 << 20,
            inbox_max_bytes: 16 << 20,
            request_timeout_ms: 2_000,
            ..kit::nats::nats_config(&server)
        });
        Self::postgres_with(label, config, servers, Some(server), agents).await
    }

    async fn finish(
        config: Config,
        buses: Vec<Bus>,
        db: Option<TestDatabase>,
        nats: Option<NatsServer>,
        backend: Option<&str>,
        agents: &[&str],
    ) -> App {
        let Servers {
            servers,
            team,
            agents,
        } = Servers::start(&config, &buses, "team-w", backend, agents).await;
        App {
            servers,
            buses,
            team,
            agents,
            config,
            db,
            _nats: nats,
        }
    }

    /// The same agent's client on server `i`.
    fn on(&self, agent: usize, server: usize) -> ApiClient {
        self.agents[agent].client_on(&self.servers[server].url())
    }

    async fn conversation(&self, creator: usize, members: &[usize]) -> Uuid {
        let ids: Vec<Uuid> = members.iter().map(|m| self.agents[*m].id).collect();
        uuid_of(
            &self.agents[creator]
                .client
                .create_conversation("waits", &ids)
                .await
                .unwrap()["id"],
        )
    }

    /// Waits until `n` fetches wait on server `i` (they subscribed and found nothing).
    async fn until_waiting(&self, server: usize, n: usize) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while self.buses[server].waiting_fetches() < n {
            assert!(
                Instant::now() < deadline,
                "{n} fetches never waited on server {server}"
            );
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
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

/// A waiting fetch in the background: its answer and how long it took.
fn wait_in_background(
    client: ApiClient,
    wait_ms: u64,
) -> tokio::task::JoinHandle<(u16, Value, Duration)> {
    tokio::spawn(async move {
        let started = Instant::now();
        let (status, body) = client.fetch_waiting(10, wait_ms).await.unwrap();
        (status, body, started.elapsed())
    })
}

fn deliveries(body: &Value) -> Vec<Value> {
    body["deliveries"].as_array().cloned().unwrap_or_default()
}

// --- scenarios --------------------------------------------------------------------------------

/// bob waits on server `wait_on`; alice sends through server 0: bob's wait answers with it.
async fn a_wait_returns_when_a_message_is_sent(app: &App, wait_on: usize) {
    let conv = app.conversation(0, &[1]).await;
    let bob = wait_in_background(app.on(1, wait_on), 20_000);
    app.until_waiting(wait_on, 1).await;
    let sent = app.agents[0]
        .client
        .send(conv, "r1", "hello bob")
        .await
        .unwrap();
    let (status, body, _) = bob.await.unwrap();
    assert_eq!(status, 200, "{body}");
    let got = deliveries(&body);
    assert_eq!(got.len(), 1, "the wait ended without the message: {body}");
    assert_eq!(got[0]["message"]["id"], sent["message"]["id"]);
    assert_eq!(got[0]["body"], "hello bob");
}

/// An empty wait answers an empty page after at least `wait_ms` and at most `wait_ms` + 1 s.
async fn an_empty_wait_lasts_as_stated(app: &App) {
    let (status, body, took) = wait_in_background(app.on(1, 0), 700).await.unwrap();
    assert_eq!(status, 200, "{body}");
    assert!(deliveries(&body).is_empty(), "{body}");
    assert!(
        took >= Duration::from_millis(700),
        "answered early: {took:?}"
    );
    assert!(
        took <= Duration::from_millis(1_700),
        "answered late: {took:?}"
    );
}

/// A message for bob wakes bob, not carol: carol's wait lasts its whole length and is empty.
async fn another_agents_message_does_not_end_this_wait(app: &App) {
    let conv = app.conversation(0, &[1]).await;
    let carol = wait_in_background(app.on(2, 0), 1_500);
    let bob = wait_in_background(app.on(1, 0), 20_000);
    app.until_waiting(0, 2).await;
    app.agents[0]
        .client
        .send(conv, "r1", "for bob")
        .await
        .unwrap();
    let (_, bob_body, _) = bob.await.unwrap();
    assert_eq!(deliveries(&bob_body).len(), 1, "{bob_body}");
    let (status, body, took) = carol.await.unwrap();
    assert_eq!(status, 200, "{body}");
    assert!(deliveries(&body).is_empty(), "{body}");
    assert!(
        took >= Duration::from_millis(1_500),
        "carol's wait ended early with an empty page: {took:?}"
    );
}

/// bob waits on server `wait_on`; server `revoke_on` revokes him: the wait ends with 401 within
/// a second.
async fn revocation_ends_a_wait(app: &App, wait_on: usize, revoke_on: usize) {
    let bob = wait_in_background(app.on(1, wait_on), 20_000);
    app.until_waiting(wait_on, 1).await;
    let revoked = Instant::now();
    app.buses[revoke_on]
        .revoke_agent(app.team.id, app.agents[1].id)
        .await
        .unwrap();
    let (status, body, _) = bob.await.unwrap();
    let after = revoked.elapsed();
    assert_eq!(status, 401, "{body}");
    assert_eq!(body["code"], "unauthenticated");
    assert!(
        after <= Duration::from_secs(1),
        "the revoked wait ended {after:?} after the revocation"
    );
}

// --- memory -----------------------------------------------------------------------------------

#[tokio::test]
async fn memory_a_wait_returns_when_a_message_is_sent() {
    let app = App::memory(&["alice", "bob"]).await;
    a_wait_returns_when_a_message_is_sent(&app, 0).await;
    app.finish_test().await;
}

#[tokio::test]
async fn memory_an_empty_wait_lasts_as_stated() {
    let app = App::memory(&["alice", "bob"]).await;
    an_empty_wait_lasts_as_stated(&app).await;
    app.finish_test().await;
}

#[tokio::test]
async fn memory_another_agents_message_does_not_end_this_wait() {
    let app = App::memory(&["alice", "bob", "carol"]).await;
    another_agents_message_does_not_end_this_wait(&app).await;
    app.finish_test().await;
}

#[tokio::test]
async fn memory_revocation_ends_a_wait() {
    let app = App::memory(&["alice", "bob"]).await;
    revocation_ends_a_wait(&app, 0, 0).await;
    app.finish_test().await;
}

#[tokio::test]
async fn memory_a_wait_above_the_maximum_is_invalid() {
    let mut config = config();
    config.bus.max_wait_ms = 500;
    let app = App::memory_with(config, Arc::new(MemoryWakeups::new()), &["alice", "bob"]).await;
    let (status, body) = app.agents[1].client.fetch_waiting(10, 501).await.unwrap();
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["code"], "invalid");
    let (status, body) = app.agents[1].client.fetch_waiting(10, 500).await.unwrap();
    assert_eq!(status, 200, "the maximum itself is allowed: {body}");
    app.finish_test().await;
}

/// Shutdown ends every wait at once with an empty page (a normal answer), within the grace.
#[tokio::test]
async fn memory_shutdown_ends_every_wait_with_an_empty_page() {
    let app = App::memory(&["alice", "bob", "carol"]).await;
    let waits: Vec<_> = (0..3)
        .map(|i| wait_in_background(app.on(i, 0), 40_000))
        .collect();
    app.until_waiting(0, 3).await;
    let stopping = Instant::now();
    let App { servers, .. } = app;
    for s in servers {
        s.stop().await;
    }
    for w in waits {
        let (status, body, _) = w.await.unwrap();
        assert_eq!(status, 200, "{body}");
        assert!(deliveries(&body).is_empty(), "{body}");
    }
    let took = stopping.elapsed();
    assert!(
        took < Duration::from_secs(5),
        "the waits held the shutdown for {took:?}"
    );
}

/// With a wake-up adapter that loses every notification, a message is still returned within
/// 1.5 × `topup_after` of being stored: through the safety sweep, from the inbox (bob) and from
/// the ledger top-up alone (carol: the inbox keeps one reference, so one of the two is
/// discarded).
#[tokio::test]
async fn memory_lost_wakeups_delay_a_wait_at_most_one_and_a_half_topup_after() {
    let config = config();
    let topup_after = Duration::from_millis(config.bus.topup_after_ms);
    let mut memory = memory_config(&config);
    memory.inbox.max_messages = 1;
    let (composed, _) = memory_with_wakeups(
        &config,
        Arc::new(SystemClock),
        memory,
        Arc::new(MemoryWakeups::losing_everything()),
    )
    .unwrap();
    let app = App::finish(
        config,
        vec![composed.bus],
        None,
        None,
        None,
        &["alice", "bob", "carol"],
    )
    .await;
    let conv = app.conversation(0, &[1, 2]).await;
    let bob = wait_in_background(app.on(1, 0), 20_000);
    let carol = wait_in_background(app.on(2, 0), 20_000);
    app.until_waiting(0, 2).await;
    let sent_at = Instant::now();
    let sent = app.agents[0].client.send(conv, "r1", "hi").await.unwrap();
    for (who, wait) in [("bob", bob), ("carol", carol)] {
        let (status, body, _) = wait.await.unwrap();
        let after = sent_at.elapsed();
        assert_eq!(status, 200, "{body}");
        let got = deliveries(&body);
        assert_eq!(got.len(), 1, "{who}: {body}");
        assert_eq!(got[0]["message"]["id"], sent["message"]["id"]);
        // 1.5 × topup_after, plus the relay's store and one sweep's scheduling.
        assert!(
            after <= topup_after * 3 / 2 + Duration::from_millis(400),
            "{who} got it {after:?} after the send"
        );
    }
    app.finish_test().await;
}

/// A wake-up while the ledger is down: the woken fetch's checks fail, are logged, and the wait
/// goes on; once the ledger is back the message sent then is returned — the request never
/// failed.
#[tokio::test]
async fn memory_a_failing_re_fetch_keeps_the_wait() {
    let config = config();
    let wakeups = MemoryWakeups::new();
    let (composed, parts) = memory_with_wakeups(
        &config,
        Arc::new(SystemClock),
        memory_config(&config),
        Arc::new(wakeups.clone()),
    )
    .unwrap();
    let app = App::finish(
        config,
        vec![composed.bus],
        None,
        None,
        None,
        &["alice", "bob"],
    )
    .await;
    let conv = app.conversation(0, &[1]).await;
    let bob = wait_in_background(app.on(1, 0), 20_000);
    app.until_waiting(0, 1).await;
    parts.ledger.set_unavailable(true);
    let target = crewbus_domain::WakeupTarget::new(app.team.id, app.agents[1].id);
    wakeups.notify(&[target]).await.unwrap();
    // The woken waiter tried the ledger (and failed) and waits again.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !bob.is_finished() && Instant::now() < deadline && app.buses[0].waiting_fetches() == 1 {
        tokio::time::sleep(Duration::from_millis(2)).await;
        // Wake it until it is seen trying: each wake-up is one more failed check.
        wakeups.notify(&[target]).await.unwrap();
        if app.buses[0].metrics().wait_errors() > 0 {
            break;
        }
    }
    assert!(
        app.buses[0].metrics().wait_errors() > 0,
        "the woken fetch never tried the ledger"
    );
    assert!(!bob.is_finished(), "a failing re-fetch ended the wait");
    parts.ledger.set_unavailable(false);
    let sent = app.agents[0]
        .client
        .send(conv, "r1", "after the outage")
        .await
        .unwrap();
    let (status, body, _) = bob.await.unwrap();
    assert_eq!(status, 200, "{body}");
    let got = deliveries(&body);
    assert_eq!(got.len(), 1, "{body}");
    assert_eq!(got[0]["message"]["id"], sent["message"]["id"]);
    app.finish_test().await;
}

// --- Postgres ---------------------------------------------------------------------------------

#[tokio::test]
async fn postgres_a_wait_returns_when_a_message_is_sent_on_the_same_server() {
    let app = App::postgres("wait_pg_same", 1, &["alice", "bob"]).await;
    a_wait_returns_when_a_message_is_sent(&app, 0).await;
    app.finish_test().await;
}

#[tokio::test]
async fn postgres_a_wait_returns_when_a_message_is_sent_through_another_server() {
    let app = App::postgres("wait_pg_across", 2, &["alice", "bob"]).await;
    a_wait_returns_when_a_message_is_sent(&app, 1).await;
    app.finish_test().await;
}

#[tokio::test]
async fn postgres_an_empty_wait_lasts_as_stated() {
    let app = App::postgres("wait_pg_empty", 1, &["alice", "bob"]).await;
    an_empty_wait_lasts_as_stated(&app).await;
    app.finish_test().await;
}

#[tokio::test]
async fn postgres_another_agents_message_does_not_end_this_wait() {
    let app = App::postgres("wait_pg_other", 1, &["alice", "bob", "carol"]).await;
    another_agents_message_does_not_end_this_wait(&app).await;
    app.finish_test().await;
}

#[tokio::test]
async fn postgres_revocation_on_another_server_ends_a_wait() {
    let app = App::postgres("wait_pg_revoke", 2, &["alice", "bob"]).await;
    revocation_ends_a_wait(&app, 0, 1).await;
    app.finish_test().await;
}

/// 500 agents waiting at once hold no more connections than none do (the pool's maximum plus
/// the wake-up listener), and none of them is active or idle in a transaction while they wait.
#[tokio::test]
async fn postgres_500_waiting_agents_hold_no_database_connection() {
    const WAITERS: usize = 500;
    let mut config = config();
    // Quiet workers: any active session would then be a waiter's.
    config.bus.idle_poll_ms = 60_000;
    config.bus.topup_after_ms = 120_000;
    let max = 10;
    let db = kit::postgres::database("wait_pg_500").await;
    let options = db.pool().connect_options().as_ref().clone();
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(max)
        .connect_with(options.application_name("crewbus-wait-test"))
        .await
        .unwrap();
    let bus = postgres_with_pool(&config, pool, Arc::new(SystemClock))
        .await
        .unwrap()
        .bus;
    let team = bus.add_team("team-500", None, None).await.unwrap();
    let server = Server::start(bus.clone(), config.listen, Shutdown::new())
        .await
        .unwrap();
    let mut clients = Vec::new();
    for k in 0..WAITERS {
        let new = bus.add_agent(team.id, &format!("a{k}")).await.unwrap();
        clients.push(ApiClient::new(server.url(), Some(new.token)));
    }
    let waits: Vec<_> = clients
        .into_iter()
        .map(|c| wait_in_background(c, 40_000))
        .collect();
    let deadline = Instant::now() + Duration::from_secs(30);
    while bus.waiting_fetches() < WAITERS {
        assert!(
            Instant::now() < deadline,
            "only {} of {WAITERS} waiters waited",
            bus.waiting_fetches()
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let name = db.name().to_owned();
    let observer = db.pool();
    // A session busy in two samples 100 ms apart is held (a waiting fetch would hold one for
    // its whole 40 s); the bus's background work runs short statements on the pool now and
    // then (seen: the batched last-activity write of the 500 agents, every few seconds), so
    // one sample may catch a session active, never the same one twice in a row.
    let mut busy_before: Vec<i32> = Vec::new();
    for _ in 0..10 {
        // The server's sessions: its pool and its listener (the listener connects with the
        // pool's options, so it carries the same application name).
        let sessions: Vec<(i32, Option<String>, Option<String>)> = sqlx::query_as(
            "SELECT pid, state, query FROM pg_stat_activity
             WHERE datname = $1 AND application_name = 'crewbus-wait-test'",
        )
        .bind(&name)
        .fetch_all(observer)
        .await
        .unwrap();
        assert!(
            sessions.len() as u32 <= max + 1,
            "{} sessions with {WAITERS} waiters (pool max {max} + the listener)",
            sessions.len()
        );
        let busy: Vec<i32> = sessions
            .iter()
            .filter(|(_, state, _)| state.as_deref() != Some("idle"))
            .map(|(pid, _, _)| *pid)
            .collect();
        assert!(
            busy.iter().all(|pid| !busy_before.contains(pid)),
            "a session stayed busy while agents wait: {sessions:?}"
        );
        busy_before = busy;
        assert_eq!(bus.waiting_fetches(), WAITERS, "a wait ended early");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Shutdown ends them all with an empty page.
    server.stop().await;
    for w in waits {
        let (status, body, _) = w.await.unwrap();
        assert_eq!(status, 200, "{body}");
        assert!(deliveries(&body).is_empty(), "{body}");
    }
    db.passed().await;
}

// --- Postgres + JetStream ---------------------------------------------------------------------

#[tokio::test]
async fn postgres_jetstream_a_wait_returns_when_a_message_is_sent_on_the_same_server() {
    let app = App::postgres_jetstream("wait_js_same", 1, &["alice", "bob"]).await;
    a_wait_returns_when_a_message_is_sent(&app, 0).await;
    app.finish_test().await;
}

#[tokio::test]
async fn postgres_jetstream_a_wait_returns_when_a_message_is_sent_through_another_server() {
    let app = App::postgres_jetstream("wait_js_across", 2, &["alice", "bob"]).await;
    a_wait_returns_when_a_message_is_sent(&app, 1).await;
    app.finish_test().await;
}

#[tokio::test]
async fn postgres_jetstream_an_empty_wait_lasts_as_stated() {
    let app = App::postgres_jetstream("wait_js_empty", 1, &["alice", "bob"]).await;
    an_empty_wait_lasts_as_stated(&app).await;
    app.finish_test().await;
}

#[tokio::test]
async fn postgres_jetstream_another_agents_message_does_not_end_this_wait() {
    let app = App::postgres_jetstream("wait_js_other", 1, &["alice", "bob", "carol"]).await;
    another_agents_message_does_not_end_this_wait(&app).await;
    app.finish_test().await;
}

#[tokio::test]
async fn postgres_jetstream_revocation_ends_a_wait() {
    let app = App::postgres_jetstream("wait_js_revoke", 2, &["alice", "bob"]).await;
    revocation_ends_a_wait(&app, 1, 0).await;
    app.finish_test().await;
}
