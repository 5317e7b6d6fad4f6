//! The composition root: the only module that names adapters. It picks them from the
//! configuration and hands the use cases ports.
//!
//! - `[storage] kind` (see [`Config::store`]): `sqlite` — the default without `[database]` — the
//!   embedded store in the data directory for every port (a new team's default body backend is
//!   `sqlite`); `memory` for every port (nothing outlives the process).
//! - `[database]`: Postgres ledger, journal, inbox and bodies; a new team's default body backend
//!   is `postgres`.
//! - `[nats]`: JetStream bodies and inbox are available by name (`jetstream`) for teams whose
//!   streams are provisioned; the team's records choose.
//!
//! - `[push]`: the operator push outbox over the push store of the same choice (memory, SQLite,
//!   or Postgres with a database), sealed with the local key ring when one is configured — always for
//!   Postgres: a Postgres push store without `[push.key_ring]` is refused unless
//!   `push.allow_unsealed`. The delivery worker is built from the sealed outbox over the journal
//!   the ledger writes into. With neither destinations nor a key ring configured there is no push
//!   outbox (runs still work; nothing is registered).
//!
//! A conversation keeps the backend it was created with: every registry stays reachable by name.

use std::sync::Arc;

use std::time::Duration;

use crewbus_domain::{BusError, BusResult, Quotas};
use crewbus_jetstream::{Credential, JetStreamAdmin, JetStreamBackends};
use crewbus_memory::{
    BodiesConfig, InboxConfig, MemoryBackends, MemoryConfig, MemoryFeed, MemoryLedger,
    MemoryPushStore, MemoryWakeups,
};
use crewbus_ports::{
    Backends, Clock, Feed, Journal, KeyRing, Leases, Ledger, Operators, Oversight, PushStore,
    Search, SendAllowance, SystemClock, Wakeups,
};
use crewbus_postgres::{
    PostgresBackends, PostgresFeed, PostgresLedger, PostgresPushStore, PostgresSettings,
    PostgresWakeups,
};
use crewbus_sqlite::{
    SqliteBackends, SqliteConfig, SqliteLedger, SqlitePools, SqlitePushStore, SqliteSettings,
};
use sqlx::PgPool;
use sqlx::postgres::PgPoolOptions;

use crate::config::{Config, NatsConfig, NatsCredential, StorageKind};
use crate::metrics::{StoreCommits, StoreRows, StoreWrites, StoreWritesSource};
use crate::push::{DeliveryWorker, PushRuntime};
use crate::usecases::backends::CombinedBackends;
use crate::usecases::bus::{Bus, BusSettings, Ports};

/// The embedded store's start-up check ([`check_embedded_store`]): its verdict and what it took.
pub use crewbus_sqlite::{Integrity, IntegrityCheck};

/// What the composition root built.
pub struct Composed {
    /// The use cases over the chosen ports.
    pub bus: Bus,
    /// The journal of runs.
    pub journal: Arc<dyn Journal>,
    /// The push store operator tools read (`push list|parked|unpark`): the outbox's sealed store
    /// when the bus has a push outbox, else the bare store (no credential is ever printed).
    pub push_store: Arc<dyn PushStore>,
    /// A one-line description of the choice (no secrets).
    pub description: String,
}

/// The memory adapters of a composition, for tests and tools that need their fault injection.
#[derive(Clone)]
pub struct MemoryParts {
    /// The memory ledger (and journal).
    pub ledger: MemoryLedger,
    /// The memory registry (bodies and inbox per team).
    pub backends: MemoryBackends,
}

/// Builds the ports the configuration asks for, on the system clock, as a command beside the
/// server ([`Opener::Operator`]: the embedded store must exist; `serve` uses [`compose_server`]).
///
/// Errors: a database or broker that cannot be reached at start-up → `Unavailable`; bad limits →
/// `Invalid`.
pub async fn compose(config: &Config) -> BusResult<Composed> {
    compose_as(config, Opener::Operator, Arc::new(SystemClock)).await
}

/// [`compose`] for `crewbus serve`: the embedded store is created when missing and migrated
/// (the caller holds its data directory's `serve.lock`).
pub async fn compose_server(config: &Config) -> BusResult<Composed> {
    compose_as(config, Opener::Server, Arc::new(SystemClock)).await
}

