//! Shared set-up of the end-to-end tests: the app started in-process on 127.0.0.1:0 and driven
//! through its real HTTP API.
#![allow(dead_code)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use crewbus::bus::Bus;
use crewbus::client::{ApiClient, uuid_of};
use crewbus::compose::{
    Composed, MemoryParts, memory_config, memory_with_wakeups, postgres_with_pool,
};
use crewbus::config::Config;
use crewbus::server::Server;
use crewbus_benches::kit;
use crewbus_conformance::postgres::TestDatabase;
use crewbus_domain::{BusResult, Team, Uuid};
use crewbus_memory::{ManualClock, MemoryConfig, MemoryWakeups};
use crewbus_ports::Clock;
use serde_json::Value;

/// One agent of the test team.
pub type TestAgent = kit::servers::Agent;

pub mod scenarios;
pub mod serve;

/// The memory composition as the server builds it (its limits, in-process wake-ups) on
/// `clock`, with its adapters for fault injection.
pub fn memory_with_clock(
    config: &Config,
    clock: Arc<dyn Clock>,
) -> BusResult<(Composed, MemoryParts)> {
    memory_with(config, clock, memory_config(config))
}

/// [`memory_with_clock`] with the memory adapters' limits `memory` (tests shrink the inbox to
/// make it overflow).
pub fn memory_with(
    config: &Config,
    clock: Arc<dyn Clock>,
    memory: MemoryConfig,
) -> BusResult<(Composed, MemoryParts)> {
    memory_with_wakeups(config, clock, memory, Arc::new(MemoryWakeups::new()))
}

/// A running app with a manual clock: the memory combination (`parts`) or Postgres (`db`).
pub struct TestApp {
    pub server: Server,
    pub bus: Bus,
    pub journal: Arc<dyn crewbus_ports::Journal>,
    pub parts: MemoryParts,
    pub db: Option<TestDatabase>,
    /// A private nats-server kept alive for the test, when one was spawned.
    pub nats: Option<crewbus_conformance::nats::NatsServer>,
    pub clock: ManualClock,
    pub team: Team,
    pub agents: Vec<TestAgent>,
    pub config: Config,
}

/// The test configuration: hand-out grace 30 s (on the manual clock), top-up after 2 s.
pub fn test_config() -> Config {
    let mut c = Config {
        listen: "127.0.0.1:0".parse().unwrap(),
        ..Config::default()
    };
    c.bus.handout_grace_ms = 30_000;
    c.bus.topup_after_ms = 2_000;
    c.bus.idle_poll_ms = 10;
    c.bus.backoff_base_ms = 1_000;
    c.bus.backoff_cap_ms = 4_000;
    c
}

pub type MemoryApp = TestApp;

impl TestApp {
    /// The Postgres combination (ledger, journal, inbox, bodies) on a fresh database of
    /// `DATABASE_URL`'s server.
    pub async fn postgres(label: &str, agents: &[&str]) -> TestApp {
        Self::postgres_with(label, test_config(), agents).await
    }

    /// [`TestApp::postgres`] with an explicit configuration (e.g. a `[push]` section).
    pub async fn postgres_with(label: &str, config: Config, agents: &[&str]) -> TestApp {
        Self::postgres_on(label, config, agents, None, |db| db.pool().clone()).await
    }

    /// [`TestApp::postgres_with`] whose server reaches the database through the pool
    /// `reach` makes from the test database's connection options (e.g. through a proxy);
    /// the agents are created before it is used, through that pool.
    pub async fn postgres_reached_by(
        label: &str,
        config: Config,
        agents: &[&str],
        reach: impl FnOnce(sqlx::postgres::PgConnectOptions) -> sqlx::PgPool,
    ) -> TestApp {
        Self::postgres_on(label, config, agents, None, |db| {
            reach((*db.pool().connect_options()).clone())
        })
        .await
    }

