//! Opening the store file every SQLite adapter of a process shares ([`open`] → [`SqlitePools`]),
//! and its online backup ([`backup_to`]).

use std::path::{Path, PathBuf};
use std::time::Duration;

use crewbus_domain::{BusError, BusResult, StoreError};
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};
use sqlx::{ConnectOptions, Connection};

use crate::error::{BusyCounter, bus_error, store_error};
use crate::write_counts::WriteCounts;

/// How to open the store file. Every field has a default ([`SqliteConfig::default`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SqliteConfig {
    /// Create the file (and its schema, with [`crate::migrate`]) when it does not exist. Only the
    /// server creates the store; operator commands open with `false` and get `NotProvisioned`
    /// naming the path when it is missing. Default `false`.
    pub create_if_missing: bool,
    /// How long a statement waits for a lock another connection (another process: an operator
    /// command, a backup) holds, before it fails with a retryable `Unavailable` (SQLite's
    /// `busy_timeout`, set explicitly on every connection). Default 5 s.
    pub busy_timeout: Duration,
    /// Connections of the read pool (count, at least 1). Default 4. Writes always go through
    /// one connection of their own.
    pub read_connections: u32,
    /// How long an operation waits for a free pooled connection (the write connection is
    /// shared by every writer of the process, so this bounds the queue) before it fails with a
    /// retryable `Unavailable`. Default 10 s.
    pub acquire_timeout: Duration,
    /// Count the rows every write connection writes, per table ([`SqlitePools::write_counts`],
    /// from SQLite's update hook, which then runs inside every statement). For the write audit
    /// and the tests that read the counts; a production server leaves it off. Default `false`:
    /// the counts stay empty.
    pub count_rows: bool,
}

impl Default for SqliteConfig {
    fn default() -> Self {
        SqliteConfig {
            create_if_missing: false,
            busy_timeout: Duration::from_secs(5),
            read_connections: 4,
            acquire_timeout: Duration::from_secs(10),
            count_rows: false,
        }
    }
}

/// The pools of one open store file: one write connection, on which every write transaction
/// starts with `BEGIN IMMEDIATE`, and a read pool (`query_only`) for reads. Cheap to clone; every
/// clone shares the pools and the busy counter.
///
/// Every connection runs with `journal_mode=WAL` (readers never block the writer, nor the
/// writer readers), `synchronous=FULL` (a commit returns after the WAL is fsynced),
/// `foreign_keys=ON` and the configured `busy_timeout`. With [`SqliteConfig::count_rows`], every
/// write connection counts the rows it writes per table ([`SqlitePools::write_counts`]).
#[derive(Clone)]
pub struct SqlitePools {
    write: SqlitePool,
    /// Every write transaction of the process, as parts of shared ones (group commit).
    pub(crate) group: GroupCommit,
    read: SqlitePool,
    path: PathBuf,
    busy_timeout: Duration,
    busy: BusyCounter,
    writes: WriteCounts,
}

impl std::fmt::Debug for SqlitePools {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqlitePools")
            .field("path", &self.path)
            .field("busy_errors", &self.busy.get())
            .finish_non_exhaustive()
    }
}

use crate::group_commit::GroupCommit;
pub(crate) use crate::group_commit::WriteTx;

impl SqlitePools {
    /// The store file these pools opened.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// How many statements failed because the database stayed busy or locked past the busy
    /// timeout (each answered `Unavailable`), since [`open`]. Counts every adapter over these
    /// pools.
    pub fn busy_errors(&self) -> u64 {
        self.busy.get()
    }

    /// Rows inserted, updated and deleted per table by this process's write connection since
    /// [`open`] (SQLite's update hook; see [`WriteCounts`] for what is and is not counted), when
    /// it was opened with [`SqliteConfig::count_rows`]; else nothing is counted and the snapshot
    /// is empty. The handle shares the live counters: read them with [`WriteCounts::snapshot`].
    pub fn write_counts(&self) -> WriteCounts {
        self.writes.clone()
    }

