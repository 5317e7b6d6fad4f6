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
//! # Checked at start, emptied at a clean stop
//!
//! A server checks the file before it serves it ([`check_integrity`]: SQLite's `quick_check`,
//! whole after an unclean stop, within a time budget after a clean one) and refuses a damaged
//! one; its clean stop copies the write-ahead log into the file and empties it
//! ([`checkpoint`]), which is also how the next start tells a clean stop from another.
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
//!
//! # Rows written per table
//!
//! SQLite keeps no per-table write counters, so, when opened with [`SqliteConfig::count_rows`]
//! (the write audit, tests; off by default), every write connection counts the rows it inserts,
//! updates and deletes per table, from SQLite's update hook ([`SqlitePools::write_counts`],
//! [`WriteCounts`]: what the hook does not see is listed there).
#![warn(missing_docs)]

mod codec;
mod connect;
mod dialect;
mod error;
mod group_commit;
mod integrity;
mod ledger;
#[cfg(test)]
mod plans;
mod push_store;
mod write_counts;

pub use connect::{SqliteConfig, SqlitePools, backup_to, open};
pub use integrity::{Integrity, IntegrityCheck, check_integrity, checkpoint};
pub use ledger::SqliteLedger;
pub use write_counts::{TableWrites, WriteCounts};

use std::collections::HashMap;

pub use dialect::Lite;

/// One tenant's runs and journals in this store (`SqliteJournal::new(pools, tenant)`; the ledger's
/// `journal()` gives the one over its store and tenant).
pub type SqliteJournal = crewbus_sql::journal::SqlJournal<Lite>;

/// One team's bodies in this store's `bodies` table, the table the ledger's send transaction
/// writes for its own conversations (`SqliteBackend::new(pools, team, clock, &settings)`).
pub type SqliteBackend = crewbus_sql::body::SqlBodies<Lite>;

/// One team's inbox as this store's queue table, `inbox_queue`
/// (`SqliteInbox::new(pools, team, clock, &settings)`).
pub type SqliteInbox = crewbus_sql::inbox::SqlInbox<Lite>;

/// What this store's body backend and inbox are configured with.
pub type SqliteSettings = crewbus_sql::settings::SqlSettings;

/// The registry of this store's per-team body backends and inboxes, answering for [`NAME`]
/// (`SqliteBackends::new(pools, clock, settings)`).
pub type SqliteBackends = crewbus_sql::registry::SqlBackends<Lite>;

/// One tenant's push registrations and their cursors (`SqlitePushStore::new(pools, tenant)`).
pub type SqlitePushStore = crewbus_sql::push_store::SqlPushStore<Lite>;

use crewbus_domain::{BusError, BusResult};
use sqlx::migrate::{Migrate, MigrateError, Migration, Migrator};
use sqlx::{Executor, SqliteConnection};

/// The backend name SQLite answers for (`MessagingBackend::name`, `Backends::name`, the scheme
/// of its locators).
pub const NAME: &str = "sqlite";

/// The embedded migrations (`adapters/sqlite/migrations`). Apply them with [`migrate`], not
/// with `MIGRATOR.run`: sqlx's SQLite runner (0.8) runs every migration inside a transaction and
/// ignores a file's `-- no-transaction` marker, and a migration that rebuilds a referenced table
/// needs foreign keys off, which SQLite refuses to change inside a transaction.
pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations");

/// Applies every pending migration to the store behind `pools`, in version order, on the write
/// connection; the server calls it at start-up.
///
/// A migration runs in one transaction with its bookkeeping row, as sqlx runs it, unless its file
/// starts with `-- no-transaction`: then the file runs as written, outside any transaction (it
/// opens and commits its own, and may turn foreign keys off around it), `PRAGMA
/// foreign_key_check` must then find nothing, and only then is it recorded as applied. Whatever
/// happens, the write connection is left as [`open`] made it: no transaction open, foreign keys
/// on (read back; after a failure the connection is closed and the pool opens a fresh one).
///
/// Idempotent (applied migrations are skipped). Errors: the store busy or unreachable →
/// `Unavailable`; a migration refused, an applied migration changed since or unknown to this
/// build, a failed one recorded, or a foreign key broken by a no-transaction migration →
/// `Conflict` (the schema needs an operator); the cause is logged.
pub async fn migrate(pools: &SqlitePools) -> BusResult<()> {
    migrate_with(pools, &MIGRATOR).await
}

