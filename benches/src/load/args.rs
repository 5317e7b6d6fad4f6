//! The arguments of `crewbus-load` and the plan made of them.

use std::time::Duration;

use clap::{Args, Parser};
use crewbus::config::{BackendChoice, Config};
use crewbus_domain::BusResult;

use super::mcp::Transport;

/// crewbus-load — drives running crewbus servers with simulated agents over HTTP (or MCP) and
/// reports throughput, latency and a zero-loss check (exit code 1 when it fails).
///
/// Given tokens (`--token`, `--tokens-file`) it only talks to the servers. Otherwise it creates
/// its teams and agents in the servers' store, opened beside them: the embedded store of
/// `--data-dir` (a `crewbus serve` must run on it) or the configuration's `[database]`.
#[derive(Debug, Parser)]
#[command(
    name = "crewbus-load",
    version,
    after_help = "\
Examples:
  crewbus-load --config crewbus.toml --url http://127.0.0.1:7700 --teams 2 --messages 5000
  crewbus-load --config crewbus.toml --backend jetstream --rate 500 --members 4
  crewbus-load --json --url http://127.0.0.1:7700 --tokens-file tokens.txt

Configuration (the store to create teams in, [nats] for --backend jetstream, [log]): crewbus.toml
in the working directory, --config PATH or CREWBUS_CONFIG, then CREWBUS_* variables, as `crewbus`
reads them. See crewbus.example.toml."
)]
pub struct LoadCli {
    /// Configuration file (TOML). Default: $CREWBUS_CONFIG, else ./crewbus.toml when present.
    #[arg(long, value_name = "PATH")]
    pub config: Option<std::path::PathBuf>,
    /// Print the report as JSON instead of text.
    #[arg(long)]
    pub json: bool,
    /// The embedded store's data directory (overrides storage.data_dir), where the running
    /// `crewbus serve` keeps its store. Default: $XDG_DATA_HOME/crewbus, else
    /// ~/.local/share/crewbus.
    #[arg(long, value_name = "DIR")]
    pub data_dir: Option<std::path::PathBuf>,
    /// What to run.
    #[command(flatten)]
    pub load: LoadArgs,
}

impl LoadCli {
    /// Applies `--data-dir` to a loaded configuration and checks it. Errors: a configuration
    /// that does not hold → `Invalid`.
    pub fn apply(&self, mut config: Config) -> BusResult<Config> {
        if let Some(dir) = &self.data_dir {
            config.storage.data_dir = Some(dir.clone());
        }
        config.validate()?;
        Ok(config)
    }
}