/// Who opens the store, which decides what may be created and migrated on the embedded store
/// (Postgres migrates per `database.migrate_on_start` either way).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Opener {
    /// `crewbus serve`: creates the embedded store when missing and applies its migrations.
    Server,
    /// A command beside a running server (`team`, `agent`, `push`, `backup`, `crewbus-load`):
    /// creates nothing, migrates nothing, and refuses a store whose schema is not this build's.
    Operator,
}

/// The ports of `config`'s store (`storage.kind`, or `[database]`), opened as `opener`.
pub async fn compose_as(
    config: &Config,
    opener: Opener,
    clock: Arc<dyn Clock>,
) -> BusResult<Composed> {
    match config.store()? {
        StorageKind::Postgres => {
            let pool = connect(config).await?;
            postgres_with_pool(config, pool, clock).await
        }
        StorageKind::Sqlite => {
            let pools = open_sqlite(config, opener).await?;
            sqlite_with(config, pools, clock, Arc::new(MemoryWakeups::new()))
        }
        StorageKind::Memory => {
            let wakeups = Arc::new(MemoryWakeups::new());
            Ok(memory_with_wakeups(config, clock, memory_config(config), wakeups)?.0)
        }
    }
}

/// Opens the embedded store of `config` (`<data_dir>/crewbus.db`, the busy timeout of
/// `storage.busy_timeout_ms`, rows counted with `storage.count_rows`): as the server, creating
/// and migrating it; as an operator, only an existing store of this build's schema.
///
/// Errors: no data directory → `Invalid`; the store missing (operator) → `NotProvisioned`
/// naming the path; the schema not this build's (operator) → `Conflict`; the file unusable →
/// `Invalid`/`Unavailable`.
pub async fn open_sqlite(config: &Config, opener: Opener) -> BusResult<SqlitePools> {
    let path = crate::config::database_path(&config.storage.data_dir()?);
    let pools = crewbus_sqlite::open(
        &path,
        &SqliteConfig {
            create_if_missing: opener == Opener::Server,
            busy_timeout: Duration::from_millis(config.storage.busy_timeout_ms()),
            // A write waits for the one write connection no longer than for the file's lock.
            acquire_timeout: Duration::from_millis(config.storage.busy_timeout_ms()),
            count_rows: config.storage.count_rows,
            ..SqliteConfig::default()
        },
    )
    .await?;
    match opener {
        Opener::Server => crewbus_sqlite::migrate(&pools).await?,
        Opener::Operator => crewbus_sqlite::check_schema(&pools).await?,
    }
    Ok(pools)
}

/// How long `crewbus serve`'s check of the embedded store may take when the last stop was
/// clean: SQLite's `quick_check` costs about 4 s of CPU per GiB of store, so a store up to about
/// half a GiB is checked whole and a larger one as far as this reaches (after an unclean stop
/// the whole store is checked, whatever it takes).
pub const START_CHECK_BUDGET: Duration = Duration::from_secs(2);

/// `crewbus serve`'s check of the embedded store before it opens it
/// (`crewbus_sqlite::check_integrity`, within [`START_CHECK_BUDGET`] after a clean stop). Never
/// writes to the store. Errors: no data directory → `Invalid`; the file unreadable or locked
/// past `storage.busy_timeout_ms` → `Unavailable`; a damaged file is the answer's verdict.
pub async fn check_embedded_store(config: &Config) -> BusResult<IntegrityCheck> {
    let path = crate::config::database_path(&config.storage.data_dir()?);
    let busy = Duration::from_millis(config.storage.busy_timeout_ms());
    crewbus_sqlite::check_integrity(&path, busy, START_CHECK_BUDGET).await
}

/// `crewbus serve`'s clean stop of the embedded store, once it stopped serving: its write-ahead
/// log copied into the file and emptied (`crewbus_sqlite::checkpoint`). Returns whether it
/// completed (`false`: a writer still held the log). Errors: the file cannot be written →
/// `Unavailable`.
pub async fn checkpoint_embedded_store(config: &Config) -> BusResult<bool> {
    let path = crate::config::database_path(&config.storage.data_dir()?);
    let busy = Duration::from_millis(config.storage.busy_timeout_ms());
    crewbus_sqlite::checkpoint(&path, busy).await
}

