//! Configuration: one TOML file plus `CREWBUS_*` environment overrides.
//!
//! Sources, later ones winning: the embedded default (the embedded SQLite store, listening on
//! `127.0.0.1:7700`), the TOML file (`--config PATH`, else `CREWBUS_CONFIG`, else `crewbus.toml`
//! in the working directory when it exists), then environment variables `CREWBUS_<KEY>` where a
//! nested key is joined with `__` (`CREWBUS_DATABASE__URL`, `CREWBUS_BUS__RELAY_BATCH`).
//! `crewbus.example.toml` at the repository root documents every key.
//!
//! Secrets (the database URL's password, NATS credentials) are [`Secret`]s: `Debug` never prints
//! them, and URLs are printed with the password replaced by `***`.

use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use crewbus_domain::{BusError, BusResult, MAX_BODY_BYTES, Secret, TenantId};
use figment::Figment;
use figment::providers::{Env, Format, Toml};
use serde::Deserialize;

use crate::push::PushSettings;

mod bus;
mod console;
mod http;
mod rate_limit;
mod storage;
mod stores;

pub use bus::{BusConfig, MAX_TOKEN_CACHE_MS};
pub use console::ConsoleConfig;
pub use http::AllowList;
pub use rate_limit::{RateLimitConfig, RateLimits, TeamRateLimit};
pub use storage::{
    DATABASE_FILE, LOCK_FILE, MASTER_KEY_FILE, StorageConfig, StorageKind, database_path,
};
pub use stores::{BackendChoice, DatabaseConfig, NatsConfig, NatsCredential};

/// The default listen address of `crewbus serve`.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:7700";

/// The whole configuration. Every field has a default; an empty file is the embedded default.
#[derive(Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Address `crewbus serve` listens on (`CREWBUS_LISTEN`). Default `127.0.0.1:7700`.
    pub listen: SocketAddr,
    /// The deployment's tenant name. Default `default`.
    pub tenant: TenantId,
    /// The store (`[storage]`): the embedded SQLite store in the data directory by default,
    /// `memory` for a store that forgets on stop, Postgres when `[database]` is present.
    pub storage: StorageConfig,
    /// Postgres: when present, the ledger, journal, inbox and bodies are Postgres.
    pub database: Option<DatabaseConfig>,
    /// NATS JetStream: when present, teams may use JetStream bodies and inboxes (opt-in per team,
    /// once an operator provisioned the team's streams).
    pub nats: Option<NatsConfig>,
    /// Bus tuning: body limit, relay, hand-outs, retention.
    pub bus: BusConfig,
    /// Logging.
    pub log: LogConfig,
    /// The operator push outbox (`[push]`): destinations (credentials and signing keys only from
    /// named environment variables or files), the key ring sealing credentials at rest, delivery
    /// tuning, `allow_unsealed`. Default: no destinations.
    pub push: PushSettings,
    /// The serve listener (`[http]`): which `Host` and `Origin` values every route accepts
    /// beyond loopback.
    pub http: AllowList,
    /// The older name of `[http]`'s lists, from when only the MCP endpoint checked them: still
    /// read, and merged into `[http]` (see [`Config::allow_list`]).
    pub mcp: AllowList,
    /// The operator console (`[console]`).
    pub console: ConsoleConfig,
    /// The send rate limit per agent (`[rate_limit]`; off by default).
    pub rate_limit: RateLimitConfig,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            listen: DEFAULT_LISTEN
                .parse()
                .expect("default listen address parses"),
            tenant: TenantId::default_tenant(),
            storage: StorageConfig::default(),
            database: None,
            nats: None,
            bus: BusConfig::default(),
            log: LogConfig::default(),
            push: PushSettings::default(),
            http: AllowList::default(),
            mcp: AllowList::default(),
            console: ConsoleConfig::default(),
            rate_limit: RateLimitConfig::default(),
        }
    }
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Config")
            .field("listen", &self.listen)
            .field("tenant", &self.tenant)
            .field("storage", &self.storage)
            .field("database", &self.database)
            .field("nats", &self.nats)
            .field("bus", &self.bus)
            .field("log", &self.log)
            .field("push", &self.push)
            .field("http", &self.http)
            .field("mcp", &self.mcp)
            .field("console", &self.console)
            .field("rate_limit", &self.rate_limit)
            .finish()
    }
}

