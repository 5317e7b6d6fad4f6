//! The CLI's commands (everything but the demo): each prints human-readable text, or JSON with
//! `--json`, and returns the process exit code.

use std::process::ExitCode;

use crewbus_domain::{Agent, BusError, BusResult, Operator, OperatorScope, Team};
use serde_json::json;

use crate::cli::dev_team::{self, DevAgent, DevTokens};
use crate::cli::embedded::Prepared;
use crate::cli::{
    AgentCommand, BackendChoice, BackupArgs, HealthArgs, OperatorCommand, ServeArgs, StreamCommand,
    TeamCommand,
};
use crate::compose::{compose, compose_server};
use crate::config::Config;
use crate::server::Server;
use crate::shutdown::Shutdown;
use crate::usecases::bus::Bus;

/// `crewbus serve`: on the embedded store, checks it first ([`crate::embedded::check_store`]:
/// a damaged one is refused, said on stderr, exit code 2, nothing listening); composes the bus,
/// sets up the dev team (see [`crate::cli::dev_team`]): on the
/// embedded store always (default team `local`, agents alice and bob), with a database only when
/// `--dev-team` is given; prints each agent (`agent NAME (ID) of team TEAM: token TOKEN`, with
/// `--json` one object `{team, agent, name, token}` per agent, `token` null when it cannot be
/// recovered), starts the server, then prints the dev tokens file and a host configuration to
/// paste, and the address (`--json`: `{listening, mcp_url}`). Errors: `--dev-agent` without
/// `--dev-team` when a database is configured → `Invalid`; as `compose`, the dev team's use
/// cases and `Server::start`. After a graceful stop the embedded store's write-ahead log is
/// checkpointed into its file ([`crate::embedded::stop_store`]).
pub async fn serve(
    mut config: Config,
    args: ServeArgs,
    embedded: Option<Prepared>,
    json: bool,
) -> BusResult<ExitCode> {
    if let Some(listen) = args.listen {
        config.listen = listen;
    }
    let team_name = match (&args.dev_team, config.database.is_none()) {
        (Some(team), _) => Some(team.clone()),
        (None, true) => Some(dev_team::DEFAULT_TEAM.to_owned()),
        (None, false) if args.dev_agents.is_empty() => None,
        (None, false) => {
            return Err(BusError::invalid(
                "with [database] configured, --dev-agent needs --dev-team NAME (dev agents are \
                 set up only when asked for)",
            ));
        }
    };
    if let Some(p) = &embedded {
        say_embedded(p, json);
        // Checked before anything opens it, migrates it or listens: a damaged store is refused
        // with exit code 2, as a configuration error (what the operator fixes before a start).
        if let Err(damaged) = crate::embedded::check_store(&config).await? {
            eprintln!("crewbus: {damaged}");
            return Ok(ExitCode::from(2));
        }
    }
    if !config.listen.ip().is_loopback() && config.allow_list().allowed_hosts.is_empty() {
        // Every route checks Host: a client that names this server by another name than
        // loopback (its IP, a DNS name, a load balancer's health check) is refused with 403.
        tracing::warn!(
            listen = %config.listen,
            "listening beyond loopback with no [http] allowed_hosts: requests naming this server              by anything but localhost, 127.0.0.1 or [::1] are refused with 403 (set              http.allowed_hosts, e.g. CREWBUS_HTTP__ALLOWED_HOSTS='[\"bus.example.com\"]')"
        );
    }
    let composed = compose_server(&config).await?;
    tracing::info!(adapters = %composed.description, "composed");
    let bus = composed.bus;
    // Listen first: an address in use is refused before any dev agent or token is set up.
    let shutdown = Shutdown::new();
    let server = Server::start(bus.clone(), config.listen, shutdown.clone()).await?;
    tokio::spawn(shutdown.clone().on_signals());
    let mut dev = None;
    if let Some(team_name) = team_name {
        let names: Vec<String> = if args.dev_agents.is_empty() {
            dev_team::DEFAULT_AGENTS.map(str::to_owned).to_vec()
        } else {
            args.dev_agents.clone()
        };
        let mut tokens = DevTokens::open(config.storage.data_dir().ok().as_deref());
        let (team, agents) = dev_team::ensure(&bus, &team_name, &names, &mut tokens).await?;
        if let Err(e) = tokens.save() {
            let path = tokens.path().map(|p| p.display().to_string());
            tracing::warn!(path, error = %e, "cannot write the dev tokens file: new tokens are printed but not kept");
        }
        for a in &agents {
            print_dev_agent(&team, a, json);
        }
        dev = Some((team, agents, tokens));
    }
    let api_operator = match &args.dev_operator_token_file {
        Some(path) => Some((
            path.clone(),
            dev_team::ensure_api_operator(&bus, path).await?,
        )),
        None => None,
    };
    let base = dev_team::local_url(server.addr());
    let mcp_url = format!("{base}/mcp");
    let console = dev.is_some() && bus.settings().console.enabled;
    if json {
        say(format_args!(
            "{}",
            json!({"listening": server.url(), "mcp_url": mcp_url})
        ));
        if console {
            console_sign_in(&bus, &base, json).await;
        }
        if let Some((path, operator)) = &api_operator {
            say(format_args!(
                "{}",
                json!({"admin_api": format!("{base}/v1/admin"), "operator": operator.name, "operator_token_file": path})
            ));
        }
    } else {
        if console {
            console_sign_in(&bus, &base, json).await;
        }
        if let Some((path, operator)) = &api_operator {
            say(format_args!(
                "admin API: {base}/v1/admin with operator {}'s token, kept in {} (0600)",
                operator.name,
                path.display()
            ));
        }
        if let Some((team, agents, tokens)) = &dev {
            print_host_config(team, agents, tokens, &base, &mcp_url);
        }
        println!(
            "crewbus listening on {} ({}); MCP at {mcp_url}. Ctrl-C stops it.",
            server.url(),
            composed.description
        );
    }
    server.wait().await;
    if embedded.is_some() {
        // A clean stop leaves the store whole in its file, and the next start knows it.
        crate::embedded::stop_store(&config).await;
    }
    // The lock is released only once the server (and its workers) stopped.
    drop(embedded);
    Ok(ExitCode::SUCCESS)
}

