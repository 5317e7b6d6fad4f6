//! `crewbus connect claude-code`: sets a project up for Claude Code in one command — the MCP
//! server in `.mcp.json`, the permission for its tools and the hooks in
//! `.claude/settings.local.json` (or `settings.json`), and optionally a section of `CLAUDE.md`
//! — and `crewbus connect headers`, the `headersHelper` Claude Code runs for the token with
//! `--http`.
//!
//! The server is the stdio bridge (`crewbus mcp --token-file …`) by default: Claude Code runs an
//! HTTP server's `headersHelper` only in a workspace the user has trusted in an interactive
//! session once (2.1.328's debug log: "headersHelper not run: this workspace has no persisted
//! trust"), so over HTTP a fresh machine's `claude -p`, and the first interactive session before
//! the trust dialog, would reach `/mcp` without a token. A stdio server has no such condition.
//!
//! Edits are format-preserving ([`json_edit`]), computed first ([`plan`]) so `--dry-run` prints
//! them, a second run finds nothing to do and no agent is created for a change that cannot be
//! made, and recorded ([`manifest`]) so `--remove` restores each file exactly ([`removal`]). The
//! token ([`resolve`], [`token`]) lives in a 0600 file outside the work tree (or where `git
//! check-ignore` confirms it is ignored), never in a file the configuration is written to;
//! with `--shared` at one path under the home directory, named relative to it. What is done is
//! printed by [`report`].

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context as _, anyhow, bail};
use clap::{Args, Subcommand, ValueEnum};
use serde_json::json;

use crate::config::Config;

pub mod host_path;
pub mod instructions;
pub mod json_edit;
pub mod manifest;
pub mod plan;
pub mod removal;
pub mod report;
pub mod resolve;
pub mod token;

use host_path::{HostPath, shell_quote};
use manifest::Manifest;
use plan::Setup;
use report::{Said, report};

/// The server `connect` points at by default.
pub const DEFAULT_URL: &str = "http://127.0.0.1:7700";

