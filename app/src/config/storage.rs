//! `[storage]`: which store keeps the ledger (and, by default, the bodies and inboxes), and where
//! the embedded store keeps its files.

use std::path::{Path, PathBuf};

use crewbus_domain::{BusError, BusResult};
use serde::Deserialize;

/// The store behind the ledger, journal, push store, inboxes and (by default) bodies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum StorageKind {
    /// The embedded durable store: one SQLite database in the data directory (one machine, one
    /// server). The default when no `[database]` is configured.
    Sqlite,
    /// In-process memory: forgets everything when the process stops (tests, demos, CI).
    Memory,
    /// Postgres (`[database]`): the store for more than one server or machine.
    Postgres,
}

impl StorageKind {
    /// The store's name, as in the configuration (`sqlite`, `memory`, `postgres`).
    pub fn name(self) -> &'static str {
        match self {
            StorageKind::Sqlite => "sqlite",
            StorageKind::Memory => "memory",
            StorageKind::Postgres => "postgres",
        }
    }
}

/// The `[storage]` section.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StorageConfig {
    /// `sqlite`, `memory` or `postgres` (`CREWBUS_STORAGE__KIND`). Default: `postgres` when
    /// `[database]` is present, else `sqlite`. `postgres` needs `[database]`; `sqlite` or `memory`
    /// beside `[database]` is a contradiction and is refused.
    pub kind: Option<StorageKind>,
    /// The embedded store's directory (`--data-dir`, `CREWBUS_STORAGE__DATA_DIR`): the database
    /// `crewbus.db` (with its `-wal` and `-shm` files), `serve.lock`, the push master key
    /// `master.key` (0600) and `dev-tokens.json` (0600). Default `$XDG_DATA_HOME/crewbus`, else
    /// `~/.local/share/crewbus`.
    pub data_dir: Option<PathBuf>,
    /// How long a write waits for the embedded store's write lock before it is refused as
    /// `unavailable` (503, retryable), in milliseconds. Default 5000.
    pub busy_timeout_ms: Option<u64>,
    /// Count the rows the embedded store's writes insert, update and delete per table, shown in
    /// `/metrics` as `crewbus_store_rows_total{table, op}` (`CREWBUS_STORAGE__COUNT_ROWS`): for
    /// the write audit (`scripts/write-audit`) and the tests that read the counts. SQLite's
    /// update hook then runs inside every write statement. Default `false`: not counted, the
    /// family has no samples. Postgres keeps its own counts (`pg_stat_user_tables`).
    pub count_rows: bool,
}

/// The database file's name in the data directory.
pub const DATABASE_FILE: &str = "crewbus.db";

/// The lock file `crewbus serve` holds for as long as it runs.
pub const LOCK_FILE: &str = "serve.lock";

/// The push master key file the embedded store creates for itself.
pub const MASTER_KEY_FILE: &str = "master.key";

/// The default of `busy_timeout_ms`.
pub const DEFAULT_BUSY_TIMEOUT_MS: u64 = 5_000;

impl StorageConfig {
    /// The store this configuration selects, `database` telling whether `[database]` is present.
    /// Errors: `kind = "postgres"` without `[database]`, or `sqlite`/`memory` beside it →
    /// `Invalid` naming both keys.
    pub fn resolve(&self, database: bool) -> BusResult<StorageKind> {
        match (self.kind, database) {
            (None, true) | (Some(StorageKind::Postgres), true) => Ok(StorageKind::Postgres),
            (None, false) => Ok(StorageKind::Sqlite),
            (Some(StorageKind::Postgres), false) => Err(BusError::invalid(
                "storage.kind = \"postgres\" needs a [database] section with its url",
            )),
            (Some(kind), true) => Err(BusError::invalid(format!(
                "storage.kind = \"{}\" contradicts the [database] section (which selects \
                 Postgres): remove one of them",
                kind.name()
            ))),
            (Some(kind), false) => Ok(kind),
        }
    }

