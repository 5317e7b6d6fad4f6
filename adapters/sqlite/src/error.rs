//! The one place database errors are classified — by SQLite's extended result code and sqlx's
//! error kind, never by message text — and turned into the bus's [`BusError`] or the stores'
//! [`StoreError`]. The database's own error is kept as the `source` of retryable and backend
//! errors and logged (one line of a kind per 5 s at most, counting the repeats); its text
//! (`database is locked`, …) never reaches a caller.
//!
//! A busy or locked database (`SQLITE_BUSY`, `SQLITE_LOCKED` and their extended codes), met once
//! the busy timeout has run out, is `Unavailable` (retryable, 503) and counted on the
//! [`BusyCounter`] of the pools the statement ran on ([`crate::SqlitePools::busy_errors`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use crewbus_domain::{BusError, RepeatedWarnings, StoreError};

/// SQLite result codes the adapter classifies (<https://www.sqlite.org/rescode.html>). The
/// primary code is the low byte of the extended one.
pub(crate) mod code {
    /// `SQLITE_BUSY`: another connection holds the lock (after the busy timeout).
    pub(crate) const BUSY: i32 = 5;
    /// `SQLITE_LOCKED`: a conflict inside one connection or shared cache.
    pub(crate) const LOCKED: i32 = 6;
    /// `SQLITE_NOMEM`.
    pub(crate) const NOMEM: i32 = 7;
    /// `SQLITE_READONLY`: a write on a read-only (or `query_only`) connection.
    pub(crate) const READONLY: i32 = 8;
    /// `SQLITE_INTERRUPT`.
    pub(crate) const INTERRUPT: i32 = 9;
    /// `SQLITE_IOERR` (and its extended codes).
    pub(crate) const IOERR: i32 = 10;
    /// `SQLITE_CORRUPT`: the database file is damaged.
    pub(crate) const CORRUPT: i32 = 11;
    /// `SQLITE_FULL`: the disk is full.
    pub(crate) const FULL: i32 = 13;
    /// `SQLITE_CANTOPEN`.
    pub(crate) const CANTOPEN: i32 = 14;
    /// `SQLITE_PROTOCOL`: a WAL locking race that did not resolve.
    pub(crate) const PROTOCOL: i32 = 15;
    /// `SQLITE_TOOBIG`: a string or blob above the length limit.
    pub(crate) const TOOBIG: i32 = 18;
    /// `SQLITE_CONSTRAINT`.
    pub(crate) const CONSTRAINT: i32 = 19;
    /// `SQLITE_MISMATCH`: a datatype mismatch.
    pub(crate) const MISMATCH: i32 = 20;
    /// `SQLITE_RANGE`: a bind parameter index out of range.
    pub(crate) const RANGE: i32 = 25;
    /// `SQLITE_NOTADB`: the file is not a SQLite database.
    pub(crate) const NOTADB: i32 = 26;
    /// `SQLITE_CONSTRAINT_FOREIGNKEY`.
    pub(crate) const CONSTRAINT_FOREIGNKEY: i32 = 787;
    /// `SQLITE_CONSTRAINT_PRIMARYKEY`.
    pub(crate) const CONSTRAINT_PRIMARYKEY: i32 = 1555;
    /// `SQLITE_CONSTRAINT_UNIQUE`.
    pub(crate) const CONSTRAINT_UNIQUE: i32 = 2067;
}

/// Counts busy or locked errors (after the busy timeout) of one set of pools. Cheap to clone;
/// every clone counts into the same total.
#[derive(Debug, Clone, Default)]
pub(crate) struct BusyCounter(Arc<AtomicU64>);

impl BusyCounter {
    /// How many busy or locked errors were met so far.
    pub(crate) fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }

    fn bump(&self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

/// What a database error means for the caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Class {
    /// A unique or primary key violation: the row is already recorded.
    Conflict,
    /// A foreign key violation, or no row: something referenced does not exist.
    NotFound,
    /// Another constraint (CHECK, NOT NULL, datatype), a value too big or mismatched: the input
    /// was refused.
    Refused,
    /// `SQLITE_BUSY` / `SQLITE_LOCKED` after the busy timeout: retry later (counted).
    Busy,
    /// I/O errors, a full disk, a file that cannot be opened, out of memory, the pool closed or
    /// timed out, the worker thread gone: retry later.
    Unavailable,
    /// `SQLITE_INTERRUPT`: the statement was interrupted.
    Timeout,
    /// `SQLITE_CORRUPT` / `SQLITE_NOTADB`: the file is damaged or not a database; an operator
    /// must restore it. The server's fault, never the request's: retryable `Unavailable` (503),
    /// logged as an error.
    Damaged,
    /// Anything else (`SQLITE_ERROR` for a statement SQLite refuses, a read-only connection
    /// asked to write, stored data that cannot be decoded): a bug a retry will not fix.
    Internal,
}