/// The embedded store for the ledger, journal, push store, inbox and bodies over `pools`;
/// waiting fetches are woken in process by `wakeups` (one server per store: `serve.lock`).
pub fn sqlite_with(
    config: &Config,
    pools: SqlitePools,
    clock: Arc<dyn Clock>,
    wakeups: Arc<dyn Wakeups>,
) -> BusResult<Composed> {
    let settings = BusSettings::from_config(&config.bus);
    let path = pools.path().display().to_string();
    let writes = pools.write_counts();
    let group = pools.clone();
    let store_writes: StoreWritesSource = Arc::new(move || {
        let (transactions, parts) = group.group_commits();
        StoreWrites {
            rows: writes
                .snapshot()
                .into_iter()
                .map(|t| StoreRows {
                    table: t.table,
                    inserted: t.inserted,
                    updated: t.updated,
                    deleted: t.deleted,
                })
                .collect(),
            commits: Some(StoreCommits {
                transactions,
                parts,
            }),
        }
    });
    let ledger = SqliteLedger::new(pools.clone(), config.tenant.clone());
    let journal: Arc<dyn Journal> = Arc::new(ledger.journal());
    let push_store: Arc<dyn PushStore> =
        Arc::new(SqlitePushStore::new(pools.clone(), config.tenant.clone()));
    let registry = SqliteBackends::new(
        pools,
        clock.clone(),
        SqliteSettings {
            max_body_bytes: config.bus.max_body_bytes,
            ack_wait: settings.handout_grace,
            ..SqliteSettings::default()
        },
    );
    let ledger = Arc::new(ledger);
    let stores = Stores {
        ledger: ledger.clone(),
        operators: ledger.clone(),
        oversight: ledger.clone(),
        leases: ledger.clone(),
        // One server holds the store: its buckets are exact in process.
        send_allowance: None,
        search: ledger.clone(),
        registry: Arc::new(registry),
        journal,
        push_store,
        persistent: true,
        wakeups,
        // One server per store (`serve.lock`): in process, as the wake-ups.
        feed: Arc::new(MemoryFeed::new()),
        store_writes: Some(store_writes),
    };
    finish(config, settings, clock, stores, |push| {
        format!(
            "ledger=sqlite inbox=sqlite bodies=sqlite{}{} (embedded store {path})",
            if config.nats.is_some() {
                ", jetstream by team"
            } else {
                ""
            },
            describe_push(push, "sqlite"),
        )
    })
}

/// Connects the pool `[database]` describes. Errors: no `[database]` → `Invalid`; the database
/// unreachable → `Unavailable`, whose message names the URL with its password replaced by `***`
/// and why ([`connect_reason`]).
pub async fn connect(config: &Config) -> BusResult<PgPool> {
    let db = config
        .database
        .as_ref()
        .ok_or_else(|| BusError::invalid("no [database] configured (CREWBUS_DATABASE__URL)"))?;
    let what = crate::config::redact_url(db.url.expose());
    PgPoolOptions::new()
        .max_connections(db.max_connections)
        .acquire_timeout(Duration::from_secs(CONNECT_TIMEOUT_S))
        .connect(db.url.expose())
        .await
        .map_err(|e| {
            let reason = connect_reason(&e);
            BusError::unavailable_from(format!("database {what} ({reason})"), e)
        })
}

/// How long [`connect`] tries to open its first connection, seconds.
const CONNECT_TIMEOUT_S: u64 = 10;

/// Why a connection to Postgres failed, for a person: the server's own message (`database "x"
/// does not exist`, `password authentication failed for user "y"`: Postgres never repeats a
/// password), the operating system's (`Connection refused`), or the timeout. Other driver
/// errors (a malformed URL among them, whose text could hold the URL) are named by kind only.
fn connect_reason(e: &sqlx::Error) -> String {
    match e {
        sqlx::Error::Database(db) => format!("the server says: {}", db.message()),
        sqlx::Error::Io(io) => io.to_string(),
        sqlx::Error::PoolTimedOut => {
            format!("no connection within {CONNECT_TIMEOUT_S} s: is the server running there?")
        }
        sqlx::Error::Tls(_) => "TLS failed".to_owned(),
        sqlx::Error::Configuration(_) => "the URL is not a valid Postgres URL".to_owned(),
        _ => "the driver could not connect".to_owned(),
    }
}

