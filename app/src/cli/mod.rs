//! The command line: `crewbus serve | mcp | migrate | team | agent | stream | health | backup
//! | push`.
//!
//! The arguments are defined here; each command's body lives beside them ([`commands`],
//! [`push_commands`], [`streams`], the stdio bridge [`mcp_bridge`], the development team of
//! `serve` [`dev_team`]), and the HTTP client the commands that talk to a server use
//! ([`client`]). The load generator is `crewbus-load`, a binary of `benches/`.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

/// The body backends a team can choose (kept here too, where the command line has always named it).
pub use crate::config::BackendChoice;

pub mod client;
pub mod commands;
pub mod connect;
pub mod dev_team;
pub mod embedded;
pub mod hook;
pub mod lease_commands;
pub mod mcp_bridge;
pub mod push_commands;
pub mod search_command;
pub mod streams;
pub mod watch_client;

/// The multi-threaded Tokio runtime a command runs on. Errors: it cannot start — said on stderr
/// after `who` (`crewbus`, `crewbus mcp`), and the command's exit code (1).
pub fn runtime(who: &str) -> Result<tokio::runtime::Runtime, std::process::ExitCode> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| {
            eprintln!("{who}: cannot start the async runtime: {e}");
            std::process::ExitCode::FAILURE
        })
}

/// crewbus — the durable message bus for teams of AI agents.
///
/// Agents of a team talk in conversations over an HTTP API; every message is recorded in a
/// ledger (Postgres, or the embedded SQLite store on one machine), its body is kept by a body
/// backend (Postgres, SQLite, NATS JetStream or memory), and every recipient gets it exactly once: a delivery is confirmed
/// only after its receipt is committed.
#[derive(Debug, Parser)]
#[command(
    name = "crewbus",
    version,
    propagate_version = true,
    after_help = "\
Examples:
  crewbus serve                             the embedded store at 127.0.0.1:7700, dev team
                                            `local` with agents alice and bob (kept across restarts)
  crewbus serve --ephemeral                 the same on memory: nothing kept after it stops
  crewbus connect claude-code --agent alice set a Claude Code project up: MCP server, hooks
  crewbus mcp --url http://127.0.0.1:7700   stdio MCP server for a host (token: CREWBUS_MCP_TOKEN)
  crewbus --config crewbus.toml migrate     create or upgrade the Postgres schema
  crewbus team add research                 create a team (beside the running server)
  crewbus agent add --team research alice   create an agent; prints its token once
  crewbus operator add ops                  an operator (console and admin API); token once
  crewbus health                            ask the running server if it is healthy
  crewbus push parked                       push registrations that stopped (dead letters)
  crewbus backup --to copy.db               an online copy of the embedded store

Configuration: crewbus.toml in the working directory, --config PATH or CREWBUS_CONFIG, then
CREWBUS_* variables (CREWBUS_LISTEN, CREWBUS_DATABASE__URL, …). See crewbus.example.toml."
)]
pub struct Cli {
    /// Configuration file (TOML). Default: $CREWBUS_CONFIG, else ./crewbus.toml when present.
    #[arg(long, global = true, value_name = "PATH")]
    pub config: Option<PathBuf>,

    /// Print machine-readable JSON instead of human-readable text.
    #[arg(long, global = true)]
    pub json: bool,

    /// The embedded store's data directory (overrides storage.data_dir): its database, the
    /// push master key and dev-tokens.json. Default: $XDG_DATA_HOME/crewbus, else
    /// ~/.local/share/crewbus. Only `serve` creates it.
    #[arg(long, global = true, value_name = "DIR")]
    pub data_dir: Option<PathBuf>,

    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the bus: HTTP API, MCP endpoint, relay, reference and retention workers.
    ///
    /// With no configuration it runs on the embedded store (SQLite in the data directory: what
    /// it acknowledged survives a restart) and sets up a dev team, `local`, with agents alice and
    /// bob: it prints their tokens and a host configuration to paste, and keeps the tokens in
    /// dev-tokens.json in the data directory, so the next start gives the same agents the same
    /// tokens. Stops gracefully on Ctrl-C or SIGTERM: no new requests, in-flight work drained.
    #[command(after_help = "\
The data directory: --data-dir, else storage.data_dir, else $XDG_DATA_HOME/crewbus, else
~/.local/share/crewbus. It holds crewbus.db, serve.lock (one server per directory: a second
`serve` on it is refused), master.key (0600, made at the first start) and keys/ (together they
open the sealed push credentials: back them up with the store) and dev-tokens.json.
--ephemeral keeps the store in memory instead (only dev-tokens.json survives the stop).
With [database] configured, dev agents are set up only when --dev-team is given. An agent that
already exists is reused, never re-created; its token is printed when dev-tokens.json holds one
that works for it (the ledger keeps only a hash of each token).

Examples:
  crewbus serve                                  embedded store; team local, alice and bob
  crewbus serve --ephemeral                      memory: nothing is kept after it stops
  crewbus serve --listen 0.0.0.0:7700
  crewbus serve --dev-team demo --dev-agent carol --dev-agent dave
  crewbus serve --data-dir ./state               the embedded store in ./state
  crewbus serve --ephemeral --dev-operator-token-file ./operator.token
                                                 an admin API token for scripts (0600 file)
  CREWBUS_DATABASE__URL=postgres://postgres@127.0.0.1/crewbus crewbus serve")]
    Serve(ServeArgs),

