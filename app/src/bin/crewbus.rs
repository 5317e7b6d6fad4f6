//! The `crewbus` binary: parses the command line, loads the configuration and runs the command
//! (`crewbus mcp` and `crewbus hook` load none: they are clients of a running server).

use std::process::ExitCode;

use clap::Parser;
use crewbus::cli::{Cli, Command};
use crewbus::config::Config;

fn main() -> ExitCode {
    // `crewbus hook` parses its own arguments: a hook must exit 0 on any failure, an unknown
    // flag included (clap's exit 2 would keep a Claude Code session running), and reads no
    // configuration file or CREWBUS_* variable.
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if let Some(rest) = crewbus::cli::hook::dispatched(&args) {
        return crewbus::cli::hook::main(rest);
    }
    let cli = Cli::parse_from(args);
    if let Command::Mcp(args) = cli.command {
        // stdout is the MCP stdio transport: nothing else may write to it, and no configuration
        // file or CREWBUS_* variable concerns the bridge.
        return crewbus::mcp_bridge::main(args);
    }
    if let Command::Connect(cmd) = &cli.command
        && cmd.before_configuration()
        && let crewbus::cli::connect::ConnectCommand::Headers(args) = cmd
    {
        // Run by Claude Code in the project directory: no crewbus.toml there concerns it.
        return crewbus::cli::connect::headers(args);
    }
    let mut config = match Config::load(cli.config.as_deref()).and_then(|c| cli.apply(c)) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("crewbus: {e}");
            return ExitCode::from(2);
        }
    };
    crewbus::logging::init(&config.log);
    // The embedded store: `serve` creates and locks its data directory (and its push master
    // key, which the configuration check below then reads); every other command opens it
    // beside the running server and refuses a missing one.
    let prepared = match crewbus::embedded::prepare(&cli.command, &mut config) {
        Ok(p) => p,
        Err(e) => return fail(&anyhow::Error::new(e)),
    };
    // What only the composition can check (push destinations and their secrets, the key ring,
    // the listener URL) is configuration too: refused here, exit 2, for every command that
    // composes the bus.
    if cli.command.composes()
        && let Err(e) = crewbus::compose::check_configuration(&config)
    {
        eprintln!("crewbus: {e}");
        return ExitCode::from(2);
    }
    let runtime = match crewbus::cli::runtime("crewbus") {
        Ok(r) => r,
        Err(code) => return code,
    };
    match runtime.block_on(run(cli, config, prepared)) {
        Ok(code) => code,
        Err(e) => fail(&e),
    }
}

/// Reports a command's failure (`--json`: `{"error": {code, message}}` on stdout, else a line on
/// stderr) and returns exit code 1.
fn fail(e: &anyhow::Error) -> ExitCode {
    let message = message(e);
    if cli_json_requested() {
        let code = e
            .downcast_ref::<crewbus_domain::BusError>()
            .map_or("internal", crewbus_domain::BusError::code);
        println!(
            "{}",
            serde_json::json!({"error": {"code": code, "message": message}})
        );
    } else {
        eprintln!("crewbus: {message}");
    }
    ExitCode::FAILURE
}

/// The chain of an error's messages, down to the first `BusError`: a `BusError`'s message is
/// written for people, its sources (a driver's or broker's text) are for the logs.
fn message(e: &anyhow::Error) -> String {
    let mut parts = Vec::new();
    for cause in e.chain() {
        parts.push(cause.to_string());
        if cause.is::<crewbus_domain::BusError>() {
            break;
        }
    }
    parts.join(": ")
}

fn cli_json_requested() -> bool {
    std::env::args().any(|a| a == "--json")
}

async fn run(
    cli: Cli,
    config: Config,
    prepared: Option<crewbus::embedded::Prepared>,
) -> anyhow::Result<ExitCode> {
    let json = cli.json;
    match cli.command {
        Command::Serve(args) => Ok(crewbus::commands::serve(config, args, prepared, json).await?),
        Command::Migrate => Ok(crewbus::commands::migrate(config, json).await?),
        Command::Team(cmd) => Ok(crewbus::commands::team(config, cmd, json).await?),
        Command::Agent(cmd) => Ok(crewbus::commands::agent(config, cmd, json).await?),
        Command::Operator(cmd) => Ok(crewbus::commands::operator(config, cmd, json).await?),
        Command::Stream(cmd) => Ok(crewbus::commands::stream(config, cmd, json).await?),
        Command::Health(args) => Ok(crewbus::commands::health(config, args, json).await?),
        Command::Backup(args) => Ok(crewbus::commands::backup(config, args, json).await?),
        Command::Push(cmd) => Ok(crewbus::push_commands::push(config, cmd, json).await?),
        Command::Lease(cmd) => Ok(crewbus::lease_commands::lease(config, cmd, json).await?),
        Command::Search(args) => Ok(crewbus::search_command::search(config, args, json).await?),
        Command::Connect(cmd) => crewbus::cli::connect::run(config, cmd, json).await,
        Command::Mcp(_) => unreachable!("`crewbus mcp` runs before the configuration is loaded"),
        Command::Hook(_) => unreachable!("`crewbus hook` runs before the configuration is loaded"),
    }
}
