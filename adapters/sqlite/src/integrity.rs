//! The store file checked before a server serves it ([`check_integrity`]), and left whole by a
//! clean stop ([`checkpoint`]).
//!
//! A clean stop copies the write-ahead log into the file and empties it
//! (`PRAGMA wal_checkpoint(TRUNCATE)`), so at the next start a `-wal` file with frames in it
//! means the last writer did not stop cleanly (a crash, a kill, a power loss, or an operator
//! command that wrote without a server). The start's check is bounded by that:
//!
//! - after an unclean stop: SQLite's `PRAGMA quick_check` over the whole file, however long it
//!   takes (measured: about 4 s of CPU per GiB, with the file in the page cache);
//! - after a clean stop: the file's length against the page count its header records (a file
//!   cut short is found at once, whatever its size), then `quick_check` for at most the budget
//!   the caller gives; a larger store is checked as far as the budget reaches, and a damaged
//!   page beyond it is found when it is read (answered `Unavailable`).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crewbus_domain::{BusError, BusResult};
use sqlx::sqlite::{SqliteConnectOptions, SqliteSynchronous};
use sqlx::{ConnectOptions, Connection, SqliteConnection};

use crate::error::{BusyCounter, Class, bus_error, classify};

/// Most problems `quick_check` lists (SQLite's own limit is 100).
const MOST_PROBLEMS: u32 = 10;

/// Steps (VM instructions, or pages checked) between two looks at the budget's deadline.
const PROGRESS_STEPS: i32 = 100;

/// What [`check_integrity`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Integrity {
    /// Nothing wrong: the whole file was checked.
    Sound,
    /// Nothing wrong as far as the check reached: the budget ran out first.
    Unfinished,
    /// The file is damaged or not a SQLite database: it must not be served. `problems` are
    /// SQLite's findings, for the operator's log (none when SQLite refused to read the file at
    /// all).
    Damaged {
        /// SQLite's words, at most ten lines.
        problems: Vec<String>,
    },
}

/// The outcome of [`check_integrity`]: the verdict and what the check took.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IntegrityCheck {
    /// What was found.
    pub verdict: Integrity,
    /// Whether the last stop was not clean (its `-wal` file held frames): the check then had
    /// no budget.
    pub after_unclean_stop: bool,
    /// How long the check took.
    pub took: Duration,
}

/// The store's write-ahead log, `<path>-wal`.
fn wal_path(path: &Path) -> PathBuf {
    let mut wal = path.as_os_str().to_owned();
    wal.push("-wal");
    PathBuf::from(wal)
}

/// Whether `path`'s write-ahead log holds frames (the last writer stopped without emptying it).
/// Errors: the log exists but cannot be read → `Unavailable`.
fn wal_holds_frames(path: &Path) -> BusResult<bool> {
    let wal = wal_path(path);
    match std::fs::metadata(&wal) {
        Ok(m) => Ok(m.len() > 0),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(BusError::unavailable_from(
            format!("cannot read {}", wal.display()),
            e,
        )),
    }
}

/// A connection of its own to the store file, reading only (`query_only`), never creating it.
async fn connect(path: &Path, busy_timeout: Duration) -> Result<SqliteConnection, sqlx::Error> {
    SqliteConnectOptions::new()
        .filename(path)
        .create_if_missing(false)
        .busy_timeout(busy_timeout)
        .pragma("query_only", "ON")
        // A whole check takes seconds on a large store: not a slow statement to warn about.
        .disable_statement_logging()
        .connect()
        .await
}

