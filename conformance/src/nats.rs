//! Real `nats-server` fixtures: one server (or a 3-node cluster) per test, spawned from a binary.
//!
//! The binary comes from `NATS_SERVER_BIN`, else from `PATH`; a missing binary fails loudly.
//! Each server gets a free port, its own store dir and log in a temp dir, and the repository's
//! `conformance/nats/server.conf` (JetStream on, `max_payload` 2 MB, a provisioning and a
//! runtime user, optional account storage budget). Readiness is awaited against a deadline; the
//! process is killed and its files removed on drop; when the test binary ends without dropping
//! it (`process::exit`, a static, a panic, a kill), the process is killed and its dir removed
//! once the binary is gone ([`crate::child`]'s watchdog). [`NatsServer::restart`] brings it back
//! on the same port and store dir. `NATS_URL` makes tests use an external server instead
//! ([`external_url`]); tests needing a server of their own are then reported as ignored.

use std::io::Read;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::wait::Deadline;

/// The prefix of every server's temp dir.
const DIR_PREFIX: &str = "crewbus-nats-";

/// How long a server may take to become ready.
pub const READY_DEADLINE: Duration = Duration::from_secs(20);

/// The configuration template kept in the repository.
const TEMPLATE: &str = include_str!("../nats/server.conf");

/// A user name and password from the fixture's configuration.
#[derive(Clone, PartialEq, Eq)]
pub struct UserPassword {
    /// User name.
    pub user: String,
    /// Password (a test secret, not printed by `Debug`).
    pub password: String,
}

impl std::fmt::Debug for UserPassword {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UserPassword")
            .field("user", &self.user)
            .finish_non_exhaustive()
    }
}

impl UserPassword {
    /// A raw async-nats JetStream context on `url` as this user, for tests and benches that
    /// act on the broker directly (an operator deleting a stream, a baseline publisher).
    /// Panics when the server refuses the connection.
    pub async fn jetstream(&self, url: &str) -> async_nats::jetstream::Context {
        let client = async_nats::ConnectOptions::with_user_and_password(
            self.user.clone(),
            self.password.clone(),
        )
        .connect(url)
        .await
        .unwrap_or_else(|e| panic!("connecting to {url} as {}: {e}", self.user));
        async_nats::jetstream::new(client)
    }
}

/// The provisioning credential of the fixture's account (may create/update/delete streams).
pub fn provisioning_user() -> UserPassword {
    UserPassword {
        user: "provisioner".into(),
        password: "provisioner-test-secret".into(),
    }
}

/// The runtime credential of the fixture's account (never changes a stream).
pub fn runtime_user() -> UserPassword {
    UserPassword {
        user: "runtime".into(),
        password: "runtime-test-secret".into(),
    }
}

/// `NATS_URL`, when the suite is to run against an external server.
pub fn external_url() -> Option<String> {
    std::env::var("NATS_URL").ok().filter(|u| !u.is_empty())
}

/// The `nats-server` binary: `NATS_SERVER_BIN`, else the first `nats-server` on `PATH`.
///
/// Panics (failing the test loudly) when neither gives an executable.
pub fn server_binary() -> PathBuf {
    if let Some(bin) = std::env::var_os("NATS_SERVER_BIN").filter(|b| !b.is_empty()) {
        let bin = PathBuf::from(bin);
        assert!(
            bin.is_file(),
            "NATS_SERVER_BIN={} is not a file",
            bin.display()
        );
        return bin;
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|dir| dir.join("nats-server"))
        .find(|p| p.is_file())
        .expect(
            "nats-server not found: set NATS_SERVER_BIN or put nats-server on PATH \
             (scripts/test installs both server lines)",
        )
}

/// The version the binary reports, e.g. `2.9.10`.
pub fn server_version(bin: &Path) -> String {
    let out = Command::new(bin)
        .arg("--version")
        .output()
        .unwrap_or_else(|e| panic!("cannot run {} --version: {e}", bin.display()));
    let text = String::from_utf8_lossy(&out.stdout);
    text.trim()
        .rsplit(' ')
        .next()
        .unwrap_or_default()
        .trim_start_matches('v')
        .to_owned()
}

/// `(major, minor, patch)` of a version string such as `2.9.10`.
pub fn parse_version(v: &str) -> (u32, u32, u32) {
    let mut it = v.split(['.', '-']).map(|p| p.parse().unwrap_or(0));
    (
        it.next().unwrap_or(0),
        it.next().unwrap_or(0),
        it.next().unwrap_or(0),
    )
}

/// A free TCP port on 127.0.0.1 (bound and released).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free local port")
}

/// Options of a spawned server.
#[derive(Debug, Clone, Default)]
pub struct NatsOptions {
    /// The account's file-storage budget in bytes (`None`: unlimited).
    pub account_max_file: Option<u64>,
    /// The server's `max_payload` as written in its config (`None`: `2MB`).
    pub max_payload: Option<String>,
}

/// A spawned `nats-server`, killed and cleaned up on drop.
pub struct NatsServer {
    bin: PathBuf,
    dir: tempfile::TempDir,
    port: u16,
    conf: PathBuf,
    child: Option<Child>,
    starts: u32,
}

impl std::fmt::Debug for NatsServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NatsServer")
            .field("port", &self.port)
            .field("dir", &self.dir.path())
            .finish()
    }
}

fn render(name: &str, port: u16, store: &Path, cluster: &str, options: &NatsOptions) -> String {
    let js = match options.account_max_file {
        Some(bytes) => format!("{{ max_file: {bytes}, max_mem: 1048576 }}"),
        None => "enabled".to_owned(),
    };
    TEMPLATE
        .replace("{{PORT}}", &port.to_string())
        .replace("{{NAME}}", name)
        .replace("{{STORE}}", &store.display().to_string())
        .replace("{{CLUSTER}}", cluster)
        .replace("{{ACCOUNT_JETSTREAM}}", &js)
        .replace(
            "{{MAX_PAYLOAD}}",
            options.max_payload.as_deref().unwrap_or("2MB"),
        )
}