/// Classifies a sqlx error: the single decision table of the adapter.
pub(crate) fn classify(err: &sqlx::Error) -> Class {
    use sqlx::Error as E;
    match err {
        E::Database(db) => {
            let extended: i32 = db.code().and_then(|c| c.parse().ok()).unwrap_or(0);
            match (extended, extended & 0xff) {
                (code::CONSTRAINT_UNIQUE | code::CONSTRAINT_PRIMARYKEY, _) => Class::Conflict,
                (code::CONSTRAINT_FOREIGNKEY, _) => Class::NotFound,
                (_, code::CONSTRAINT | code::TOOBIG | code::MISMATCH | code::RANGE) => {
                    Class::Refused
                }
                (_, code::BUSY | code::LOCKED) => Class::Busy,
                (_, code::IOERR | code::FULL | code::CANTOPEN | code::NOMEM | code::PROTOCOL) => {
                    Class::Unavailable
                }
                (_, code::INTERRUPT) => Class::Timeout,
                (_, code::CORRUPT | code::NOTADB) => Class::Damaged,
                (_, code::READONLY) => Class::Internal,
                _ => Class::Internal,
            }
        }
        E::Io(_) | E::PoolClosed | E::PoolTimedOut | E::WorkerCrashed => Class::Unavailable,
        E::RowNotFound => Class::NotFound,
        _ => Class::Internal,
    }
}

/// The warnings and errors logged, by class and `what`: at most one line of a kind per
/// [`crewbus_domain::WARNING_PERIOD`], counting the occurrences (a damaged store fails every
/// worker pass and every request).
static REPEATED: RepeatedWarnings = RepeatedWarnings::new();

fn log(err: &sqlx::Error, class: Class, what: &str) {
    let due = || REPEATED.note(&format!("{class:?} {what}"), Instant::now());
    match class {
        Class::Busy | Class::Unavailable | Class::Timeout => {
            if let Some(repeated) = due() {
                tracing::warn!(what, error = %err, repeated, "sqlite unavailable")
            }
        }
        Class::Internal | Class::Damaged => {
            if let Some(repeated) = due() {
                tracing::error!(what, error = %err, repeated, "sqlite failure")
            }
        }
        Class::Conflict | Class::NotFound | Class::Refused => {
            tracing::debug!(what, error = %err, "sqlite refused")
        }
    }
}

/// Classifies, logs and counts (a busy error bumps `busy`).
fn classified(err: &sqlx::Error, what: &str, busy: &BusyCounter) -> Class {
    let class = classify(err);
    if class == Class::Busy {
        busy.bump();
    }
    log(err, class, what);
    class
}

/// Maps a sqlx error met while doing `what` (e.g. `"body store"`) to the bus's error:
/// `Conflict`, `NotFound`, `Invalid` (refused data, or an internal failure), retryable
/// `Unavailable` (busy, I/O, a damaged file; with the sqlx error as source) or `Timeout`.
/// `Display` carries only `what`. A busy error is counted on `busy`.
pub(crate) fn bus_error(err: sqlx::Error, what: &str, busy: &BusyCounter) -> BusError {
    match classified(&err, what, busy) {
        Class::Conflict => BusError::conflict(format!("{what}: already recorded")),
        Class::NotFound => BusError::not_found(format!("{what}: a referenced row")),
        Class::Refused => BusError::invalid(format!("{what}: refused by the database")),
        Class::Busy => BusError::unavailable_from(format!("sqlite busy ({what})"), err),
        Class::Unavailable => BusError::unavailable_from(format!("sqlite ({what})"), err),
        Class::Timeout => BusError::timeout(format!("sqlite ({what})")),
        Class::Internal => BusError::invalid(format!("{what}: the database failed the statement")),
        // The request was not wrong: a client that trusts status codes must not give up on it
        // (503 with Retry-After), and the operator sees the log's error.
        Class::Damaged => BusError::unavailable_from(
            format!(
                "{what}: the store file is damaged or not a SQLite database: an operator must \
                 restore it from a backup (`crewbus backup`), without a stale -wal/-shm file \
                 beside it"
            ),
            err,
        ),
    }
}

