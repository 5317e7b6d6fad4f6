//! Fault suite: processes killed or restarted mid-load, each scenario ending with `crewbus
//! load`'s zero-loss check. Real servers: a private nats-server (`NATS_SERVER_BIN`, else PATH),
//! Postgres from `DATABASE_URL` (or a private cluster for the restart), and the built `crewbus`
//! binary. The scenarios of this file run one at a time.

use crate::fault_support;

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crewbus::cli::BackendChoice;
use crewbus_benches::kit::postgres::database_with_url;
use crewbus_conformance::nats::NatsServer;
use crewbus_conformance::postgres::{PgCluster, database_url_options};
use fault_support::*;

/// Polls `/health` of `url` until `broker` reads `want` (deadline 30 s).
async fn broker_reads(url: &str, want: &str) {
    let client = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(r) = client.get(format!("{url}/health")).send().await
            && let Ok(v) = r.json::<serde_json::Value>().await
            && v["broker"] == want
        {
            return;
        }
        assert!(Instant::now() < deadline, "broker never reads {want}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn nats_server_killed_and_restarted_mid_load_loses_nothing() {
    let _serial = SERIAL.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let mut nats = NatsServer::start();
    let (db, url) = database_with_url("faults_nats_kill", database_url_options()).await;
    let settings = StackSettings::new(&url, Some(&nats));
    let server = CrewbusProcess::start(dir.path(), &settings).await;
    let mut args = load_args(&[server.url()], 1, scaled(400), 100.0);
    args.backend = Some(BackendChoice::Jetstream);
    let (progress, load, _) = start_load(&server.config(), &args).await;

    accepted_at_least(&progress, scaled(80)).await;
    nats.kill();
    broker_reads(&server.url(), "unreachable").await;
    assert!(
        progress.accepted.load(Ordering::SeqCst) < scaled(400),
        "the load ended before the broker was down"
    );
    let nats = tokio::task::spawn_blocking(move || {
        nats.restart();
        nats
    })
    .await
    .unwrap();
    let report = load.await.unwrap();
    assert_no_loss(&report, scaled(400));
    drop(nats);
    drop(server);
    db.passed().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn crewbus_server_killed_and_restarted_mid_load_loses_nothing() {
    let _serial = SERIAL.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let nats = NatsServer::start();
    let (db, url) = database_with_url("faults_crewbus_kill", database_url_options()).await;
    let settings = StackSettings::new(&url, Some(&nats));
    let mut server = CrewbusProcess::start(dir.path(), &settings).await;
    let mut args = load_args(&[server.url()], 1, scaled(400), 100.0);
    args.backend = Some(BackendChoice::Jetstream);
    let (progress, load, _) = start_load(&server.config(), &args).await;

    accepted_at_least(&progress, scaled(100)).await;
    crash_and_await_retries(&mut server, &progress).await;
    server.restart().await;
    let report = load.await.unwrap();
    assert_no_loss(&report, scaled(400));
    assert!(report.retries > 0);
    drop(server);
    drop(nats);
    db.passed().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_restarted_mid_load_loses_nothing() {
    let _serial = SERIAL.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let mut cluster = PgCluster::start().await;
    let (db, url) = database_with_url("faults_pg_restart", cluster.options()).await;
    let settings = StackSettings::new(&url, None);
    let server = CrewbusProcess::start(dir.path(), &settings).await;
    let args = load_args(&[server.url()], 1, scaled(400), 100.0);
    let (progress, load, _) = start_load(&server.config(), &args).await;

    accepted_at_least(&progress, scaled(100)).await;
    let retries = progress.retries.load(Ordering::SeqCst);
    cluster.stop(false).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    while progress.retries.load(Ordering::SeqCst) == retries {
        assert!(Instant::now() < deadline, "nobody noticed the outage");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    cluster.restart().await;
    let report = load.await.unwrap();
    assert_no_loss(&report, scaled(400));
    assert!(report.retries > 0);
    drop(server);
    db.passed().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_servers_on_one_postgres_and_nats_lose_nothing_and_deliver_once() {
    let _serial = SERIAL.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let nats = NatsServer::start();
    let (db, url) = database_with_url("faults_scale_out", database_url_options()).await;
    let settings = StackSettings::new(&url, Some(&nats));
    let a = CrewbusProcess::start(dir.path(), &settings).await;
    let b = CrewbusProcess::start(dir.path(), &settings).await;
    // Agents alternate between the servers: every conversation spans both.
    let mut args = load_args(&[a.url(), b.url()], 2, scaled(400), 0.0);
    args.backend = Some(BackendChoice::Jetstream);
    let (_, load, _) = start_load(&a.config(), &args).await;
    let report = load.await.unwrap();
    assert_no_loss(&report, scaled(800));
    drop((a, b, nats));
    db.passed().await;
}