    /// A stdio MCP server relaying to a running server's `/mcp` (for hosts that launch servers).
    ///
    /// For hosts that launch MCP servers as subprocesses: relays JSON-RPC between stdin/stdout
    /// (MCP's stdio transport) and the Streamable HTTP endpoint `URL/mcp` (MCP's HTTP
    /// transport, with its session and revision headers), adding the agent's bearer token. Reads
    /// no configuration file.
    ///
    /// Each line on stdin is one JSON-RPC message, relayed to the server; each message the
    /// server sends (the JSON answer, or each event of an SSE stream) is written to stdout as
    /// one line. Messages are relayed concurrently: a waiting `fetch_inbox` does not hold up a
    /// `ping`. When the server cannot be reached or refuses the token, a request gets a JSON-RPC
    /// error answer (code -32000, `data.http_status` when there was an HTTP answer) and stderr
    /// says why; a line that is not JSON gets -32700.
    #[command(after_help = "\
The token: $CREWBUS_MCP_TOKEN, or --token-file PATH (never a command-line argument, so it stays
out of process listings). One token per live host session: the token is the agent's identity.
Without a token it exits with code 2. The global --config and --json do not apply to it.

Example host configuration (mcpServers JSON, e.g. Claude Code's .mcp.json):
  {
    \"mcpServers\": {
      \"crewbus\": {
        \"command\": \"/absolute/path/to/crewbus\",
        \"args\": [\"mcp\", \"--url\", \"http://127.0.0.1:7700\"],
        \"env\": { \"CREWBUS_MCP_TOKEN\": \"cbt_…\" }
      }
    }
  }
`crewbus serve` prints this block with its own address, binary path and the dev agents' tokens.

Examples:
  CREWBUS_MCP_TOKEN=cbt_… crewbus mcp --url http://127.0.0.1:7700
  crewbus mcp --url https://bus.example.com --token-file ~/.config/crewbus/alice.token
  crewbus mcp --channel --tools core --token-file ~/.config/crewbus/alice.token
                                  Claude Code channel events, the lean tool list")]
    Mcp(McpArgs),

    /// Create or upgrade the Postgres schema (needs [database]).
    #[command(after_help = "\
Examples:
  crewbus --config crewbus.toml migrate
  CREWBUS_DATABASE__URL=postgres://postgres@127.0.0.1/crewbus crewbus migrate")]
    Migrate,

    /// Teams: each has a default body backend and an inbox.
    #[command(subcommand)]
    Team(TeamCommand),

    /// Agents: each has a bearer token, shown once when the agent is added.
    #[command(subcommand)]
    Agent(AgentCommand),

    /// Operators: the people who run the agents, with a bearer token (`cbo_…`, shown once)
    /// for the admin API and the console, scoped to every team or to named ones.
    #[command(subcommand)]
    Operator(OperatorCommand),

    /// Operator actions on a team's JetStream streams (needs [nats] with the provisioning
    /// credential).
    #[command(subcommand, alias = "streams")]
    Stream(StreamCommand),

    /// Ask a running server for /health and print the answer. Exit code 1 when unhealthy.
    Health(HealthArgs),

    /// Copy the embedded store, online, to a new file (SQLite's `VACUUM INTO`): a consistent
    /// snapshot taken beside the running server, which keeps serving.
    #[command(after_help = "\
The copy is one self-contained SQLite file, compacted. To restore it, stop the server and put
the file in place of crewbus.db in the data directory (removing crewbus.db-wal and
crewbus.db-shm), or start a server on a new data directory holding it as crewbus.db. Back up
master.key and keys/ too, and restore them beside it: without them sealed push credentials
cannot be opened (a server refuses a store whose master.key is missing). The copy is mode 0600.
Copying the data directory's files by hand is safe only while no server runs.

