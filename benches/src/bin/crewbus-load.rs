//! `crewbus-load`: the load generator (see [`crewbus_benches::load`]). Parses the command line,
//! loads the configuration (when it creates teams, it opens the servers' store beside them) and
//! runs the load; exit code 1 when the run fails or its zero-loss check does, 2 when the
//! configuration is refused.

use std::process::ExitCode;

use clap::Parser;
use crewbus::config::Config;
use crewbus_benches::load::{self, LoadCli};
use crewbus_domain::BusError;

fn main() -> ExitCode {
    let cli = LoadCli::parse();
    let mut config = match Config::load(cli.config.as_deref()).and_then(|c| cli.apply(c)) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("crewbus-load: {e}");
            return ExitCode::from(2);
        }
    };
    crewbus::logging::init(&config.log);
    if let Err(e) = load::prepare(&cli.load, &mut config) {
        return fail(cli.json, &e);
    }
    // What only the composition can check (push destinations and their secrets, the key ring)
    // is configuration too, when the run composes the bus to create its teams.
    if !cli.load.uses_tokens()
        && let Err(e) = crewbus::compose::check_configuration(&config)
    {
        eprintln!("crewbus-load: {e}");
        return ExitCode::from(2);
    }
    let runtime = match crewbus::cli::runtime("crewbus-load") {
        Ok(r) => r,
        Err(code) => return code,
    };
    match runtime.block_on(load::command(config, cli.load, cli.json)) {
        Ok(code) => code,
        Err(e) => fail(cli.json, &e),
    }
}

/// Reports the run's failure (`--json`: `{"error": {code, message}}` on stdout, else a line on
/// stderr) and returns exit code 1.
fn fail(json: bool, e: &BusError) -> ExitCode {
    if json {
        println!(
            "{}",
            serde_json::json!({"error": {"code": e.code(), "message": e.to_string()}})
        );
    } else {
        eprintln!("crewbus-load: {e}");
    }
    ExitCode::FAILURE
}
