//! SQLite fixtures: a fresh store file per test in a temp directory of its own.
//!
//! [`TempStore`] owns the directory (`crewbus-sqlite-<random>/`, holding `bus.db` and its `-wal`
//! and `-shm` files). Dropped normally, the directory is deleted; dropped while the thread
//! panics (a failed assertion), it is kept and its path printed, so the store can be inspected
//! with the `sqlite3` shell. Opening and migrating the file is the test target's job (this crate
//! names no adapter).

use std::fmt;
use std::path::{Path, PathBuf};

/// A temp directory holding one test's store file; kept on failure.
pub struct TempStore {
    dir: Option<tempfile::TempDir>,
    path: PathBuf,
    label: String,
}

impl fmt::Debug for TempStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TempStore")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl TempStore {
    /// A new empty temp directory for test `label` (printed if the store is kept). Panics — failing
    /// the test — when no temp directory can be made.
    pub fn new(label: &str) -> Self {
        let dir = tempfile::Builder::new()
            .prefix("crewbus-sqlite-")
            .tempdir()
            .unwrap_or_else(|e| panic!("no temp dir for test `{label}`: {e}"));
        let path = dir.path().join("bus.db");
        TempStore {
            dir: Some(dir),
            path,
            label: label.to_owned(),
        }
    }

    /// The store file's path (`<dir>/bus.db`; not created until the adapter opens it).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Another path in the same directory (a backup target), deleted with it.
    pub fn sibling(&self, name: &str) -> PathBuf {
        self.path.with_file_name(name)
    }
}

impl Drop for TempStore {
    fn drop(&mut self) {
        if std::thread::panicking()
            && let Some(dir) = self.dir.take()
        {
            let kept = dir.keep();
            eprintln!(
                "test `{}` did not pass: kept SQLite store {} for inspection",
                self.label,
                kept.join("bus.db").display()
            );
        }
    }
}