/// Logging.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LogConfig {
    /// Directives such as `info` or `crewbus=debug,info` (`CREWBUS_LOG__LEVEL`). Default `info`.
    pub level: String,
    /// `text` or `json`. Default `text`.
    pub format: String,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            level: "info".to_owned(),
            format: "text".to_owned(),
        }
    }
}

/// The largest `bus.max_http_connections` accepted.
const MAX_CONNECTIONS: usize = 1_000_000;

/// The longest duration a `bus.*_ms` key accepts: one day, in milliseconds.
const MAX_DURATION_MS: u64 = 86_400_000;

impl Config {
    /// Loads the configuration: embedded default ← `path` (or `CREWBUS_CONFIG`, or `./crewbus.toml`
    /// when it exists) ← `CREWBUS_*` variables, except `CREWBUS_CONFIG`, `CREWBUS_MCP_TOKEN`, `CREWBUS_TOKEN` and
    /// those the configuration names as a secret's source (a `*_env` key, or `env` of a secret
    /// source). Errors: a named file that does not exist, bad TOML, an unknown key or a wrong
    /// type → `Invalid` naming the key — and the variable, when it came from one — never a
    /// value.
    pub fn load(path: Option<&Path>) -> BusResult<Config> {
        let mut figment = Figment::new();
        let file = path
            .map(Path::to_path_buf)
            .or_else(|| std::env::var_os("CREWBUS_CONFIG").map(PathBuf::from));
        match file {
            Some(file) => {
                if !file.exists() {
                    return Err(BusError::invalid(format!(
                        "configuration file {} does not exist",
                        file.display()
                    )));
                }
                figment = figment.merge(Toml::file(file));
            }
            None => figment = figment.merge(Toml::file("crewbus.toml")),
        }
        // Not keys: the file's path, the `crewbus mcp` bridge's token (which may well be
        // exported in a server's shell), and every variable a `*_env` key (or a secret source's
        // `env`) names as where a secret comes from — `master_key_env = "CREWBUS_MASTER_KEY"`
        // names a secret, not a key `master_key`. Any other `CREWBUS_*` variable is a key, and
        // an unknown one is refused naming the variable.
        let mut ignored: Vec<String> = NOT_KEYS.iter().map(|v| (*v).to_owned()).collect();
        let first = figment.clone().merge(env_keys(&ignored));
        if let Ok(value) = first.find_value("") {
            ignored.extend(
                secret_variables(&value)
                    .into_iter()
                    .filter_map(|v| v.strip_prefix(ENV_PREFIX).map(str::to_owned)),
            );
        }
        Self::from_figment(figment.merge(env_keys(&ignored)))
    }

    /// Parses a configuration from TOML text alone (no environment), for tests and tools.
    pub fn from_toml(text: &str) -> BusResult<Config> {
        Self::from_figment(Figment::new().merge(Toml::string(text)))
    }

    fn from_figment(figment: Figment) -> BusResult<Config> {
        let config: Config = figment.extract().map_err(|e| {
            // figment's message names the key and the expected type; it never echoes a value
            // for the kinds of error we can get here except an unparsable scalar, so we keep
            // only the kind and the path.
            let path = e.path.join(".");
            let kind = describe_figment_kind(&e.kind);
            // An unknown top-level key is its own path: named once.
            let redundant =
                matches!(&e.kind, figment::error::Kind::UnknownField(f, _) if *f == path);
            BusError::invalid(format!(
                "configuration: {kind}{}{}{}",
                if path.is_empty() || redundant {
                    String::new()
                } else {
                    format!(" at `{path}`")
                },
                from_variable(&e)
                    .map(|v| format!(" (from the environment variable {v})"))
                    .unwrap_or_default(),
                from_file(&e)
                    .map(|f| format!(" (in {f})"))
                    .unwrap_or_default(),
            ))
        })?;
        config.validate()?;
        Ok(config)
    }