/// [`migrate`] with only the migrations whose version is at most `version`: the store as a build
/// whose last migration was `version` left it, for upgrade tests that load an older build's data
/// (`app/tests/it/upgrade_fixtures.rs`) and then let the server apply the rest. Versions are this
/// build's (`MIGRATOR`; `YYYYMMDDNNNNNN` numbers); a `version` older than every migration applies
/// none (the bookkeeping table is still made).
///
/// Errors: as [`migrate`]; a store that already has a migration above `version` → `Conflict`
/// (sqlx's check: an applied migration unknown to the filtered list).
pub async fn migrate_to(pools: &SqlitePools, version: i64) -> BusResult<()> {
    let migrator = Migrator {
        migrations: std::borrow::Cow::Owned(
            MIGRATOR
                .iter()
                .filter(|m| m.version <= version)
                .cloned()
                .collect(),
        ),
        ..Migrator::DEFAULT
    };
    migrate_with(pools, &migrator).await
}

/// [`migrate`] with the migrations of `migrator`.
async fn migrate_with(pools: &SqlitePools, migrator: &Migrator) -> BusResult<()> {
    let what = "migrations";
    let mut conn = pools.writer().acquire().await.map_err(pools.db(what))?;
    let applied = apply_pending(&mut conn, migrator).await;
    let restored = restore_connection(&mut conn).await;
    if applied.is_err() || restored.is_err() {
        // Whatever a failed migration left on the connection (its transaction open, foreign
        // keys off), the pool's replacement, opened with `open`'s options, has none of it.
        let _ = conn.close().await;
    }
    match applied {
        Ok(()) => {}
        Err(Refused::Migrate(MigrateError::Execute(e))) => return Err(pools.bus_error(e, what)),
        Err(Refused::Migrate(e)) => {
            tracing::error!(error = %e, "sqlite migrations refused");
            return Err(BusError::conflict(
                "sqlite schema: migrations could not be applied",
            ));
        }
        Err(Refused::ForeignKeys {
            version,
            violations,
        }) => {
            tracing::error!(
                version,
                violations,
                "sqlite migration left rows referencing nothing; not recorded as applied"
            );
            return Err(BusError::conflict(format!(
                "sqlite schema: migration {version} broke {violations} foreign key reference(s)"
            )));
        }
    }
    restored.map_err(pools.db(what))
}

/// Why [`apply_pending`] stopped.
enum Refused {
    /// sqlx's refusal: a statement failed, a checksum differs, a version is unknown or dirty.
    Migrate(MigrateError),
    /// A no-transaction migration committed, but `foreign_key_check` found `violations` rows.
    ForeignKeys { version: i64, violations: i64 },
}

impl From<MigrateError> for Refused {
    fn from(e: MigrateError) -> Self {
        Refused::Migrate(e)
    }
}

impl From<sqlx::Error> for Refused {
    fn from(e: sqlx::Error) -> Self {
        Refused::Migrate(MigrateError::Execute(e))
    }
}

/// sqlx's `Migrator::run` (the same checks: no dirty version, every applied version known with
/// its checksum unchanged), except that a `-- no-transaction` migration runs outside a
/// transaction ([`apply_outside_a_transaction`]).
async fn apply_pending(conn: &mut SqliteConnection, migrator: &Migrator) -> Result<(), Refused> {
    conn.ensure_migrations_table().await?;
    if let Some(version) = conn.dirty_version().await? {
        return Err(MigrateError::Dirty(version).into());
    }
    let applied: HashMap<i64, Vec<u8>> = conn
        .list_applied_migrations()
        .await?
        .into_iter()
        .map(|m| (m.version, m.checksum.into_owned()))
        .collect();
    if let Some(unknown) = applied
        .keys()
        .find(|v| !migrator.iter().any(|m| m.version == **v))
    {
        return Err(MigrateError::VersionMissing(*unknown).into());
    }
    for migration in migrator
        .iter()
        .filter(|m| !m.migration_type.is_down_migration())
    {
        match applied.get(&migration.version) {
            Some(checksum) if checksum[..] != migration.checksum[..] => {
                return Err(MigrateError::VersionMismatch(migration.version).into());
            }
            Some(_) => {}
            None if migration.no_tx => apply_outside_a_transaction(conn, migration).await?,
            None => {
                conn.apply(migration).await?;
            }
        }
    }
    Ok(())
}