/// Postgres for the ledger, journal, inbox and bodies over `pool` (migrations applied first
/// when `database.migrate_on_start`, the default).
pub async fn postgres_with_pool(
    config: &Config,
    pool: PgPool,
    clock: Arc<dyn Clock>,
) -> BusResult<Composed> {
    if config.database.as_ref().is_none_or(|d| d.migrate_on_start) {
        crewbus_postgres::migrate(&pool).await?;
    }
    let settings = BusSettings::from_config(&config.bus);
    let ledger = PostgresLedger::new(pool.clone(), config.tenant.clone());
    let journal: Arc<dyn Journal> = Arc::new(ledger.journal());
    let push_store: Arc<dyn PushStore> =
        Arc::new(PostgresPushStore::new(pool.clone(), config.tenant.clone()));
    let postgres = PostgresBackends::new(
        pool.clone(),
        clock.clone(),
        PostgresSettings {
            max_body_bytes: config.bus.max_body_bytes,
            ack_wait: settings.handout_grace,
            ..PostgresSettings::default()
        },
    );
    let listen = match config.database.as_ref().and_then(|d| d.listen_url.as_ref()) {
        Some(url) => url
            .expose()
            .parse()
            .map_err(|_| BusError::invalid("database.listen_url does not parse as postgres://…"))?,
        None => (*pool.connect_options()).clone(),
    };
    let wakeups: Arc<dyn Wakeups> = Arc::new(PostgresWakeups::new(pool.clone(), listen.clone()));
    let feed: Arc<dyn Feed> = Arc::new(PostgresFeed::new(pool, listen));
    let ledger = Arc::new(ledger);
    let stores = Stores {
        ledger: ledger.clone(),
        operators: ledger.clone(),
        oversight: ledger.clone(),
        leases: ledger.clone(),
        // Servers share the database: each agent's bucket is one row of it.
        send_allowance: Some(ledger.clone()),
        search: ledger.clone(),
        registry: Arc::new(postgres),
        journal,
        push_store,
        persistent: true,
        wakeups,
        feed,
        store_writes: None,
    };
    finish(config, settings, clock, stores, |push| {
        match &config.database {
            Some(d) => format!(
                "ledger=postgres inbox=postgres bodies=postgres{}{} ({})",
                if config.nats.is_some() {
                    ", jetstream by team"
                } else {
                    ""
                },
                describe_push(push, "postgres"),
                crate::config::redact_url(d.url.expose())
            ),
            None => format!(
                "ledger=postgres inbox=postgres bodies=postgres{}",
                describe_push(push, "postgres")
            ),
        }
    })
}

/// The memory store: memory for every port, with the memory adapters' limits `memory` (the
/// server's: [`memory_config`]) and waiting fetches woken by `wakeups` (the server's: in
/// process). Tests shrink the inbox to make it overflow, prove the waiting fetch's bounds with
/// `MemoryWakeups::losing_everything`, and reach the adapters' fault injection through the
/// [`MemoryParts`]; their shorthands live in the test kits (`app/tests/it/common`).
pub fn memory_with_wakeups(
    config: &Config,
    clock: Arc<dyn Clock>,
    memory: MemoryConfig,
    wakeups: Arc<dyn Wakeups>,
) -> BusResult<(Composed, MemoryParts)> {
    let settings = BusSettings::from_config(&config.bus);
    let ledger = MemoryLedger::new(config.tenant.clone());
    let registry = MemoryBackends::new(memory, clock.clone())?;
    let journal: Arc<dyn Journal> = Arc::new(ledger.journal());
    let push_store: Arc<dyn PushStore> = Arc::new(MemoryPushStore::new(config.tenant.clone()));
    let stores = Stores {
        ledger: Arc::new(ledger.clone()),
        operators: Arc::new(ledger.clone()),
        oversight: Arc::new(ledger.clone()),
        leases: Arc::new(ledger.clone()),
        // One process holds a memory store: its buckets are exact in process.
        send_allowance: None,
        search: Arc::new(ledger.clone()),
        registry: Arc::new(registry.clone()),
        journal,
        push_store,
        persistent: false,
        wakeups,
        feed: Arc::new(MemoryFeed::new()),
        store_writes: None,
    };
    let composed = finish(config, settings, clock, stores, |push| {
        format!(
            "ledger=memory inbox=memory bodies=memory{}{} (memory store: nothing is kept after it stops)",
            if config.nats.is_some() {
                ", jetstream by team"
            } else {
                ""
            },
            describe_push(push, "memory"),
        )
    })?;
    Ok((
        composed,
        MemoryParts {
            ledger,
            backends: registry,
        },
    ))
}