/// `crewbus connect …`
#[derive(Debug, Subcommand)]
pub enum ConnectCommand {
    /// Set a project up for Claude Code: the MCP server, the hooks that wake the session when
    /// messages come, and (--instructions) a CLAUDE.md section teaching the loop.
    #[command(after_help = "\
What it writes (in --dir, default the working directory):
  .mcp.json                    the MCP server \"crewbus\": the stdio bridge `crewbus mcp --url
                               URL --token-file FILE --tools core`, started by Claude Code
                               (--channel: with channel notifications, and no hooks; --http:
                               URL/mcp?tools=core with a headersHelper reading the token file,
                               which Claude Code runs only in a workspace trusted interactively)
  .claude/settings.local.json  \"mcp__crewbus\" in permissions.allow (every crewbus tool runs
                               unasked: print mode denies a tool not allowed), and hooks running
                               `crewbus hook claude-code` on Stop, SessionStart, UserPromptSubmit
                               and PostToolUse (--shared: settings.json)
  CLAUDE.md (or AGENTS.md)     with --instructions, a marked section
Other servers, hooks and keys stay byte for byte; a second run changes nothing; an MCP server
\"crewbus\" connect did not write is replaced only with --force; a file holding comments or
trailing commas (which Claude Code skips) is refused. --remove puts each file back as it was (or
deletes the one it created; in a file edited since it takes out only crewbus's entries). The
token is written to a 0600 file outside the work tree ($XDG_CONFIG_HOME/crewbus/connect/…),
never into these files: they name the crewbus binary and the token file by absolute path, or
with --shared as `crewbus` (through PATH) and ${HOME}/.config/crewbus/connect/shared/NAME.token,
the same for every teammate.

The agent: --token-file PATH (an existing agent's token), or --agent NAME: the token `crewbus
serve` keeps for a dev agent (dev-tokens.json), else a new agent, created through the admin API
with --operator-token-file, else beside the store (as `crewbus agent add`) when the server at
--url answers and takes its token. --dry-run checks the team, the name and the operator token.

Examples:
  crewbus serve &                                     then, in the project:
  crewbus connect claude-code --agent alice           interactive sessions (background wake)
  crewbus connect claude-code --agent alice --headless    `claude -p`: a blocking Stop hook
  crewbus connect claude-code --agent carol --team research --operator-token-file ops.token \\
      --url https://bus.example.com --instructions
  crewbus connect claude-code --dry-run                   show the change, write nothing
  crewbus connect claude-code --remove                    undo it")]
    ClaudeCode(ClaudeCodeArgs),

    /// Print the HTTP headers a host sends to crewbus's /mcp (`{"Authorization": "Bearer …"}`)
    /// from a token file: Claude Code's headersHelper runs it (`connect claude-code --http`).
    /// Reads no configuration.
    #[command(
        after_help = "Example:\n  crewbus connect headers --token-file ~/.config/crewbus/connect/proj-1a2b3c4d5e6f/alice.token"
    )]
    Headers(HeadersArgs),
}

impl ConnectCommand {
    /// Whether the command runs before any configuration is loaded (`headers`).
    pub fn before_configuration(&self) -> bool {
        matches!(self, ConnectCommand::Headers(_))
    }
}

/// Which tools `/mcp` lists for the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Tools {
    /// The core profile: messages, deliveries and leases (a smaller `tools/list`).
    Core,
    /// Every tool.
    Full,
}

/// `crewbus connect claude-code` options.
#[derive(Debug, Args)]
pub struct ClaudeCodeArgs {
    /// The agent: its dev token from `crewbus serve`, or a new agent of this name.
    #[arg(long, value_name = "NAME")]
    pub agent: Option<String>,
    /// The agent's team (name or id).
    #[arg(long, value_name = "TEAM", default_value = crate::dev_team::DEFAULT_TEAM)]
    pub team: String,
    /// The project directory.
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// For print mode (`claude -p`): a blocking Stop hook instead of the background wake.
    #[arg(long)]
    pub headless: bool,
    /// Channel notifications from the stdio bridge (`crewbus mcp --channel`) instead of hooks.
    #[arg(long)]
    pub channel: bool,
    /// The MCP server over HTTP (URL/mcp) with a headersHelper reading the token file, instead
    /// of the stdio bridge. Claude Code runs a headersHelper only in a workspace trusted in an
    /// interactive session once: until then (and in `claude -p` on a fresh machine) no crewbus
    /// tool loads.
    #[arg(long, conflicts_with = "channel")]
    pub http: bool,
    /// Write the hooks to .claude/settings.json (shared with the team) instead of
    /// settings.local.json.
    #[arg(long)]
    pub shared: bool,
    /// Add a marked section to CLAUDE.md (AGENTS.md when only that exists) teaching the loop.
    #[arg(long)]
    pub instructions: bool,
    /// Print the change as a unified diff; write and create nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Undo what an earlier `connect` wrote for this project.
    #[arg(long)]
    pub remove: bool,
    /// Replace an MCP server named "crewbus" in .mcp.json that `connect` did not write
    /// (`--remove` puts it back).
    #[arg(long)]
    pub force: bool,
    /// Base URL of the crewbus server.
    #[arg(long, value_name = "URL", default_value = DEFAULT_URL)]
    pub url: String,
    /// The tool profile the host lists.
    #[arg(long, value_enum, default_value = "core")]
    pub tools: Tools,
    /// An existing agent's token file (used where it is; it must not be a file git tracks).
    /// The token is the agent: not with --agent or --operator-token-file.
    #[arg(long, value_name = "PATH", conflicts_with_all = ["agent", "operator_token_file"])]
    pub token_file: Option<PathBuf>,
    /// An operator token file: create --agent through the admin API of --url.
    #[arg(long, value_name = "PATH")]
    pub operator_token_file: Option<PathBuf>,
    /// How long the Stop hook waits for news, seconds (1 to 86400). Default: 50 with
    /// --headless, else 28800 (8 h, in the background).
    #[arg(long, value_name = "SECONDS",
          value_parser = clap::value_parser!(u64).range(1..=plan::MAX_WAIT_S))]
    pub wait: Option<u64>,
    /// Consecutive wakes before the Stop hook lets the session stop (above 7 also raises
    /// Claude Code's own cap, CLAUDE_CODE_STOP_HOOK_BLOCK_CAP).
    #[arg(long, value_name = "N", default_value_t = crate::cli::hook::HOST_BLOCK_CAP - 1)]
    pub max_wakes: u32,
}

/// `crewbus connect headers` options.
#[derive(Debug, Args)]
pub struct HeadersArgs {
    /// The agent's token file.
    #[arg(long, value_name = "PATH")]
    pub token_file: PathBuf,
}

/// `crewbus connect headers`: the headers as one JSON object on stdout. Exit 1 (a line on
/// stderr, never the token) when the file cannot be read.
pub fn headers(args: &HeadersArgs) -> ExitCode {
    match token::read(&args.token_file) {
        Ok(t) => {
            let line = json!({"Authorization": format!("Bearer {}", t.expose())}).to_string();
            let _ = writeln!(std::io::stdout().lock(), "{line}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("crewbus connect headers: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Runs `crewbus connect …` (`headers` runs before the configuration: see
/// [`ConnectCommand::before_configuration`]).
pub async fn run(config: Config, cmd: ConnectCommand, json: bool) -> anyhow::Result<ExitCode> {
    match cmd {
        ConnectCommand::ClaudeCode(args) => claude_code(config, args, json).await,
        ConnectCommand::Headers(args) => Ok(headers(&args)),
    }
}

fn project_dir(dir: Option<&Path>) -> anyhow::Result<PathBuf> {
    let dir = match dir {
        Some(d) => d.to_owned(),
        None => std::env::current_dir().context("the working directory")?,
    };
    dir.canonicalize()
        .with_context(|| format!("the project directory {}", dir.display()))
}

/// `path` as the host will find it from any directory: resolved when it exists (no `..`, no
/// symbolic link), else joined to the working directory.
fn absolute(path: &Path) -> anyhow::Result<PathBuf> {
    if let Ok(p) = path.canonicalize() {
        return Ok(p);
    }
    std::path::absolute(path).with_context(|| format!("the path {}", path.display()))
}

/// The command `crewbus serve` suggests for connecting Claude Code as its dev agent `agent`
/// of `team`, served at `url` with its data directory `data_dir` (each option only when not
/// the default).
pub fn suggestion(agent: &str, team: &str, url: &str, data_dir: Option<&Path>) -> String {
    let mut c = format!("crewbus connect claude-code --agent {}", shell_quote(agent));
    if team != crate::dev_team::DEFAULT_TEAM {
        c.push_str(&format!(" --team {}", shell_quote(team)));
    }
    if url.trim_end_matches('/') != DEFAULT_URL {
        c.push_str(&format!(" --url {}", shell_quote(url)));
    }
    let default_dir = crate::config::StorageConfig::default().data_dir().ok();
    if let Some(d) = data_dir
        && Some(d) != default_dir.as_deref()
    {
        // Absolute: the command runs in the project, not where serve was started.
        let d = std::path::absolute(d).unwrap_or_else(|_| d.to_owned());
        c.push_str(&format!(
            " --data-dir {}",
            shell_quote(&d.to_string_lossy())
        ));
    }
    c
}

/// The binary the configuration names: this one by its absolute path, or with `--shared`
/// `crewbus` as `PATH` finds it (a note when that is another file). Errors: `--shared` and no
/// `crewbus` on `PATH`.
fn binary(shared: bool, notes: &mut Vec<String>) -> anyhow::Result<HostPath> {
    let this = std::env::current_exe()
        .and_then(|p| p.canonicalize())
        .context("the path of the crewbus binary")?;
    if !shared {
        return Ok(HostPath::Absolute(this));
    }
    match resolve::on_path("crewbus") {
        None => bail!(
            "--shared names the binary as `crewbus`, found through PATH (the same name on every \
             teammate's machine), and no `crewbus` is on PATH here: put {} on PATH (or install \
             crewbus there), then run again",
            this.parent().unwrap_or(&this).display()
        ),
        Some(found) => {
            if found.canonicalize().ok().as_deref() != Some(this.as_path()) {
                notes.push(format!(
                    "`crewbus` on PATH is {}, not this binary ({}): the shared files run that one",
                    found.display(),
                    this.display()
                ));
            }
            Ok(HostPath::OnPath("crewbus"))
        }
    }
}

/// What `--shared` depends on: Claude Code (checked with 2.1.328, real-host scenario (g))
/// applies a project's shared `.claude/settings.json` — the permission and the hooks — only in a
/// workspace trusted in an interactive session; `claude -p` elsewhere ignores both.
const SHARED_NEEDS_TRUST: &str = "Claude Code applies .claude/settings.json (the permission and \
     the hooks) only in a workspace you have trusted: run `claude` here once and accept the trust \
     dialog. `claude -p` in a workspace never trusted ignores both; there, connect without \
     --shared (.claude/settings.local.json is applied untrusted)";

/// What to do after `--channel`: the launch command and its conditions.
fn channel_next(project: &Path) -> Vec<String> {
    vec![
        format!(
            "start Claude Code in {} with `claude --dangerously-load-development-channels \
             server:crewbus`: crewbus is not on the channels allowlist, and without that flag \
             the session gets no channel events",
            project.display()
        ),
        "channels are a research preview of Claude Code (2.1.80 or later): they need a claude.ai \
         login and are not loaded with API-key or console authentication (Team and Enterprise \
         organizations must enable them). --channel installs no hooks, so the same news never \
         arrives twice: where channels do not load, run connect again without --channel for the \
         hooks"
            .to_owned(),
    ]
}

async fn claude_code(config: Config, a: ClaudeCodeArgs, json: bool) -> anyhow::Result<ExitCode> {
    let project = project_dir(a.dir.as_deref())?;
    let cdir = manifest::connect_dir(&project).map_err(|e| anyhow!(e))?;
    let existing = Manifest::load(&cdir).map_err(|e| anyhow!(e))?;
    if a.remove {
        return removal::run(&project, &cdir, existing, a.dry_run, json);
    }
    if a.channel && a.headless {
        bail!(
            "--channel and --headless exclude each other: a channel needs an interactive session"
        );
    }
    let url = a.url.trim_end_matches('/').to_owned();
    if !(url.starts_with("http://") || url.starts_with("https://")) {
        bail!("--url must be an http:// or https:// URL, not {url:?}");
    }
    let mut manifest = existing.unwrap_or_else(|| Manifest {
        project: project.clone(),
        ..Manifest::default()
    });
    let mut notes = Vec::new();
    let exe = binary(a.shared, &mut notes)?;
    let shared = match a.shared {
        true => Some(resolve::shared_token(&project)?),
        false => None,
    };
    let token = resolve::resolve(&config, &a, &url, &cdir, &manifest, shared.as_ref()).await?;
    let token_file = token.path.clone();
    token::check_location(&project, &token_file).map_err(|e| anyhow!(e))?;
    let mut who = match &token.source {
        resolve::Source::File => {
            let t = token::read(&token_file).map_err(|e| anyhow!(e))?;
            notes.push(format!("token: {}, {}", token.how, token_file.display()));
            token::whoami(&url, &t).await.map_err(|e| anyhow!(e))?
        }
        resolve::Source::New(t) => {
            notes.push(format!(
                "token: {}; {} in {} (0600)",
                token.how,
                if a.dry_run { "would be kept" } else { "kept" },
                token_file.display()
            ));
            token::whoami(&url, t).await.map_err(|e| anyhow!(e))?
        }
        resolve::Source::Create => None,
    };
    if a.http {
        notes.push(
            "--http: Claude Code runs the headersHelper only in a workspace you have trusted in \
             an interactive session once; until then (and in `claude -p` on a machine that never \
             did) no crewbus tool loads. Without --http the stdio bridge has no such condition."
                .to_owned(),
        );
    }
    if shared.is_some() {
        notes.push(format!(
            "--shared: the shared files name `crewbus` (through PATH) and the token file as \
             ${{HOME}}/{}, the same on every teammate's machine; each teammate runs this command \
             once with their own --agent or --token-file",
            shared.as_ref().map(|s| s.rel.as_str()).unwrap_or_default()
        ));
    }
    if who.is_none() && !matches!(token.source, resolve::Source::Create) {
        notes.push(format!(
            "crewbus does not answer at {url} now: the configuration is written anyway, and the \
             hooks stay quiet until it runs"
        ));
    }
    let agent = who
        .as_ref()
        .map(|m| m.name.clone())
        .or_else(|| a.agent.clone())
        .or_else(|| manifest.agent.clone())
        .unwrap_or_else(|| "this session's".to_owned());
    let wait = a.wait.unwrap_or(if a.headless { 50 } else { 28_800 });
    let setup = Setup {
        project: project.clone(),
        exe,
        url: url.clone(),
        token_file: match &shared {
            Some(s) => HostPath::Home(s.rel.clone()),
            None => HostPath::Absolute(token_file.clone()),
        },
        agent: agent.clone(),
        headless: a.headless,
        channel: a.channel,
        http: a.http,
        shared: a.shared,
        instructions: a.instructions,
        tools: match a.tools {
            Tools::Core => "core",
            Tools::Full => "full",
        },
        wait,
        max_wakes: a.max_wakes,
        force: a.force,
    };
    // Every file's change is known (and possible) before an agent is created or a file written.
    let changes = plan::plan(&setup, &manifest).map_err(|e| anyhow!(e))?;
    let done = format!(
        "done. Start Claude Code in {}; `crewbus connect claude-code --remove` undoes this.",
        project.display()
    );
    let mut next = if a.channel {
        channel_next(&project)
    } else {
        Vec::new()
    };
    if a.shared {
        next.push(SHARED_NEEDS_TRUST.to_owned());
    }
    if a.dry_run {
        if let resolve::Source::Create = token.source {
            notes.push(format!(
                "{}; its token would be kept in {} (0600)",
                token.how,
                token_file.display()
            ));
        }
        let said = Said {
            notes: &notes,
            done: &done,
            next: &next,
            removing: false,
        };
        return Ok(report(&project, &changes, &said, json, true));
    }
    let new_token = match token.source {
        resolve::Source::New(t) => Some(t),
        resolve::Source::Create => {
            let (t, how) = resolve::create(&config, &a, &url).await?;
            notes.push(format!(
                "token: {how}; kept in {} (0600)",
                token_file.display()
            ));
            who = token::whoami(&url, &t).await.ok().flatten();
            Some(t)
        }
        resolve::Source::File => None,
    };
    // The token first: nothing points at a file that is not there.
    if let Some(t) = &new_token {
        if let Some(dir) = token_file.parent() {
            manifest::create_private_dir(dir).map_err(|e| anyhow!(e))?;
        }
        manifest::write_private(&token_file, &format!("{}\n", t.expose()))
            .map_err(|e| anyhow!(e))?;
        manifest.token_made(&token_file);
    }
    manifest::create_private_dir(&cdir).map_err(|e| anyhow!(e))?;
    for change in changes.iter().filter(|c| c.changes()) {
        if let Some(parent) = change.path.parent()
            && !parent.exists()
        {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("cannot create {}", parent.display()))?;
            manifest.created_dirs.push(parent.to_owned());
        }
        let after = change.after.as_deref().unwrap_or_default();
        manifest::write_atomically(&change.path, after, None).map_err(|e| anyhow!(e))?;
        manifest.record(
            &change.path,
            change.before.as_deref(),
            after,
            change.allow_added,
        );
    }
    manifest.project = project.clone();
    manifest.team = token
        .team
        .clone()
        .or_else(|| who.as_ref().map(|m| m.team.clone()));
    manifest.agent = who
        .map(|m| m.name)
        .or_else(|| a.agent.clone())
        .or(manifest.agent.take());
    manifest.use_token(&token_file);
    manifest.block_cap_set |= setup.block_cap().is_some();
    manifest.save(&cdir).map_err(|e| anyhow!(e))?;
    let said = Said {
        notes: &notes,
        done: &done,
        next: &next,
        removing: false,
    };
    Ok(report(&project, &changes, &said, json, false))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: ClaudeCodeArgs,
    }

    #[test]
    fn a_token_file_is_the_agent_and_takes_no_other_agent() {
        for other in [["--agent", "bob"], ["--operator-token-file", "op.token"]] {
            let e =
                Cli::try_parse_from(["connect", "--token-file", "alice.token", other[0], other[1]])
                    .err()
                    .unwrap_or_else(|| panic!("--token-file with {} accepted", other[0]));
            assert_eq!(e.kind(), clap::error::ErrorKind::ArgumentConflict, "{e}");
        }
        assert!(Cli::try_parse_from(["connect", "--token-file", "alice.token"]).is_ok());
        assert!(
            Cli::try_parse_from(["connect", "--agent", "bob", "--operator-token-file", "o"])
                .is_ok()
        );
    }

    #[test]
    fn wait_is_bounded_when_parsed() {
        let parse = |w: &str| Cli::try_parse_from(["connect", "--wait", w]);
        for bad in ["0", "86401", "18446744073709551615", "-1"] {
            let e = parse(bad)
                .err()
                .unwrap_or_else(|| panic!("--wait {bad} accepted"));
            assert!(
                matches!(
                    e.kind(),
                    clap::error::ErrorKind::ValueValidation
                        | clap::error::ErrorKind::UnknownArgument
                ),
                "--wait {bad}: {e}"
            );
        }
        assert_eq!(parse("86400").unwrap().args.wait, Some(plan::MAX_WAIT_S));
        assert_eq!(parse("1").unwrap().args.wait, Some(1));
    }

    #[test]
    fn serve_suggests_only_the_options_that_differ() {
        assert_eq!(
            suggestion("alice", "local", "http://127.0.0.1:7700/", None),
            "crewbus connect claude-code --agent alice"
        );
        assert_eq!(
            suggestion(
                "bob",
                "demo team",
                "http://127.0.0.1:4000",
                Some(Path::new("/s/d d"))
            ),
            "crewbus connect claude-code --agent bob --team 'demo team' --url \
             http://127.0.0.1:4000 --data-dir '/s/d d'"
        );
    }
}