/// Runs a `-- no-transaction` migration as written, checks every foreign key, then records it
/// as applied. A statement that fails before the file's `COMMIT` leaves its transaction open: it
/// is rolled back here, and nothing of the file is kept. Whatever failed, the file is not
/// recorded and the next start runs it again, so such a file is written to be run again (the
/// message table's rebuild is: it copies the table into the same shape).
async fn apply_outside_a_transaction(
    conn: &mut SqliteConnection,
    migration: &Migration,
) -> Result<(), Refused> {
    let started = std::time::Instant::now();
    if let Err(e) = conn.execute(&*migration.sql).await {
        // The failure may have come before the file's BEGIN or after its COMMIT, with no
        // transaction to roll back: that refusal is expected and not the error to report.
        let _ = conn.execute("ROLLBACK").await;
        return Err(MigrateError::ExecuteMigration(e, migration.version).into());
    }
    let violations: i64 = sqlx::query_scalar("SELECT count(*) FROM pragma_foreign_key_check")
        .fetch_one(&mut *conn)
        .await?;
    if violations > 0 {
        return Err(Refused::ForeignKeys {
            version: migration.version,
            violations,
        });
    }
    let nanos = i64::try_from(started.elapsed().as_nanos()).unwrap_or(i64::MAX);
    sqlx::query(
        "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time)
         VALUES (?1, ?2, TRUE, ?3, ?4)",
    )
    .bind(migration.version)
    .bind(&*migration.description)
    .bind(&*migration.checksum)
    .bind(nanos)
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// Puts the write connection back as [`open`] configured it, after the migrations (a
/// no-transaction migration turns foreign keys off; one that failed part-way may have left
/// them off): foreign keys on, read back to be sure.
async fn restore_connection(conn: &mut SqliteConnection) -> Result<(), sqlx::Error> {
    conn.execute("PRAGMA foreign_keys = ON").await?;
    let on: i64 = sqlx::query_scalar("PRAGMA foreign_keys")
        .fetch_one(&mut *conn)
        .await?;
    if on == 1 {
        Ok(())
    } else {
        // Only inside a transaction does SQLite ignore the pragma: one was left open.
        Err(sqlx::Error::Protocol(
            "the write connection's foreign keys stayed off after the migrations".into(),
        ))
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

    #[tokio::test]
    async fn migrate_to_stops_at_the_version_and_migrate_applies_the_rest() {
        let versions: Vec<i64> = MIGRATOR.iter().map(|m| m.version).collect();
        let (first, last) = (versions[0], *versions.last().unwrap());
        let (_dir, pools) = fresh().await;
        migrate_to(&pools, first).await.unwrap();
        let applied = |pools: SqlitePools| async move {
            sqlx::query_scalar::<_, i64>("SELECT version FROM _sqlx_migrations ORDER BY 1")
                .fetch_all(pools.reader())
                .await
                .unwrap()
        };
        assert_eq!(applied(pools.clone()).await, [first]);
        assert!(matches!(
            check_schema(&pools).await,
            Err(BusError::NotProvisioned { .. })
        ));
        migrate(&pools).await.unwrap();
        assert_eq!(applied(pools.clone()).await, versions);
        // Asked for less than the store has: refused, nothing changed.
        if first != last {
            let e = migrate_to(&pools, first).await.unwrap_err();
            assert!(matches!(e, BusError::Conflict { .. }), "{e:?}");
        }
        check_schema(&pools).await.unwrap();
        pools.close().await;
    }

    use std::borrow::Cow;

    use sqlx::migrate::MigrationType;

    /// A parent table and a child referencing it `ON DELETE CASCADE`, with one row each.
    const PARENT_AND_CHILD: &str = "
        CREATE TABLE parent (id INTEGER PRIMARY KEY, x TEXT NOT NULL) STRICT;
        CREATE TABLE child (parent_id INTEGER NOT NULL REFERENCES parent (id) ON DELETE CASCADE)
            STRICT;
        INSERT INTO parent VALUES (1, 'one');
        INSERT INTO child VALUES (1);";

    /// `parent` rebuilt as the message table's migration rebuilds it, then `tail` before the
    /// commit.
    fn rebuild_parent(tail: &str) -> String {
        format!(
            "-- no-transaction
             PRAGMA foreign_keys = OFF;
             BEGIN IMMEDIATE;
             CREATE TABLE parent_new (id INTEGER PRIMARY KEY, x TEXT NOT NULL UNIQUE) STRICT;
             INSERT INTO parent_new SELECT id, x FROM parent;
             DROP TABLE parent;
             ALTER TABLE parent_new RENAME TO parent;
             {tail}
             COMMIT;
             PRAGMA foreign_keys = ON;"
        )
    }

    fn migrator(second: String) -> Migrator {
        let m = |version, sql: String| {
            let no_tx = sql.starts_with("-- no-transaction");
            Migration::new(
                version,
                Cow::Owned(format!("m{version}")),
                MigrationType::Simple,
                Cow::Owned(sql),
                no_tx,
            )
        };
        Migrator {
            migrations: Cow::Owned(vec![m(1, PARENT_AND_CHILD.to_owned()), m(2, second)]),
            ..Migrator::DEFAULT
        }
    }

    async fn fresh() -> (tempfile::TempDir, SqlitePools) {
        let dir = tempfile::tempdir().unwrap();
        let config = SqliteConfig {
            create_if_missing: true,
            ..SqliteConfig::default()
        };
        let pools = open(dir.path().join("bus.db"), &config).await.unwrap();
        (dir, pools)
    }

    /// The child rows, the versions recorded, and the write connection's `foreign_keys`.
    async fn state(pools: &SqlitePools) -> (i64, Vec<i64>, i64) {
        let children = sqlx::query_scalar("SELECT count(*) FROM child")
            .fetch_one(pools.reader())
            .await
            .unwrap();
        let versions = sqlx::query_scalar("SELECT version FROM _sqlx_migrations ORDER BY 1")
            .fetch_all(pools.reader())
            .await
            .unwrap();
        let foreign_keys = sqlx::query_scalar("PRAGMA foreign_keys")
            .fetch_one(pools.writer())
            .await
            .unwrap();
        (children, versions, foreign_keys)
    }

    #[tokio::test]
    async fn a_no_transaction_migration_rebuilds_a_parent_table_keeping_its_children() {
        let (_dir, pools) = fresh().await;
        let migrator = migrator(rebuild_parent(""));
        migrate_with(&pools, &migrator).await.unwrap();
        assert_eq!(
            state(&pools).await,
            (1, vec![1, 2], 1),
            "children kept, fks on"
        );
        // The write connection is usable and enforces foreign keys.
        let mut tx = pools.begin("t").await.unwrap();
        let orphan = sqlx::query("INSERT INTO child VALUES (9)")
            .execute(&mut *tx)
            .await
            .unwrap_err();
        assert!(matches!(
            pools.bus_error(orphan, "t"),
            BusError::NotFound { .. }
        ));
        drop(tx);
        migrate_with(&pools, &migrator).await.unwrap();
        assert_eq!(state(&pools).await, (1, vec![1, 2], 1), "applied once");
        pools.close().await;
    }

    #[tokio::test]
    async fn a_no_transaction_migration_that_fails_part_way_is_rolled_back_and_not_recorded() {
        let (_dir, pools) = fresh().await;
        // Its own check finds the orphan it made (as the message table's migration checks) and
        // fails the statement, inside the file's transaction.
        let failing = rebuild_parent(
            "DELETE FROM parent;
             CREATE TEMP TABLE foreign_key_violations (found INTEGER NOT NULL CHECK (found = 0))
                 STRICT;
             INSERT INTO temp.foreign_key_violations SELECT count(*) FROM pragma_foreign_key_check;",
        );
        let e = migrate_with(&pools, &migrator(failing)).await.unwrap_err();
        assert!(matches!(e, BusError::Conflict { .. }), "{e:?}");
        assert_eq!(state(&pools).await, (1, vec![1], 1), "rolled back, fks on");
        let parents: Vec<String> = sqlx::query_scalar("SELECT x FROM parent")
            .fetch_all(pools.reader())
            .await
            .unwrap();
        assert_eq!(parents, ["one"], "the old table as it was");
        // The corrected migration applies on the next start.
        migrate_with(&pools, &migrator(rebuild_parent("")))
            .await
            .unwrap();
        assert_eq!(state(&pools).await, (1, vec![1, 2], 1));
        pools.close().await;
    }

    #[tokio::test]
    async fn a_no_transaction_migration_that_breaks_a_foreign_key_is_not_recorded() {
        let (_dir, pools) = fresh().await;
        // No check of its own: it commits a parent-less child, which the runner finds.
        let breaking = rebuild_parent("DELETE FROM parent;");
        let e = migrate_with(&pools, &migrator(breaking)).await.unwrap_err();
        assert!(matches!(e, BusError::Conflict { .. }), "{e:?}");
        assert_eq!(state(&pools).await, (1, vec![1], 1), "not recorded, fks on");
        pools.close().await;
    }
}
