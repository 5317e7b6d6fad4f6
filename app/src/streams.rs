//! `crewbus stream …`: operator actions on a team's JetStream streams, with the provisioning
//! credential.

use std::process::ExitCode;

use crewbus_domain::{BusError, BusResult};

use crate::cli::StreamCommand;
use crate::config::Config;

/// Runs one stream command. Errors: no `[nats]` configured → `Invalid`.
pub async fn run(config: Config, _cmd: StreamCommand, _json: bool) -> BusResult<ExitCode> {
    if config.nats.is_none() {
        return Err(BusError::invalid(
            "stream commands need [nats] with the provisioning credential",
        ));
    }
    Err(BusError::invalid(
        "JetStream is not built into this binary yet",
    ))
}
