//! Shared set-up of the fault suite (`faults_*.rs`): real `crewbus serve` processes (the built
//! binary, `CARGO_BIN_EXE_crewbus`) on a fresh Postgres database and, where the scenario needs it,
//! a private `nats-server` of the conformance fixture; `crewbus-load` (the library function)
//! drives them over HTTP and ends with its zero-loss check.
//!
//! Settings are short so faults heal quickly: hand-out grace 2 s, relay backoff 100 ms..1 s
//! with 60 attempts, NATS request timeout 1 s.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crewbus::config::Config;
use crewbus_benches::kit;
use crewbus_benches::load::{LoadArgs, LoadPlan, LoadProgress, LoadReport, LoadTeam};
use crewbus_conformance::child::SpawnTied;
use crewbus_conformance::nats::{NatsServer, free_port};

/// Heavy scenarios of one test binary run one at a time.
pub static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Settings of the stack's configuration file.
#[derive(Debug, Clone)]
pub struct StackSettings {
    /// `postgres://…` of the ledger's database.
    pub database_url: String,
    /// The nats-server URLs (empty: no NATS).
    pub nats_servers: Vec<String>,
    /// Stream replicas of teams created with this configuration.
    pub replicas: u32,
    /// Body stream quota of teams created with this configuration, bytes.
    pub body_max_bytes: u64,
    /// Inbox stream quota, references.
    pub inbox_max_messages: u64,
    /// When set, the store is the embedded one in this data directory instead of
    /// `database_url`'s Postgres.
    pub embedded_dir: Option<PathBuf>,
}

impl StackSettings {
    /// Defaults for `database_url` and an optional NATS server.
    pub fn new(database_url: &str, nats: Option<&NatsServer>) -> Self {
        StackSettings {
            database_url: database_url.to_owned(),
            nats_servers: nats.map(NatsServer::url).into_iter().collect(),
            replicas: 1,
            body_max_bytes: 64 << 20,
            inbox_max_messages: 1_000_000,
            embedded_dir: None,
        }
    }

    /// The embedded store (SQLite) in `data_dir`, no NATS.
    pub fn embedded(data_dir: &Path) -> Self {
        StackSettings {
            embedded_dir: Some(data_dir.to_path_buf()),
            ..StackSettings::new("", None)
        }
    }

    /// The configuration (for operator work in the test: teams, agents, provisioning), written
    /// under `dir` and loaded as the binary would load it.
    pub fn config(&self, dir: &Path) -> Config {
        let path = dir.join(format!("operator-{}.toml", free_port()));
        std::fs::write(&path, self.toml(0)).unwrap();
        Config::load(Some(&path)).unwrap()
    }

    /// The TOML configuration listening on `port`.
    pub fn toml(&self, port: u16) -> String {
        let store = match &self.embedded_dir {
            Some(dir) => format!(
                "[storage]\nkind = \"sqlite\"\ndata_dir = {:?}\n",
                dir.display().to_string()
            ),
            None => format!(
                "[database]\nurl = \"{}\"\nmax_connections = 8\nmigrate_on_start = true\n",
                self.database_url
            ),
        };
        let mut s = format!(
            r#"listen = "127.0.0.1:{port}"
{store}[bus]
handout_grace_ms = 2000
idle_poll_ms = 10
backoff_base_ms = 100
backoff_cap_ms = 1000
backoff_max_attempts = 60
relay_lease_ms = 5000
[log]
level = "warn"
"#
        );
        if !self.nats_servers.is_empty() {
            let nats = self
                .nats_servers
                .iter()
                .map(|u| format!("\"{u}\""))
                .collect::<Vec<_>>()
                .join(", ");
            s.push_str(&format!(
                r#"[nats]
servers = [{nats}]
replicas = {replicas}
request_timeout_ms = 1000
body_max_bytes = {body}
inbox_max_bytes = 16777216
inbox_max_messages = {inbox}
{credentials}"#,
                body = self.body_max_bytes,
                replicas = self.replicas,
                inbox = self.inbox_max_messages,
                credentials = kit::nats::credentials_toml(),
            ));
        }
        s
    }
}

/// A `crewbus serve` process on a fixed port, killable (SIGKILL) and restartable there.
pub struct CrewbusProcess {
    port: u16,
    config: PathBuf,
    log: PathBuf,
    child: Option<Child>,
    starts: u32,
}

impl CrewbusProcess {
    /// Writes the configuration under `dir`, starts the process and waits for `/health`.
    pub async fn start(dir: &Path, settings: &StackSettings) -> CrewbusProcess {
        let port = free_port();
        let config = dir.join(format!("crewbus-{port}.toml"));
        std::fs::write(&config, settings.toml(port)).unwrap();
        let mut p = CrewbusProcess {
            port,
            log: dir.join(format!("crewbus-{port}.log")),
            config,
            child: None,
            starts: 0,
        };
        p.spawn().await;
        p
    }

    /// The configuration as the process reads it (for operator work in the test).
    pub fn config(&self) -> Config {
        Config::load(Some(&self.config)).unwrap()
    }