/// The stores one configuration chose, handed to the composition's one tail ([`finish`]).
struct Stores {
    ledger: Arc<dyn Ledger>,
    /// The ledger's operators (the same store).
    operators: Arc<dyn Operators>,
    /// The ledger's oversight reads (the same store).
    oversight: Arc<dyn Oversight>,
    /// The ledger's leases (the same store).
    leases: Arc<dyn Leases>,
    /// Each agent's shared send bucket, when servers share the store (Postgres).
    send_allowance: Option<Arc<dyn SendAllowance>>,
    /// The ledger's search index (the same store).
    search: Arc<dyn Search>,
    /// The console feed: in process for memory and SQLite, `NOTIFY` for Postgres.
    feed: Arc<dyn Feed>,
    /// The registry of the ledger's own body and inbox backend (JetStream is added by team).
    registry: Arc<dyn Backends>,
    journal: Arc<dyn Journal>,
    /// The bare push store ([`assemble`] shows the outbox's sealed one when there is an outbox).
    push_store: Arc<dyn PushStore>,
    /// Whether the push store outlives the process (see [`push_runtime`]).
    persistent: bool,
    wakeups: Arc<dyn Wakeups>,
    /// The store's rows written per table, for `/metrics`: the embedded store counts them
    /// (SQLite's update hook); Postgres has `pg_stat_user_tables`, memory writes no rows.
    store_writes: Option<StoreWritesSource>,
}

/// The one tail of every composition: the push runtime over the chosen push store, the registries (the chosen one, then JetStream when
/// `[nats]` is configured), the settings completed with the registries' names and `[mcp]`, the
/// [`Ports`], the bus and its [`Composed`], described by `describe` (given the push runtime).
/// Errors: [`push_runtime`]'s and JetStream's (`Invalid` for a bad `[push]` or `[nats]`).
fn finish(
    config: &Config,
    settings: BusSettings,
    clock: Arc<dyn Clock>,
    stores: Stores,
    describe: impl FnOnce(Option<&PushRuntime>) -> String,
) -> BusResult<Composed> {
    let push = push_runtime(
        config,
        Arc::clone(&stores.push_store),
        stores.persistent,
        Arc::clone(&stores.journal),
        clock.clone(),
    )?;
    let mut registries: Vec<Arc<dyn Backends>> = vec![stores.registry];
    let broker = add_jetstream(config, &settings, &mut registries)?;
    let settings = BusSettings {
        backends: registries.iter().map(|r| r.name().to_owned()).collect(),
        allow: config.allow_list(),
        console: crate::usecases::bus::ConsoleSettings::from_config(&config.console),
        attempts_kept: config.push.attempts_kept,
        rate_limits: config.rate_limit.settings(),
        ..settings
    };
    let ports = Ports {
        ledger: stores.ledger,
        backends: Arc::new(CombinedBackends::new(registries)),
        journal: Arc::clone(&stores.journal),
        clock,
        broker,
        wakeups: stores.wakeups,
        operators: stores.operators,
        oversight: stores.oversight,
        leases: stores.leases,
        send_allowance: stores.send_allowance,
        search: stores.search,
        feed: stores.feed,
        // What operators read: the outbox's sealed store when there is one (never ciphertext).
        push_store: push.as_ref().map_or_else(
            || Arc::clone(&stores.push_store),
            |p| Arc::clone(p.outbox.store()),
        ),
    };
    let description = describe(push.as_ref());
    let bus = Bus::new(ports, settings);
    let bus = match stores.store_writes {
        Some(source) => bus.with_store_writes(source),
        None => bus,
    };
    // The delivery worker says on the console feed when it parks a registration.
    let push = push.map(|mut p| {
        p.worker = p.worker.with_events(bus.feed_sink());
        p
    });
    Ok(assemble(
        bus,
        stores.journal,
        stores.push_store,
        push,
        description,
    ))
}

/// The [`Composed`] of a bus, its journal and its push outbox (when there is one).
fn assemble(
    bus: Bus,
    journal: Arc<dyn Journal>,
    bare_push_store: Arc<dyn PushStore>,
    push: Option<PushRuntime>,
    description: String,
) -> Composed {
    match push {
        Some(push) => Composed {
            push_store: Arc::clone(push.outbox.store()),
            bus: bus.with_push(push),
            journal,
            description,
        },
        None => Composed {
            bus,
            journal,
            push_store: bare_push_store,
            description,
        },
    }
}