    /// Closes both pools, waiting for connections in use to be returned (checkpointing the WAL
    /// when the last connection closes). Further use answers `Unavailable`.
    pub async fn close(&self) {
        self.write.close().await;
        self.read.close().await;
    }

    /// The group commit's work since [`open`]: (shared write transactions committed — one
    /// fsynced `COMMIT` each —, write transactions they held). The second ÷ the first is the
    /// mean batch: 1.0 when writes never overlap, higher under concurrent writers.
    pub fn group_commits(&self) -> (u64, u64) {
        self.group.committed()
    }

    /// The single-connection write pool (migrations, and the few writes that need no
    /// transaction of their own).
    pub(crate) fn writer(&self) -> &SqlitePool {
        &self.write
    }

    /// The read pool (`query_only`).
    pub(crate) fn reader(&self) -> &SqlitePool {
        &self.read
    }

    /// Begins a write transaction: a part of the shared one of the group commit
    /// ([`crate::group_commit`]), whose `BEGIN IMMEDIATE` takes the write lock at once (waiting
    /// up to the busy timeout for another process), so no statement can fail later with
    /// `SQLITE_BUSY` when it first writes (a deferred `BEGIN` would, without consulting the busy
    /// handler). Its `commit` returns after the shared transaction's fsynced `COMMIT`. (The
    /// store's writes take it as `Dialect::begin`/`Dialect::write`; this one is the tests'.)
    #[cfg(test)]
    pub(crate) async fn begin(&self, what: &str) -> BusResult<WriteTx> {
        self.group
            .begin()
            .await
            .map_err(|e| self.bus_error(e, what))
    }

    /// Maps a sqlx error to the bus's error, counting busy errors (see `error::bus_error`).
    pub(crate) fn bus_error(&self, err: sqlx::Error, what: &str) -> BusError {
        bus_error(err, what, &self.busy)
    }

    /// Maps a sqlx error to the stores' error, counting busy errors (see `error::store_error`).
    pub(crate) fn store_error(&self, err: sqlx::Error, what: &str) -> StoreError {
        store_error(err, what, &self.busy)
    }

    /// `|e| self.bus_error(e, what)`.
    pub(crate) fn db<'a>(&'a self, what: &'a str) -> impl Fn(sqlx::Error) -> BusError + 'a {
        move |e| self.bus_error(e, what)
    }

    /// Options for a connection of its own to the same file (a backup, a test holding a lock).
    fn side_options(&self) -> SqliteConnectOptions {
        SqliteConnectOptions::new()
            .filename(&self.path)
            .create_if_missing(false)
            .busy_timeout(self.busy_timeout)
            .synchronous(SqliteSynchronous::Full)
            .foreign_keys(true)
    }

    /// A connection of its own to the store file (not from the pools), with the same busy
    /// timeout: for operator work that must not hold a pooled connection (and for tests that
    /// hold a lock from outside, as another process would). Errors: the file cannot be opened →
    /// `Unavailable`.
    pub async fn side_connection(&self) -> BusResult<sqlx::SqliteConnection> {
        self.side_options()
            .connect()
            .await
            .map_err(|e| self.bus_error(e, "sqlite side connection"))
    }
}

