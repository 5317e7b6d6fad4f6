//! Fault suite on the embedded store (SQLite in a data directory of the test's own): `crewbus
//! serve` killed with SIGKILL mid-load and restarted loses nothing the load tool saw accepted,
//! and 32 concurrent senders never see a busy store. Each scenario ends with `crewbus load`'s
//! zero-loss check (every accepted message stored once and delivered once to every recipient).

mod fault_support;

use fault_support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn serve_killed_with_sigkill_mid_load_on_the_embedded_store_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let settings = StackSettings::embedded(&dir.path().join("data"));
    let mut server = CrewbusProcess::start(dir.path(), &settings).await;
    let args = load_args(&[server.url()], 1, scaled(400), 100.0);
    let (progress, load, _) = start_load(&server.config(), &args).await;

    accepted_at_least(&progress, scaled(100)).await;
    crash_and_await_retries(&mut server, &progress).await;
    // The restart takes the data directory's lock again (the killed process's lock died with
    // it) and recovers the database from its write-ahead log.
    server.restart().await;
    let report = load.await.unwrap();
    assert_no_loss(&report, scaled(400));
    assert!(report.retries > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn thirty_two_concurrent_senders_never_see_a_busy_store() {
    let dir = tempfile::tempdir().unwrap();
    let settings = StackSettings::embedded(&dir.path().join("data"));
    let server = CrewbusProcess::start(dir.path(), &settings).await;
    let mut args = load_args(&[server.url()], 1, scaled(600), 0.0);
    args.senders = 32;
    args.conversations = 4;
    let (_, load, _) = start_load(&server.config(), &args).await;
    let report = load.await.unwrap();
    assert_no_loss(&report, scaled(600));
    // A busy store answers 503, which the load tool retries and counts: none may happen.
    assert_eq!(report.retries, 0, "{report:#?}");
    assert!(
        !server.log_text().contains("busy"),
        "the server logged a busy store:\n{}",
        server.log_text()
    );
}