Examples:
  crewbus backup --to /backups/crewbus-2026-12-01.db
  crewbus --data-dir ./state backup --to ./state-copy.db")]
    Backup(BackupArgs),

    /// The operator push outbox: a run's registrations, the parked (dead-letter) list, un-park
    /// (beside the running server; not on the memory store). Credentials are never printed; URLs without userinfo or query.
    #[command(subcommand)]
    Push(PushCommand),

    /// Leases: a team's live claims on path patterns (list, release any holder's), and an
    /// agent's check that it holds paths (over HTTP: a git pre-commit hook's command).
    #[command(subcommand)]
    Lease(lease_commands::LeaseCommand),

    /// Full-text search of a team's messages as one of its agents may read them (its
    /// conversations), best match first, matched words marked.
    Search(search_command::SearchArgs),

    /// A host's lifecycle hook (Claude Code, Codex, Cursor): tells an agent's session about
    /// messages waiting for it. Reads no configuration; never fails its host (exit 0).
    #[command(long_about = hook::LONG_ABOUT, after_help = hook::AFTER_HELP)]
    Hook(hook::HookArgs),

    /// Set a host up in one command: `crewbus connect claude-code` writes the MCP server, the
    /// hooks and (optionally) instructions into a project; `--remove` undoes it.
    #[command(subcommand)]
    Connect(connect::ConnectCommand),
}

impl Cli {
    /// Applies the command line's store options to a loaded configuration: `--data-dir`, and
    /// `serve --ephemeral` (memory). Errors: `--ephemeral` beside `[database]` → `Invalid`.
    pub fn apply(
        &self,
        mut config: crate::config::Config,
    ) -> crewbus_domain::BusResult<crate::config::Config> {
        if let Some(dir) = &self.data_dir {
            config.storage.data_dir = Some(dir.clone());
        }
        if let Command::Serve(args) = &self.command
            && args.ephemeral
        {
            if config.database.is_some() {
                return Err(crewbus_domain::BusError::invalid(
                    "--ephemeral (memory) contradicts the [database] section: remove one of them",
                ));
            }
            config.storage.kind = Some(crate::config::StorageKind::Memory);
        }
        config.validate()?;
        Ok(config)
    }
}

impl Command {
    /// Whether the command composes the bus (and so reads the push destinations' secrets and
    /// the key ring, and opens the embedded store beside the server): every command but `mcp`,
    /// `hook`, `migrate`, `health` and `backup`.
    pub fn composes(&self) -> bool {
        match self {
            Command::Mcp(_)
            | Command::Hook(_)
            | Command::Migrate
            | Command::Health(_)
            | Command::Backup(_) => false,
            Command::Lease(cmd) => cmd.composes(),
            // It opens the store itself, and only to create an agent beside it.
            Command::Connect(_) => false,
            _ => true,
        }
    }
}

/// `crewbus push …`
#[derive(Debug, Clone, Subcommand)]
pub enum PushCommand {
    /// A run's push registrations (one per destination until it acknowledged the terminal
    /// record).
    #[command(after_help = "Example:\n  crewbus push list --run 0190f7a2-…")]
    List {
        /// Run id.
        #[arg(long)]
        run: uuid::Uuid,
    },
    /// Parked registrations (410 from the receiver, a configuration error, or the attempt
    /// ceiling reached), with cursor, attempts and last error.
    #[command(after_help = "Example:\n  crewbus push parked --limit 20")]
    Parked {
        /// At most this many (1 to 1000).
        #[arg(long, default_value_t = 100)]
        limit: usize,
    },
    /// Un-park a registration: due now, attempts reset, resuming from its cursor. Exit code 1
    /// when no such parked registration exists.
    #[command(after_help = "Example:\n  crewbus push unpark --run 0190f7a2-… --id operator:ops")]
    Unpark {
        /// Run id.
        #[arg(long)]
        run: uuid::Uuid,
        /// Registration id (`operator:<destination name>`).
        #[arg(long)]
        id: String,
    },
}

