//! Fault suite: inbox faults mid-load (a recipient's consumer and the team's inbox stream
//! deleted; an inbox overflowing with discard-old) and a team's body stream at its quota while
//! another team keeps sending. Each ends with `crewbus-load`'s zero-loss check. Real servers: a
//! private nats-server (`NATS_SERVER_BIN`, else PATH), Postgres from `DATABASE_URL`, the built
//! `crewbus` binary. The scenarios of this file run one at a time.

use crate::fault_support;

use crewbus::cli::BackendChoice;
use crewbus_benches::kit::postgres::database_with_url;
use crewbus_benches::load::{LoadPlan, LoadProgress};
use crewbus_conformance::nats::{NatsServer, provisioning_user};
use crewbus_conformance::postgres::database_url_options;
use fault_support::*;

async fn jetstream(nats: &NatsServer) -> async_nats::jetstream::Context {
    provisioning_user().jetstream(&nats.url()).await
}

/// The team of agent `agent` (its id) as the ledger of `url` knows it, and its recipient key.
async fn team_and_key(
    db: &crewbus_conformance::postgres::TestDatabase,
    agent: crewbus_domain::Uuid,
) -> (crewbus_domain::Uuid, String) {
    sqlx::query_as::<_, (crewbus_domain::Uuid, String)>(
        "SELECT team_id, recipient_key FROM agents WHERE id = $1",
    )
    .bind(agent)
    .fetch_one(db.pool())
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn consumer_and_inbox_stream_deleted_mid_load_lose_nothing() {
    let _serial = SERIAL.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let nats = NatsServer::start();
    let (db, url) = database_with_url("faults_inbox_deleted", database_url_options()).await;
    let settings = StackSettings::new(&url, Some(&nats));
    let server = CrewbusProcess::start(dir.path(), &settings).await;
    let mut args = load_args(&[server.url()], 1, scaled(500), 100.0);
    args.drain_timeout = 30;
    args.backend = Some(BackendChoice::Jetstream);
    let (progress, load, teams) = start_load(&server.config(), &args).await;
    let (team, key) = team_and_key(&db, teams[0].agents[1].id).await;
    let js = jetstream(&nats).await;
    let stream_name = format!("CREWBUS_I_{}", team.simple());

    accepted_at_least(&progress, scaled(100)).await;
    assert!(
        js.get_stream(&stream_name)
            .await
            .unwrap()
            .delete_consumer(&key)
            .await
            .unwrap()
            .success
    );
    accepted_at_least(&progress, scaled(250)).await;
    assert!(js.delete_stream(&stream_name).await.unwrap().success);
    // The runtime credential cannot create streams: the inbox stays missing until the operator
    // provisions it again (`crewbus stream provision`). Meanwhile bodies stay readable and the
    // ledger (the authority) tops every recipient up: deliveries keep being confirmed.
    accepted_at_least(&progress, scaled(350)).await;
    let (status, v) = teams[0].agents[1]
        .client
        .call(reqwest::Method::GET, "/v1/inbox/status", None)
        .await
        .unwrap();
    assert_eq!((status, v["present"].as_bool()), (200, Some(false)), "{v}");
    let delivered = || progress.delivered.load(std::sync::atomic::Ordering::SeqCst);
    let before = delivered();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while delivered() < before + 200 {
        assert!(
            std::time::Instant::now() < deadline,
            "deliveries stalled while the inbox stream is missing: {} then {}",
            before,
            delivered()
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert!(
        js.get_stream(&stream_name).await.is_err(),
        "the inbox stream is still missing: the deliveries above came from the ledger"
    );
    crewbus::compose::stream_admin(&server.config())
        .unwrap()
        .provision_inbox(team)
        .await
        .unwrap();
    let report = load.await.unwrap();
    assert_no_loss(&report, scaled(500));
    drop((server, nats));
    db.passed().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_overflowing_inbox_loses_nothing() {
    let _serial = SERIAL.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let nats = NatsServer::start();
    let (db, url) = database_with_url("faults_inbox_overflow", database_url_options()).await;
    let mut settings = StackSettings::new(&url, Some(&nats));
    settings.inbox_max_messages = 50;
    let server = CrewbusProcess::start(dir.path(), &settings).await;
    let mut args = load_args(&[server.url()], 1, scaled(300), 0.0);
    args.backend = Some(BackendChoice::Jetstream);
    args.receive_after_send = true;
    let (progress, load, teams) = start_load(&server.config(), &args).await;
    let (team, _) = team_and_key(&db, teams[0].agents[0].id).await;
    let report = load.await.unwrap();
    assert_no_loss(&report, scaled(300));
    assert!(progress.accepted.load(std::sync::atomic::Ordering::SeqCst) == scaled(300));
    // 900 references went through an inbox that holds 50: most were discarded (discard old)
    // and every recipient still got every message (the ledger topped the inbox up).
    let mut stream = jetstream(&nats)
        .await
        .get_stream(format!("CREWBUS_I_{}", team.simple()))
        .await
        .unwrap();
    let state = stream.info().await.unwrap().state.clone();
    assert!(state.messages <= 50, "{state:?}");
    assert!(state.last_sequence > 50, "{state:?}");
    drop((server, nats));
    db.passed().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_team_at_its_body_quota_does_not_stop_another_team() {
    let _serial = SERIAL.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let nats = NatsServer::start();
    let (db, url) = database_with_url("faults_quota", database_url_options()).await;
    let settings = StackSettings::new(&url, Some(&nats));
    let server = CrewbusProcess::start(dir.path(), &settings).await;
    // The full team: its body stream provisioned with a 2 MiB quota, bodies of ~60 KiB.
    let mut small = settings.clone();
    small.body_max_bytes = 2 << 20;
    let small_config = small.config(dir.path());
    let mut full_args = load_args(&[server.url()], 1, scaled(150), 0.0);
    full_args.backend = Some(BackendChoice::Jetstream);
    full_args.body_bytes = 60_000;
    full_args.body_bytes_max = Some(60_000);
    full_args.team_prefix = "full".into();
    // Its messages beyond the quota are never delivered: stop waiting for them after 15 s.
    full_args.drain_timeout = 15;
    let mut other_args = load_args(&[server.url()], 1, scaled(400), 100.0);
    other_args.backend = Some(BackendChoice::Jetstream);
    other_args.team_prefix = "other".into();

    let full_teams = crewbus_benches::load::create_teams(&small_config, &full_args)
        .await
        .unwrap();
    let (_, other_load, _) = start_load(&server.config(), &other_args).await;
    let full = crewbus_benches::load::run_with(
        LoadPlan::from_args(&full_args),
        full_teams,
        std::sync::Arc::new(LoadProgress::default()),
    )
    .await
    .unwrap();
    let other = other_load.await.unwrap();
    // The other team: everything stored and delivered exactly once.
    assert_no_loss(&other, scaled(400));
    // The full team: what did not fit waits in the outbox (`pending_publication`, retried by
    // the relay) or failed for good with quota_exceeded once the attempts ran out (an
    // explained absence in history); nothing silently lost, nothing twice.
    let z = &full.zero_loss;
    assert!(!z.passed);
    let quota_failed = z.failed.get("quota_exceeded").copied().unwrap_or(0);
    assert!(quota_failed + z.pending > 0, "{z:#?}");
    assert_eq!(
        z.failed.values().sum::<u64>(),
        quota_failed,
        "failed for another reason: {z:#?}"
    );
    assert_eq!((z.lost, z.duplicated, z.disagreements), (0, 0, 0), "{z:#?}");
    assert!(full.accepted as f64 * 60_000.0 > (2 << 20) as f64);
    drop((server, nats));
    db.passed().await;
}