/// Opens (or, with [`SqliteConfig::create_if_missing`], creates) the store file at `path`: the
/// write connection first (which sets WAL mode, a persistent property of the file), then the
/// read pool. Apply [`crate::migrate`] next.
///
/// Errors: the file missing and `create_if_missing` false → `NotProvisioned` naming the path;
/// `path` a directory, `read_connections` 0, or a file system without WAL support → `Invalid`
/// naming the path; the file unreadable, damaged or not a database → `Unavailable` (the cause
/// logged and kept as the source).
pub async fn open(path: impl AsRef<Path>, config: &SqliteConfig) -> BusResult<SqlitePools> {
    let path = path.as_ref().to_owned();
    if config.read_connections == 0 {
        return Err(BusError::invalid(
            "sqlite: read_connections must be at least 1",
        ));
    }
    match std::fs::metadata(&path) {
        Ok(m) if m.is_dir() => {
            return Err(BusError::invalid(format!(
                "sqlite store {} is a directory, not a file",
                path.display()
            )));
        }
        Ok(_) => {}
        Err(_) if !config.create_if_missing => {
            return Err(BusError::NotProvisioned {
                what: format!("sqlite store {}", path.display()),
                remedy: "start the server once (it creates the store), or check the path"
                    .to_owned(),
            });
        }
        Err(_) => {}
    }
    let busy = BusyCounter::default();
    let base = SqliteConnectOptions::new()
        .filename(&path)
        .busy_timeout(config.busy_timeout)
        .synchronous(SqliteSynchronous::Full)
        .foreign_keys(true);
    let write_options = base
        .clone()
        .create_if_missing(config.create_if_missing)
        .journal_mode(SqliteJournalMode::Wal);
    let opening = format!("open {}", path.display());
    let what = opening.as_str();
    let writes = WriteCounts::default();
    let mut write = SqlitePoolOptions::new()
        .max_connections(1)
        .min_connections(1)
        .idle_timeout(None)
        .max_lifetime(None)
        .acquire_timeout(config.acquire_timeout);
    if config.count_rows {
        // Every write connection (the first, and one the pool opens after a close) counts the
        // rows it writes.
        let hook = writes.clone();
        write = write.after_connect(move |conn, _meta| {
            let hook = hook.clone();
            Box::pin(async move {
                conn.lock_handle()
                    .await?
                    .set_update_hook(move |row| hook.record(&row));
                Ok(())
            })
        });
    }
    let write = write
        .connect_with(write_options)
        .await
        .map_err(|e| bus_error(e, what, &busy))?;
    let mode: String = sqlx::query_scalar("PRAGMA journal_mode")
        .fetch_one(&write)
        .await
        .map_err(|e| bus_error(e, what, &busy))?;
    if !mode.eq_ignore_ascii_case("wal") {
        write.close().await;
        return Err(BusError::invalid(format!(
            "sqlite store {}: WAL mode is not available (journal_mode is {mode})",
            path.display()
        )));
    }
    let read = SqlitePoolOptions::new()
        .max_connections(config.read_connections)
        .min_connections(0)
        .acquire_timeout(config.acquire_timeout)
        .connect_with(base.create_if_missing(false).pragma("query_only", "ON"))
        .await
        .map_err(|e| bus_error(e, what, &busy))?;
    Ok(SqlitePools {
        group: GroupCommit::new(write.clone(), config.acquire_timeout),
        write,
        read,
        path,
        busy_timeout: config.busy_timeout,
        busy,
        writes,
    })
}