/// Checks the store file at `path` before a server opens it (nothing else may have it open for
/// writing: the caller holds the data directory's lock). After an unclean stop the whole file is
/// checked; after a clean one, its length against its header, then `quick_check` for at most
/// `budget` (see the module's documentation). Never writes to the store.
///
/// Errors: the file cannot be opened or read for a reason that is not damage (missing,
/// unreadable, locked past `busy_timeout`) → `Unavailable`/`NotProvisioned`, as
/// [`crate::open`] says them. A damaged file is not an error but [`Integrity::Damaged`].
pub async fn check_integrity(
    path: impl AsRef<Path>,
    busy_timeout: Duration,
    budget: Duration,
) -> BusResult<IntegrityCheck> {
    let path = path.as_ref();
    let started = Instant::now();
    let after_unclean_stop = wal_holds_frames(path)?;
    let what = format!("check {}", path.display());
    let busy = BusyCounter::default();
    let damaged = |problems: Vec<String>| Integrity::Damaged { problems };
    let mut conn = match connect(path, busy_timeout).await {
        Ok(conn) => conn,
        Err(e) if classify(&e) == Class::Damaged => {
            return Ok(IntegrityCheck {
                verdict: damaged(Vec::new()),
                after_unclean_stop,
                took: started.elapsed(),
            });
        }
        Err(e) => return Err(bus_error(e, &what, &busy)),
    };
    let verdict = match examine(&mut conn, path, after_unclean_stop, budget).await {
        Ok(verdict) => Ok(verdict),
        Err(e) => match classify(&e) {
            Class::Damaged => Ok(damaged(Vec::new())),
            // The progress handler stopped the check at the budget.
            Class::Timeout if !after_unclean_stop => Ok(Integrity::Unfinished),
            _ => Err(bus_error(e, &what, &busy)),
        },
    };
    let _ = conn.close().await;
    Ok(IntegrityCheck {
        verdict: verdict?,
        after_unclean_stop,
        took: started.elapsed(),
    })
}

/// The checks on `conn`: the length (when the log is empty, the file alone holds every page),
/// then `quick_check`, interrupted at `budget` unless the last stop was unclean.
async fn examine(
    conn: &mut SqliteConnection,
    path: &Path,
    after_unclean_stop: bool,
    budget: Duration,
) -> Result<Integrity, sqlx::Error> {
    if !after_unclean_stop {
        let pages: i64 = sqlx::query_scalar("PRAGMA page_count")
            .fetch_one(&mut *conn)
            .await?;
        let page_size: i64 = sqlx::query_scalar("PRAGMA page_size")
            .fetch_one(&mut *conn)
            .await?;
        let expected = u64::try_from(pages.saturating_mul(page_size)).unwrap_or(0);
        let length = std::fs::metadata(path).map_err(sqlx::Error::Io)?.len();
        if length < expected {
            return Ok(Integrity::Damaged {
                problems: vec![format!(
                    "the file is {length} bytes long, its header records {pages} pages of \
                     {page_size} bytes ({expected} bytes): it was cut short"
                )],
            });
        }
        let deadline = Instant::now() + budget;
        conn.lock_handle()
            .await?
            .set_progress_handler(PROGRESS_STEPS, move || Instant::now() < deadline);
    }
    let found: Result<Vec<String>, sqlx::Error> =
        sqlx::query_scalar(&format!("PRAGMA quick_check({MOST_PROBLEMS})"))
            .fetch_all(&mut *conn)
            .await;
    if !after_unclean_stop {
        conn.lock_handle().await?.remove_progress_handler();
    }
    let found = found?;
    if found.len() == 1 && found[0] == "ok" {
        Ok(Integrity::Sound)
    } else {
        Ok(Integrity::Damaged { problems: found })
    }
}

