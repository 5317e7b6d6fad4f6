//! The real `crewbus` processes the bench measures: `crewbus hook claude-code` (fed a host's
//! event on stdin) and the stdio bridge `crewbus mcp --channel` (spoken to as a host speaks to
//! it, one JSON-RPC message a line).
//!
//! Each runs with an empty environment but `HOME` and `XDG_STATE_HOME` (the bench's temporary
//! home: the hooks' state lives there), so no proxy variable or `CREWBUS_*` setting of the
//! bench's shell reaches it.
//!
//! They are spawned plainly (`posix_spawn`), not tied to the bench by a `pre_exec` hook
//! (`crewbus_conformance::child`): a `pre_exec` hook makes std `fork` this process — the one
//! the server runs in — and a fork write-protects all of its memory, so the server then takes a
//! page fault at the first write to each page, right when the sample's send runs (measured:
//! +1.5 ms p50 and +15 ms p99 on the hook's latency on the embedded store, whose page cache is
//! in this process). None outlives the bench anyway: the server goes with it, so a hook's watch
//! fails and the hook exits (within 2 s, by its contract), and the bridge's stdin closes.

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use serde_json::{Value, json};
use tokio::sync::mpsc;

/// The `crewbus` binary the processes run: `$CREWBUS_BIN` when set (as `scripts/test`'s MCP,
/// host and browser steps take it), else the one cargo built beside this bench
/// (`target/<profile>/crewbus`: `cargo build --release -p crewbus --bin crewbus` before `cargo
/// bench`; the workspace's test build has it before the test mode). Panics, naming the build
/// command, when there is none. Printed with its age, so a stale build shows.
pub fn crewbus_bin() -> PathBuf {
    let bin = match std::env::var_os("CREWBUS_BIN") {
        Some(path) => PathBuf::from(path),
        None => {
            let exe = std::env::current_exe().expect("this bench's path");
            // target/<profile>/deps/wake-<hash>
            exe.parent()
                .and_then(Path::parent)
                .expect("the bench runs from target/<profile>/deps")
                .join("crewbus")
        }
    };
    let modified = std::fs::metadata(&bin)
        .and_then(|m| m.modified())
        .unwrap_or_else(|e| {
            panic!(
                "no crewbus binary at {} ({e}): build it first — `cargo build --release -p \
                 crewbus --bin crewbus` before `cargo bench`, `cargo build -p crewbus --bin \
                 crewbus` before the test mode — or set CREWBUS_BIN",
                bin.display()
            )
        });
    let age = SystemTime::now()
        .duration_since(modified)
        .unwrap_or(Duration::ZERO);
    eprintln!(
        "wake bench: crewbus binary {} (built {} s ago)",
        bin.display(),
        age.as_secs()
    );
    bin
}

/// `bin` with an empty environment but `HOME` and `XDG_STATE_HOME` inside `home`.
fn command(bin: &Path, home: &Path) -> Command {
    let mut c = Command::new(bin);
    c.env_clear()
        .env("HOME", home)
        .env("XDG_STATE_HOME", home.join("state"))
        .current_dir(home)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

/// What to run a hook with.
pub struct HookSpec<'a> {
    pub bin: &'a Path,
    pub home: &'a Path,
    pub url: &'a str,
    pub token_file: &'a Path,
}

impl HookSpec<'_> {
    /// `crewbus hook claude-code --headless --wait WAIT …`, fed `event` on stdin (closed
    /// after it): the running child.
    pub fn spawn(&self, wait_seconds: u64, event: &Value) -> Child {
        let mut child = command(self.bin, self.home)
            .args(["hook", "claude-code", "--headless", "--url", self.url])
            .arg("--token-file")
            .arg(self.token_file)
            .args(["--wait", &wait_seconds.to_string()])
            .spawn()
            .expect("spawn crewbus hook");
        let mut stdin = child.stdin.take().expect("the hook's stdin");
        stdin
            .write_all(event.to_string().as_bytes())
            .expect("write the hook event");
        drop(stdin);
        child
    }
}

/// A Claude Code `Stop` event of `session`, not after a blocked stop.
pub fn stop_event(session: &str) -> Value {
    json!({"hook_event_name": "Stop", "session_id": session, "stop_hook_active": false,
           "cwd": "/tmp", "transcript_path": "/tmp/none.jsonl"})
}

/// A Claude Code `UserPromptSubmit` event of `session`.
pub fn prompt_event(session: &str) -> Value {
    json!({"hook_event_name": "UserPromptSubmit", "session_id": session, "prompt": "go on",
           "cwd": "/tmp", "transcript_path": "/tmp/none.jsonl"})
}

/// How a hook process ended.
#[derive(Debug)]
pub struct HookEnd {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    /// When its first stdout line (the decision) arrived, if any.
    pub decided: Option<Instant>,
    /// When it had exited (waited for).
    pub exited: Instant,
}

