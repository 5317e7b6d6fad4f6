//! `crewbus push list|parked|unpark`: the operator's view of the push outbox's registrations
//! (PUSH.md §3, §6), through the oversight use cases the admin API calls (with
//! [`OperatorScope::Everything`]: the CLI stands beside the store). Output never carries a
//! credential (only the authorization scheme), and URLs are printed without userinfo or query
//! ([`crewbus_domain::redact_url`]).

use std::process::ExitCode;

use crewbus_domain::{BusError, BusResult, OperatorScope, PushConfig, PushRegistration, RunId};
use serde_json::{Value, json};

use crate::cli::PushCommand;
use crate::config::Config;
use crate::usecases::bus::Bus;

/// What a push command produced: the text to print and whether it succeeded (the exit code).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PushOutput {
    /// Human-readable lines, or one JSON document with `--json`.
    pub text: String,
    /// `false` when `unpark` found no parked registration (exit code 1).
    pub success: bool,
}

fn config_json(c: &PushConfig) -> Value {
    json!({
        "id": c.id,
        "run": c.run.0,
        "url": crewbus_domain::redact_url(&c.url),
        "authentication": c.authentication.as_ref().map(|a| a.scheme.clone()),
    })
}

fn registration_json(r: &PushRegistration) -> Value {
    let mut v = config_json(&r.config);
    v["next_seq"] = json!(r.next_seq.0);
    v["attempts"] = json!(r.attempts);
    v["next_attempt_at"] = json!(r.next_attempt_at);
    v["last_error"] = json!(r.last_error);
    v["parked"] = json!(r.parked);
    v
}

/// Runs `cmd` through `bus`'s oversight use cases (`admin_push_configs`,
/// `admin_parked_registrations`, `admin_unpark`, every team in scope) and renders its output (JSON with `json`). A run the
/// journal does not know has no registrations to list or un-park.
///
/// Errors: the store's, as the domain maps them into a `BusError` (`Unavailable` when it cannot
/// be reached); `parked --limit` 0 or above `MAX_PAGE` → `Invalid`.
pub async fn run_push_command(bus: &Bus, cmd: &PushCommand, json: bool) -> BusResult<PushOutput> {
    let everything = OperatorScope::Everything;
    match cmd {
        PushCommand::List { run } => {
            let run = RunId(*run);
            let configs: Vec<PushConfig> = match bus.admin_push_configs(&everything, run).await {
                Ok(configs) => configs,
                Err(BusError::NotFound { .. }) => Vec::new(),
                Err(e) => return Err(e),
            };
            let text = if json {
                Value::Array(configs.iter().map(config_json).collect()).to_string()
            } else if configs.is_empty() {
                format!(
                    "no push registrations for run {run} (none opened, or every destination has acknowledged its terminal record)"
                )
            } else {
                let mut lines = vec![format!("{:<28} {:<10} URL", "ID", "AUTH")];
                for c in &configs {
                    lines.push(format!(
                        "{:<28} {:<10} {}",
                        c.id,
                        c.authentication.as_ref().map_or("-", |a| a.scheme.as_str()),
                        crewbus_domain::redact_url(&c.url)
                    ));
                }
                lines.join("\n")
            };
            Ok(PushOutput {
                text,
                success: true,
            })
        }
        PushCommand::Parked { limit } => {
            if *limit == 0 || *limit > crewbus_domain::MAX_PAGE {
                return Err(BusError::invalid(format!(
                    "--limit must be between 1 and {}",
                    crewbus_domain::MAX_PAGE
                )));
            }
            let parked: Vec<PushRegistration> = bus
                .admin_parked_registrations(&everything, *limit)
                .await?
                .into_iter()
                .map(|p| p.registration)
                .collect();
            let text = if json {
                Value::Array(parked.iter().map(registration_json).collect()).to_string()
            } else if parked.is_empty() {
                "no parked push registrations".to_owned()
            } else {
                let mut lines = vec![format!(
                    "{:<36} {:<24} {:>8} {:>8}  URL / LAST ERROR",
                    "RUN", "ID", "NEXT SEQ", "ATTEMPTS"
                )];
                for r in &parked {
                    lines.push(format!(
                        "{:<36} {:<24} {:>8} {:>8}  {}",
                        r.config.run,
                        r.config.id,
                        r.next_seq.0,
                        r.attempts,
                        crewbus_domain::redact_url(&r.config.url)
                    ));
                    if let Some(e) = &r.last_error {
                        lines.push(format!("{:<80}{e}", ""));
                    }
                }
                lines.push(format!(
                    "un-park one with: crewbus push unpark --run RUN --id ID ({} shown)",
                    parked.len()
                ));
                lines.join("\n")
            };
            Ok(PushOutput {
                text,
                success: true,
            })
        }
        PushCommand::Unpark { run, id } => {
            let run = RunId(*run);
            let found = match bus.admin_unpark(&everything, run, id).await {
                Ok(found) => found,
                Err(BusError::NotFound { .. }) => false,
                Err(e) => return Err(e),
            };
            let text = if json {
                json!({"run": run.0, "id": id, "unparked": found}).to_string()
            } else if found {
                format!("{id} of run {run} un-parked: it is due now and resumes from its cursor")
            } else {
                format!("no parked registration {id} for run {run}")
            };
            Ok(PushOutput {
                text,
                success: found,
            })
        }
    }
}

/// `crewbus push …`: composes the configured deployment beside its server (the embedded store or
/// Postgres: the memory store keeps registrations only inside a running server) and prints the
/// command's output.
///
/// Errors: the memory store → `Invalid`; composition errors (a Postgres push store without a key
/// ring while destinations are configured, unless `allow_unsealed`); the store's.
pub async fn push(config: Config, cmd: PushCommand, json: bool) -> BusResult<ExitCode> {
    if config.store()? == crate::config::StorageKind::Memory {
        return Err(BusError::invalid(
            "push commands need a store that outlives a process: the memory store keeps push \
             registrations only inside a running `crewbus serve`. Use the embedded store (the \
             default) or configure [database] (CREWBUS_DATABASE__URL)",
        ));
    }
    let composed = crate::compose::compose(&config).await?;
    let out = run_push_command(&composed.bus, &cmd, json).await?;
    println!("{}", out.text);
    Ok(if out.success {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