    /// Checks the values that types alone cannot: body limit within the contract, non-zero
    /// batches, a database URL that is a Postgres URL.
    pub fn validate(&self) -> BusResult<()> {
        self.rate_limit.validate()?;
        if self.bus.max_body_bytes == 0 || self.bus.max_body_bytes > MAX_BODY_BYTES {
            return Err(BusError::invalid(format!(
                "bus.max_body_bytes must be between 1 and {MAX_BODY_BYTES}"
            )));
        }
        if self.bus.send_batch_max == 0 || self.bus.send_batch_max_bytes == 0 {
            return Err(BusError::invalid(
                "bus.send_batch_max and bus.send_batch_max_bytes must be at least 1",
            ));
        }
        if self.bus.relay_batch == 0 || self.bus.reference_batch == 0 || self.bus.max_fetch == 0 {
            return Err(BusError::invalid(
                "bus.relay_batch, bus.reference_batch and bus.max_fetch must be at least 1",
            ));
        }
        if self.bus.relay_lease_ms == 0
            || self.bus.idle_poll_ms == 0
            || self.bus.request_body_timeout_ms == 0
            || self.bus.health_timeout_ms == 0
        {
            return Err(BusError::invalid(
                "bus.relay_lease_ms, bus.idle_poll_ms, bus.request_body_timeout_ms and \
                 bus.health_timeout_ms must be at least 1",
            ));
        }
        if self.bus.request_timeout_ms == 0 || self.bus.request_timeout_ms > 300_000 {
            return Err(BusError::invalid(
                "bus.request_timeout_ms must be between 1 and 300000 (5 minutes)",
            ));
        }
        if !(1_000..=86_400_000).contains(&self.bus.lease_max_ttl_ms)
            || self.bus.lease_default_ttl_ms < 1_000
            || self.bus.lease_default_ttl_ms > self.bus.lease_max_ttl_ms
        {
            return Err(BusError::invalid(
                "bus.lease_max_ttl_ms must be between 1000 and 86400000 (one day), and \
                 bus.lease_default_ttl_ms between 1000 and bus.lease_max_ttl_ms",
            ));
        }
        if self.bus.header_read_timeout_ms == 0 {
            return Err(BusError::invalid(
                "bus.header_read_timeout_ms must be at least 1",
            ));
        }
        if self.bus.max_http_connections == 0 || self.bus.max_http_connections > MAX_CONNECTIONS {
            return Err(BusError::invalid(format!(
                "bus.max_http_connections must be between 1 and {MAX_CONNECTIONS}"
            )));
        }
        // Durations beyond a day are refused rather than left to overflow an instant.
        let b = &self.bus;
        for (key, ms) in [
            ("relay_lease_ms", b.relay_lease_ms),
            ("idle_poll_ms", b.idle_poll_ms),
            ("backoff_base_ms", b.backoff_base_ms),
            ("backoff_cap_ms", b.backoff_cap_ms),
            ("handout_grace_ms", b.handout_grace_ms),
            ("topup_after_ms", b.topup_after_ms),
            ("request_body_timeout_ms", b.request_body_timeout_ms),
            ("header_read_timeout_ms", b.header_read_timeout_ms),
            ("shutdown_grace_ms", b.shutdown_grace_ms),
            ("health_timeout_ms", b.health_timeout_ms),
            (
                "retention_interval_s (in ms)",
                b.retention_interval_s.saturating_mul(1_000),
            ),
        ] {
            if ms > MAX_DURATION_MS {
                return Err(BusError::invalid(format!(
                    "bus.{key} must be at most {MAX_DURATION_MS} (one day)"
                )));
            }
        }
        if let Some(db) = &self.database {
            for (key, url) in [
                ("url", Some(&db.url)),
                ("listen_url", db.listen_url.as_ref()),
            ] {
                if let Some(url) = url.map(Secret::expose)
                    && !(url.starts_with("postgres://") || url.starts_with("postgresql://"))
                {
                    return Err(BusError::invalid(format!(
                        "database.{key} must start with postgres:// or postgresql://"
                    )));
                }
                // The URL itself is never echoed (it may hold a password).
                if let Some(url) = url.map(Secret::expose)
                    && url.parse::<sqlx::postgres::PgConnectOptions>().is_err()
                {
                    return Err(BusError::invalid(format!(
                        "database.{key} does not parse as postgres://user:password@host:port/database"
                    )));
                }
            }
        }
        if self.bus.token_cache_ms > bus::MAX_TOKEN_CACHE_MS {
            return Err(BusError::invalid(format!(
                "bus.token_cache_ms must be at most {} (1 s: how long a revoked token may still \
                 authenticate); 0 disables the token cache",
                bus::MAX_TOKEN_CACHE_MS
            )));
        }
        if self.bus.max_body_bytes_in_flight < MAX_BODY_BYTES {
            return Err(BusError::invalid(format!(
                "bus.max_body_bytes_in_flight must be at least {MAX_BODY_BYTES} (one body)"
            )));
        }
        if self.bus.max_fetch_bytes < MAX_BODY_BYTES
            || self.bus.max_fetch_bytes > self.bus.max_body_bytes_in_flight
        {
            return Err(BusError::invalid(format!(
                "bus.max_fetch_bytes must be between {MAX_BODY_BYTES} (one body) and \
                 bus.max_body_bytes_in_flight ({})",
                self.bus.max_body_bytes_in_flight
            )));
        }
        if self.bus.max_wait_ms > 300_000 {
            return Err(BusError::invalid(
                "bus.max_wait_ms must be at most 300000 (5 minutes)",
            ));
        }
        if let Some(nats) = &self.nats
            && nats.servers.is_empty()
        {
            return Err(BusError::invalid(
                "nats.servers must name at least one server",
            ));
        }
        if self.push.poll_ms == 0 || self.push.timeout_ms == 0 || self.push.concurrency == 0 {
            return Err(BusError::invalid(
                "push.poll_ms, push.timeout_ms and push.concurrency must be at least 1",
            ));
        }
        if !crate::push::ATTEMPTS_KEPT.contains(&self.push.attempts_kept) {
            return Err(BusError::invalid(format!(
                "push.attempts_kept must be between {} and {}",
                crate::push::ATTEMPTS_KEPT.start(),
                crate::push::ATTEMPTS_KEPT.end()
            )));
        }
        if !crate::push::ATTEMPTS_KEPT_DAYS.contains(&self.push.attempts_kept_days) {
            return Err(BusError::invalid(format!(
                "push.attempts_kept_days must be between {} and {}",
                crate::push::ATTEMPTS_KEPT_DAYS.start(),
                crate::push::ATTEMPTS_KEPT_DAYS.end()
            )));
        }
        if self
            .log
            .level
            .parse::<tracing_subscriber::filter::Targets>()
            .is_err()
        {
            return Err(BusError::invalid(
                "log.level must be a directive list such as `info` or `crewbus=debug,info`",
            ));
        }
        if !matches!(self.log.format.as_str(), "text" | "json") {
            return Err(BusError::invalid("log.format must be `text` or `json`"));
        }
        self.http.validate("http")?;
        self.mcp.validate("mcp")?;
        if !ConsoleConfig::SESSION_IDLE_S.contains(&self.console.session_idle_s) {
            return Err(BusError::invalid(format!(
                "console.session_idle_s must be between {} and {} (seconds)",
                ConsoleConfig::SESSION_IDLE_S.start(),
                ConsoleConfig::SESSION_IDLE_S.end()
            )));
        }
        self.storage.validate()?;
        self.store()?;
        Ok(())
    }

