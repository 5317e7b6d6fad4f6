//! `crewbus lease list|release|check`: the operator's view of a team's leases and their
//! release (through the use cases the admin API calls, every team in scope: the CLI stands
//! beside the store), and the agent's check that it holds paths (over HTTP, with its token: what
//! a git pre-commit hook runs).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Subcommand;
use crewbus_domain::{BusError, BusResult, Lease, LeaseFilter, LeasePattern, OperatorScope};
use reqwest::Method;
use serde_json::{Value, json};

use crate::cli::client::ApiClient;
use crate::config::Config;

/// `crewbus lease …`
#[derive(Debug, Clone, Subcommand)]
pub enum LeaseCommand {
    /// A team's live leases (holder, pattern, mode, fencing token, expiry), oldest grant first.
    #[command(after_help = "\
Examples:
  crewbus lease list --team research
  crewbus lease list --team research --agent alice --overlapping 'src/auth/**'")]
    List {
        /// Team name or id.
        #[arg(long)]
        team: String,
        /// Only this agent's leases (name or id).
        #[arg(long)]
        agent: Option<String>,
        /// Only leases whose pattern overlaps this one.
        #[arg(long, value_name = "PATTERN")]
        overlapping: Option<String>,
    },
    /// Release a lease, whoever holds it (idempotent). A server beside the embedded store hears
    /// of it by no wake-up: acquires waiting there try again within 1 s.
    #[command(after_help = "Example:\n  crewbus lease release --team research 0190f7a2-…")]
    Release {
        /// Team name or id.
        #[arg(long)]
        team: String,
        /// Lease id (as `crewbus lease list` shows it).
        lease: uuid::Uuid,
    },
    /// Check, as an agent, that you hold every PATH now (a live lease of yours covers it; with
    /// --fencing-token, that lease). Exit code 1 when one is not held: a git pre-commit hook
    /// runs it over the staged paths. The agent's token comes from --token-file or
    /// $CREWBUS_TOKEN.
    #[command(after_help = "\
Example (.git/hooks/pre-commit):
  git diff --cached --name-only -z | xargs -0 crewbus lease check --url http://127.0.0.1:7700")]
    Check {
        /// Base URL of the crewbus server.
        #[arg(long, value_name = "URL", default_value = "http://127.0.0.1:7700")]
        url: String,
        /// Read the agent's bearer token from this file (surrounding whitespace is ignored)
        /// instead of $CREWBUS_TOKEN.
        #[arg(long, value_name = "PATH")]
        token_file: Option<PathBuf>,
        /// Only this lease's fencing token counts (a stale one is refused).
        #[arg(long, value_name = "N")]
        fencing_token: Option<u64>,
        /// Paths relative to the shared root, `/`-separated (e.g. src/auth/token.rs).
        #[arg(required = true, value_name = "PATH")]
        paths: Vec<String>,
    },
}

impl LeaseCommand {
    /// Whether it composes the bus: `check` only talks HTTP.
    pub fn composes(&self) -> bool {
        !matches!(self, LeaseCommand::Check { .. })
    }
}

fn lease_json(l: &Lease) -> Value {
    json!({
        "id": l.id,
        "agent": l.agent,
        "agent_name": l.agent_name,
        "pattern": l.claim.pattern.as_str(),
        "mode": match l.claim.mode {
            crewbus_domain::LeaseMode::Exclusive => "exclusive",
            crewbus_domain::LeaseMode::Shared => "shared",
        },
        "fencing_token": l.token.0,
        "run": l.run.map(|r| r.0),
        "acquired_at": l.acquired_at,
        "expires_at": l.expires_at,
        "ended_at": l.ended.map(|e| e.at),
        "end_reason": l.ended.map(|e| e.reason.as_str()),
    })
}