impl HookEnd {
    /// The decision on stdout: exit 0 and `{"decision":"block","reason":…}`; the reason.
    pub fn reason(&self, who: &str) -> String {
        assert_eq!(
            self.code,
            Some(0),
            "{who}: stdout {:?}, stderr {:?}",
            self.stdout,
            self.stderr
        );
        let v: Value = serde_json::from_str(self.stdout.trim())
            .unwrap_or_else(|_| panic!("{who}: stdout is not a decision: {self:?}"));
        assert_eq!(v["decision"], "block", "{who}: {self:?}");
        v["reason"]
            .as_str()
            .unwrap_or_else(|| panic!("{who}: no reason: {self:?}"))
            .to_owned()
    }
}

/// Waits (blocking) for `child` to end: its stdout's first line is timed as it arrives, then
/// the rest of both streams are read and the process waited for.
pub fn wait_hook(mut child: Child) -> HookEnd {
    let mut stdout = BufReader::new(child.stdout.take().expect("the hook's stdout"));
    let mut stderr = child.stderr.take().expect("the hook's stderr");
    let mut first = String::new();
    let n = stdout
        .read_line(&mut first)
        .expect("read the hook's stdout");
    let decided = (n > 0).then(Instant::now);
    let mut rest = String::new();
    stdout
        .read_to_string(&mut rest)
        .expect("read the hook's stdout");
    let status = child.wait().expect("wait for the hook");
    let exited = Instant::now();
    let mut err = String::new();
    let _ = stderr.read_to_string(&mut err);
    HookEnd {
        code: status.code(),
        stdout: first + &rest,
        stderr: err,
        decided,
        exited,
    }
}

/// `crewbus mcp --channel` on stdio, past its handshake.
pub struct Bridge {
    child: Child,
    stdin: Option<ChildStdin>,
    /// Each stdout line with the instant it was read (by a thread of its own).
    lines: mpsc::UnboundedReceiver<(Instant, String)>,
    next_id: u64,
}

/// The MCP revision the bench's host speaks.
const REVISION: &str = "2025-11-25";

impl Bridge {
    /// Starts the bridge for the agent of `token_file` on the server at `url`, and completes
    /// the host's handshake (`initialize`, checked to declare `experimental["claude/channel"]`,
    /// then `notifications/initialized`, which starts its watch loop).
    pub async fn start(bin: &Path, home: &Path, url: &str, token_file: &Path) -> Bridge {
        let mut child = command(bin, home)
            .args(["mcp", "--channel", "--url", url])
            .arg("--token-file")
            .arg(token_file)
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn crewbus mcp --channel");
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().expect("the bridge's stdout");
        let (tx, lines) = mpsc::unbounded_channel();
        std::thread::spawn(move || {
            let mut stdout = BufReader::new(stdout);
            loop {
                let mut line = String::new();
                match stdout.read_line(&mut line) {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {
                        if tx.send((Instant::now(), line)).is_err() {
                            return;
                        }
                    }
                }
            }
        });
        let mut bridge = Bridge {
            child,
            stdin,
            lines,
            next_id: 1,
        };
        let id = bridge.request(
            "initialize",
            json!({"protocolVersion": REVISION, "capabilities": {},
                   "clientInfo": {"name": "wake-bench", "version": "1"}}),
        );
        let (_, answer) = bridge.next(Duration::from_secs(10)).await;
        assert_eq!(answer["id"], id, "the initialize answer: {answer}");
        assert!(
            answer["result"]["capabilities"]["experimental"]
                .get("claude/channel")
                .is_some(),
            "the bridge declares the channel: {answer}"
        );
        bridge.write(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        bridge
    }

    fn write(&mut self, message: &Value) {
        let stdin = self.stdin.as_mut().expect("the bridge's stdin is open");
        writeln!(stdin, "{message}").expect("write to the bridge");
        stdin.flush().expect("flush the bridge's stdin");
    }

    fn request(&mut self, method: &str, params: Value) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        self.write(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        id
    }

    /// The next stdout line, as JSON, with when it was read. Panics after `within`.
    pub async fn next(&mut self, within: Duration) -> (Instant, Value) {
        let (at, line) = tokio::time::timeout(within, self.lines.recv())
            .await
            .unwrap_or_else(|_| panic!("the bridge wrote nothing within {within:?}"))
            .expect("the bridge's stdout ended");
        let value = serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("the bridge wrote a line that is not JSON ({e}): {line}"));
        (at, value)
    }

    /// The next line, which must be a channel event: when it was read, and its params.
    pub async fn event(&mut self, within: Duration) -> (Instant, Value) {
        let (at, line) = self.next(within).await;
        assert_eq!(line["method"], "notifications/claude/channel", "{line}");
        (at, line["params"].clone())
    }

    /// Closes its stdin; it must exit 0 within 10 s.
    pub async fn close(mut self) {
        drop(self.stdin.take());
        let mut child = self.child;
        let wait = tokio::task::spawn_blocking(move || child.wait());
        let status = tokio::time::timeout(Duration::from_secs(10), wait)
            .await
            .expect("the bridge exits within 10 s of the end of its input")
            .expect("wait task")
            .expect("wait for the bridge");
        assert!(status.success(), "the bridge ended with {status}");
    }
}