/// `crewbus-load` options.
#[derive(Debug, Clone, Args)]
pub struct LoadArgs {
    /// Base URL of the server (repeatable: agents are spread round-robin over the servers).
    #[arg(
        long = "url",
        value_name = "URL",
        default_value = "http://127.0.0.1:7700"
    )]
    pub urls: Vec<String>,
    /// Create this many teams through the ledger (the embedded store or Postgres, opened beside
    /// the server), named
    /// `<team-prefix>-<n>-<random>`. Ignored when tokens are given.
    #[arg(long, default_value_t = 1)]
    pub teams: usize,
    /// Name prefix of the created teams.
    #[arg(long, default_value = "load")]
    pub team_prefix: String,
    /// Body backend (and inbox) of the created teams. Default: the ledger's own. `jetstream`
    /// provisions the teams' streams (needs [nats] with the provisioning credential).
    #[arg(long, value_enum)]
    pub backend: Option<BackendChoice>,
    /// Agents per created team.
    #[arg(long, default_value_t = 4)]
    pub agents: usize,
    /// Use these agents' bearer tokens instead of creating teams (repeatable; teams are learned
    /// from `/v1/me`). Also read from `--tokens-file`, one per line.
    #[arg(long = "token", value_name = "TOKEN")]
    pub tokens: Vec<String>,
    /// A file with one bearer token per line.
    #[arg(long, value_name = "PATH")]
    pub tokens_file: Option<std::path::PathBuf>,
    /// Conversations per team.
    #[arg(long, default_value_t = 2)]
    pub conversations: usize,
    /// Members per conversation (the sender plus `members - 1` recipients), at most the team's
    /// agents.
    #[arg(long, default_value_t = 4)]
    pub members: usize,
    /// Messages per team.
    #[arg(long, default_value_t = 1000)]
    pub messages: u64,
    /// Target send rate in messages per second over all teams (0: as fast as possible).
    #[arg(long, default_value_t = 0.0)]
    pub rate: f64,
    /// Concurrent senders per team.
    #[arg(long, default_value_t = 16)]
    pub senders: usize,
    /// Smallest body in bytes.
    #[arg(long, default_value_t = 256)]
    pub body_bytes: usize,
    /// Largest body in bytes (default: `--body-bytes`).
    #[arg(long)]
    pub body_bytes_max: Option<usize>,
    /// Deliveries asked for per fetch.
    #[arg(long, default_value_t = 100)]
    pub fetch_limit: usize,
    /// Seconds to keep retrying a request that gets no answer, 429 or 5xx.
    #[arg(long, default_value_t = 120)]
    pub retry_for: u64,
    /// Seconds to wait, after the last send, for every delivery to be confirmed.
    #[arg(long, default_value_t = 120)]
    pub drain_timeout: u64,
    /// No progress line on stderr.
    #[arg(long)]
    pub quiet: bool,
    /// Agents start fetching only after every send was answered (a backlog builds up).
    #[arg(long)]
    pub receive_after_send: bool,
    /// How the agents send, fetch and confirm: `http` (the API) or `mcp` (the tools at `/mcp`,
    /// through rmcp's client, as an agent host calls them).
    #[arg(long, value_enum, default_value_t = Transport::Http)]
    pub transport: Transport,
}

impl LoadArgs {
    /// Whether the agents come from tokens (`--token`, `--tokens-file`): then no team is
    /// created and the ledger is never opened.
    pub fn uses_tokens(&self) -> bool {
        !self.tokens.is_empty() || self.tokens_file.is_some()
    }
}

/// What to run (see the module docs).
#[derive(Debug, Clone)]
pub struct LoadPlan {
    /// Conversations per team (≥ 1).
    pub conversations: usize,
    /// Members per conversation (≥ 2).
    pub members: usize,
    /// Messages per team.
    pub messages: u64,
    /// Messages per second over all teams; 0 = unpaced.
    pub rate: f64,
    /// Concurrent senders per team (≥ 1).
    pub senders: usize,
    /// Body size range in bytes.
    pub body_bytes: (usize, usize),
    /// Deliveries per fetch.
    pub fetch_limit: usize,
    /// How long a transient failure is retried.
    pub retry_for: Duration,
    /// How long to wait after the last send for every delivery.
    pub drain_timeout: Duration,
    /// Print a progress line on stderr about once a second.
    pub progress: bool,
    /// Agents start fetching only once every send was answered (builds a backlog, e.g. to
    /// overflow inboxes).
    pub receive_after_send: bool,
    /// The interface the agents use.
    pub transport: Transport,
}

impl LoadPlan {
    /// The plan of the command-line options.
    pub fn from_args(a: &LoadArgs) -> Self {
        LoadPlan {
            conversations: a.conversations.max(1),
            members: a.members.max(2),
            messages: a.messages,
            rate: a.rate.max(0.0),
            senders: a.senders.max(1),
            body_bytes: (
                a.body_bytes,
                a.body_bytes_max.unwrap_or(a.body_bytes).max(a.body_bytes),
            ),
            fetch_limit: a.fetch_limit.clamp(1, 1000),
            retry_for: Duration::from_secs(a.retry_for),
            drain_timeout: Duration::from_secs(a.drain_timeout),
            progress: !a.quiet,
            receive_after_send: a.receive_after_send,
            transport: a.transport,
        }
    }
}