fn describe_push(push: Option<&PushRuntime>, store: &str) -> String {
    match push {
        Some(p) => format!(
            ", push={store} ({} destination(s), {})",
            p.outbox.destinations().len(),
            match (p.outbox.is_sealed(), store) {
                (true, _) => "credentials sealed",
                (false, "memory") => "credentials in memory only",
                (false, _) => "credentials NOT sealed",
            }
        ),
        None => String::new(),
    }
}

/// The push outbox and its delivery worker over `store` (PUSH.md §4–§6), per `config.push`:
/// destinations resolved (secrets read from their named variables or files), the store sealed
/// with the local key ring when one is configured, the worker built from the sealed outbox over
/// `journal` (the journal the ledger writes into), time from `clock`.
///
/// `None` when `[push]` names neither a destination nor a key ring (nothing would be registered).
/// Errors (`Invalid`, never holding a secret): a `persistent` store without a key ring and
/// without `push.allow_unsealed`; a secret source that cannot be read; a destination that breaks
/// a rule (blank or duplicate name, bad URL, bad signing key); a master key or key directory that
/// cannot be used; an HTTP client that cannot be built.
pub fn push_runtime(
    config: &Config,
    store: Arc<dyn PushStore>,
    persistent: bool,
    journal: Arc<dyn Journal>,
    clock: Arc<dyn Clock>,
) -> BusResult<Option<PushRuntime>> {
    let settings = &config.push;
    if settings.destinations.is_empty() && settings.key_ring.is_none() {
        return Ok(None);
    }
    let setup = |e: crate::push::PushSetupError| BusError::invalid(e.to_string());
    let keys = settings
        .key_ring()
        .map_err(setup)?
        .map(|k| Arc::new(k) as Arc<dyn KeyRing>);
    let outbox = settings
        .outbox(store, persistent, keys, config.tenant.clone())
        .map_err(setup)?
        .with_clock(clock);
    let transport = Arc::new(settings.transport().map_err(setup)?);
    let worker =
        DeliveryWorker::new(&outbox, journal, transport).with_settings(settings.delivery());
    Ok(Some(PushRuntime {
        attempts_kept_for: settings.attempts_kept_for(),
        ..PushRuntime::new(outbox, worker, settings.poll())
    }))
}

/// Checks what only building the composition can check, without connecting anything: the push
/// destinations (their secrets read from their variables and files, every rule checked), the
/// key ring's master key and directory. The binary runs it before every command that composes,
/// so a configuration error exits 2 naming its key (the database URLs are checked when the
/// configuration loads).
///
/// Errors: `Invalid`, naming the key (never a secret).
pub fn check_configuration(config: &Config) -> BusResult<()> {
    let persistent = config.store()? != StorageKind::Memory;
    let store: Arc<dyn PushStore> = Arc::new(MemoryPushStore::new(config.tenant.clone()));
    let ledger = MemoryLedger::new(config.tenant.clone());
    push_runtime(
        config,
        store,
        persistent,
        Arc::new(ledger.journal()),
        Arc::new(SystemClock),
    )?;
    Ok(())
}

/// The memory adapters' limits for `config`: the body limit of `bus.max_body_bytes`, an inbox
/// whose ack wait is the hand-out grace.
pub fn memory_config(config: &Config) -> MemoryConfig {
    let settings = BusSettings::from_config(&config.bus);
    MemoryConfig {
        bodies: BodiesConfig {
            max_body_bytes: config.bus.max_body_bytes,
            quota: Quotas {
                max_messages: 1_000_000,
                max_bytes: 1 << 30,
            },
        },
        inbox: InboxConfig {
            // The inbox hands a reference out again when the hand-out grace has passed.
            ack_wait: settings.handout_grace,
            ..InboxConfig::default()
        },
    }
}

/// With `[nats]`: the JetStream registry (runtime credential) joins `registries` and the broker
/// is returned for health. Connections open lazily, on a team's first use.
fn add_jetstream(
    config: &Config,
    settings: &BusSettings,
    registries: &mut Vec<Arc<dyn Backends>>,
) -> BusResult<Option<Arc<dyn crewbus_ports::StreamAdmin>>> {
    let Some(nats) = &config.nats else {
        return Ok(None);
    };
    let runtime = jetstream_config(nats, &nats.runtime, config, settings);
    registries.push(Arc::new(JetStreamBackends::new(runtime.clone())?));
    Ok(Some(Arc::new(JetStreamAdmin::new(runtime))))
}

