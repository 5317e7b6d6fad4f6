//! `crewbus-load`: drives running servers over their HTTP API with simulated agents, measures
//! throughput and latency, and ends with a **zero-loss check**.
//!
//! The run: every team's agents are put into `conversations` conversations of `members` agents
//! each; `messages` messages per team are sent (round-robin over conversations and their
//! members) at `rate` messages per second in total (0: as fast as `senders` concurrent senders
//! per team go), with bodies of `body_bytes..=body_bytes_max` bytes. Every agent fetches and
//! confirms what it receives while the senders run and until every recipient has confirmed every
//! accepted message (or the drain deadline passes).
//!
//! Transient failures (no answer, 429, 5xx) are retried with the same `request_id` — the API is
//! idempotent on it — until `retry_for` passes, so a server, broker or database restart mid-run
//! loses nothing the bus accepted. A send refused with another 4xx (e.g. 507 `quota_exceeded`) is
//! counted as *rejected* for its team and is not expected anywhere.
//!
//! The zero-loss check ([`ZeroLoss`]) passes when:
//! - every accepted message appears exactly once in its conversation's history (the ledger),
//!   `stored`, and no two history entries share a `request_id`;
//! - every recipient (the conversation's members but the sender) confirmed every accepted message,
//!   the `confirmed` outcome came back at most once per (recipient, message), and no agent was
//!   handed a message again after it learned the message was confirmed;
//! - the ledger's receipts agree: one receipt per recipient, each with `delivered_at` set, for
//!   exactly the recipients the agents say confirmed it.

use std::process::ExitCode;

use crewbus::config::Config;
use crewbus_domain::{BusError, BusResult};

mod args;
mod check;
mod mcp;
mod report;
mod retry;
mod run;
mod team;

pub use args::{LoadArgs, LoadCli, LoadPlan};
pub use mcp::Transport;
pub use report::{LoadProgress, LoadReport, Percentiles, TeamReport, ZeroLoss};
pub use run::{run, run_with};
pub use team::{LoadAgent, LoadTeam, create_teams, teams_of_tokens};

use report::print_report;

/// The bearer tokens of a `--tokens-file`: one per line, blank lines skipped. Errors: a file
/// that looks like JSON (such as `dev-tokens.json`, whose tokens are its `"token"` fields) →
/// `Invalid` naming the file and the format wanted.
fn tokens_of_file(path: &std::path::Path, text: &str) -> BusResult<Vec<String>> {
    let lines: Vec<String> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect();
    if lines
        .first()
        .is_some_and(|l| l.starts_with('{') || l.starts_with('['))
    {
        return Err(BusError::invalid(format!(
            "{} looks like JSON: --tokens-file wants one bearer token per line (from \
             dev-tokens.json, take each agent's \"token\" value)",
            path.display()
        )));
    }
    Ok(lines)
}

/// Completes `config` for a run that creates its teams: the embedded store must exist beside
/// the running server (as for `crewbus`'s commands beside it). Given tokens, nothing is opened.
/// Errors: as `crewbus::embedded::prepare_beside` (no `crewbus.db` in the data directory →
/// `NotFound`).
pub fn prepare(args: &LoadArgs, config: &mut Config) -> BusResult<()> {
    if args.uses_tokens() {
        return Ok(());
    }
    crewbus::embedded::prepare_beside(config)
}

/// `crewbus-load`: prints the report (text or `--json`); exit code 1 when the zero-loss check
/// fails.
pub async fn command(config: Config, args: LoadArgs, json: bool) -> BusResult<ExitCode> {
    let mut tokens = args.tokens.clone();
    if let Some(path) = &args.tokens_file {
        let text = std::fs::read_to_string(path)
            .map_err(|e| BusError::invalid(format!("cannot read {}: {e}", path.display())))?;
        tokens.extend(tokens_of_file(path, &text)?);
    }
    let teams = if tokens.is_empty() {
        create_teams(&config, &args).await?
    } else {
        teams_of_tokens(&args.urls, &tokens).await?
    };
    let report = run(LoadPlan::from_args(&args), teams).await?;
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report).unwrap_or_default()
        );
    } else {
        print_report(&report);
    }
    Ok(if report.zero_loss.passed {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn load_parses_on_the_command_line() {
        use clap::Parser as _;
        let cli = LoadCli::try_parse_from([
            "crewbus-load",
            "--url",
            "http://a:1",
            "--url",
            "http://b:2",
            "--messages",
            "5",
            "--rate",
            "10",
            "--body-bytes",
            "100",
            "--body-bytes-max",
            "50",
        ])
        .unwrap();
        assert_eq!(cli.load.urls.len(), 2);
        let plan = LoadPlan::from_args(&cli.load);
        assert_eq!((plan.messages, plan.body_bytes), (5, (100, 100)));
    }

    #[test]
    fn the_cli_is_well_formed() {
        use clap::CommandFactory as _;
        LoadCli::command().debug_assert();
    }

    #[test]
    fn load_with_tokens_needs_no_store() {
        use clap::Parser as _;
        // A data directory holding no store: opening it is refused.
        let mut missing = Config::default();
        missing.storage.data_dir = Some("/nonexistent/crewbus-load-test".into());
        let creates = LoadCli::try_parse_from(["crewbus-load"]).unwrap();
        assert!(
            !creates.load.uses_tokens(),
            "creating teams opens the ledger"
        );
        assert!(matches!(
            prepare(&creates.load, &mut missing.clone()),
            Err(BusError::NotFound { .. })
        ));
        for tokens in [
            &["--token", "t"][..],
            &["--tokens-file", "/nonexistent/tokens"][..],
        ] {
            let cli = LoadCli::try_parse_from(["crewbus-load"].iter().chain(tokens)).unwrap();
            assert!(cli.load.uses_tokens(), "{tokens:?}");
            assert!(
                matches!(prepare(&cli.load, &mut missing.clone()), Ok(())),
                "no store is opened for {tokens:?}"
            );
        }
    }

    #[test]
    fn a_tokens_file_is_one_token_per_line_and_json_is_refused() {
        let path = std::path::Path::new("tokens.txt");
        assert_eq!(
            tokens_of_file(path, "cbt_a\n\n  cbt_b  \n").unwrap(),
            vec!["cbt_a", "cbt_b"]
        );
        assert!(tokens_of_file(path, "").unwrap().is_empty());
        for json in ["{\"teams\": {}}", "\n[\"cbt_a\"]"] {
            assert!(matches!(
                tokens_of_file(path, json),
                Err(BusError::Invalid { .. })
            ));
        }
    }
}
