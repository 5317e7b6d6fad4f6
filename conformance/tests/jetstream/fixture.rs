//! The fixture's servers die with the test binary that started them, however it ends
//! (`crewbus_conformance::child`): this binary runs itself again as a probe that starts a
//! `nats-server`, prints its pid, waits for the go-ahead on stdin (sent once the server is seen
//! running) and then ends without dropping it — by `process::exit` (what a
//! `libtest-mimic` harness does), by a panic, or killed with `SIGKILL` — and the server must be
//! gone within 10 s after, and its temp dir once the next fixture server starts.

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

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
    // The server is never dropped: only the kernel's parent-death signal can stop it.
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

/// Whether `pid` is a live (not zombie) `nats-server`.
fn nats_server_alive(pid: u32) -> bool {
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let state = stat
        .rfind(')')
        .and_then(|i| stat[i + 1..].split_whitespace().next())
        .unwrap_or("");
    comm.trim_end() == "nats-server" && !state.is_empty() && state != "Z"
}

fn probe(mode: &'static str) -> Result<(), Failed> {
    let mut child = Command::new(std::env::current_exe()?)
        .env(PROBE, mode)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()?;
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("the probe's stdout")).read_line(&mut line)?;
    let (pid, dir) = line
        .trim()
        .strip_prefix("pid ")
        .and_then(|rest| rest.split_once(" dir "))
        .and_then(|(pid, dir)| Some((pid.parse::<u32>().ok()?, PathBuf::from(dir))))
        .ok_or_else(|| format!("the probe printed {line:?}, not `pid N dir D`"))?;
    assert!(dir.exists(), "the probe's server dir {}", dir.display());
    assert!(nats_server_alive(pid), "the probe's server {pid} runs");
    let mut go = child.stdin.take().expect("the probe's stdin");
    writeln!(go, "go")?;
    drop(go);
    if mode == "hang" {
        child.kill()?;
    }
    let status = child.wait()?;
    assert!(
        !status.success() || mode == "exit",
        "the probe ended as asked ({mode}): {status}"
    );
    let mut deadline = Deadline::new(
        Duration::from_secs(10),
        format!("nats-server {pid} to die with its test binary ({mode})"),
    );
    while nats_server_alive(pid) {
        assert!(
            !deadline.passed(),
            "nats-server {pid} outlived its test binary ({mode})"
        );
        deadline.tick_blocking();
    }
    // Its dir is left (no destructor ran), until the next fixture server starts.
    drop(NatsServer::start());
    assert!(
        !dir.exists(),
        "the dead probe's server dir {} was removed by the next fixture",
        dir.display()
    );
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