/// A clean stop's last write: copies every frame of the store's write-ahead log into the file
/// and empties the log (`PRAGMA wal_checkpoint(TRUNCATE)`, on a connection of its own, waiting
/// up to `busy_timeout` for a writer still at work), so the next start finds the file whole and
/// knows the stop was clean. Returns whether it completed: `false` when a reader or writer still
/// held part of the log (the next start then checks the whole file).
///
/// Errors: the file cannot be opened or written → `Unavailable` (the cause logged).
pub async fn checkpoint(path: impl AsRef<Path>, busy_timeout: Duration) -> BusResult<bool> {
    let path = path.as_ref();
    let what = format!("checkpoint {}", path.display());
    let busy = BusyCounter::default();
    let mut conn = SqliteConnectOptions::new()
        .filename(path)
        .create_if_missing(false)
        .busy_timeout(busy_timeout)
        .synchronous(SqliteSynchronous::Full)
        .connect()
        .await
        .map_err(|e| bus_error(e, &what, &busy))?;
    // (busy, frames in the log, frames copied): busy is 1 when the log could not be emptied.
    let done: Result<(i64, i64, i64), sqlx::Error> =
        sqlx::query_as("PRAGMA wal_checkpoint(TRUNCATE)")
            .fetch_one(&mut conn)
            .await;
    let _ = conn.close().await;
    let (blocked, _, _) = done.map_err(|e| bus_error(e, &what, &busy))?;
    Ok(blocked == 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{SqliteConfig, migrate, open};

    const BUSY: Duration = Duration::from_secs(5);
    const BUDGET: Duration = Duration::from_secs(30);

    /// A migrated store with some rows, its pools still open (their WAL holds frames).
    async fn store(dir: &Path) -> (PathBuf, crate::SqlitePools) {
        let path = dir.join("crewbus.db");
        let config = SqliteConfig {
            create_if_missing: true,
            ..SqliteConfig::default()
        };
        let pools = open(&path, &config).await.unwrap();
        migrate(&pools).await.unwrap();
        (path, pools)
    }

    fn wal_len(path: &Path) -> u64 {
        std::fs::metadata(wal_path(path)).map_or(0, |m| m.len())
    }

    #[tokio::test]
    async fn a_clean_stop_empties_the_log_and_the_next_check_finds_it_sound() {
        let dir = tempfile::tempdir().unwrap();
        let (path, pools) = store(dir.path()).await;
        assert!(wal_len(&path) > 0, "the migrations are in the log");
        let check = check_integrity(&path, BUSY, BUDGET).await.unwrap();
        assert_eq!(check.verdict, Integrity::Sound);
        assert!(check.after_unclean_stop);
        assert!(checkpoint(&path, BUSY).await.unwrap());
        assert_eq!(wal_len(&path), 0, "the log is empty after a clean stop");
        pools.close().await;
        let check = check_integrity(&path, BUSY, BUDGET).await.unwrap();
        assert_eq!(check.verdict, Integrity::Sound);
        assert!(!check.after_unclean_stop);
    }

    #[tokio::test]
    async fn a_file_cut_short_is_damaged_with_or_without_a_log() {
        for clean in [true, false] {
            let dir = tempfile::tempdir().unwrap();
            let (path, pools) = store(dir.path()).await;
            // Everything in the file, so that cutting it loses pages.
            assert!(checkpoint(&path, BUSY).await.unwrap());
            if !clean {
                // A write after the checkpoint: the log holds frames again, as after a kill.
                sqlx::query("PRAGMA user_version = 7")
                    .execute(pools.writer())
                    .await
                    .unwrap();
                assert!(wal_len(&path) > 0);
            }
            let len = std::fs::metadata(&path).unwrap().len();
            let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
            file.set_len(len / 2).unwrap();
            drop(file);
            let check = check_integrity(&path, BUSY, BUDGET).await.unwrap();
            assert!(
                matches!(check.verdict, Integrity::Damaged { .. }),
                "clean {clean}: {check:?}"
            );
            assert_eq!(check.after_unclean_stop, !clean);
            drop(pools);
        }
    }

    #[tokio::test]
    async fn a_file_that_is_not_a_database_is_damaged() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("crewbus.db");
        std::fs::write(&path, vec![0x5a_u8; 8192]).unwrap();
        let check = check_integrity(&path, BUSY, BUDGET).await.unwrap();
        assert!(
            matches!(check.verdict, Integrity::Damaged { .. }),
            "{check:?}"
        );
    }

    #[tokio::test]
    async fn a_clean_store_checked_past_its_budget_is_unfinished() {
        let dir = tempfile::tempdir().unwrap();
        let (path, pools) = store(dir.path()).await;
        assert!(checkpoint(&path, BUSY).await.unwrap());
        pools.close().await;
        let check = check_integrity(&path, BUSY, Duration::ZERO).await.unwrap();
        assert_eq!(check.verdict, Integrity::Unfinished);
    }

    #[tokio::test]
    async fn a_missing_store_is_an_error_not_damage() {
        let dir = tempfile::tempdir().unwrap();
        let e = check_integrity(dir.path().join("absent.db"), BUSY, BUDGET)
            .await
            .unwrap_err();
        assert!(matches!(e, BusError::Unavailable { .. }), "{e:?}");
    }
}