/// Prints the console's sign-in line ([`print_console_sign_in`]), or why there is none (the bus
/// serves on: the console still takes an operator's token).
async fn console_sign_in(bus: &Bus, base: &str, json: bool) {
    if let Err(e) = print_console_sign_in(bus, base, json).await {
        eprintln!(
            "console: no sign-in code ({e}); sign in at {base}/console/sign-in with an \
             operator token (`crewbus operator add NAME`)"
        );
    }
}

/// The console's sign-in URL with a fresh one-time code for the dev operator (created with every
/// team in scope when missing): `console: URL (…)`, or with `--json` one object
/// `{console_url, operator, sign_in_code, expires_at}`. Each start prints a new code and
/// withdraws the operator's earlier unused ones ([`Bus::replace_sign_in_codes`]). Errors:
/// the dev operator revoked → `Conflict`; the store's.
async fn print_console_sign_in(bus: &Bus, base: &str, json: bool) -> BusResult<()> {
    let operator = bus.dev_operator().await?;
    // The codes printed by earlier starts stop working: only this one signs in.
    let code = bus.replace_sign_in_codes(&operator).await?;
    let url = format!("{base}/console/sign-in?code={}", code.code);
    if json {
        say(format_args!(
            "{}",
            json!({
                "console_url": url,
                "operator": operator.name,
                "sign_in_code": code.code,
                "expires_at": code.expires_at,
            })
        ));
    } else {
        say(format_args!(
            "console: {url} (operator {}: one-time code, works once, expires in {} min)",
            operator.name,
            crewbus_domain::SIGN_IN_CODE_TTL_SECS / 60
        ));
    }
    Ok(())
}

/// Writes one line to stdout, ignoring a stdout nobody reads any more: a server goes on serving
/// when whoever started it stopped reading what it prints (`println!` would panic on the
/// broken pipe).
fn say(line: std::fmt::Arguments<'_>) {
    use std::io::Write as _;
    let _ = writeln!(std::io::stdout(), "{line}");
}

/// Where the embedded store is, on stderr (stdout carries the dev agents and, with `--json`,
/// one JSON document per line).
fn say_embedded(p: &Prepared, json: bool) {
    let db = crate::config::database_path(&p.data_dir);
    if json {
        eprintln!(
            "{}",
            json!({"embedded_store": db, "lock": p.lock.path(), "new_master_key": p.new_master_key})
        );
        return;
    }
    eprintln!(
        "embedded store: {} (kept across restarts; `--ephemeral` keeps nothing)",
        db.display()
    );
    if let Some(key) = &p.new_master_key {
        eprintln!(
            "push master key made: {} (0600; it seals push credentials at rest: back it up with \
             the database)",
            key.display()
        );
    }
}

