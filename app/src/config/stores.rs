//! The stores' sections: `[database]` (Postgres) and `[nats]` (JetStream), and the body backends
//! a team can choose.

use std::fmt;
use std::path::PathBuf;

use crewbus_domain::Secret;
use serde::Deserialize;

use super::redact_url;

/// A body backend a team can use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum BackendChoice {
    /// In-process memory (forgets everything on stop).
    Memory,
    /// SQLite, in the embedded store's own file (stored in the send transaction).
    Sqlite,
    /// Postgres, in the ledger's own database (stored in the send transaction).
    Postgres,
    /// NATS JetStream (the team's streams come from `team add --provision` or `crewbus stream
    /// provision`).
    Jetstream,
}

impl BackendChoice {
    /// The backend's registry name.
    pub fn name(self) -> &'static str {
        match self {
            BackendChoice::Memory => "memory",
            BackendChoice::Sqlite => "sqlite",
            BackendChoice::Postgres => "postgres",
            BackendChoice::Jetstream => "jetstream",
        }
    }
}

/// Postgres connection settings.
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DatabaseConfig {
    /// Connection URL, e.g. `postgres://crewbus:PASSWORD@127.0.0.1:5432/crewbus`
    /// (`CREWBUS_DATABASE__URL`). Never printed with its password.
    pub url: Secret,
    /// Largest number of pooled connections. Default 10.
    #[serde(default = "default_max_connections")]
    pub max_connections: u32,
    /// Apply pending migrations when `serve` starts. Default true (`crewbus migrate` applies them
    /// explicitly).
    #[serde(default = "yes")]
    pub migrate_on_start: bool,
    /// Where the wake-up listener connects (`LISTEN` needs a session of its own: one dedicated
    /// connection per server, outside the pool). Set it to the database itself when `url` goes
    /// through a transaction-pooling proxy. Default: `url`. Never printed with its password.
    #[serde(default)]
    pub listen_url: Option<Secret>,
}

fn default_max_connections() -> u32 {
    10
}

fn yes() -> bool {
    true
}

impl fmt::Debug for DatabaseConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DatabaseConfig")
            .field("url", &redact_url(self.url.expose()))
            .field("max_connections", &self.max_connections)
            .field("migrate_on_start", &self.migrate_on_start)
            .field(
                "listen_url",
                &self.listen_url.as_ref().map(|u| redact_url(u.expose())),
            )
            .finish()
    }
}

/// NATS JetStream settings. The server uses the runtime credential; operator commands
/// (`crewbus stream …`) use the provisioning credential.
#[derive(Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NatsConfig {
    /// Server URLs. Default `["nats://127.0.0.1:4222"]`.
    pub servers: Vec<String>,
    /// The runtime credential (publish, read, consume, ack; never create or delete streams).
    pub runtime: NatsCredential,
    /// The provisioning credential (create, update and delete streams); operator commands only.
    pub provisioning: NatsCredential,
    /// Stream replicas (1 for a single server, 3 in production). Default 1.
    pub replicas: u32,
    /// Body stream quota: largest number of messages. Default 1 000 000.
    pub body_max_messages: u64,
    /// Body stream quota in bytes (at least 2 MiB). Default 1 GiB.
    pub body_max_bytes: u64,
    /// Inbox stream quota: largest number of references. Default 1 000 000.
    pub inbox_max_messages: u64,
    /// Inbox stream quota in bytes (at least 1 MiB). Default 256 MiB.
    pub inbox_max_bytes: u64,
    /// Request timeout in milliseconds. Default 5000.
    pub request_timeout_ms: u64,
    /// Prefix of stream and subject names. Default `crewbus`.
    pub prefix: String,
}

impl Default for NatsConfig {
    fn default() -> Self {
        NatsConfig {
            servers: vec!["nats://127.0.0.1:4222".to_owned()],
            runtime: NatsCredential::default(),
            provisioning: NatsCredential::default(),
            replicas: 1,
            body_max_messages: 1_000_000,
            body_max_bytes: 1 << 30,
            inbox_max_messages: 1_000_000,
            inbox_max_bytes: 256 << 20,
            request_timeout_ms: 5_000,
            prefix: "crewbus".to_owned(),
        }
    }
}

impl fmt::Debug for NatsConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let servers: Vec<String> = self.servers.iter().map(|s| redact_url(s)).collect();
        f.debug_struct("NatsConfig")
            .field("servers", &servers)
            .field("runtime", &self.runtime)
            .field("provisioning", &self.provisioning)
            .field("replicas", &self.replicas)
            .field("body_max_messages", &self.body_max_messages)
            .field("body_max_bytes", &self.body_max_bytes)
            .field("inbox_max_messages", &self.inbox_max_messages)
            .field("inbox_max_bytes", &self.inbox_max_bytes)
            .field("request_timeout_ms", &self.request_timeout_ms)
            .field("prefix", &self.prefix)
            .finish()
    }
}

/// One NATS credential: a user and password, a token, or a `.creds` file. All optional (an
/// unauthenticated server needs none).
#[derive(Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NatsCredential {
    /// User name.
    pub user: Option<String>,
    /// Password (with `user`).
    pub password: Option<Secret>,
    /// Token.
    pub token: Option<Secret>,
    /// Path of a `.creds` file (JWT + nkey seed).
    pub creds_file: Option<PathBuf>,
}

impl fmt::Debug for NatsCredential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NatsCredential")
            .field("user", &self.user)
            .field("password", &self.password.as_ref().map(|_| "[redacted]"))
            .field("token", &self.token.as_ref().map(|_| "[redacted]"))
            .field("creds_file", &self.creds_file)
            .finish()
    }
}
