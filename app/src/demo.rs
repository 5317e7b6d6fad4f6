//! demo
use crate::config::Config;
use crewbus_domain::BusResult;
use std::process::ExitCode;
/// Runs the demo.
pub async fn run(_c: Config, _j: bool) -> BusResult<ExitCode> {
    Ok(ExitCode::SUCCESS)
}
