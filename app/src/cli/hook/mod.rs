//! `crewbus hook claude-code | codex | cursor`: a host's lifecycle hook that tells an agent's
//! session about messages waiting for it, through the server's `POST /v1/inbox/watch`.
//!
//! It is dispatched before any configuration is loaded (as `crewbus mcp` is): it reads no
//! `crewbus.toml`, opens no store and no `CREWBUS_*` variable but `CREWBUS_TOKEN` concerns it.
//! A hook must never break the session it serves, so **every failure** — its arguments, stdin,
//! its state, the network, the server, a revoked token — ends with exit code 0, nothing on
//! stdout (no decision) and one line on stderr, within 2 s of the failure. The only non-zero exit
//! is the deliberate exit 2 of Claude Code's background (`asyncRewake`) Stop wake.
//!
//! What it prints for a model holds counts, ids, and agent names and conversation titles cleaned
//! by [`crewbus_domain::quote_for_model`] (at most [`crewbus_domain::NAME_CHARS`] characters
//! each, quoted «…»), never body text: a Stop reason is read by the model as its next
//! instruction. The modules: [`event`] (the host's event JSON), [`report`] (what is printed),
//! [`state`] (the per-session cursor file), [`run`] (each event's flow); the HTTP call is
//! [`crate::cli::watch_client`], shared with `crewbus mcp --channel`.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, Parser, ValueEnum};
use crewbus_domain::Secret;

pub mod event;
pub mod report;
pub mod run;
pub mod state;

/// The environment variable holding the agent's bearer token (`--token-file` wins).
pub const TOKEN_ENV: &str = "CREWBUS_TOKEN";

/// Claude Code's own cap on consecutive Stop-hook blocks (`CLAUDE_CODE_STOP_HOOK_BLOCK_CAP`,
/// default 8); the hook's default `--max-wakes` stays one below it.
pub const HOST_BLOCK_CAP: u32 = 8;

/// The host whose hook protocol is spoken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Host {
    /// Claude Code: Stop (background `asyncRewake` wake, or `--headless` blocking decision),
    /// SessionStart, UserPromptSubmit, PostToolUse (`additionalContext`).
    ClaudeCode,
    /// Codex (hooks feature): Stop (blocking decision), SessionStart, UserPromptSubmit,
    /// PostToolUse (`additionalContext`).
    Codex,
    /// Cursor: `stop` (a `followup_message`).
    Cursor,
}

impl Host {
    /// The name used on the command line and in state file keys.
    pub fn name(self) -> &'static str {
        match self {
            Host::ClaudeCode => "claude-code",
            Host::Codex => "codex",
            Host::Cursor => "cursor",
        }
    }
}

/// `crewbus hook --help`'s description.
pub const LONG_ABOUT: &str =
    "A host's lifecycle hook: tells an agent's session about messages waiting for it.

Reads the host's hook event (JSON) on stdin and asks the server's POST /v1/inbox/watch, which \
hands out nothing: the messages stay in the inbox until the agent fetches them (fetch_inbox). \
What the hook reports is recorded in a per-session cursor, so the same news never wakes a \
session twice. Reads no configuration file. Every failure (arguments, stdin, state, network, \
server, a revoked token) ends with exit code 0, no decision and one line on stderr: a hook never \
blocks or breaks the session. The one non-zero exit is Claude Code's background Stop wake (exit \
2, the summary on stderr).";