/// `crewbus serve` options.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Address to listen on (overrides `listen` in the configuration).
    #[arg(long, env = "CREWBUS_LISTEN", value_name = "ADDR")]
    pub listen: Option<SocketAddr>,

    /// The dev team: found or created at start-up, with the --dev-agent agents. Default on the
    /// embedded store: `local`. With [database], dev agents are set up only when this is given.
    #[arg(long, value_name = "NAME")]
    pub dev_team: Option<String>,

    /// A dev agent of the dev team, found or created, its token printed (repeatable). Default:
    /// alice and bob.
    #[arg(long = "dev-agent", value_name = "NAME")]
    pub dev_agents: Vec<String>,

    /// Development: an operator `dev-api` (every team) for the admin API, its token kept in FILE
    /// (0600, written when missing, read back at the next start: on the memory store the same
    /// token works again after a restart). Never printed. For scripts and probes that need an
    /// operator token beside a server that keeps no operator `crewbus operator add` can reach
    /// (`--ephemeral`); elsewhere prefer `crewbus operator add NAME`.
    #[arg(long, value_name = "FILE")]
    pub dev_operator_token_file: Option<PathBuf>,

    /// Keep the store in memory: nothing but dev-tokens.json survives the stop (tests, demos,
    /// CI). The same as
    /// `[storage] kind = "memory"`; refused beside `[database]`.
    #[arg(long)]
    pub ephemeral: bool,
}

/// `crewbus backup` options.
#[derive(Debug, Args)]
pub struct BackupArgs {
    /// The file to write (must not exist yet).
    #[arg(long, value_name = "FILE")]
    pub to: PathBuf,
}

/// `crewbus mcp` options. The token is deliberately not an option: it comes from
/// `CREWBUS_MCP_TOKEN` or `--token-file`.
#[derive(Debug, Clone, Args)]
pub struct McpArgs {
    /// Base URL of the crewbus server; the bridge talks to `URL/mcp` (a URL already ending in
    /// `/mcp` is used as is).
    #[arg(long, value_name = "URL", default_value = "http://127.0.0.1:7700")]
    pub url: String,

    /// Read the agent's bearer token from this file (surrounding whitespace is ignored) instead
    /// of $CREWBUS_MCP_TOKEN.
    #[arg(long, value_name = "PATH")]
    pub token_file: Option<PathBuf>,

    /// Claude Code channel: declare `claude/channel` and push one channel event per batch of
    /// new messages (counts, senders, titles, previews; it hands nothing out).
    #[arg(long)]
    pub channel: bool,

    /// The tool profile `tools/list` shows (sent as the Crewbus-Tools header): `core`, the agent
    /// loop's 12 tools without output schemas, or `full`. Default: the server's, full.
    #[arg(long, value_name = "PROFILE", value_parser = ["core", "full"])]
    pub tools: Option<String>,
}

/// `crewbus health` options.
#[derive(Debug, Args)]
pub struct HealthArgs {
    /// Base URL of the server. Default: http://<listen from the configuration>.
    #[arg(long, value_name = "URL")]
    pub url: Option<String>,
}

/// `crewbus team …`
#[derive(Debug, Subcommand)]
pub enum TeamCommand {
    /// Create a team. A team on JetStream needs its streams before anything is sent: add
    /// `--provision` (needs [nats] with the provisioning credential), which creates the team,
    /// provisions its body and inbox streams, and only then moves it to JetStream.
    #[command(after_help = "\
Examples:
  crewbus team add research
  crewbus team add research --backend jetstream --inbox jetstream --provision
The same in steps (the team must exist before `stream provision` can name it):
  crewbus team add research
  crewbus stream provision --team research
  crewbus team set-backend research --backend jetstream --inbox jetstream")]
    Add {
        /// The team's display name.
        name: String,
        /// Default body backend for new conversations. Default: the ledger's own (postgres with
        /// a database, sqlite on the embedded store, memory on the memory store). `jetstream` needs `--provision`: without it `team add`
        /// refuses (`not_provisioned`), since messages sent before the streams exist wait in the
        /// outbox and then fail.
        #[arg(long, value_enum)]
        backend: Option<BackendChoice>,
        /// Inbox backend. Default: as the ledger. `jetstream` needs `--provision`.
        #[arg(long, value_enum)]
        inbox: Option<BackendChoice>,
        /// Provision the team's JetStream streams (body and inbox, with the configured quotas)
        /// before it uses them; only with `--backend jetstream` or `--inbox jetstream`. If
        /// provisioning fails the team stays on the default backend, and `crewbus stream
        /// provision --team NAME` then `crewbus team set-backend` finish the job.
        #[arg(long)]
        provision: bool,
    },
    /// List teams.
    List,
    /// Move a team's default body backend and inbox; conversations keep the backend they were
    /// created with. Moving to jetstream needs the team's streams provisioned.
    #[command(
        after_help = "Examples:\n  crewbus stream provision --team research\n  crewbus team set-backend research --backend jetstream --inbox jetstream"
    )]
    SetBackend {
        /// Team name or id.
        team: String,
        /// Body backend for new conversations.
        #[arg(long, value_enum)]
        backend: BackendChoice,
        /// Inbox backend.
        #[arg(long, value_enum)]
        inbox: BackendChoice,
    },
}