    /// Postgres ledger, journal; JetStream bodies and inbox on the server of `NATS_URL` (default
    /// a private `nats-server` spawned for the test from `NATS_SERVER_BIN` or `PATH`), the team's
    /// streams provisioned for the test and removed after.
    /// The inbox's ack wait is 2 s of real time (the server's clock).
    pub async fn postgres_jetstream(label: &str, agents: &[&str]) -> TestApp {
        if let Some(url) = crewbus_conformance::nats::external_url() {
            return Self::postgres_nats(
                label,
                agents,
                crewbus::config::NatsConfig {
                    servers: vec![url],
                    body_max_bytes: 64 << 20,
                    inbox_max_bytes: 16 << 20,
                    ..Default::default()
                },
            )
            .await;
        }
        let server = crewbus_conformance::nats::NatsServer::start();
        let mut app = Self::postgres_private_jetstream(label, agents, &server).await;
        app.nats = Some(server);
        app
    }

    /// Postgres ledger + JetStream on a private `nats-server` of the conformance fixture
    /// (`max_payload` 2 MB), the server using the runtime credential and provisioning done
    /// with the provisioning credential.
    pub async fn postgres_private_jetstream(
        label: &str,
        agents: &[&str],
        server: &crewbus_conformance::nats::NatsServer,
    ) -> TestApp {
        Self::postgres_private_jetstream_with(label, agents, server, |_| {}).await
    }

    /// [`TestApp::postgres_private_jetstream`] with the NATS settings adjusted by `adjust`.
    pub async fn postgres_private_jetstream_with(
        label: &str,
        agents: &[&str],
        server: &crewbus_conformance::nats::NatsServer,
        adjust: impl FnOnce(&mut crewbus::config::NatsConfig),
    ) -> TestApp {
        let mut nats = crewbus::config::NatsConfig {
            body_max_bytes: 64 << 20,
            inbox_max_bytes: 16 << 20,
            request_timeout_ms: 1_000,
            ..kit::nats::nats_config(server)
        };
        adjust(&mut nats);
        Self::postgres_nats(label, agents, nats).await
    }

    async fn postgres_nats(
        label: &str,
        agents: &[&str],
        nats: crewbus::config::NatsConfig,
    ) -> TestApp {
        let mut config = test_config();
        config.bus.handout_grace_ms = 2_000;
        config.nats = Some(nats);
        Self::postgres_on(label, config, agents, Some("jetstream"), |db| {
            db.pool().clone()
        })
        .await
    }

    /// The Postgres composition of `config` on a fresh migrated database, reached through the
    /// pool `reach` gives for it, the test team's backends `backend`.
    async fn postgres_on(
        label: &str,
        config: Config,
        agents: &[&str],
        backend: Option<&str>,
        reach: impl FnOnce(&TestDatabase) -> sqlx::PgPool,
    ) -> TestApp {
        let db = kit::postgres::database(label).await;
        let pool = reach(&db);
        let clock = ManualClock::new(chrono::Utc::now());
        let composed = postgres_with_pool(&config, pool, Arc::new(clock.clone()))
            .await
            .unwrap();
        // Unused on Postgres, kept so scenarios share one type.
        let (_, parts) =
            memory_with(&config, Arc::new(clock.clone()), memory_config(&config)).unwrap();
        Self::finish(config, composed, parts, Some(db), clock, agents, backend).await
    }

    /// Stops the server; removes JetStream streams; on Postgres drops the test database (kept
    /// when the test failed).
    pub async fn finish_test(self) {
        self.server.stop().await;
        kit::servers::remove_streams(&self.config, &self.team).await;
        if let Some(db) = self.db {
            db.passed().await;
        }
    }

    pub async fn start(agents: &[&str]) -> MemoryApp {
        let config = test_config();
        let memory = memory_config(&config);
        Self::start_with(config, memory, agents).await
    }

    pub async fn start_with(config: Config, memory: MemoryConfig, agents: &[&str]) -> MemoryApp {
        let clock = ManualClock::new(chrono::Utc::now());
        let (composed, parts) = memory_with(&config, Arc::new(clock.clone()), memory).unwrap();
        Self::finish(config, composed, parts, None, clock, agents, None).await
    }