    /// The listener's allow list: `[http]` with the older `[mcp]` lists merged in.
    pub fn allow_list(&self) -> AllowList {
        self.http.merged(&self.mcp)
    }

    /// The store this configuration selects ([`StorageConfig::resolve`]). Errors: a
    /// contradiction between `storage.kind` and `[database]` → `Invalid`.
    pub fn store(&self) -> BusResult<StorageKind> {
        self.storage.resolve(self.database.is_some())
    }

    /// A one-line description of which adapters this configuration selects, for logs and the
    /// CLI (no secrets).
    pub fn describe(&self) -> String {
        let ledger = self.store().map_or("invalid", StorageKind::name);
        let nats = match &self.nats {
            Some(n) => format!(
                "jetstream available at {}",
                n.servers
                    .iter()
                    .map(|s| redact_url(s))
                    .collect::<Vec<_>>()
                    .join(",")
            ),
            None => "no jetstream".to_owned(),
        };
        format!("ledger={ledger} inbox={ledger} bodies={ledger} ({nats})")
    }
}

/// The prefix of the variables read as configuration keys.
const ENV_PREFIX: &str = "CREWBUS_";

/// `CREWBUS_*` variables that are never configuration keys (without the prefix): the file's
/// path, the `crewbus mcp` bridge's token and the agent token of `crewbus lease check`.
pub const NOT_KEYS: [&str; 3] = ["CONFIG", "MCP_TOKEN", "TOKEN"];

