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
//! them and a second run finds nothing to do, and recorded ([`manifest`]) so `--remove` restores
//! each file exactly. The token lives in a 0600 file outside the work tree (or where `git
//! check-ignore` confirms it is ignored), never in a file the configuration is written to
//! ([`token`]).

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context as _, anyhow, bail};
use clap::{Args, Subcommand, ValueEnum};
use crewbus_domain::Secret;
use serde_json::json;

use crate::config::Config;

pub mod instructions;
pub mod json_edit;
pub mod manifest;
pub mod plan;
pub mod token;

use manifest::Manifest;
use plan::{Change, Setup};

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
Other servers, hooks and keys stay byte for byte; a second run changes nothing; --remove puts
each file back as it was (or deletes the one it created). The token is written to a 0600 file
outside the work tree ($XDG_CONFIG_HOME/crewbus/connect/…), never into these files: they name
the crewbus binary and the token file by absolute path.

The agent: --token-file PATH (an existing agent's token), or --agent NAME: the token `crewbus
serve` keeps for a dev agent (dev-tokens.json), else a new agent, created through the admin API
with --operator-token-file, else beside the store (as `crewbus agent add`).

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
    /// Base URL of the crewbus server.
    #[arg(long, value_name = "URL", default_value = "http://127.0.0.1:7700")]
    pub url: String,
    /// The tool profile the host lists.
    #[arg(long, value_enum, default_value = "core")]
    pub tools: Tools,
    /// An existing agent's token file (used where it is; it must not be a file git tracks).
    #[arg(long, value_name = "PATH")]
    pub token_file: Option<PathBuf>,
    /// An operator token file: create --agent through the admin API of --url.
    #[arg(long, value_name = "PATH")]
    pub operator_token_file: Option<PathBuf>,
    /// How long the Stop hook waits for news, seconds. Default: 50 with --headless, else
    /// 28800 (8 h, in the background).
    #[arg(long, value_name = "SECONDS")]
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

/// Where the token comes from.
enum TokenPlan {
    /// A file that exists (given, or made by an earlier run).
    File(PathBuf, &'static str),
    /// A token to write to a new file.
    New(PathBuf, Secret, String),
    /// `--dry-run`: an agent that would be created.
    WouldCreate(PathBuf, String),
}

impl TokenPlan {
    fn path(&self) -> &Path {
        match self {
            TokenPlan::File(p, _) | TokenPlan::New(p, _, _) | TokenPlan::WouldCreate(p, _) => p,
        }
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

async fn resolve_token(
    config: &Config,
    a: &ClaudeCodeArgs,
    cdir: &Path,
    manifest: &Manifest,
) -> anyhow::Result<TokenPlan> {
    if let Some(p) = &a.token_file {
        return Ok(TokenPlan::File(absolute(p)?, "the given token file"));
    }
    if let Some(p) = &manifest.token_file
        && p.exists()
        && (a.agent.is_none() || a.agent == manifest.agent)
    {
        return Ok(TokenPlan::File(
            p.clone(),
            "the token file of an earlier connect",
        ));
    }
    let Some(agent) = &a.agent else {
        bail!(
            "name the agent (--agent NAME: a dev agent of `crewbus serve`, or a new one) or give \
             an existing agent's token (--token-file PATH)"
        );
    };
    crewbus_domain::validate_recipient_key(agent).map_err(|e| anyhow!("--agent: {e}"))?;
    let path = cdir.join(format!("{agent}.token"));
    if path.exists() {
        return Ok(TokenPlan::File(
            path,
            "the token file of an earlier connect",
        ));
    }
    if let Some(t) = token::dev_token(config, &a.team, agent) {
        return Ok(TokenPlan::New(
            path,
            t,
            format!(
                "the dev token `crewbus serve` keeps for {agent} (team {})",
                a.team
            ),
        ));
    }
    if a.dry_run {
        return Ok(TokenPlan::WouldCreate(
            path,
            format!("would create the agent {agent} in team {}", a.team),
        ));
    }
    let token = match &a.operator_token_file {
        Some(op) => {
            let op = token::read(op).map_err(|e| anyhow!(e))?;
            token::create_via_admin_api(&a.url, &op, &a.team, agent)
                .await
                .map_err(|e| anyhow!(e))?
        }
        None => token::create_beside_store(config.clone(), &a.team, agent)
            .await
            .map_err(|e| anyhow!(e))?,
    };
    let how = match a.operator_token_file {
        Some(_) => "created through the admin API",
        None => "created beside the store",
    };
    Ok(TokenPlan::New(
        path,
        token,
        format!("agent {agent} {how} in team {}", a.team),
    ))
}

async fn claude_code(config: Config, a: ClaudeCodeArgs, json: bool) -> anyhow::Result<ExitCode> {
    let project = project_dir(a.dir.as_deref())?;
    let cdir = manifest::connect_dir(&project).map_err(|e| anyhow!(e))?;
    let existing = Manifest::load(&cdir).map_err(|e| anyhow!(e))?;
    if a.remove {
        return remove(&project, &cdir, existing, a.dry_run, json);
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
    let plan_token = resolve_token(&config, &a, &cdir, &manifest).await?;
    let token_file = plan_token.path().to_owned();
    token::check_location(&project, &token_file).map_err(|e| anyhow!(e))?;
    let mut notes = Vec::new();
    let who = match &plan_token {
        TokenPlan::File(p, how) => {
            let t = token::read(p).map_err(|e| anyhow!(e))?;
            notes.push(format!("token: {how}, {}", p.display()));
            token::whoami(&url, &t).await.map_err(|e| anyhow!(e))?
        }
        TokenPlan::New(p, t, how) => {
            notes.push(format!("token: {how}; kept in {} (0600)", p.display()));
            token::whoami(&url, t).await.map_err(|e| anyhow!(e))?
        }
        TokenPlan::WouldCreate(p, how) => {
            notes.push(format!(
                "{how}; its token would be kept in {} (0600)",
                p.display()
            ));
            None
        }
    };
    if a.http {
        notes.push(
            "--http: Claude Code runs the headersHelper only in a workspace you have trusted in \
             an interactive session once; until then (and in `claude -p` on a machine that never \
             did) no crewbus tool loads. Without --http the stdio bridge has no such condition."
                .to_owned(),
        );
    }
    if who.is_none() && !matches!(plan_token, TokenPlan::WouldCreate(..)) {
        notes.push(format!(
            "crewbus does not answer at {url} now: the configuration is written anyway, and the \
             hooks stay quiet until it runs"
        ));
    }
    let agent = who
        .clone()
        .or_else(|| a.agent.clone())
        .or_else(|| manifest.agent.clone())
        .unwrap_or_else(|| "this session's".to_owned());
    let wait = a.wait.unwrap_or(if a.headless { 50 } else { 28_800 });
    let setup = Setup {
        project: project.clone(),
        exe: std::env::current_exe()
            .and_then(|p| p.canonicalize())
            .context("the path of the crewbus binary")?,
        url: url.clone(),
        token_file: token_file.clone(),
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
    };
    let changes = plan::plan(&setup, &manifest).map_err(|e| anyhow!(e))?;
    let done = format!(
        "done. Start Claude Code in {}; `crewbus connect claude-code --remove` undoes this.",
        project.display()
    );
    if a.dry_run {
        return Ok(report(&project, &changes, &notes, json, true, &done));
    }
    // The token first: nothing points at a file that is not there.
    let mut token_created = false;
    if let TokenPlan::New(p, t, _) = &plan_token {
        manifest::create_private_dir(&cdir).map_err(|e| anyhow!(e))?;
        manifest::write_private(p, &format!("{}\n", t.expose())).map_err(|e| anyhow!(e))?;
        token_created = true;
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
    manifest.agent = who.or_else(|| a.agent.clone()).or(manifest.agent.take());
    manifest.token_file = Some(token_file);
    manifest.token_created |= token_created;
    manifest.block_cap_set |= setup.block_cap().is_some();
    manifest.save(&cdir).map_err(|e| anyhow!(e))?;
    Ok(report(&project, &changes, &notes, json, false, &done))
}

/// Prints what was (or, `dry_run`, would be) done: the notes, then per file its change (a
/// diff with `dry_run`); `--json`: one JSON document.
fn report(
    project: &Path,
    changes: &[Change],
    notes: &[String],
    json: bool,
    dry_run: bool,
    done: &str,
) -> ExitCode {
    let state = |c: &Change| match (&c.before, &c.after, c.changes()) {
        (_, _, false) => "unchanged",
        (None, Some(_), true) => "created",
        (Some(_), None, true) => "deleted",
        _ => "updated",
    };
    let mut out = std::io::stdout().lock();
    if json {
        let files: Vec<_> = changes
            .iter()
            .map(|c| {
                let mut v = json!({"path": c.path, "change": state(c), "what": c.what});
                if dry_run && c.changes() {
                    v["diff"] = plan::diff(project, c).into();
                }
                v
            })
            .collect();
        let doc = json!({"project": project, "dry_run": dry_run, "notes": notes, "files": files});
        let _ = writeln!(out, "{doc}");
        return ExitCode::SUCCESS;
    }
    let verb = if dry_run { "would be" } else { "" };
    for note in notes {
        let _ = writeln!(out, "crewbus connect: {note}");
    }
    for c in changes {
        let name = c.path.strip_prefix(project).unwrap_or(&c.path).display();
        let s = state(c);
        let s = if dry_run && c.changes() {
            format!("{verb} {s}")
        } else {
            s.to_owned()
        };
        let _ = writeln!(out, "crewbus connect: {name}: {s} — {}", c.what);
        if dry_run && c.changes() {
            let _ = write!(out, "{}", plan::diff(project, c));
        }
    }
    if dry_run {
        let _ = writeln!(out, "crewbus connect: dry run: nothing was written");
    } else if changes.iter().all(|c| !c.changes()) && !done.starts_with("removed") {
        let _ = writeln!(
            out,
            "crewbus connect: nothing to change: {} is set up",
            project.display()
        );
    } else {
        let _ = writeln!(out, "crewbus connect: {done}");
    }
    ExitCode::SUCCESS
}

fn remove(
    project: &Path,
    cdir: &Path,
    manifest: Option<Manifest>,
    dry_run: bool,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let Some(manifest) = manifest else {
        let mut out = std::io::stdout().lock();
        if json {
            let _ = writeln!(
                out,
                "{}",
                json!({"project": project, "removed": false, "files": []})
            );
        } else {
            let _ = writeln!(
                out,
                "crewbus connect: nothing to remove: no earlier `crewbus connect` for {}",
                project.display()
            );
        }
        return Ok(ExitCode::SUCCESS);
    };
    let changes = plan::removal(&manifest).map_err(|e| anyhow!(e))?;
    let mut notes = Vec::new();
    if let Some(agent) = &manifest.agent {
        notes.push(format!(
            "the agent {agent} still exists (`crewbus agent revoke --team TEAM {agent}` revokes it)"
        ));
    }
    let done = "removed: each file is back as it was before `crewbus connect`";
    if dry_run {
        return Ok(report(project, &changes, &notes, json, true, done));
    }
    for change in changes.iter().filter(|c| c.changes()) {
        match &change.after {
            Some(text) => {
                manifest::write_atomically(&change.path, text, None).map_err(|e| anyhow!(e))?
            }
            None => std::fs::remove_file(&change.path)
                .with_context(|| format!("cannot delete {}", change.path.display()))?,
        }
    }
    for dir in manifest.created_dirs.iter().rev() {
        // Only when empty: whatever else is in it stays.
        let _ = std::fs::remove_dir(dir);
    }
    if manifest.token_created
        && let Some(t) = &manifest.token_file
    {
        let _ = std::fs::remove_file(t);
        notes.push(format!("deleted the token file {}", t.display()));
    }
    let _ = std::fs::remove_file(cdir.join(manifest::FILE));
    let _ = std::fs::remove_dir(cdir);
    Ok(report(project, &changes, &notes, json, false, done))
}