impl NatsServer {
    /// Starts a server with default options and waits until it is ready.
    pub fn start() -> NatsServer {
        Self::start_with(&NatsOptions::default())
    }

    /// Starts a server with `options` and waits until it is ready.
    pub fn start_with(options: &NatsOptions) -> NatsServer {
        let server = Self::configure("crewbus-test", free_port(), "", options);
        Self::launch(server)
    }

    fn configure(name: &str, port: u16, cluster: &str, options: &NatsOptions) -> NatsServer {
        let bin = server_binary();
        let dir = tempfile::Builder::new()
            .prefix(DIR_PREFIX)
            .tempdir()
            .expect("a temp dir for nats-server");
        // Removed by the watchdog once this process has ended, should no destructor run.
        crate::child::remove_when_ended(dir.path()).expect("the fixture watchdog");
        let store = dir.path().join("store");
        std::fs::create_dir_all(&store).expect("store dir");
        let conf = dir.path().join("server.conf");
        std::fs::write(&conf, render(name, port, &store, cluster, options)).expect("conf file");
        NatsServer {
            bin,
            dir,
            port,
            conf,
            child: None,
            starts: 0,
        }
    }

    fn launch(mut self) -> NatsServer {
        self.spawn();
        self.await_ready(&["Server is ready"]);
        self
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join(format!("server-{}.log", self.starts))
    }

    fn spawn(&mut self) {
        self.starts += 1;
        let mut command = Command::new(&self.bin);
        command
            .arg("-c")
            .arg(&self.conf)
            .arg("-l")
            .arg(self.log_path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        // Killed with the test binary even when it ends without dropping this (`child`).
        let child = crate::child::spawn(command)
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", self.bin.display()));
        self.child = Some(child);
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    fn await_ready(&mut self, markers: &[&str]) {
        let mut deadline = Deadline::new(READY_DEADLINE, "nats-server to be ready");
        loop {
            let log = self.log();
            if markers.iter().all(|m| log.contains(m)) {
                return;
            }
            if let Some(child) = self.child.as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                let mut err = String::new();
                if let Some(mut e) = child.stderr.take() {
                    let _ = e.read_to_string(&mut err);
                }
                panic!("nats-server exited ({status}) before ready:\n{err}\n{log}");
            }
            assert!(
                !deadline.passed(),
                "nats-server not ready within {READY_DEADLINE:?}; log:\n{log}"
            );
            deadline.tick_blocking();
        }
    }

    /// The client URL, `nats://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// The server's temp dir (configuration, logs, `store/`), removed on drop.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The TCP port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The version of the binary this server runs.
    pub fn version(&self) -> String {
        server_version(&self.bin)
    }

    /// The operating-system process id of the running server (`None` after [`NatsServer::kill`]),
    /// e.g. to read its CPU time from `/proc/<pid>/stat`.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Kills the process (SIGKILL: a crash, not a shutdown) and waits for it to exit.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Whether the process is running.
    pub fn is_running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    /// Starts the server again on the same port and store dir (killing it first if it runs)
    /// and waits until it is ready.
    pub fn restart(&mut self) {
        self.kill();
        let mut deadline = Deadline::new(READY_DEADLINE, format!("port {} to be free", self.port));
        // The port may linger briefly after a kill; the server retries binding itself, but
        // wait for the port to be free so a failed bind does not masquerade as a crash.
        while TcpListener::bind(("127.0.0.1", self.port)).is_err() {
            deadline.tick_blocking();
        }
        self.spawn();
        self.await_ready(&["Server is ready"]);
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A 3-node JetStream cluster on localhost; nodes are killed and cleaned up on drop.
pub struct NatsCluster {
    nodes: Vec<NatsServer>,
}

impl NatsCluster {
    /// Starts three clustered nodes and waits until each reports ready. (JetStream's meta
    /// leader may be elected a moment later: callers poll their first request.)
    pub fn start() -> NatsCluster {
        // Six distinct ports: all bound at once, then released (ports picked one at a time
        // may repeat, and a node would then fail to bind).
        let held: Vec<TcpListener> = (0..6)
            .map(|_| TcpListener::bind("127.0.0.1:0").expect("a free local port"))
            .collect();
        let free: Vec<u16> = held
            .iter()
            .map(|l| l.local_addr().expect("a bound port").port())
            .collect();
        drop(held);
        let ports: Vec<(u16, u16)> = free.chunks(2).map(|p| (p[0], p[1])).collect();
        let routes: Vec<String> = ports
            .iter()
            .map(|(_, c)| format!("\"nats-route://127.0.0.1:{c}\""))
            .collect();
        let mut nodes: Vec<NatsServer> = ports
            .iter()
            .enumerate()
            .map(|(i, (port, cport))| {
                let cluster = format!(
                    "cluster {{\n  name: \"crewbus-test\"\n  listen: \"127.0.0.1:{cport}\"\n  routes: [{}]\n}}",
                    routes.join(", ")
                );
                NatsServer::configure(&format!("n{i}"), *port, &cluster, &NatsOptions::default())
            })
            .collect();
        for node in &mut nodes {
            node.spawn();
        }
        for node in &mut nodes {
            node.await_ready(&["Server is ready"]);
        }
        NatsCluster { nodes }
    }

    /// Client URLs of every node.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(NatsServer::url).collect()
    }

    /// Node `i` (0..3).
    pub fn node(&mut self, i: usize) -> &mut NatsServer {
        &mut self.nodes[i]
    }
}