/// Maps a sqlx error met while doing `what` to the stores' error (journal, push store), by the
/// same classification: `Unavailable` (retryable: busy, I/O, interrupted, a damaged file) with
/// the sqlx error as source, `Conflict`, `NotFound`, `Invalid` for refused data, `Backend` for
/// the rest. A busy error is counted on `busy`.
pub(crate) fn store_error(err: sqlx::Error, what: &str, busy: &BusyCounter) -> StoreError {
    let class = classified(&err, what, busy);
    let source = || -> Option<crewbus_domain::Source> { Some(Arc::new(err)) };
    match class {
        Class::Conflict => StoreError::conflict(format!("{what}: already recorded")),
        Class::NotFound => StoreError::not_found(format!("{what}: a referenced row")),
        Class::Refused => StoreError::invalid(format!("{what}: refused by the database")),
        Class::Busy | Class::Unavailable | Class::Timeout | Class::Damaged => {
            StoreError::Unavailable {
                what: format!("sqlite ({what})"),
                source: source(),
            }
        }
        Class::Internal => StoreError::Backend {
            what: format!("sqlite ({what})"),
            source: source(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pool_and_io_errors_are_retryable_and_not_counted_as_busy() {
        let busy = BusyCounter::default();
        let io = || sqlx::Error::Io(std::io::Error::other("secret path detail"));
        let e = bus_error(io(), "body store", &busy);
        assert!(matches!(e, BusError::Unavailable { .. }));
        assert!(!e.to_string().contains("secret path detail"));
        assert!(std::error::Error::source(&e).is_some());
        assert!(store_error(io(), "journal", &busy).is_retryable());
        assert!(matches!(
            bus_error(sqlx::Error::PoolTimedOut, "x", &busy),
            BusError::Unavailable { .. }
        ));
        assert!(matches!(
            bus_error(sqlx::Error::RowNotFound, "x", &busy),
            BusError::NotFound { .. }
        ));
        assert!(matches!(
            store_error(sqlx::Error::RowNotFound, "x", &busy),
            StoreError::NotFound { .. }
        ));
        assert_eq!(busy.get(), 0);
    }

    /// What a statement on the file at `path` fails with (the file is read only by it).
    async fn failure(path: &std::path::Path) -> sqlx::Error {
        use sqlx::ConnectOptions as _;
        let conn = sqlx::sqlite::SqliteConnectOptions::new()
            .filename(path)
            .connect()
            .await;
        let mut conn = match conn {
            Ok(conn) => conn,
            Err(e) => return e,
        };
        sqlx::query("SELECT count(*) FROM sqlite_master")
            .execute(&mut conn)
            .await
            .expect_err("the file is damaged")
    }

    #[tokio::test]
    async fn a_damaged_file_is_the_servers_fault_unavailable_and_retryable() {
        let dir = tempfile::tempdir().unwrap();
        // Not a database at all (SQLITE_NOTADB), and a database cut short (SQLITE_CORRUPT).
        let garbage = dir.path().join("garbage.db");
        std::fs::write(&garbage, vec![0x5a_u8; 8192]).unwrap();
        let cut = dir.path().join("cut.db");
        {
            let mut conn = {
                use sqlx::ConnectOptions as _;
                sqlx::sqlite::SqliteConnectOptions::new()
                    .filename(&cut)
                    .create_if_missing(true)
                    .connect()
                    .await
                    .unwrap()
            };
            for i in 0..50 {
                sqlx::query(&format!("CREATE TABLE t{i} (x TEXT)"))
                    .execute(&mut conn)
                    .await
                    .unwrap();
            }
            sqlx::Connection::close(conn).await.unwrap();
            let len = std::fs::metadata(&cut).unwrap().len();
            let file = std::fs::OpenOptions::new().write(true).open(&cut).unwrap();
            file.set_len(len / 2).unwrap();
        }
        let busy = BusyCounter::default();
        for path in [&garbage, &cut] {
            assert_eq!(classify(&failure(path).await), Class::Damaged, "{path:?}");
            let e = bus_error(failure(path).await, "send", &busy);
            assert!(matches!(e, BusError::Unavailable { .. }), "{e:?}");
            assert!(e.is_retryable());
            assert!(std::error::Error::source(&e).is_some(), "the cause is kept");
            let e = store_error(failure(path).await, "journal", &busy);
            assert!(matches!(e, StoreError::Unavailable { .. }), "{e:?}");
            assert!(e.is_retryable());
        }
        assert_eq!(busy.get(), 0);
    }
}
