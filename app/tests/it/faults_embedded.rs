//! Fault suite on the embedded store (SQLite in a data directory of the test's own): `crewbus
//! serve` killed with SIGKILL mid-load and restarted loses nothing the load tool saw accepted,
//! and 32 concurrent senders never see a busy store. Each load scenario ends with `crewbus
//! load`'s zero-loss check (every accepted message stored once and delivered once to every
//! recipient). A store damaged under a running server is logged once per kind and period, not
//! once per failing pass.

use crate::fault_support;

use std::time::{Duration, Instant};

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

/// Overwrites `file` from `offset` to its end (at most `len` bytes) with a pattern no page or
/// frame has: the file is damaged, its length kept.
fn damage(file: &std::path::Path, offset: u64, len: u64) {
    use std::io::{Seek as _, SeekFrom, Write as _};
    let size = std::fs::metadata(file).unwrap().len();
    let n = len.min(size.saturating_sub(offset));
    let mut f = std::fs::OpenOptions::new().write(true).open(file).unwrap();
    f.seek(SeekFrom::Start(offset)).unwrap();
    f.write_all(&vec![0xA5; n as usize]).unwrap();
    f.sync_all().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_damaged_while_serving_logs_each_kind_of_failure_once_per_period() {
    // The store's schema page, its write-ahead log and the log's index overwritten under a
    // running server: every worker pass fails (the relay, the reference worker, the search
    // index, the push worker…). Each kind of failure is logged at most once per 5 s, the later
    // lines counting the repeats (`repeated=N`), not once per pass.
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let settings = StackSettings::embedded(&data);
    let server = CrewbusProcess::start(dir.path(), &settings).await;
    let db = walkdir(&data)
        .into_iter()
        .find(|p| p.file_name().is_some_and(|n| n == "crewbus.db"))
        .expect("the store's file");
    // `crewbus serve` answers /health before it sets up its dev team (it listens first): damage
    // before that set-up would fail the start, not the serving. The dev tokens file is written
    // once the team is there.
    let deadline = Instant::now() + Duration::from_secs(30);
    while !walkdir(&data)
        .iter()
        .any(|p| p.file_name().is_some_and(|n| n == "dev-tokens.json"))
    {
        assert!(
            Instant::now() < deadline,
            "no dev team set up within 30 s:\n{}",
            server.log_text()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let logged_before = server.log_text().lines().count();
    damage(&db, 1024, 1 << 20);
    for suffix in ["-wal", "-shm"] {
        let side = db.with_file_name(format!("crewbus.db{suffix}"));
        if side.exists() {
            damage(&side, 0, 1 << 20);
        }
    }
    let started = Instant::now();
    // Until a kind has been logged a second time (its count of repeats above 1): 5 s at least.
    let repeated = |text: &str| {
        text.lines().skip(logged_before).any(|l| {
            l.split_whitespace()
                .filter_map(|f| f.strip_prefix("repeated="))
                .any(|n| n.parse::<u64>().is_ok_and(|n| n > 1))
        })
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while !repeated(&server.log_text()) {
        assert!(
            Instant::now() < deadline,
            "no failure was counted as repeated within 30 s:\n{}",
            server.log_text()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let elapsed = started.elapsed();
    let text = server.log_text();
    let mut kinds: std::collections::BTreeMap<String, u64> = Default::default();
    for line in text.lines().skip(logged_before) {
        if !(line.contains(" ERROR ") || line.contains(" WARN ")) {
            continue;
        }
        // The level, target, message and the fields before the error's own text.
        let start = line
            .find(" ERROR ")
            .or_else(|| line.find(" WARN "))
            .unwrap();
        let kind = line[start..].split(" error=").next().unwrap().to_owned();
        *kinds.entry(kind).or_default() += 1;
    }
    assert!(
        kinds.keys().any(|k| k.contains("ERROR")),
        "the damage was logged as an error: {kinds:#?}"
    );
    let bound = 2 + elapsed.as_secs() / 5;
    for (kind, n) in &kinds {
        assert!(
            *n <= bound,
            "{n} lines of {kind} in {elapsed:?} (at most {bound}):\n{text}"
        );
    }
}

/// Every file under `dir`.
fn walkdir(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            files.extend(walkdir(&path));
        } else {
            files.push(path);
        }
    }
    files
}