    /// `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    async fn spawn(&mut self) {
        self.starts += 1;
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_crewbus"))
            .arg("--config")
            .arg(&self.config)
            .arg("serve")
            .env_remove("CREWBUS_CONFIG")
            .env_remove("CREWBUS_DATABASE__URL")
            .env_remove("CREWBUS_LISTEN")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            // Killed with the test binary even when it ends without dropping this.
            .spawn_tied()
            .expect("the crewbus binary starts");
        self.child = Some(child);
        let client = reqwest::Client::new();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(r) = client.get(format!("{}/health", self.url())).send().await
                && r.status().is_success()
            {
                return;
            }
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                panic!("crewbus exited ({status}):\n{}", self.log_text());
            }
            assert!(
                Instant::now() < deadline,
                "crewbus not healthy within 30 s:\n{}",
                self.log_text()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The process's log so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// SIGKILL (a crash: nothing drained) and wait for the exit.
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Start again on the same port (waiting until it is free) and wait for `/health`.
    pub async fn restart(&mut self) {
        self.kill9();
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::net::TcpListener::bind(("127.0.0.1", self.port)).is_err() {
            assert!(Instant::now() < deadline, "port {} stays busy", self.port);
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        self.spawn().await;
    }
}

impl Drop for CrewbusProcess {
    fn drop(&mut self) {
        self.kill9();
        if std::thread::panicking() {
            let log = self.log_text();
            let tail: String = log
                .chars()
                .skip(log.chars().count().saturating_sub(4000))
                .collect();
            eprintln!("--- crewbus on port {} (log tail) ---\n{tail}", self.port);
        }
    }
}

/// A message count of the short profile, scaled to the profile chosen by
/// `FAULTS_PROFILE` (not `CREWBUS_…`: the spawned servers would read that as configuration):
/// `short` (the default, what `scripts/test` runs: × 1) or `long`
/// (release checks: × 25, e.g. 400 → 10,000 messages per scenario, a few minutes each). Any
/// other value fails the test, naming the variable.
pub fn scaled(short: u64) -> u64 {
    match std::env::var("FAULTS_PROFILE").as_deref() {
        Err(std::env::VarError::NotPresent) | Ok("short") => short,
        Ok("long") => short * 25,
        other => panic!("FAULTS_PROFILE must be `short` or `long`, not {other:?}"),
    }
}

/// Load options for a fault scenario: `teams` teams of 4 agents, conversations of 4 members
/// (3 recipients), `messages` per team at `rate` messages/s in all, bodies 200..=2000 bytes.
pub fn load_args(urls: &[String], teams: usize, messages: u64, rate: f64) -> LoadArgs {
    LoadArgs {
        urls: urls.to_vec(),
        teams,
        team_prefix: "fault".into(),
        backend: None,
        agents: 4,
        tokens: vec![],
        tokens_file: None,
        conversations: 2,
        members: 4,
        messages,
        rate,
        senders: 8,
        body_bytes: 200,
        body_bytes_max: Some(2000),
        fetch_limit: 100,
        retry_for: 90,
        drain_timeout: 90,
        quiet: true,
        receive_after_send: false,
        transport: crewbus_benches::load::Transport::Http,
    }
}

/// Creates the teams through the ledger of `config`, then starts the load in a task.
pub async fn start_load(
    config: &Config,
    args: &LoadArgs,
) -> (
    Arc<LoadProgress>,
    tokio::task::JoinHandle<LoadReport>,
    Vec<LoadTeam>,
) {
    let teams = crewbus_benches::load::create_teams(config, args)
        .await
        .unwrap();
    let progress = Arc::new(LoadProgress::default());
    let plan = LoadPlan::from_args(args);
    let task = {
        let (progress, teams) = (progress.clone(), teams.clone());
        tokio::spawn(async move {
            crewbus_benches::load::run_with(plan, teams, progress)
                .await
                .unwrap()
        })
    };
    (progress, task, teams)
}

/// Waits (deadline 60 s) until at least `n` messages were accepted.
pub async fn accepted_at_least(progress: &LoadProgress, n: u64) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while progress.accepted.load(Ordering::SeqCst) < n {
        assert!(
            Instant::now() < deadline,
            "only {} messages accepted",
            progress.accepted.load(Ordering::SeqCst)
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// SIGKILLs `server` (a crash: nothing drained) and waits (deadline 30 s) until the load's
/// agents notice: their requests go unanswered and at least one more is retried.
pub async fn crash_and_await_retries(server: &mut CrewbusProcess, progress: &LoadProgress) {
    server.kill9();
    let retries = progress.retries.load(Ordering::SeqCst);
    let deadline = Instant::now() + Duration::from_secs(30);
    while progress.retries.load(Ordering::SeqCst) == retries {
        assert!(Instant::now() < deadline, "nobody noticed the crash");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Asserts the zero-loss check passed and every planned message was accepted.
pub fn assert_no_loss(report: &LoadReport, planned: u64) {
    assert!(
        report.zero_loss.passed,
        "zero-loss check failed: {:#?}",
        report.zero_loss
    );
    assert_eq!(report.accepted, planned, "{report:#?}");
    assert_eq!(report.delivered, report.deliveries_expected, "{report:#?}");
    assert!(report.zero_loss.receipts_checked >= report.deliveries_expected);
}