/// The `CREWBUS_*` variables as keys (nested keys joined with `__`), but `ignored` (names
/// without the prefix, any case).
fn env_keys(ignored: &[String]) -> Env {
    let ignored: Vec<&str> = ignored.iter().map(String::as_str).collect();
    Env::prefixed(ENV_PREFIX)
        .ignore(&ignored)
        .split("__")
        .lowercase(true)
}

/// Every environment variable the configuration names as a secret's source: the string value
/// of any key ending in `_env` (`master_key_env`) and of any key `env` (a secret source
/// `{ env = "…" }`), anywhere in the tree.
fn secret_variables(value: &figment::value::Value) -> Vec<String> {
    use figment::value::Value;
    let mut found = Vec::new();
    let mut stack = vec![value];
    while let Some(v) = stack.pop() {
        match v {
            Value::Dict(_, dict) => {
                for (key, v) in dict {
                    if (key == "env" || key.ends_with("_env"))
                        && let Value::String(_, name) = v
                    {
                        found.push(name.to_ascii_uppercase());
                    }
                    stack.push(v);
                }
            }
            Value::Array(_, items) => stack.extend(items),
            _ => {}
        }
    }
    found
}

/// The environment variable an error came from, when it came from one (`CREWBUS_X__Y`).
fn from_variable(e: &figment::Error) -> Option<String> {
    let metadata = e.metadata.as_ref()?;
    if !metadata.name.contains("environment") {
        return None;
    }
    // The key's path, as `env_keys` splits a variable name: nested keys joined with `__`.
    (!e.path.is_empty()).then(|| {
        let keys: Vec<String> = e.path.iter().map(|k| k.to_ascii_uppercase()).collect();
        format!("{ENV_PREFIX}{}", keys.join("__"))
    })
}

/// The file an error came from, when it came from one (its path as given).
fn from_file(e: &figment::Error) -> Option<String> {
    let source = e.metadata.as_ref()?.source.as_ref()?;
    source.file_path().map(|p| p.display().to_string())
}