/// `crewbus hook --help`'s closing text: the events, the state, examples.
pub const AFTER_HELP: &str = "\
Events:
  claude-code  Stop without --headless: waits in the background (install it with
               \"asyncRewake\": true and a timeout above --wait); with news it prints the summary
               on stderr and exits 2, which wakes the idle session.
               Stop with --headless (print mode): waits up to --wait, then prints
               {\"decision\":\"block\",\"reason\":…} with news, or nothing.
               SessionStart, UserPromptSubmit, PostToolUse: a check without waiting (at most
               300 ms); with news not yet reported, hookSpecificOutput.additionalContext.
  codex        Stop (blocking, as --headless), SessionStart, UserPromptSubmit, PostToolUse.
  cursor       stop: waits up to --wait, then {\"followup_message\": …} with news, else {}.
Consecutive wakes (Claude Code's and Codex's stop_hook_active, Cursor's loop_count) stop at
--max-wakes; a prompt from the user starts the count again.

State: $XDG_STATE_HOME/crewbus/hooks (else ~/.local/state/crewbus/hooks), one 0600 file per
server, agent and host session; entries older than 7 days are pruned.

Examples (`crewbus connect claude-code` writes these for you):
  crewbus hook claude-code --token-file ~/.config/crewbus/alice.token --wait 28800
  crewbus hook claude-code --headless --wait 50 --url http://127.0.0.1:7700
  echo '{\"hook_event_name\":\"SessionStart\",\"session_id\":\"s1\"}' | \\
    CREWBUS_TOKEN=cbt_… crewbus hook claude-code";

/// The token from `file` when given, else from [`TOKEN_ENV`], trimmed. Errors (a message naming
/// the source, never the value): neither set, an unreadable or empty file.
pub fn token(file: Option<&Path>) -> Result<Secret, String> {
    let (text, source) = match file {
        Some(path) => match std::fs::read_to_string(path) {
            Ok(text) => (text, format!("the token file {}", path.display())),
            Err(e) => {
                return Err(format!(
                    "cannot read the token file {}: {e}",
                    path.display()
                ));
            }
        },
        None => match std::env::var(TOKEN_ENV) {
            Ok(text) => (text, format!("${TOKEN_ENV}")),
            Err(_) => {
                return Err(format!(
                    "no token: pass --token-file PATH or set ${TOKEN_ENV} to the agent's bearer \
                     token"
                ));
            }
        },
    };
    let token = Secret::new(text.trim());
    if token.is_empty() {
        return Err(format!(
            "{source} is empty: it must hold the agent's bearer token"
        ));
    }
    Ok(token)
}

/// `crewbus hook` options.
#[derive(Debug, Clone, Args)]
pub struct HookArgs {
    /// Which host's hook protocol to speak.
    #[arg(value_enum)]
    pub host: Host,

    /// Base URL of the crewbus server.
    #[arg(long, value_name = "URL", default_value = "http://127.0.0.1:7700")]
    pub url: String,

    /// Read the agent's bearer token from this file (surrounding whitespace ignored) instead of
    /// $CREWBUS_TOKEN.
    #[arg(long, value_name = "PATH")]
    pub token_file: Option<PathBuf>,

    /// How long a Stop hook waits for news, in seconds: 0 (ask once, without waiting) to
    /// 86400, as `crewbus connect --wait` writes it (the background wake loops over requests
    /// of at most the server's bus.max_wait_ms).
    #[arg(long, value_name = "SECONDS", default_value_t = 50,
          value_parser = clap::value_parser!(u64).range(0..=crate::cli::connect::plan::MAX_WAIT_S))]
    pub wait: u64,

    /// Claude Code in print mode: the Stop hook blocks and answers with a decision (no
    /// background wake).
    #[arg(long)]
    pub headless: bool,

    /// Consecutive wakes after which a Stop hook lets the session stop.
    #[arg(long, value_name = "N", default_value_t = HOST_BLOCK_CAP - 1)]
    pub max_wakes: u32,
}

// `crewbus hook …` parsed on its own, before any configuration: its errors are the hook's.
#[derive(Debug, Parser)]
#[command(
    name = "crewbus hook",
    version,
    about = "A host's lifecycle hook: tells an agent's session about messages waiting for it",
    long_about = LONG_ABOUT,
    after_help = AFTER_HELP
)]
struct HookCli {
    #[command(flatten)]
    args: HookArgs,
}

/// The arguments after `hook` when the command line names `crewbus [global options] hook …`;
/// `None` for every other command. The global options it steps over: `--json`, `--config
/// PATH`, `--data-dir DIR` (and their `=` forms).
pub fn dispatched(args: &[OsString]) -> Option<Vec<OsString>> {
    let mut i = 1;
    while let Some(arg) = args.get(i) {
        let a = arg.to_str()?;
        match a {
            "--json" => i += 1,
            "--config" | "--data-dir" => i += 2,
            _ if a.starts_with("--config=") || a.starts_with("--data-dir=") => i += 1,
            "hook" => return Some(args[i + 1..].to_vec()),
            _ => return None,
        }
    }
    None
}

/// Runs `crewbus hook` with the arguments after `hook`. Always exit code 0 but for Claude
/// Code's background Stop wake (2); `--help` and `--version` print on stdout.
pub fn main(args: Vec<OsString>) -> ExitCode {
    let argv = std::iter::once(OsString::from("crewbus hook")).chain(args);
    let cli = match HookCli::try_parse_from(argv) {
        Ok(cli) => cli,
        Err(e) => {
            use clap::error::ErrorKind;
            if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
                print!("{e}");
                return ExitCode::SUCCESS;
            }
            run::fail(&format!("{} (see crewbus hook --help)", one_line(&e)));
            return ExitCode::SUCCESS;
        }
    };
    run::main(cli.args)
}