    /// The data directory: `data_dir` when set, else `$XDG_DATA_HOME/crewbus` (an absolute path;
    /// a relative one is ignored, as the XDG specification says), else
    /// `$HOME/.local/share/crewbus`. Errors: none of them is set → `Invalid` saying what to set.
    pub fn data_dir(&self) -> BusResult<PathBuf> {
        if let Some(dir) = &self.data_dir {
            return Ok(dir.clone());
        }
        default_data_dir().ok_or_else(|| {
            BusError::invalid(
                "no data directory: set --data-dir, storage.data_dir, XDG_DATA_HOME or HOME",
            )
        })
    }

    /// The busy timeout in milliseconds (`busy_timeout_ms`, else 5000).
    pub fn busy_timeout_ms(&self) -> u64 {
        self.busy_timeout_ms.unwrap_or(DEFAULT_BUSY_TIMEOUT_MS)
    }

    pub(super) fn validate(&self) -> BusResult<()> {
        if let Some(ms) = self.busy_timeout_ms
            && !(1..=600_000).contains(&ms)
        {
            return Err(BusError::invalid(
                "storage.busy_timeout_ms must be between 1 and 600000 (10 minutes)",
            ));
        }
        if let Some(dir) = &self.data_dir
            && dir.as_os_str().is_empty()
        {
            return Err(BusError::invalid("storage.data_dir must not be empty"));
        }
        Ok(())
    }
}

/// `$XDG_DATA_HOME/crewbus` (absolute only), else `$HOME/.local/share/crewbus`.
fn default_data_dir() -> Option<PathBuf> {
    let var = |name| {
        std::env::var_os(name)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    if let Some(xdg) = var("XDG_DATA_HOME").filter(|p| p.is_absolute()) {
        return Some(xdg.join("crewbus"));
    }
    var("HOME").map(|home| home.join(".local").join("share").join("crewbus"))
}

/// The database file inside `data_dir`.
pub fn database_path(data_dir: &Path) -> PathBuf {
    data_dir.join(DATABASE_FILE)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kind(k: Option<StorageKind>) -> StorageConfig {
        StorageConfig {
            kind: k,
            ..StorageConfig::default()
        }
    }

    #[test]
    fn database_alone_means_postgres_and_nothing_means_sqlite() {
        assert_eq!(kind(None).resolve(true).unwrap(), StorageKind::Postgres);
        assert_eq!(kind(None).resolve(false).unwrap(), StorageKind::Sqlite);
        assert_eq!(
            kind(Some(StorageKind::Memory)).resolve(false).unwrap(),
            StorageKind::Memory
        );
        assert_eq!(
            kind(Some(StorageKind::Postgres)).resolve(true).unwrap(),
            StorageKind::Postgres
        );
    }

    #[test]
    fn contradictions_are_invalid() {
        for (k, db) in [
            (StorageKind::Postgres, false),
            (StorageKind::Sqlite, true),
            (StorageKind::Memory, true),
        ] {
            let err = kind(Some(k)).resolve(db).unwrap_err();
            assert!(
                matches!(err, BusError::Invalid { .. }),
                "{k:?} {db}: {err:?}"
            );
        }
    }

    #[test]
    fn the_data_dir_key_wins() {
        let c = StorageConfig {
            data_dir: Some(PathBuf::from("/x/y")),
            ..StorageConfig::default()
        };
        assert_eq!(c.data_dir().unwrap(), PathBuf::from("/x/y"));
        assert_eq!(
            database_path(Path::new("/x/y")),
            PathBuf::from("/x/y/crewbus.db")
        );
    }

    #[test]
    fn busy_timeout_out_of_range_is_invalid() {
        for ms in [0, 600_001] {
            let c = StorageConfig {
                busy_timeout_ms: Some(ms),
                ..StorageConfig::default()
            };
            assert!(matches!(c.validate(), Err(BusError::Invalid { .. })));
        }
    }
}