fn describe_figment_kind(kind: &figment::error::Kind) -> String {
    use figment::error::Kind;
    match kind {
        Kind::Message(m) => without_source_excerpt(m),
        Kind::InvalidType(actual, expected) => {
            format!("expected {expected}, found {}", actual_kind(actual))
        }
        Kind::InvalidValue(actual, expected) => {
            format!("expected {expected}, found {}", actual_kind(actual))
        }
        Kind::InvalidLength(len, expected) => format!("length {len}, expected {expected}"),
        Kind::UnknownVariant(v, expected) => {
            format!("unknown variant `{v}`, expected one of {expected:?}")
        }
        Kind::UnknownField(field, _) => format!("unknown key `{field}`"),
        Kind::MissingField(field) => format!("missing key `{field}`"),
        Kind::DuplicateField(field) => format!("duplicate key `{field}`"),
        Kind::ISizeOutOfRange(_) | Kind::USizeOutOfRange(_) => "number out of range".to_owned(),
        Kind::Unsupported(actual) => format!("unsupported {}", actual_kind(actual)),
        Kind::UnsupportedKey(actual, _) => format!("unsupported key {}", actual_kind(actual)),
    }
}

/// A parser message without the excerpt of the file it quotes: a TOML syntax error shows the
/// offending line (`2 | url = "postgres://u:hunter2@…`), which may hold a secret. Keeps the
/// position line and the reason; drops every excerpt line (` |`, `N |`, and the `^` marker).
fn without_source_excerpt(message: &str) -> String {
    let is_excerpt = |line: &str| {
        let t = line.trim_start_matches(|c: char| c.is_ascii_digit() || c == ' ');
        t.starts_with('|')
    };
    message
        .lines()
        .filter(|l| !l.trim().is_empty() && !is_excerpt(l))
        .map(str::trim)
        .collect::<Vec<_>>()
        .join("; ")
}

/// The kind of a value, never the value itself (it may be a secret).
fn actual_kind(actual: &figment::error::Actual) -> &'static str {
    use figment::error::Actual;
    match actual {
        Actual::Bool(_) => "a boolean",
        Actual::Unsigned(_) | Actual::Signed(_) => "an integer",
        Actual::Float(_) => "a float",
        Actual::Char(_) | Actual::Str(_) => "a string",
        Actual::Bytes(_) => "bytes",
        Actual::Unit => "unit",
        Actual::Option => "an option",
        Actual::NewtypeStruct => "a newtype",
        Actual::Seq => "a list",
        Actual::Map => "a table",
        Actual::Enum => "an enum",
        Actual::UnitVariant => "a unit variant",
        Actual::NewtypeVariant => "a newtype variant",
        Actual::TupleVariant => "a tuple variant",
        Actual::StructVariant => "a struct variant",
        Actual::Other(_) => "a value",
    }
}

/// A URL with its password (and any `password=` query or key-value parameter) replaced by
/// `***`. Used for every URL that reaches a log or `Debug`.
pub fn redact_url(url: &str) -> String {
    let mut out = match url.split_once("://") {
        Some((scheme, rest)) => {
            let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
            let (authority, tail) = rest.split_at(authority_end);
            match authority.rsplit_once('@') {
                Some((userinfo, host)) => {
                    let user = userinfo.split(':').next().unwrap_or("");
                    if userinfo.contains(':') {
                        format!("{scheme}://{user}:***@{host}{tail}")
                    } else {
                        format!("{scheme}://{user}@{host}{tail}")
                    }
                }
                None => url.to_owned(),
            }
        }
        None => url.to_owned(),
    };
    if let Some(idx) = out.to_ascii_lowercase().find("password=") {
        let start = idx + "password=".len();
        let end = out[start..]
            .find(['&', ' ', ';'])
            .map_or(out.len(), |e| start + e);
        out.replace_range(start..end, "***");
    }
    out
}

#[cfg(test)]
mod tests;