fn print_dev_agent(team: &Team, dev: &DevAgent, json: bool) {
    let agent = dev.agent();
    if json {
        println!(
            "{}",
            json!({"team": team.id, "agent": agent.id, "name": agent.name, "token": dev.token()})
        );
        return;
    }
    match dev.token() {
        Some(token) => println!(
            "agent {} ({}) of team {}: token {token}",
            agent.name, agent.id, team.name
        ),
        None if agent.revoked() => println!(
            "agent {} ({}) of team {}: revoked; pass another --dev-agent name",
            agent.name, agent.id, team.name
        ),
        None => println!(
            "agent {} ({}) of team {}: already exists and its token cannot be recovered (only \
             its hash is stored; dev-tokens.json has none that works for it): use the token \
             printed when it was created, or pass another --dev-agent name, or `crewbus agent \
             add --team {} NAME`",
            agent.name, agent.id, team.name, team.name
        ),
    }
}

/// The dev tokens file and a host configuration for the first agent with a known token, in
/// both forms (Streamable HTTP, and the stdio bridge with this binary's absolute path).
fn print_host_config(
    team: &Team,
    agents: &[DevAgent],
    tokens: &DevTokens,
    base: &str,
    mcp_url: &str,
) {
    match tokens.path() {
        Some(path) => println!(
            "dev tokens: {} (0600; the next start reuses them)",
            path.display()
        ),
        None => println!(
            "dev tokens: not kept (no data directory: set --data-dir, XDG_DATA_HOME or HOME)"
        ),
    }
    let Some(first) = agents.iter().find(|a| a.token().is_some()) else {
        return;
    };
    let (name, token) = (&first.agent().name, first.token().unwrap_or_default());
    let others: Vec<&str> = agents
        .iter()
        .filter(|a| a.token().is_some() && a.agent().name != *name)
        .map(|a| a.agent().name.as_str())
        .collect();
    let exe = std::env::current_exe().unwrap_or_else(|_| "crewbus".into());
    println!();
    println!(
        "Connect an MCP host as {name} of team {} (one token per live host session{}):",
        team.name,
        if others.is_empty() {
            String::new()
        } else {
            format!("; for {}, the same with its token", others.join(", "))
        }
    );
    println!("Streamable HTTP:");
    println!("{}", dev_team::http_host_config(mcp_url, token));
    println!("stdio (the host starts the bridge):");
    println!("{}", dev_team::stdio_host_config(&exe, base, token));
    println!(
        "Claude Code, in your project (the MCP server, its permission, hooks that wake the session): {}",
        crate::cli::connect::suggestion(
            name,
            &team.name,
            base,
            tokens.path().and_then(|p| p.parent())
        )
    );
    println!();
}