/// clap's error as one line: what it says before its usage, the arguments it names included
/// (the missing ones, the possible values), without its tips.
fn one_line(e: &clap::Error) -> String {
    let text = e.to_string();
    let parts: Vec<&str> = text
        .lines()
        .map(str::trim)
        .take_while(|l| !l.starts_with("Usage:") && !l.starts_with("For more information"))
        .filter(|l| !l.is_empty() && !l.starts_with("tip:"))
        .collect();
    let line = parts.join(" ");
    let line = line.strip_prefix("error: ").unwrap_or(&line);
    if line.is_empty() {
        "bad arguments".to_owned()
    } else {
        line.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory as _;

    fn os(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    #[test]
    fn a_token_comes_from_the_file_and_is_never_shown() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("t");
        std::fs::write(&file, "  cbt_secret\n").unwrap();
        assert_eq!(token(Some(&file)).unwrap().expose(), "cbt_secret");
        std::fs::write(&file, "\n").unwrap();
        let empty = token(Some(&file)).err().unwrap();
        assert!(empty.contains("empty") && !empty.contains("cbt"), "{empty}");
        assert!(token(Some(&dir.path().join("none"))).is_err());
    }

    #[test]
    fn the_hook_cli_is_well_formed() {
        HookCli::command().debug_assert();
    }

    #[test]
    fn hook_is_found_after_global_options_only() {
        assert_eq!(
            dispatched(&os(&["crewbus", "hook", "claude-code", "--bogus"])),
            Some(os(&["claude-code", "--bogus"]))
        );
        assert_eq!(
            dispatched(&os(&[
                "crewbus", "--json", "--config", "x", "hook", "cursor"
            ])),
            Some(os(&["cursor"]))
        );
        assert_eq!(
            dispatched(&os(&["crewbus", "--data-dir=d", "hook"])),
            Some(vec![])
        );
        assert_eq!(dispatched(&os(&["crewbus", "serve", "hook"])), None);
        assert_eq!(dispatched(&os(&["crewbus", "--bogus", "hook"])), None);
        assert_eq!(dispatched(&os(&["crewbus"])), None);
    }

    #[test]
    fn an_argument_error_is_one_line_naming_the_argument() {
        let line = |args: &[&str]| {
            let argv = std::iter::once("crewbus hook").chain(args.iter().copied());
            one_line(&HookCli::try_parse_from(argv).unwrap_err())
        };
        let missing = line(&[]);
        assert!(missing.contains("<HOST>"), "{missing}");
        let host = line(&["nohost"]);
        assert!(
            host.contains("nohost") && host.contains("claude-code"),
            "{host}"
        );
        let wait = line(&["claude-code", "--wait", "x"]);
        assert!(wait.contains("--wait"), "{wait}");
        let unknown = line(&["claude-code", "--bogus"]);
        assert!(
            unknown.contains("--bogus") && !unknown.contains("tip"),
            "{unknown}"
        );
        for l in [missing, host, wait, unknown] {
            assert!(!l.contains('\n') && !l.starts_with("error"), "{l}");
        }
    }

    #[test]
    fn the_wait_takes_what_connect_writes() {
        let parse = |w: &str| HookCli::try_parse_from(["crewbus hook", "claude-code", "--wait", w]);
        assert_eq!(parse("0").unwrap().args.wait, 0);
        assert_eq!(
            parse("86400").unwrap().args.wait,
            crate::cli::connect::plan::MAX_WAIT_S
        );
        for refused in ["86401", "100000", "-1"] {
            assert!(parse(refused).is_err(), "--wait {refused}");
        }
        assert_eq!(
            parse("86401").unwrap_err().kind(),
            clap::error::ErrorKind::ValueValidation
        );
    }

    #[test]
    fn defaults_match_the_issue() {
        let cli = HookCli::try_parse_from(["crewbus hook", "claude-code"]).unwrap();
        assert_eq!(cli.args.host, Host::ClaudeCode);
        assert_eq!(cli.args.url, "http://127.0.0.1:7700");
        assert_eq!(cli.args.wait, 50);
        assert_eq!(cli.args.max_wakes, 7);
        assert!(!cli.args.headless);
        assert!(HookCli::try_parse_from(["crewbus hook", "claude-code", "--nope"]).is_err());
    }
}