/// Writes a consistent copy of the store to `target` while the store stays in use (`VACUUM
/// INTO` on a connection of its own, reading one snapshot; writers are not blocked in WAL mode),
/// then fsyncs the copy and its directory (SQLite does not). The copy is a complete store:
/// [`open`] it like the original.
///
/// Errors: `target` exists (a file or anything else) → `Conflict` naming it (never
/// overwritten); `target` not valid UTF-8 → `Invalid`; the copy cannot be written (no such
/// directory, disk full) or the store is busy past the busy timeout → `Unavailable`/`Invalid`
/// (the cause logged).
pub async fn backup_to(pools: &SqlitePools, target: impl AsRef<Path>) -> BusResult<()> {
    let target = target.as_ref().to_owned();
    if std::fs::symlink_metadata(&target).is_ok() {
        return Err(BusError::conflict(format!(
            "backup target {} already exists",
            target.display()
        )));
    }
    let name = target
        .to_str()
        .ok_or_else(|| BusError::invalid("the backup target path is not UTF-8"))?
        .to_owned();
    let what = "backup";
    let mut conn = pools.side_connection().await?;
    let copied = sqlx::query("VACUUM INTO ?")
        .bind(&name)
        .execute(&mut conn)
        .await
        .map_err(pools.db(what));
    let _ = conn.close().await;
    copied?;
    tokio::task::spawn_blocking(move || -> std::io::Result<()> {
        std::fs::File::open(&target)?.sync_all()?;
        if let Some(dir) = target.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::File::open(dir)?.sync_all()?;
        }
        Ok(())
    })
    .await
    .map_err(|_| BusError::unavailable("backup: the fsync task ended"))?
    .map_err(|e| BusError::unavailable_from("backup: fsync of the copy", e))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn created() -> SqliteConfig {
        SqliteConfig {
            create_if_missing: true,
            ..SqliteConfig::default()
        }
    }

    #[tokio::test]
    async fn a_missing_store_is_not_provisioned_naming_the_path() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("absent.db");
        let e = open(&path, &SqliteConfig::default()).await.unwrap_err();
        assert!(matches!(e, BusError::NotProvisioned { .. }), "{e:?}");
        assert!(e.to_string().contains("absent.db"), "{e}");
        assert!(!path.exists(), "nothing is created");
    }

    #[tokio::test]
    async fn a_file_that_is_not_a_database_is_unavailable_and_its_text_stays_in_the_log() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("garbage.db");
        std::fs::write(&path, vec![0x5a_u8; 8192]).unwrap();
        let e = open(&path, &SqliteConfig::default()).await.unwrap_err();
        assert!(matches!(e, BusError::Unavailable { .. }), "{e:?}");
        let text = e.to_string();
        assert!(text.contains("garbage.db"), "the file is named: {text}");
        assert!(
            !text.contains("code: 26"),
            "SQLite's own text stays out: {text}"
        );
    }

    #[tokio::test]
    async fn a_directory_or_no_read_connections_is_invalid() {
        let dir = tempfile::tempdir().unwrap();
        let e = open(dir.path(), &created()).await.unwrap_err();
        assert!(matches!(e, BusError::Invalid { .. }), "{e:?}");
        let none = SqliteConfig {
            read_connections: 0,
            ..created()
        };
        let e = open(dir.path().join("x.db"), &none).await.unwrap_err();
        assert!(matches!(e, BusError::Invalid { .. }), "{e:?}");
    }

    #[tokio::test]
    async fn a_created_store_runs_in_wal_with_full_sync_and_foreign_keys() {
        let dir = tempfile::tempdir().unwrap();
        let pools = open(dir.path().join("bus.db"), &created()).await.unwrap();
        for pool in [pools.writer(), pools.reader()] {
            let mode: String = sqlx::query_scalar("PRAGMA journal_mode")
                .fetch_one(pool)
                .await
                .unwrap();
            assert_eq!(mode, "wal");
            let sync: i64 = sqlx::query_scalar("PRAGMA synchronous")
                .fetch_one(pool)
                .await
                .unwrap();
            assert_eq!(sync, 2, "FULL");
            let fk: i64 = sqlx::query_scalar("PRAGMA foreign_keys")
                .fetch_one(pool)
                .await
                .unwrap();
            assert_eq!(fk, 1);
            let busy: i64 = sqlx::query_scalar("PRAGMA busy_timeout")
                .fetch_one(pool)
                .await
                .unwrap();
            assert_eq!(busy, 5000);
        }
        let refused = sqlx::query("CREATE TABLE t (x INTEGER)")
            .execute(pools.reader())
            .await
            .unwrap_err();
        assert!(matches!(
            pools.bus_error(refused, "t"),
            BusError::Invalid { .. }
        ));
        pools.close().await;
    }

    #[tokio::test]
    async fn backup_refuses_an_existing_target() {
        let dir = tempfile::tempdir().unwrap();
        let pools = open(dir.path().join("bus.db"), &created()).await.unwrap();
        let target = dir.path().join("copy.db");
        std::fs::write(&target, b"keep me").unwrap();
        let e = backup_to(&pools, &target).await.unwrap_err();
        assert!(matches!(e, BusError::Conflict { .. }), "{e:?}");
        assert_eq!(std::fs::read(&target).unwrap(), b"keep me");
        let fresh = dir.path().join("fresh.db");
        backup_to(&pools, &fresh).await.unwrap();
        assert!(fresh.exists());
        pools.close().await;
    }
}
