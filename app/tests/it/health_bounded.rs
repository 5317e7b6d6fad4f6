//! `/health` answers within its bound (`bus.health_timeout_ms`) when the database does not
//! answer at all: a loopback port that accepts connections and never replies stands for it
//! (the pool's acquire timeout, 10 s, is far longer than the bound).

use std::sync::Arc;
use std::time::{Duration, Instant};

use crewbus::bus::{Bus, BusSettings, Ports};
use crewbus::client::ApiClient;
use crewbus::server::Server;
use crewbus::shutdown::Shutdown;
use crewbus_memory::{MemoryBackends, MemoryConfig, MemoryWakeups};
use crewbus_ports::SystemClock;
use crewbus_postgres::PostgresLedger;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};

/// A listener that accepts every connection and never sends a byte; kept open by the task.
async fn silent_peer() -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket);
        }
    });
    port
}

async fn bus_on_a_silent_database(health_timeout: Duration) -> Bus {
    let port = silent_peer().await;
    let options = PgConnectOptions::new()
        .host("127.0.0.1")
        .port(port)
        .username("postgres")
        .database("postgres");
    let pool = PgPoolOptions::new()
        .acquire_timeout(Duration::from_secs(10))
        .connect_lazy_with(options);
    let ledger = PostgresLedger::new(pool, crewbus_domain::TenantId::default());
    let clock = Arc::new(SystemClock);
    let ports = Ports {
        journal: Arc::new(ledger.journal()),
        ledger: Arc::new(ledger.clone()),
        backends: Arc::new(MemoryBackends::new(MemoryConfig::default(), clock.clone()).unwrap()),
        clock,
        broker: None,
        wakeups: Arc::new(MemoryWakeups::new()),
        operators: Arc::new(ledger.clone()),
        oversight: Arc::new(ledger.clone()),
        leases: Arc::new(ledger.clone()),
        send_allowance: None,
        search: Arc::new(ledger.clone()),
        feed: Arc::new(crewbus_memory::MemoryFeed::new()),
        push_store: Arc::new(crewbus_memory::MemoryPushStore::new(Default::default())),
    };
    Bus::new(
        ports,
        BusSettings {
            health_timeout,
            // The workers' passes wait on the silent pool: do not wait for them at stop.
            shutdown_grace: Duration::from_millis(200),
            ..BusSettings::default()
        },
    )
}

#[tokio::test]
async fn health_reports_a_silent_database_unavailable_within_its_bound() {
    let bound = Duration::from_millis(800);
    let bus = bus_on_a_silent_database(bound).await;
    let started = Instant::now();
    let report = bus.health().await;
    let took = started.elapsed();
    assert!(!report.healthy());
    assert_eq!(report.ledger, "unavailable");
    assert!(took >= bound, "answered before the bound: {took:?}");
    assert!(
        took < bound + Duration::from_millis(700),
        "the probe waited {took:?} (bound {bound:?})"
    );
}

#[tokio::test]
async fn get_health_answers_503_within_the_default_bound() {
    let bus = bus_on_a_silent_database(BusSettings::default().health_timeout).await;
    assert_eq!(bus.settings().health_timeout, Duration::from_secs(2));
    let server = Server::start(bus, "127.0.0.1:0".parse().unwrap(), Shutdown::new())
        .await
        .unwrap();
    let client = ApiClient::new(server.url(), None);
    let started = Instant::now();
    let (status, body) = client
        .call(reqwest::Method::GET, "/health", None)
        .await
        .unwrap();
    let took = started.elapsed();
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["ledger"], "unavailable");
    assert!(took < Duration::from_secs(3), "GET /health took {took:?}");
    server.stop().await;
}
