//! The fixture's servers die with the test binary that started them, however it ends, and their
//! store dirs go too (`crewbus_conformance::child`'s watchdog): this binary runs itself again as
//! a probe that starts a `nats-server`, prints its pid and dir, waits for the go-ahead on stdin
//! (sent once the server is seen running) and then ends without dropping it — by
//! `process::exit` (what a `libtest-mimic` harness does), by a panic, or killed with `SIGKILL` —
//! and within 15 s after, that server (its pid with its start time: no other `nats-server` on
//! the machine counts) must be gone and its temp dir removed.

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use crewbus_conformance::child;
use crewbus_conformance::nats::NatsServer;
use crewbus_conformance::wait::Deadline;
use libtest_mimic::{Failed, Trial};

/// Set in a probe's environment: how it ends (`exit`, `panic` or `hang` to be killed).
const PROBE: &str = "CREWBUS_FIXTURE_PROBE";

/// In a probe (its environment has [`PROBE`]): starts a server, prints `pid N`, and ends as
/// asked; never returns. Elsewhere: returns at once.
pub(crate) fn run_probe_if_asked() {
    let Ok(mode) = std::env::var(PROBE) else {
        return;
    };
    let server = NatsServer::start();
    println!(
        "pid {} dir {}",
        server.pid().expect("a running server"),
        server.dir().display()
    );
    // The server is never dropped: only the watchdog can stop it and remove its dir.
    std::mem::forget(server);
    // Ends only once the parent has seen the server running (a line on stdin): ending at once
    // raced the parent's check, and the server could be gone before it looked.
    let mut go = String::new();
    let _ = std::io::stdin().read_line(&mut go);
    match mode.as_str() {
        "exit" => std::process::exit(0),
        "panic" => panic!("the probe panics on purpose"),
        _ => loop {
            std::thread::park();
        },
    }
}

fn probe(mode: &'static str) -> Result<(), Failed> {
    let mut process = Command::new(std::env::current_exe()?)
        .env(PROBE, mode)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()?;
    let mut line = String::new();
    BufReader::new(process.stdout.take().expect("the probe's stdout")).read_line(&mut line)?;
    let (pid, dir) = line
        .trim()
        .strip_prefix("pid ")
        .and_then(|rest| rest.split_once(" dir "))
        .and_then(|(pid, dir)| Some((pid.parse::<u32>().ok()?, PathBuf::from(dir))))
        .ok_or_else(|| format!("the probe printed {line:?}, not `pid N dir D`"))?;
    assert!(
        dir.join("store").exists(),
        "the probe's server store {}",
        dir.display()
    );
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
    assert_eq!(comm.trim_end(), "nats-server", "the probe's pid {pid}");
    let start = child::start_time(pid).ok_or_else(|| format!("the probe's server {pid} runs"))?;
    let mut go = process.stdin.take().expect("the probe's stdin");
    writeln!(go, "go")?;
    drop(go);
    if mode == "hang" {
        process.kill()?;
    }
    let status = process.wait()?;
    assert!(
        !status.success() || mode == "exit",
        "the probe ended as asked ({mode}): {status}"
    );
    let mut deadline = Deadline::new(
        Duration::from_secs(15),
        format!(
            "nats-server {pid} and {} to go with its test binary ({mode})",
            dir.display()
        ),
    );
    while child::runs(pid, start) || dir.exists() {
        assert!(
            !deadline.passed(),
            "after its test binary ended ({mode}): nats-server {pid} runs: {}, its dir {} \
             exists: {}",
            child::runs(pid, start),
            dir.display(),
            dir.exists()
        );
        deadline.tick_blocking();
    }
    Ok(())
}

/// The three trials, ignored with `ignored` (no fixture server can be started).
pub(crate) fn trials(ignored: bool) -> Vec<Trial> {
    [
        ("exits", "exit"),
        ("panics", "panic"),
        ("is_killed", "hang"),
    ]
    .into_iter()
    .map(|(name, mode)| {
        Trial::test(
            format!("jetstream::fixture::a_server_dies_when_its_test_binary_{name}"),
            move || probe(mode),
        )
        .with_ignored_flag(ignored)
    })
    .collect()
}
