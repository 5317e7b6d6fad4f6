//! The stores a bench or a test runs a bus on, made one way: `crewbus serve`'s bus on the
//! embedded store (SQLite) in a fresh temporary directory, or on a fresh database of
//! `DATABASE_URL`'s Postgres server (migrated; dropped at the end, kept and named when the run
//! fails; unset or unreachable fails the run loudly) over a pool of its own of the production
//! default size.

use std::sync::Arc;

use crewbus::bus::Bus;
use crewbus::compose;
use crewbus::config::{Config, StorageConfig, StorageKind};
use crewbus_conformance::postgres::TestDatabase;
use crewbus_ports::SystemClock;
use sqlx::PgPool;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};

/// Pooled connections of the bus on Postgres: the production default (`database.max_connections`).
pub const MAX_CONNECTIONS: u32 = 10;

/// The two stores a server runs on.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Store {
    /// The embedded store (SQLite) in a fresh temporary directory, as `crewbus serve` opens it.
    Sqlite,
    /// A fresh database on `DATABASE_URL`'s server, `LISTEN/NOTIFY` wake-ups.
    Postgres,
}

impl Store {
    pub fn name(self) -> &'static str {
        match self {
            Store::Sqlite => "sqlite",
            Store::Postgres => "postgres",
        }
    }
}

/// Both stores, the embedded one first.
pub const STORES: [Store; 2] = [Store::Sqlite, Store::Postgres];

/// A bus on a fresh store, and what keeps the store alive until [`StoreBus::close`].
pub struct StoreBus {
    pub bus: Bus,
    /// The Postgres store's database.
    pub db: Option<TestDatabase>,
    /// The bus's own pool (Postgres), closed before the database is dropped.
    pub pool: Option<PgPool>,
    /// The embedded store's directory (removed with it).
    pub dir: Option<tempfile::TempDir>,
}

impl StoreBus {
    /// The bus of `config` on a fresh `store`; `label` names the bench on stderr and in a kept
    /// database's name.
    pub async fn open(store: Store, config: &mut Config, label: &str) -> StoreBus {
        match store {
            Store::Sqlite => StoreBus::sqlite(config).await,
            Store::Postgres => StoreBus::postgres(config, label, |options| options).await,
        }
    }

    /// The bus of `config` on the embedded store in a fresh temporary directory (set into
    /// `config.storage`).
    pub async fn sqlite(config: &mut Config) -> StoreBus {
        let (bus, dir) = sqlite_bus(config).await;
        StoreBus {
            bus,
            db: None,
            pool: None,
            dir: Some(dir),
        }
    }

    /// The bus of `config` on a fresh Postgres database (printed as `<label>: fresh database
    /// <name>`), composed by `compose::postgres_with_pool` over a pool of its own of
    /// [`MAX_CONNECTIONS`] connecting with the database's options as `tune` changes them.
    pub async fn postgres(
        config: &Config,
        label: &str,
        tune: impl FnOnce(PgConnectOptions) -> PgConnectOptions,
    ) -> StoreBus {
        let db = super::postgres::database(label).await;
        eprintln!("{label}: fresh database {}", db.name());
        let pool = pool_on(&db, tune).await;
        let bus = postgres_bus(config, pool.clone()).await;
        StoreBus {
            bus,
            db: Some(db),
            pool: Some(pool),
            dir: None,
        }
    }

    /// Ends the store: the bus dropped, its pool closed, the database dropped (kept and named
    /// when the run failed) or the directory removed.
    pub async fn close(self) {
        drop(self.bus);
        if let Some(pool) = self.pool {
            pool.close().await;
        }
        if let Some(db) = self.db {
            db.passed().await;
        }
        drop(self.dir);
    }
}

/// The bus of `config` on the Postgres store behind `pool`, on the wall clock, composed by
/// `compose::postgres_with_pool` as `crewbus serve` composes it.
pub async fn postgres_bus(config: &Config, pool: PgPool) -> Bus {
    compose::postgres_with_pool(config, pool, Arc::new(SystemClock))
        .await
        .expect("compose postgres")
        .bus
}

/// A pool of [`MAX_CONNECTIONS`] on `db`, connecting with its options as `tune` changes them
/// (a second server's pool, as a deployment's second server has its own).
pub async fn pool_on(
    db: &TestDatabase,
    tune: impl FnOnce(PgConnectOptions) -> PgConnectOptions,
) -> PgPool {
    PgPoolOptions::new()
        .max_connections(MAX_CONNECTIONS)
        .connect_with(tune((*db.pool().connect_options()).clone()))
        .await
        .expect("the bus's pool")
}

/// The bus of `config` on the embedded store (SQLite) in a fresh temporary data directory (set
/// into `config.storage`), as `crewbus serve` opens it; the directory is removed when the
/// returned guard is dropped.
pub async fn sqlite_bus(config: &mut Config) -> (Bus, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("temporary directory");
    config.storage = StorageConfig {
        kind: Some(StorageKind::Sqlite),
        data_dir: Some(dir.path().to_owned()),
        ..StorageConfig::default()
    };
    let composed = compose::compose_as(config, compose::Opener::Server, Arc::new(SystemClock))
        .await
        .expect("compose sqlite");
    (composed.bus, dir)
}