/// `crewbus agent …`
#[derive(Debug, Subcommand)]
pub enum AgentCommand {
    /// Create an agent and print its bearer token (shown once; only its hash is stored).
    #[command(after_help = "Example:\n  crewbus agent add --team research alice")]
    Add {
        /// Team name or id.
        #[arg(long)]
        team: String,
        /// The agent's name (letters, digits, `_`, `-`).
        name: String,
    },
    /// List a team's agents.
    List {
        /// Team name or id.
        #[arg(long)]
        team: String,
    },
    /// Revoke an agent's token: its requests are refused from now on (by a running server that
    /// hears of it by no wake-up, within `bus.token_cache_ms`, at most 1 s).
    Revoke {
        /// Team name or id.
        #[arg(long)]
        team: String,
        /// Agent name or id.
        agent: String,
    },
}

/// `crewbus operator …`
#[derive(Debug, Subcommand)]
pub enum OperatorCommand {
    /// Create an operator and print its bearer token (`cbo_…`, shown once; only its hash is
    /// stored). The token signs in to the console (`/console`) and authenticates the admin API
    /// (`/v1/admin/…`); it is never an agent's token.
    #[command(after_help = "\
Without --team the operator sees and acts on every team; with --team (repeatable) only those,
and anything of another team is answered 404 (not found).

Examples:
  crewbus operator add ops                       every team
  crewbus operator add night-shift --team research --team support
  crewbus --json operator add ops                {\"token\": \"cbo_…\", …}")]
    Add {
        /// The operator's name (letters, digits, `_`, `-`).
        name: String,
        /// A team (name or id) the operator may see; repeat for several. Default: every team.
        #[arg(long = "team", value_name = "TEAM")]
        teams: Vec<String>,
    },
    /// List operators with their scope (never a token).
    List,
    /// Revoke an operator: its token, sign-in codes and console sessions stop working at once.
    #[command(after_help = "Example:\n  crewbus operator revoke night-shift")]
    Revoke {
        /// Operator name or id.
        operator: String,
    },
}

/// Which of a team's streams.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum StreamChoice {
    /// The body stream.
    Bodies,
    /// The inbox stream.
    Inbox,
}

/// `crewbus stream …`
#[derive(Debug, Subcommand)]
pub enum StreamCommand {
    /// Create (or find) the team's body and inbox streams with the configured quotas.
    #[command(after_help = "Example:\n  crewbus stream provision --team research")]
    Provision {
        /// Team name or id.
        #[arg(long)]
        team: String,
    },
    /// Show what changing a stream's quotas to the configured ones would do, without doing it.
    #[command(
        after_help = "Examples:\n  crewbus stream check --team research\n  crewbus stream check --team research --kind inbox"
    )]
    Check {
        /// Team name or id.
        #[arg(long)]
        team: String,
        /// Which stream.
        #[arg(long, value_enum, default_value = "bodies")]
        kind: StreamChoice,
    },
    /// Change quotas to the configured ones (refuses what `check` refuses; restores
    /// already-applied changes when a later one fails).
    #[command(
        after_help = "Example (raise the body stream to 2 GiB):\n  CREWBUS_NATS__BODY_MAX_BYTES=2147483648 crewbus stream update --team research --kind bodies"
    )]
    Update {
        /// Team name or id.
        #[arg(long)]
        team: String,
        /// Which streams (default: both).
        #[arg(long, value_enum)]
        kind: Option<StreamChoice>,
    },
    /// The account's storage: used, reserved and budget.
    #[command(after_help = "Example:\n  crewbus stream usage")]
    Usage,
    /// Delete the team's streams (refused while the team or a conversation still uses them).
    #[command(
        after_help = "Examples:\n  crewbus team set-backend research --backend postgres --inbox postgres\n  crewbus stream remove --team research"
    )]
    Remove {
        /// Team name or id.
        #[arg(long)]
        team: String,
        /// Without a database the ledger cannot be asked whether the streams are in use: delete
        /// anyway.
        #[arg(long)]
        force: bool,
    },
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_cli_is_well_formed() {
        Cli::command().debug_assert();
    }

    #[test]
    fn serve_parses_listen() {
        let cli = Cli::try_parse_from(["crewbus", "serve", "--listen", "127.0.0.1:0"]).unwrap();
        match cli.command {
            Command::Serve(a) => assert_eq!(a.listen.unwrap().port(), 0),
            other => panic!("{other:?}"),
        }
        assert!(Cli::try_parse_from(["crewbus", "serve", "--listen", "nope"]).is_err());
    }
}