/// `crewbus migrate`.
pub async fn migrate(config: Config, json: bool) -> BusResult<ExitCode> {
    let applied = crate::compose::migrate(&config).await?;
    if json {
        println!("{}", json!({"applied": applied}));
    } else if applied.is_empty() {
        println!("the schema is up to date");
    } else {
        println!(
            "applied {} migration(s): {}",
            applied.len(),
            applied.join(", ")
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// `crewbus backup --to FILE`: copies the embedded store online and prints the copy's path and
/// size (`--json`: `{backup, bytes, seconds}`). Errors: as [`crate::compose::backup`].
pub async fn backup(config: Config, args: BackupArgs, json: bool) -> BusResult<ExitCode> {
    let started = std::time::Instant::now();
    crate::compose::backup(&config, &args.to).await?;
    let bytes = std::fs::metadata(&args.to).map(|m| m.len()).unwrap_or(0);
    let seconds = started.elapsed().as_secs_f64();
    if json {
        println!(
            "{}",
            json!({"backup": args.to, "bytes": bytes, "seconds": seconds})
        );
    } else {
        println!(
            "backed up the embedded store to {} ({bytes} bytes in {seconds:.1} s); keep \
             master.key with it",
            args.to.display()
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// The bus for operator commands: they need a persistent ledger.
pub(crate) async fn operator_bus(config: &Config) -> BusResult<Bus> {
    if config.store()? == crate::config::StorageKind::Memory {
        return Err(BusError::invalid(
            "this command needs a store that outlives a process: the memory store keeps teams \
             and agents only inside a running `crewbus serve`. Use the embedded store (the \
             default: drop storage.kind = \"memory\" / --ephemeral) or configure [database] \
             (CREWBUS_DATABASE__URL), or use the dev agents `crewbus serve` sets up (their \
             tokens are printed and kept in dev-tokens.json)",
        ));
    }
    Ok(compose(config).await?.bus)
}

fn team_json(t: &Team) -> serde_json::Value {
    json!({"id": t.id, "name": t.name, "body_backend": t.body_backend, "inbox": t.inbox, "created_at": t.created_at})
}

fn agent_json(a: &Agent) -> serde_json::Value {
    json!({"id": a.id, "team": a.team, "name": a.name, "kind": a.kind, "created_at": a.created_at, "revoked_at": a.revoked_at})
}

/// `crewbus team add|list`.
pub async fn team(config: Config, cmd: TeamCommand, json: bool) -> BusResult<ExitCode> {
    let bus = operator_bus(&config).await?;
    match cmd {
        TeamCommand::Add {
            name,
            backend,
            inbox,
            provision,
        } => {
            let t = add_team(&bus, &config, &name, backend, inbox, provision, json).await?;
            if json {
                println!("{}", team_json(&t));
            } else {
                println!(
                    "team {} created: id {}, bodies on {}, inbox on {}",
                    t.name, t.id, t.body_backend, t.inbox
                );
            }
        }
        TeamCommand::SetBackend {
            team,
            backend,
            inbox,
        } => {
            let t = bus.find_team(&team).await?;
            if backend == crate::cli::BackendChoice::Jetstream
                || inbox == crate::cli::BackendChoice::Jetstream
            {
                // NotProvisioned (with the command that fixes it) when the streams are missing.
                let admin = crate::compose::stream_admin(&config)?;
                admin
                    .check_update(t.id, crewbus_domain::StreamKind::Bodies)
                    .await?;
                admin
                    .check_update(t.id, crewbus_domain::StreamKind::Inbox)
                    .await?;
            }
            let t = bus
                .set_team_backends(t.id, backend.name(), inbox.name())
                .await?;
            if json {
                println!("{}", team_json(&t));
            } else {
                println!(
                    "team {}: new conversations keep bodies on {}, the inbox is {}; existing conversations keep theirs",
                    t.name, t.body_backend, t.inbox
                );
            }
        }
        TeamCommand::List => {
            let teams = bus.ports().ledger.teams().await?;
            if json {
                println!(
                    "{}",
                    serde_json::Value::Array(teams.iter().map(team_json).collect())
                );
            } else if teams.is_empty() {
                println!("no teams yet: `crewbus team add NAME`");
            } else {
                println!(
                    "{:<24} {:<36} {:<10} {:<10}",
                    "NAME", "ID", "BODIES", "INBOX"
                );
                for t in teams {
                    println!(
                        "{:<24} {:<36} {:<10} {:<10}",
                        t.name, t.id, t.body_backend, t.inbox
                    );
                }
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `crewbus team add`: a team on JetStream is created on the default backend, its streams are
/// provisioned, and only then is it moved to JetStream, so nothing is ever sent to streams that
/// do not exist. Errors: JetStream asked of a deployment without it (no `[nats]`) → `Invalid`
/// naming the backends it has; JetStream asked without `--provision` → `NotProvisioned` naming
/// the commands that provision; `--provision` without JetStream → `Invalid`; the
/// broker's refusals while provisioning (the team then exists on the default backend); as
/// [`Bus::add_team`].
async fn add_team(
    bus: &Bus,
    config: &Config,
    name: &str,
    backend: Option<BackendChoice>,
    inbox: Option<BackendChoice>,
    provision: bool,
    json: bool,
) -> BusResult<Team> {
    let jetstream = [backend, inbox].contains(&Some(BackendChoice::Jetstream));
    if !jetstream {
        if provision {
            return Err(BusError::invalid(
                "--provision provisions JetStream streams: use it with --backend jetstream or \
                 --inbox jetstream",
            ));
        }
        return bus
            .add_team(name, backend.map(|b| b.name()), inbox.map(|b| b.name()))
            .await;
    }
    // A deployment without JetStream is told so first: provisioning would not help.
    let default = bus.default_backend();
    let backend = backend.map_or(default, |b| b.name());
    let inbox = inbox.map_or(default, |b| b.name());
    bus.check_backend(backend)?;
    bus.check_backend(inbox)?;
    if !provision {
        return Err(BusError::NotProvisioned {
            what: format!("JetStream streams of the new team `{name}`"),
            remedy: format!(
                "add --provision (`crewbus team add {name} --backend jetstream --inbox jetstream \
                 --provision`), or run `crewbus team add {name}`, `crewbus stream provision \
                 --team {name}`, then `crewbus team set-backend {name} --backend jetstream \
                 --inbox jetstream`"
            ),
        });
    }
    // Refused before anything is created: no provisioning credential.
    let admin = crate::compose::stream_admin(config)?;
    let team = bus.add_team(name, None, None).await?;
    let provisioned = async {
        if !json {
            eprintln!("… provisioning the body stream");
        }
        admin.provision(team.id).await?;
        if !json {
            eprintln!("… provisioning the inbox stream");
        }
        admin.provision_inbox(team.id).await
    }
    .await;
    if let Err(error) = provisioned {
        eprintln!(
            "team {name} was created (id {}) on {default}, but its streams could not be \
             provisioned (the error follows); once fixed, run `crewbus stream provision --team {name}` and `crewbus team \
             set-backend {name} --backend {backend} --inbox {inbox}`",
            team.id
        );
        return Err(error);
    }
    bus.set_team_backends(team.id, backend, inbox).await
}

/// `crewbus agent add|list|revoke`: `add` and `revoke` are the oversight use cases the admin
/// API calls (`Bus::admin_add_agent`, `Bus::admin_revoke_agent`), with every team in scope.
pub async fn agent(config: Config, cmd: AgentCommand, json: bool) -> BusResult<ExitCode> {
    let bus = operator_bus(&config).await?;
    match cmd {
        AgentCommand::Add { team, name } => {
            let team = bus.find_team(&team).await?;
            let new = bus
                .admin_add_agent(&OperatorScope::Everything, team.id, &name)
                .await?;
            if json {
                let mut v = agent_json(&new.agent);
                v["token"] = json!(new.token);
                println!("{v}");
            } else {
                println!(
                    "agent {} created in team {}: id {}",
                    name, team.name, new.agent.id
                );
                println!("token (shown once, store it now): {}", new.token);
                println!("use it as: Authorization: Bearer <token>");
            }
        }
        AgentCommand::List { team } => {
            let team = bus.find_team(&team).await?;
            let agents = bus.ports().ledger.agents(team.id).await?;
            if json {
                println!(
                    "{}",
                    serde_json::Value::Array(agents.iter().map(agent_json).collect())
                );
            } else {
                println!("{:<24} {:<36} STATUS", "NAME", "ID");
                for a in agents {
                    let status = match (a.revoked(), a.is_human()) {
                        (true, _) => "revoked",
                        (false, true) => "human member",
                        (false, false) => "active",
                    };
                    println!("{:<24} {:<36} {status}", a.name, a.id);
                }
            }
        }
        AgentCommand::Revoke { team, agent } => {
            let team = bus.find_team(&team).await?;
            let a = bus.find_agent(team.id, &agent).await?;
            let a = bus
                .admin_revoke_agent(&OperatorScope::Everything, team.id, a.id)
                .await?;
            if json {
                println!("{}", agent_json(&a));
            } else {
                println!(
                    "agent {} revoked: its token is refused from now on (by a running server within \
                     bus.token_cache_ms, at most 1 s)",
                    a.name
                );
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn operator_json(o: &Operator) -> serde_json::Value {
    json!({
        "id": o.id,
        "name": o.name,
        "teams": match &o.scope {
            OperatorScope::Everything => serde_json::Value::Null,
            OperatorScope::Teams(t) => json!(t),
        },
        "created_at": o.created_at,
        "revoked_at": o.revoked_at,
    })
}

/// `crewbus operator add|list|revoke`: operators beside the running server (the embedded store
/// or Postgres), through the same use cases as the admin API.
pub async fn operator(config: Config, cmd: OperatorCommand, json: bool) -> BusResult<ExitCode> {
    let bus = operator_bus(&config).await?;
    match cmd {
        OperatorCommand::Add { name, teams } => {
            let new = bus.add_operator(&name, &teams).await?;
            if json {
                let mut v = operator_json(&new.operator);
                v["token"] = json!(new.token);
                println!("{v}");
            } else {
                let scope = if teams.is_empty() {
                    "every team".to_owned()
                } else {
                    let mut named = teams.clone();
                    named.sort();
                    named.dedup();
                    format!("team(s) {}", named.join(", "))
                };
                println!(
                    "operator {} created: id {}, sees {scope}",
                    new.operator.name, new.operator.id
                );
                println!("token (shown once, store it now): {}", new.token);
                println!(
                    "use it to sign in to the console (/console/sign-in on your server's address; \
                     with this configuration's listen address {}/console/sign-in), or as \
                     Authorization: Bearer <token> on /v1/admin/…",
                    crate::cli::dev_team::local_url(config.listen)
                );
            }
        }
        OperatorCommand::List => {
            let operators = bus.operators().await?;
            let teams = bus.ports().ledger.teams().await?;
            let name_of = |id: &crewbus_domain::Uuid| {
                teams
                    .iter()
                    .find(|t| t.id == *id)
                    .map_or_else(|| id.to_string(), |t| t.name.clone())
            };
            if json {
                println!(
                    "{}",
                    serde_json::Value::Array(operators.iter().map(operator_json).collect())
                );
            } else if operators.is_empty() {
                println!("no operators yet: `crewbus operator add NAME`");
            } else {
                println!("{:<24} {:<36} {:<8} TEAMS", "NAME", "ID", "STATUS");
                for o in operators {
                    let status = if o.revoked() { "revoked" } else { "active" };
                    let scope = match &o.scope {
                        OperatorScope::Everything => "every team".to_owned(),
                        OperatorScope::Teams(t) => {
                            t.iter().map(name_of).collect::<Vec<_>>().join(", ")
                        }
                    };
                    println!("{:<24} {:<36} {status:<8} {scope}", o.name, o.id);
                }
            }
        }
        OperatorCommand::Revoke { operator } => {
            let found = bus.find_operator(&operator).await?;
            let o = bus.revoke_operator(found.id).await?;
            if json {
                println!("{}", operator_json(&o));
            } else if let Some(at) = found.revoked_at {
                println!("operator {} was already revoked (at {at})", o.name);
            } else {
                println!(
                    "operator {} revoked: its token, sign-in codes and console sessions stop working now",
                    o.name
                );
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `crewbus stream …`.
pub async fn stream(config: Config, cmd: StreamCommand, json: bool) -> BusResult<ExitCode> {
    crate::cli::streams::run(config, cmd, json).await
}

/// `crewbus health`: asks a running server.
pub async fn health(config: Config, args: HealthArgs, json: bool) -> BusResult<ExitCode> {
    let base = args
        .url
        .unwrap_or_else(|| format!("http://{}", config.listen));
    let url = format!("{}/health", base.trim_end_matches('/'));
    // Longer than the server's own bound on the probe, so a slow ledger is reported by the
    // server (503, `ledger unavailable`) rather than by this client giving up first.
    let wait = std::time::Duration::from_millis(config.bus.health_timeout_ms)
        + std::time::Duration::from_secs(5);
    let client = reqwest::Client::builder()
        .timeout(wait)
        .build()
        .map_err(|e| BusError::unavailable_from("HTTP client", e))?;
    let response = client
        .get(&url)
        .send()
        .await
        .map_err(|e| BusError::unavailable_from(format!("no answer from {base}"), e))?;
    let status = response.status();
    let body: serde_json::Value = response
        .json()
        .await
        .map_err(|e| BusError::unavailable_from("health answer is not JSON", e))?;
    if json {
        println!("{body}");
    } else {
        println!(
            "{base}: {} (ledger {}, broker {})",
            body["status"].as_str().unwrap_or("?"),
            body["ledger"].as_str().unwrap_or("?"),
            body["broker"].as_str().unwrap_or("?"),
        );
        if let Some(p) = body["publication_pending"].as_u64() {
            println!(
                "  publications pending {p}, failed {}, oldest pending {:.1} s; inbox events pending {}",
                body["publication_failed"].as_u64().unwrap_or(0),
                body["oldest_pending_age_seconds"].as_f64().unwrap_or(0.0),
                body["inbox_events_pending"].as_u64().unwrap_or(0),
            );
        }
    }
    Ok(if status.is_success() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