    async fn finish(
        config: Config,
        composed: crewbus::compose::Composed,
        parts: MemoryParts,
        db: Option<TestDatabase>,
        clock: ManualClock,
        agents: &[&str],
        backend: Option<&str>,
    ) -> TestApp {
        let bus = composed.bus.clone();
        let journal = composed.journal.clone();
        let kit::servers::Servers {
            mut servers,
            team,
            agents: list,
        } = kit::servers::Servers::start(
            &config,
            std::slice::from_ref(&bus),
            "team-a",
            backend,
            agents,
        )
        .await;
        let server = servers.pop().unwrap();
        TestApp {
            server,
            bus,
            journal,
            parts,
            db,
            nats: None,
            clock,
            team,
            agents: list,
            config,
        }
    }

    /// A client without a token.
    pub fn anonymous(&self) -> ApiClient {
        ApiClient::new(self.server.url(), None)
    }

    /// Another team with one agent, on the same server.
    pub async fn other_team_agent(&self, name: &str) -> TestAgent {
        let team = self
            .bus
            .add_team(&format!("team-{name}"), None, None)
            .await
            .unwrap();
        TestAgent::add(&self.bus, team.id, name, &self.server.url()).await
    }

    pub fn advance(&self, d: Duration) {
        self.clock.advance(d);
    }
}

/// Makes `subscriber` this thread's default for the guard's life, for a test that reads what
/// was logged (a `#[tokio::test]` runs the app's tasks on its one thread).
///
/// Every test shares one process (`tests/it`). tracing caches whether a callsite is of interest,
/// and while a single dispatcher lives it asks only the default of the thread that first hits
/// the callsite: a callsite first hit on another test's thread, which has no subscriber, would be
/// cached as "never" and this test's lines lost. A second dispatcher that lives as long as the
/// process (interested in nothing, no thread's default) makes tracing combine the interest of
/// every live dispatcher instead.
pub fn capture_logs<S>(subscriber: S) -> tracing::subscriber::DefaultGuard
where
    S: tracing::Subscriber + Send + Sync + 'static,
{
    static SECOND: std::sync::OnceLock<tracing::Dispatch> = std::sync::OnceLock::new();
    SECOND.get_or_init(|| tracing::Dispatch::new(tracing::subscriber::NoSubscriber::default()));
    tracing::subscriber::set_default(subscriber)
}

/// Polls `f` until it returns `Some`, failing the test after `secs` seconds.
pub async fn eventually<T, F, Fut>(what: &str, secs: u64, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Fetches (without confirming) until `n` deliveries arrived in total; fails after 10 s.
pub async fn fetch_n(agent: &TestAgent, n: usize) -> Vec<Value> {
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while got.len() < n {
        assert!(
            Instant::now() < deadline,
            "{} got {} of {n} deliveries",
            agent.name,
            got.len()
        );
        let batch = agent.client.fetch(100).await.unwrap();
        if batch.is_empty() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        got.extend(batch);
    }
    got
}

pub fn delivery_ids(ds: &[Value]) -> Vec<Uuid> {
    ds.iter().map(|d| uuid_of(&d["delivery_id"])).collect()
}

pub fn message_ids(ds: &[Value]) -> Vec<Uuid> {
    ds.iter().map(|d| uuid_of(&d["message"]["id"])).collect()
}

/// The text of `/metrics` of the server at `url` (Prometheus text format).
pub async fn metrics_text(url: &str) -> String {
    reqwest::get(format!("{url}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

/// The value of counter `name` (its `_total` sample) in `/metrics` of `url`; fails when absent.
pub async fn counter(url: &str, name: &str) -> u64 {
    let text = metrics_text(url).await;
    let sample = format!("{name}_total ");
    text.lines()
        .find_map(|l| l.strip_prefix(&sample))
        .unwrap_or_else(|| panic!("{name} missing from /metrics"))
        .trim()
        .parse()
        .unwrap()
}
