//! Rows written per table through the store's write connection ([`WriteCounts`]). SQLite keeps
//! no per-table write counters (Postgres has `pg_stat_user_tables`), so the adapter counts them
//! when asked ([`crate::SqliteConfig::count_rows`]: the write audit and the tests that read the
//! counts; off by default, so a production server runs no hook): [`crate::open`] then installs
//! SQLite's update hook (`sqlite3_update_hook`, through sqlx's
//! `LockedSqliteHandle::set_update_hook`) on every connection of the write pool, and the hook
//! adds one to the table's insert, update or delete counter for each row it is told about.
//!
//! # What is counted, and what is not
//!
//! - Every row an `INSERT`, `UPDATE` or `DELETE` on the write connection changes, each under its
//!   own table — an upsert's `DO UPDATE` as an update, rows a foreign key's `ON DELETE CASCADE`
//!   deletes under the child table — counted when the statement changes the row, so rows of a
//!   transaction that is later rolled back count too (as Postgres's `n_tup_ins`, `n_tup_upd` and
//!   `n_tup_del` do).
//! - Not counted, because SQLite does not call the hook for them: rows of `WITHOUT ROWID` tables
//!   (the schema has none of its own; a test of this module fails when a migration adds one; the
//!   FTS5 search index's shadow tables `message_search_fts_idx` and `message_search_fts_config`
//!   are, so their writes are not counted — its `_data` and `_docsize` tables and
//!   `message_search`, one row per indexed message, are), rows deleted
//!   by the truncate optimisation (a `DELETE` without `WHERE` on a table without triggers; the
//!   adapter issues none), rows deleted by `REPLACE` conflict resolution (the adapter uses none),
//!   and SQLite's internal tables (`sqlite_sequence`, `sqlite_stat1`).
//! - Only this process's write pool: writes made by another process on the same file (an
//!   operator command such as `crewbus team add`, `crewbus-load` creating its teams) and by a
//!   [`crate::SqlitePools::side_connection`] are not counted. The read pool cannot write.
//!
//! The counters start at zero when the store is opened (migrations applied by this process
//! count) and only grow. The hook runs on the connection's worker thread inside every statement,
//! so it does no more than a read lock and an atomic add (a write lock the first time a table is
//! written).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use sqlx::sqlite::{SqliteOperation, UpdateHookResult};

/// Rows one table's writes changed since the store was opened (see the module docs for what is
/// counted). Each field is a count of rows.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TableWrites {
    /// The table's name; `<schema>.<table>` for a table outside the main database (`temp`).
    pub table: String,
    /// Rows inserted.
    pub inserted: u64,
    /// Rows updated (an upsert that updates counts here, not as an insert).
    pub updated: u64,
    /// Rows deleted (a foreign key's cascade included).
    pub deleted: u64,
}

/// The per-table row counters of one open store, fed by SQLite's update hook on the write
/// connection. Cheap to clone: every clone shares the counters.
#[derive(Clone, Default)]
pub struct WriteCounts {
    tables: Arc<RwLock<HashMap<String, [AtomicU64; 3]>>>,
}

impl std::fmt::Debug for WriteCounts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WriteCounts")
            .field("tables", &self.snapshot().len())
            .finish()
    }
}

impl WriteCounts {
    /// Every table written since the store was opened, sorted by name, with its counts now. A
    /// table nothing was written to is absent (read its counts as zero).
    pub fn snapshot(&self) -> Vec<TableWrites> {
        let tables = self.tables.read().unwrap_or_else(|e| e.into_inner());
        let mut out: Vec<TableWrites> = tables
            .iter()
            .map(|(table, [ins, upd, del])| TableWrites {
                table: table.clone(),
                inserted: ins.load(Ordering::Relaxed),
                updated: upd.load(Ordering::Relaxed),
                deleted: del.load(Ordering::Relaxed),
            })
            .collect();
        out.sort_by(|a, b| a.table.cmp(&b.table));
        out
    }

