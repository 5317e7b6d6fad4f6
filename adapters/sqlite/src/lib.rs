//! crewbus SQLite adapter, over sqlx's SQLite driver (libsqlite3 bundled): the whole bus in one
//! file — the schema and its migrations ([`migrate`]), the ledger ([`SqliteLedger`]) and journal
//! ([`SqliteJournal`]), a body backend ([`SqliteBackend`]), an inbox as a queue table
//! ([`SqliteInbox`]), their registry ([`SqliteBackends`]) and the push store
//! ([`SqlitePushStore`]), all over one [`SqlitePools`] from [`open`].
//!
//! # What an acknowledged write survives
//!
//! Every write is one transaction that starts with `BEGIN IMMEDIATE` on the single write
//! connection and commits in WAL mode with `synchronous=FULL`: when a method returns `Ok`, its
//! transaction is in the write-ahead log and the log has been fsynced. So an acknowledged write
//! survives the process being killed (at any point: an unfinished transaction is rolled back on
//! the next open) and a power loss or OS crash **where the disk honours fsync** (a disk or
//! virtual disk that acknowledges writes it has only cached can lose them; SQLite cannot tell).
//! It does not survive the loss of the disk itself: take copies with [`backup_to`] (online,
//! `VACUUM INTO`), never by copying the file while a server runs (the WAL holds recent commits).
//!
//! # One host, one server
//!
//! The store is a file on a local disk, opened by **one server process**. SQLite's locks need a
//! local file system (never NFS or another network share: their locks are unreliable and WAL
//! needs shared memory), and the wake-ups of waiting fetches are in process (nothing tells a
//! second server that a message arrived). Operator commands may open the same file briefly
//! (they wait for the lock up to the busy timeout); a second server must not.
//!
//! # Conventions
//!
//! Time always comes from the caller or an injected `Clock`, bound as a parameter (never
//! `datetime('now')` in SQL), stored as integer microseconds since the epoch; ids are 16-byte
//! BLOBs. Every database error is mapped to a `BusError` (or `StoreError`) in one function
//! (`error.rs`), by SQLite result code: a database still busy or locked after the busy timeout is
//! a retryable `Unavailable`, counted by [`SqlitePools::busy_errors`], and SQLite's own message
//! never reaches a caller.
#![warn(missing_docs)]

mod body;
mod codec;
mod connect;
mod error;
mod inbox;
mod journal;
mod ledger;
mod push_store;
mod registry;
mod settings;

pub use body::SqliteBackend;
pub use connect::{SqliteConfig, SqlitePools, backup_to, open};
pub use inbox::SqliteInbox;
pub use journal::SqliteJournal;
pub use ledger::SqliteLedger;
pub use push_store::SqlitePushStore;
pub use registry::SqliteBackends;
pub use settings::SqliteSettings;

use crewbus_domain::{BusError, BusResult};

/// The backend name SQLite answers for (`MessagingBackend::name`, `Backends::name`, the scheme
/// of its locators).
pub const NAME: &str = "sqlite";

/// The embedded migrations (`adapters/sqlite/migrations`).
pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations");

/// Applies every pending migration to the store behind `pools` (on the write connection); the
/// server calls it at start-up.
///
/// Idempotent (applied migrations are skipped). Errors: the store busy or unreachable →
/// `Unavailable`; a migration refused or an applied migration changed since → `Conflict` (the
/// schema needs an operator); the cause is kept as the source and logged.
pub async fn migrate(pools: &SqlitePools) -> BusResult<()> {
    use sqlx::migrate::MigrateError;
    match MIGRATOR.run(pools.writer()).await {
        Ok(()) => Ok(()),
        Err(MigrateError::Execute(e)) => Err(pools.bus_error(e, "migrations")),
        Err(e) => {
            tracing::error!(error = %e, "sqlite migrations refused");
            Err(BusError::conflict(
                "sqlite schema: migrations could not be applied",
            ))
        }
    }
}

/// Checks, without changing anything, that the store behind `pools` has exactly the schema this
/// build expects: for operator commands, which open an existing store and must not migrate it
/// behind the server's back.
///
/// Errors: no migration applied (an empty or foreign SQLite file) or some still pending →
/// `NotProvisioned` naming the path, remedy "start the server" (it migrates at start); a
/// migration applied that this build does not know (a store of a newer crewbus) → `Conflict`;
/// the store busy or unreadable → `Unavailable`.
///
/// SQLite reports a missing table only as the generic `SQLITE_ERROR`, which the error mapping
/// does not tell from any other refused statement (it never reads message text): without this
/// check a statement on an unmigrated store answers `Invalid`.
pub async fn check_schema(pools: &SqlitePools) -> BusResult<()> {
    let what = "schema check";
    let not_provisioned = || BusError::NotProvisioned {
        what: format!("sqlite schema of {}", pools.path().display()),
        remedy: "start the server once (it applies the migrations)".to_owned(),
    };
    let has_table: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = '_sqlx_migrations'",
    )
    .fetch_one(pools.reader())
    .await
    .map_err(pools.db(what))?;
    if has_table == 0 {
        return Err(not_provisioned());
    }
    let applied: Vec<i64> =
        sqlx::query_scalar("SELECT version FROM _sqlx_migrations WHERE success = 1")
            .fetch_all(pools.reader())
            .await
            .map_err(pools.db(what))?;
    let known: Vec<i64> = MIGRATOR.iter().map(|m| m.version).collect();
    if applied.iter().any(|v| !known.contains(v)) {
        return Err(BusError::conflict(format!(
            "sqlite schema of {} is newer than this build",
            pools.path().display()
        )));
    }
    if known.iter().any(|v| !applied.contains(v)) {
        return Err(not_provisioned());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_unmigrated_store_is_not_provisioned_until_migrated() {
        let dir = tempfile::tempdir().unwrap();
        let config = SqliteConfig {
            create_if_missing: true,
            ..SqliteConfig::default()
        };
        let pools = open(dir.path().join("bus.db"), &config).await.unwrap();
        let e = check_schema(&pools).await.unwrap_err();
        assert!(matches!(e, BusError::NotProvisioned { .. }), "{e:?}");
        migrate(&pools).await.unwrap();
        check_schema(&pools).await.unwrap();
        migrate(&pools).await.unwrap();
        check_schema(&pools).await.unwrap();
        pools.close().await;
    }
}