/// Runs `cmd`. Errors: an unknown team, agent or lease → `NotFound`; a bad pattern or path →
/// `Invalid`; no token for `check` → `Invalid`; the store or server unreachable →
/// `Unavailable`.
pub async fn lease(config: Config, cmd: LeaseCommand, json: bool) -> BusResult<ExitCode> {
    match cmd {
        LeaseCommand::List {
            team,
            agent,
            overlapping,
        } => {
            let bus = crate::cli::commands::operator_bus(&config).await?;
            let team = bus.find_team(&team).await?;
            let agent = match agent {
                Some(a) => Some(bus.find_agent(team.id, &a).await?.id),
                None => None,
            };
            let filter = LeaseFilter {
                agent,
                overlapping: overlapping
                    .as_deref()
                    .map(LeasePattern::parse)
                    .transpose()?,
            };
            let leases = bus
                .admin_leases(&OperatorScope::Everything, team.id, &filter)
                .await?;
            if json {
                println!("{}", Value::Array(leases.iter().map(lease_json).collect()));
            } else if leases.is_empty() {
                println!("no live leases in team {}", team.name);
            } else {
                println!(
                    "{:<36} {:<16} {:<9} {:>6}  {:<20} PATTERN",
                    "ID", "AGENT", "MODE", "TOKEN", "EXPIRES"
                );
                for l in &leases {
                    println!(
                        "{:<36} {:<16} {:<9} {:>6}  {:<20} {}",
                        l.id,
                        l.agent_name,
                        lease_json(l)["mode"].as_str().unwrap_or_default(),
                        l.token.0,
                        l.expires_at.format("%Y-%m-%d %H:%M:%S"),
                        l.claim.pattern
                    );
                }
                println!("{} lease(s)", leases.len());
            }
            Ok(ExitCode::SUCCESS)
        }
        LeaseCommand::Release { team, lease } => {
            let bus = crate::cli::commands::operator_bus(&config).await?;
            let team = bus.find_team(&team).await?;
            let l = bus
                .admin_release_lease(&OperatorScope::Everything, team.id, lease)
                .await?;
            if json {
                println!("{}", lease_json(&l));
            } else {
                let how = l.ended.map(|e| e.reason.as_str()).unwrap_or("released");
                println!(
                    "lease {} of {} on {} ended ({how})",
                    l.id, l.agent_name, l.claim.pattern
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        LeaseCommand::Check {
            url,
            token_file,
            fencing_token,
            paths,
        } => check(&url, token_file, fencing_token, &paths, json).await,
    }
}

/// The agent's token: from `file`, else `$CREWBUS_TOKEN`. Errors: neither, or an unreadable
/// file → `Invalid` (the token itself is never printed).
fn token(file: Option<PathBuf>) -> BusResult<String> {
    let token = match file {
        Some(path) => std::fs::read_to_string(&path).map_err(|e| {
            BusError::invalid(format!(
                "cannot read the token file {}: {e}",
                path.display()
            ))
        })?,
        None => std::env::var("CREWBUS_TOKEN").map_err(|_| {
            BusError::invalid("no agent token: set $CREWBUS_TOKEN or pass --token-file")
        })?,
    };
    let token = token.trim().to_owned();
    if token.is_empty() {
        return Err(BusError::invalid("the agent token is empty"));
    }
    Ok(token)
}

async fn check(
    url: &str,
    token_file: Option<PathBuf>,
    fencing_token: Option<u64>,
    paths: &[String],
    json: bool,
) -> BusResult<ExitCode> {
    let client = ApiClient::new(url.trim_end_matches('/'), Some(token(token_file)?));
    let mut all = true;
    let mut answers = Vec::new();
    for path in paths {
        let mut body = json!({ "path": path });
        if let Some(t) = fencing_token {
            body["fencing_token"] = json!(t);
        }
        let (status, answer) = client
            .call(Method::POST, "/v1/leases/check", Some(body))
            .await?;
        let held = match status {
            200 => answer["held"].as_bool().unwrap_or(false),
            401 => {
                return Err(BusError::Unauthenticated);
            }
            400 => {
                return Err(BusError::invalid(format!(
                    "{path}: {}",
                    answer["message"].as_str().unwrap_or("refused")
                )));
            }
            _ => {
                return Err(BusError::unavailable(format!(
                    "the server answered {status} to the lease check"
                )));
            }
        };
        all &= held;
        if json {
            answers.push(json!({ "path": path, "held": held, "lease": answer["lease"] }));
        } else if held {
            println!(
                "held     {path} (lease {} on {}, fencing token {})",
                answer["lease"]["id"].as_str().unwrap_or("?"),
                answer["lease"]["pattern"].as_str().unwrap_or("?"),
                answer["lease"]["fencing_token"]
            );
        } else {
            println!("NOT HELD {path}: acquire a lease covering it first");
        }
    }
    if json {
        println!("{}", json!({ "held": all, "paths": answers }));
    } else if !all {
        eprintln!("crewbus: some paths are not covered by a live lease of yours");
    }
    Ok(if all {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