    /// The update hook: one row of `row.table` inserted, updated or deleted.
    pub(crate) fn record(&self, row: &UpdateHookResult<'_>) {
        let op = match row.operation {
            SqliteOperation::Insert => 0,
            SqliteOperation::Update => 1,
            SqliteOperation::Delete => 2,
            SqliteOperation::Unknown(_) => return,
        };
        let qualified;
        let table = if row.database == "main" {
            row.table
        } else {
            qualified = format!("{}.{}", row.database, row.table);
            qualified.as_str()
        };
        {
            let tables = self.tables.read().unwrap_or_else(|e| e.into_inner());
            if let Some(counters) = tables.get(table) {
                counters[op].fetch_add(1, Ordering::Relaxed);
                return;
            }
        }
        let mut tables = self.tables.write().unwrap_or_else(|e| e.into_inner());
        tables.entry(table.to_owned()).or_default()[op].fetch_add(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use sqlx::Acquire as _;

    use crate::{SqliteConfig, SqlitePools, migrate, open};

    use super::TableWrites;

    async fn store(dir: &tempfile::TempDir) -> SqlitePools {
        let config = SqliteConfig {
            create_if_missing: true,
            count_rows: true,
            ..SqliteConfig::default()
        };
        let pools = open(dir.path().join("bus.db"), &config).await.unwrap();
        migrate(&pools).await.unwrap();
        pools
    }

    fn of(pools: &SqlitePools, table: &str) -> (u64, u64, u64) {
        pools
            .write_counts()
            .snapshot()
            .into_iter()
            .find(|t| t.table == table)
            .map_or((0, 0, 0), |t: TableWrites| {
                (t.inserted, t.updated, t.deleted)
            })
    }

    #[tokio::test]
    async fn every_row_of_a_write_is_counted_under_its_table() {
        let dir = tempfile::tempdir().unwrap();
        let pools = store(&dir).await;
        let w = pools.writer();
        sqlx::query("CREATE TABLE parent (id INTEGER PRIMARY KEY, v TEXT)")
            .execute(w)
            .await
            .unwrap();
        sqlx::query(
            "CREATE TABLE child (id INTEGER PRIMARY KEY, \
             parent INTEGER NOT NULL REFERENCES parent (id) ON DELETE CASCADE)",
        )
        .execute(w)
        .await
        .unwrap();
        sqlx::query("INSERT INTO parent (id, v) VALUES (1, 'a'), (2, 'b'), (3, 'c')")
            .execute(w)
            .await
            .unwrap();
        sqlx::query("INSERT INTO child (parent) VALUES (1), (1), (2)")
            .execute(w)
            .await
            .unwrap();
        sqlx::query("UPDATE parent SET v = 'z' WHERE id >= 2")
            .execute(w)
            .await
            .unwrap();
        // An upsert that updates is an update.
        sqlx::query(
            "INSERT INTO parent (id, v) VALUES (3, 'c') ON CONFLICT (id) DO UPDATE SET v = 'y'",
        )
        .execute(w)
        .await
        .unwrap();
        // The cascade's deletes are counted under the child table.
        sqlx::query("DELETE FROM parent WHERE id = 1")
            .execute(w)
            .await
            .unwrap();
        // A rolled-back transaction's rows count too (as Postgres's counters).
        let mut conn = w.acquire().await.unwrap();
        let mut tx = conn.begin().await.unwrap();
        sqlx::query("INSERT INTO parent (id, v) VALUES (9, 'x')")
            .execute(&mut *tx)
            .await
            .unwrap();
        tx.rollback().await.unwrap();
        drop(conn);
        assert_eq!(of(&pools, "parent"), (4, 3, 1));
        assert_eq!(of(&pools, "child"), (3, 0, 2));
        assert_eq!(of(&pools, "never_written"), (0, 0, 0));
        let names: Vec<String> = pools
            .write_counts()
            .snapshot()
            .into_iter()
            .map(|t| t.table)
            .collect();
        let mut sorted = names.clone();
        sorted.sort();
        assert_eq!(names, sorted, "sorted by table");
        assert!(
            names.iter().any(|n| n == "_sqlx_migrations"),
            "the migrations this process applied count: {names:?}"
        );
        pools.close().await;
    }

    #[tokio::test]
    async fn a_replaced_write_connection_is_counted_too() {
        let dir = tempfile::tempdir().unwrap();
        let pools = store(&dir).await;
        sqlx::query("CREATE TABLE t (x INTEGER)")
            .execute(pools.writer())
            .await
            .unwrap();
        // Close the one write connection (as `migrate` does after a failure): the pool opens a
        // new one, and the hook is installed on it as on the first.
        pools
            .writer()
            .acquire()
            .await
            .unwrap()
            .close()
            .await
            .unwrap();
        sqlx::query("INSERT INTO t (x) VALUES (1), (2)")
            .execute(pools.writer())
            .await
            .unwrap();
        assert_eq!(of(&pools, "t"), (2, 0, 0));
        // Writes of another connection to the file (another process, a side connection) are
        // not this store's counts.
        let mut side = pools.side_connection().await.unwrap();
        sqlx::query("INSERT INTO t (x) VALUES (3)")
            .execute(&mut side)
            .await
            .unwrap();
        assert_eq!(of(&pools, "t"), (2, 0, 0));
        pools.close().await;
    }

    /// Without `count_rows` (the default) no hook is installed: nothing is counted.
    #[tokio::test]
    async fn rows_are_counted_only_when_asked() {
        let dir = tempfile::tempdir().unwrap();
        let config = SqliteConfig {
            create_if_missing: true,
            ..SqliteConfig::default()
        };
        assert!(!config.count_rows, "off by default");
        let pools = open(dir.path().join("bus.db"), &config).await.unwrap();
        migrate(&pools).await.unwrap();
        sqlx::query("CREATE TABLE t (x INTEGER)")
            .execute(pools.writer())
            .await
            .unwrap();
        sqlx::query("INSERT INTO t (x) VALUES (1), (2)")
            .execute(pools.writer())
            .await
            .unwrap();
        assert!(pools.write_counts().snapshot().is_empty());
        pools.close().await;
    }

    /// The update hook does not fire for `WITHOUT ROWID` tables: a migration adding one must
    /// say so in the module docs and in what `/metrics` reports, not count zero silently. FTS5
    /// makes two for the search index (said in the module docs).
    #[tokio::test]
    async fn no_table_of_the_schema_is_without_rowid() {
        let dir = tempfile::tempdir().unwrap();
        let pools = store(&dir).await;
        let without: Vec<String> = sqlx::query_scalar(
            "SELECT name FROM sqlite_schema WHERE type = 'table' \
             AND upper(sql) LIKE '%WITHOUT%ROWID%' \
             AND name NOT IN ('message_search_fts_idx', 'message_search_fts_config')",
        )
        .fetch_all(pools.reader())
        .await
        .unwrap();
        assert!(without.is_empty(), "WITHOUT ROWID tables: {without:?}");
        let tables: i64 =
            sqlx::query_scalar("SELECT count(*) FROM sqlite_schema WHERE type = 'table'")
                .fetch_one(pools.reader())
                .await
                .unwrap();
        assert!(tables >= 10, "the schema was read ({tables} tables)");
        pools.close().await;
    }
}
