//! Opening the pool every Postgres adapter of a process shares.

use std::str::FromStr;
use std::time::Duration;

use crewbus_domain::{BusError, BusResult, Secret};
use sqlx::PgPool;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};

use crate::error::bus_error;

/// How to reach the database. The URL may hold a password: it is a [`Secret`], and `Debug`
/// prints only the pool settings.
#[derive(Clone)]
pub struct PostgresConfig {
    /// `postgres://user:password@host:port/database?…` (libpq URL syntax).
    pub url: Secret,
    /// Most connections the pool opens (default 16).
    pub max_connections: u32,
    /// How long an operation waits for a free connection before it fails with a retryable
    /// `Unavailable` (default 5 s).
    pub acquire_timeout: Duration,
}

impl PostgresConfig {
    /// A configuration for `url` with the default pool settings.
    pub fn new(url: Secret) -> Self {
        PostgresConfig {
            url,
            max_connections: 16,
            acquire_timeout: Duration::from_secs(5),
        }
    }
}

impl std::fmt::Debug for PostgresConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresConfig")
            .field("url", &"<redacted>")
            .field("max_connections", &self.max_connections)
            .field("acquire_timeout", &self.acquire_timeout)
            .finish()
    }
}

/// Opens the pool (connecting once, so a wrong URL or a server that is down shows at start-up).
/// Apply [`crate::migrate`] next.
///
/// Errors: a URL that does not parse → `Invalid` (the URL itself is never echoed); the server
/// unreachable → `Unavailable`; refused credentials or an unknown database → the mapping of
/// its SQLSTATE (`Invalid`/`Unavailable`).
pub async fn connect(config: &PostgresConfig) -> BusResult<PgPool> {
    let url = config.url.expose();
    let invalid = || BusError::invalid("the Postgres URL does not parse as postgres://…");
    if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
        return Err(invalid());
    }
    let options = PgConnectOptions::from_str(url).map_err(|_| invalid())?;
    PgPoolOptions::new()
        .max_connections(config.max_connections)
        .acquire_timeout(config.acquire_timeout)
        .connect_with(options)
        .await
        .map_err(|e| bus_error(e, "connect"))
}

/// A `LISTEN` session on `channel` over a pool of one connection of its own (`listen`'s
/// options), used by nothing else. A lost session is reported to the caller (sqlx's
/// `try_recv` answers `None`), never replaced behind its back (no eager reconnection): the
/// wake-up and feed listeners end with `Unavailable` and are started again by the app, which logs
/// and counts the loss. Errors: the session not opened, or `LISTEN` refused → the mapped error,
/// naming `what`.
pub(crate) async fn listen_on(
    listen: &sqlx::postgres::PgConnectOptions,
    channel: &str,
    what: &str,
) -> crewbus_domain::BusResult<sqlx::postgres::PgListener> {
    let own = sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .min_connections(0)
        .connect_lazy_with(listen.clone());
    let mut listener = sqlx::postgres::PgListener::connect_with(&own)
        .await
        .map_err(|e| crate::error::bus_error(e, what))?;
    listener.eager_reconnect(false);
    listener
        .listen(channel)
        .await
        .map_err(|e| crate::error::bus_error(e, what))?;
    Ok(listener)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_never_prints_the_url() {
        let c = PostgresConfig::new(Secret::new("postgres://u:hunter2@db/x"));
        assert!(!format!("{c:?}").contains("hunter2"));
    }

    #[tokio::test]
    async fn a_bad_url_is_invalid_without_echoing_it() {
        for url in ["mysql://u:hunter2@db/x", "postgres://u:hunter2@db:port/x"] {
            let e = connect(&PostgresConfig::new(Secret::new(url)))
                .await
                .unwrap_err();
            assert!(matches!(e, BusError::Invalid { .. }), "{url}: {e:?}");
            assert!(!e.to_string().contains("hunter2"));
        }
    }

    #[tokio::test]
    async fn an_unreachable_server_is_retryable() {
        let mut c = PostgresConfig::new(Secret::new("postgres://u:hunter2@127.0.0.1:1/x"));
        c.acquire_timeout = Duration::from_secs(2);
        let e = connect(&c).await.unwrap_err();
        assert!(e.is_retryable(), "{e:?}");
        assert!(!e.to_string().contains("hunter2"));
    }
}