/// The JetStream adapter's configuration for `credential` (runtime for the server,
/// provisioning for operator commands).
pub fn jetstream_config(
    nats: &NatsConfig,
    credential: &NatsCredential,
    config: &Config,
    settings: &BusSettings,
) -> crewbus_jetstream::Config {
    let credential = if let Some(path) = &credential.creds_file {
        Credential::CredsFile(path.clone())
    } else if let Some(token) = &credential.token {
        Credential::Token(token.clone())
    } else if let (Some(user), Some(password)) = (&credential.user, &credential.password) {
        Credential::UserPassword {
            user: user.clone(),
            password: password.clone(),
        }
    } else {
        Credential::None
    };
    crewbus_jetstream::Config {
        servers: nats.servers.clone(),
        credential,
        body_quotas: Quotas {
            max_messages: nats.body_max_messages,
            max_bytes: nats.body_max_bytes,
        },
        inbox_quotas: Quotas {
            max_messages: nats.inbox_max_messages,
            max_bytes: nats.inbox_max_bytes,
        },
        replicas: nats.replicas,
        ack_wait: settings.handout_grace,
        request_timeout: Duration::from_millis(nats.request_timeout_ms),
        name_prefix: nats.prefix.clone(),
        body_limit: config.bus.max_body_bytes,
        ..crewbus_jetstream::Config::default()
    }
}

/// The operator's stream administration (provisioning credential). Errors: no `[nats]` →
/// `Invalid`.
pub fn stream_admin(config: &Config) -> BusResult<Arc<dyn crewbus_ports::StreamAdmin>> {
    let nats = config.nats.as_ref().ok_or_else(|| {
        BusError::invalid("stream commands need [nats] with the provisioning credential")
    })?;
    let settings = BusSettings::from_config(&config.bus);
    Ok(Arc::new(JetStreamAdmin::new(jetstream_config(
        nats,
        &nats.provisioning,
        config,
        &settings,
    ))))
}

/// `crewbus backup --to FILE`: an online copy of the embedded store (`VACUUM INTO`), opened
/// beside the running server. Errors: another store → `Invalid`; as [`open_sqlite`] and
/// `crewbus_sqlite::backup_to` (`Conflict` when `to` exists).
pub async fn backup(config: &Config, to: &std::path::Path) -> BusResult<()> {
    if config.store()? != StorageKind::Sqlite {
        return Err(BusError::invalid(format!(
            "crewbus backup copies the embedded store; this configuration's store is {} (for \
             Postgres use pg_dump; the memory store has nothing to keep)",
            config.store()?.name()
        )));
    }
    let dir = match to.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => std::path::PathBuf::from("."),
    };
    if !dir.is_dir() {
        return Err(BusError::invalid(format!(
            "the backup's directory {} does not exist",
            dir.display()
        )));
    }
    let pools = open_sqlite(config, Opener::Operator).await?;
    let copied = crewbus_sqlite::backup_to(&pools, to).await;
    pools.close().await;
    copied?;
    // The copy holds every message body: readable by its owner only.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(to, std::fs::Permissions::from_mode(0o600)).map_err(|e| {
            BusError::unavailable_from(format!("cannot make {} private", to.display()), e)
        })?;
    }
    Ok(())
}

/// Applies pending Postgres migrations; returns the versions applied now (empty when the schema
/// was up to date). Errors: no `[database]` → `Invalid`; unreachable → `Unavailable`; a refused
/// migration → `Conflict`.
pub async fn migrate(config: &Config) -> BusResult<Vec<String>> {
    let pool = connect(config).await?;
    let before = applied_versions(&pool).await;
    crewbus_postgres::migrate(&pool).await?;
    let after = applied_versions(&pool).await;
    Ok(after
        .into_iter()
        .filter(|v| !before.contains(v))
        .map(|v| {
            crewbus_postgres::MIGRATOR
                .iter()
                .find(|m| m.version == v)
                .map_or_else(|| v.to_string(), |m| format!("{v} {}", m.description))
        })
        .collect())
}

/// Versions recorded in sqlx's migrations table (empty when it does not exist yet).
async fn applied_versions(pool: &PgPool) -> Vec<i64> {
    sqlx::query_scalar::<_, i64>("SELECT version FROM _sqlx_migrations WHERE success")
        .fetch_all(pool)
        .await
        .unwrap_or_default()
}
