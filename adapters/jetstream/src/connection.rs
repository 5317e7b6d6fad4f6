//! Opening a connection to the broker with the configured credential.

use async_nats::{Client, ConnectOptions, jetstream};
use crewbus_domain::{BusError, BusResult};

use crate::config::{Config, Credential};
use crate::errors::{Failure, Op, bus_error};

/// Opens one connection with `config`'s servers and credential, bounded by its request timeout.
///
/// Errors: a refused credential → `Unauthenticated`; no server reachable within the timeout →
/// `Unavailable`/`Timeout`; an unreadable creds file → `Invalid`.
pub(crate) async fn open(config: &Config) -> BusResult<Client> {
    let mut options = ConnectOptions::new()
        .name("crewbus")
        .connection_timeout(config.request_timeout)
        .request_timeout(Some(config.request_timeout));
    options = match &config.credential {
        Credential::None => options,
        Credential::CredsFile(path) => options
            .credentials_file(path)
            .await
            .map_err(|_| BusError::invalid("the NATS creds file cannot be read"))?,
        Credential::UserPassword { user, password } => {
            options.user_and_password(user.clone(), password.expose().to_owned())
        }
        Credential::Token(token) => options.token(token.expose().to_owned()),
    };
    let servers: Vec<async_nats::ServerAddr> = config
        .servers
        .iter()
        .map(|s| s.parse())
        .collect::<Result<_, _>>()
        .map_err(|_| BusError::invalid("a NATS server URL is malformed"))?;
    // connect() itself is bounded by connection_timeout per attempt; bound the whole call too.
    match tokio::time::timeout(config.request_timeout, options.connect(servers)).await {
        Ok(Ok(client)) => Ok(client),
        Ok(Err(e)) => Err(bus_error(
            Op::Request,
            "connecting to NATS",
            Failure::from(e),
        )),
        Err(_) => Err(BusError::timeout("connecting to NATS")),
    }
}

/// A JetStream context on `client` whose requests are bounded by the request timeout.
pub(crate) fn context(client: Client, config: &Config) -> jetstream::Context {
    jetstream::ContextBuilder::new()
        .timeout(config.request_timeout)
        .build(client)
}
