//! The embedded store's data directory (`[storage] kind = "sqlite"`, the default without
//! `[database]`): `crewbus serve` creates it, locks it and keeps a push master key in it; every
//! other command opens the store beside the running server and refuses a missing one.
//!
//! The directory holds `crewbus.db` (with SQLite's `-wal` and `-shm` files), `serve.lock` (held
//! with an exclusive lock for as long as `serve` runs, so a second `serve` on the same directory
//! is refused at once), `master.key` (0600: the push key ring's master key, made by the first
//! `serve`), `keys/` (the key ring's scope keys) and `dev-tokens.json` (0600).

use std::fs::{self, File, TryLockError};
use std::io::Write as _;
use std::path::{Path, PathBuf};

use crewbus_domain::{BusError, BusResult};

use crate::cli::Command;
use crate::compose::Integrity;
use crate::config::{
    Config, DATABASE_FILE, LOCK_FILE, MASTER_KEY_FILE, StorageKind, database_path,
};
use crate::push::{KeyRingSettings, MasterKey};

/// The scope keys' directory inside the data directory.
pub const KEYS_DIR: &str = "keys";

/// The exclusive lock of `<data_dir>/serve.lock`, held until dropped (the operating system
/// releases it when the process dies, so a killed server never leaves it behind).
#[derive(Debug)]
pub struct ServeLock {
    _file: File,
    path: PathBuf,
}

impl ServeLock {
    /// The lock file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// What `serve` prepared for the embedded store: its directory, the lock and whether a master
/// key was made.
#[derive(Debug)]
pub struct Prepared {
    /// The data directory (absolute when the configuration gave a relative one).
    pub data_dir: PathBuf,
    /// The held `serve.lock`.
    pub lock: ServeLock,
    /// `Some(path)` when this start made the push master key.
    pub new_master_key: Option<PathBuf>,
}

/// Prepares the embedded store for `command`: [`prepare_serve`] for `serve`;
/// [`prepare_beside`] for every other command that composes the bus (a missing store is no error for `stream`, which needs it only to look a team up). `None` but for `serve` on the embedded store.
pub fn prepare(command: &Command, config: &mut Config) -> BusResult<Option<Prepared>> {
    match command {
        Command::Serve(_) => prepare_serve(config),
        Command::Backup(_) => prepare_beside(config).map(|()| None),
        // Stream commands need the store only to look a team up by name (`stream usage` not
        // at all): a store not created yet is left for that lookup to report.
        Command::Stream(_) => match prepare_beside(config) {
            Err(BusError::NotFound { .. }) => Ok(None),
            other => other.map(|()| None),
        },
        c if c.composes() => prepare_beside(config).map(|()| None),
        _ => Ok(None),
    }
}

/// For `serve` on the embedded store: creates the data directory (0700), takes
/// `serve.lock`, makes the push master key when there is none and no `[push.key_ring]` is
/// configured, and completes `config` (`storage.data_dir` resolved, `push.key_ring` pointing at
/// the directory's key). `None` on any other store.
///
/// Errors: no data directory can be named, or it cannot be created → `Invalid` / `Unavailable`
/// naming the path; another `serve` holds the lock → `Conflict` naming the directory.
pub fn prepare_serve(config: &mut Config) -> BusResult<Option<Prepared>> {
    if config.store()? != StorageKind::Sqlite {
        return Ok(None);
    }
    let data_dir = absolute(config.storage.data_dir()?);
    if data_dir.exists() && !data_dir.is_dir() {
        return Err(BusError::invalid(format!(
            "the data directory {} is not a directory (--data-dir / storage.data_dir)",
            data_dir.display()
        )));
    }
    create_private_dir(&data_dir)?;
    let lock = lock(&data_dir)?;
    let db = database_path(&data_dir);
    let mut new_master_key = None;
    if config.push.key_ring.is_none() {
        let key = data_dir.join(MASTER_KEY_FILE);
        if !key.exists() {
            if db.exists() {
                // A store whose key is gone: a new key would open none of its sealed push
                // credentials, and deliveries would go out without them.
                return Err(BusError::conflict(format!(
                    "{} holds a store but no {MASTER_KEY_FILE}: put back the master key (and \
                     {KEYS_DIR}/) it was made with, from where the store was backed up, or \
                     configure [push.key_ring]",
                    data_dir.display()
                )));
            }
            write_master_key(&key)?;
            new_master_key = Some(key.clone());
        }
        config.push.key_ring = Some(key_ring(&data_dir));
    }
    if !db.exists() {
        // SQLite creates its files readable by everyone (the umask's default); an empty file is
        // an empty database, and SQLite gives the -wal and -shm files the database's mode.
        create_private_file(&db)?;
    }
    config.storage.data_dir = Some(data_dir.clone());
    Ok(Some(Prepared {
        data_dir,
        lock,
        new_master_key,
    }))
}

/// For every other command on the embedded store: the store must exist (only `serve` creates
/// it); `config` is completed as for `serve` (the directory resolved, the key ring of the
/// directory's master key when it has one). Nothing is created or locked. Other stores: no-op.
///
/// Errors: no data directory can be named → `Invalid`; no `crewbus.db` in it → `NotFound`
/// naming the path and the fix.
pub fn prepare_beside(config: &mut Config) -> BusResult<()> {
    if config.store()? != StorageKind::Sqlite {
        return Ok(());
    }
    let data_dir = absolute(config.storage.data_dir()?);
    let db = database_path(&data_dir);
    if let Err(e) = std::fs::metadata(&db)
        && e.kind() != std::io::ErrorKind::NotFound
    {
        return Err(BusError::unavailable_from(
            format!("cannot read the embedded store {}", db.display()),
            e,
        ));
    }
    if !db.exists() {
        return Err(BusError::NotFound {
            what: format!(
                "the embedded store {} (start `crewbus serve --data-dir {}` once to create it, \
                 or point --data-dir / storage.data_dir at an existing one)",
                db.display(),
                data_dir.display()
            ),
        });
    }
    if config.push.key_ring.is_none() && data_dir.join(MASTER_KEY_FILE).exists() {
        config.push.key_ring = Some(key_ring(&data_dir));
    }
    config.storage.data_dir = Some(data_dir);
    Ok(())
}

fn key_ring(data_dir: &Path) -> KeyRingSettings {
    KeyRingSettings {
        master_key_env: None,
        master_key_file: Some(data_dir.join(MASTER_KEY_FILE)),
        dir: data_dir.join(KEYS_DIR),
    }
}

fn absolute(dir: PathBuf) -> PathBuf {
    std::path::absolute(&dir).unwrap_or(dir)
}

fn create_private_dir(dir: &Path) -> BusResult<()> {
    let mut builder = fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(dir).map_err(|e| {
        BusError::unavailable_from(
            format!("cannot create the data directory {}", dir.display()),
            e,
        )
    })
}

/// Creates an empty file, mode 0600, refusing to replace one.
fn create_private_file(path: &Path) -> BusResult<()> {
    let mut options = File::options();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    options
        .open(path)
        .map(drop)
        .map_err(|e| BusError::unavailable_from(format!("cannot create {}", path.display()), e))
}

/// A damaged embedded store, refused by `serve` before it listens ([`check_store`]). Its
/// `Display` names the file and what to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DamagedStore {
    /// The store file.
    pub path: PathBuf,
    /// SQLite's findings (also logged), at most ten lines; none when it could not read the file
    /// at all.
    pub problems: Vec<String>,
}

impl std::fmt::Display for DamagedStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let dir = self.path.parent().unwrap_or(Path::new("."));
        write!(
            f,
            "the embedded store {} is damaged ({}) and is not served. Restore it from a copy made \
             with `crewbus backup`: with no server running, put the copy in place of {DATABASE_FILE} \
             in {} and remove {DATABASE_FILE}-wal and {DATABASE_FILE}-shm beside it, keeping \
             {MASTER_KEY_FILE} and {KEYS_DIR}/; or move the directory aside and start afresh",
            self.path.display(),
            match self.problems.len() {
                0 => "SQLite refuses to read it: it is malformed or not a database".to_owned(),
                n => format!("SQLite's quick_check found {n} problem(s), logged"),
            },
            dir.display()
        )
    }
}

/// Before `serve` opens the embedded store of `config`: SQLite's check of the file
/// ([`crate::compose::check_embedded_store`]: the whole file after an unclean stop, at most
/// [`crate::compose::START_CHECK_BUDGET`] after a clean one), its outcome logged. `Ok(Err(_))`:
/// the store is damaged and must not be served. Errors: the file cannot be read →
/// `Unavailable`; no data directory → `Invalid`.
pub async fn check_store(config: &Config) -> BusResult<Result<(), DamagedStore>> {
    let check = crate::compose::check_embedded_store(config).await?;
    let took_ms = check.took.as_millis() as u64;
    let unclean = check.after_unclean_stop;
    match check.verdict {
        Integrity::Damaged { problems } => {
            let path = database_path(&config.storage.data_dir()?);
            tracing::error!(
                path = %path.display(),
                ?problems,
                after_unclean_stop = unclean,
                "the embedded store is damaged: not serving it"
            );
            return Ok(Err(DamagedStore { path, problems }));
        }
        Integrity::Unfinished => tracing::info!(
            took_ms,
            "embedded store checked as far as the start's budget reached (a large store after a \
             clean stop): sound so far"
        ),
        _ if unclean => tracing::info!(
            took_ms,
            "embedded store checked whole after an unclean stop: sound"
        ),
        _ => tracing::info!(took_ms, "embedded store checked: sound"),
    }
    Ok(Ok(()))
}

/// `serve`'s clean stop of the embedded store of `config`, after it stopped serving: the
/// write-ahead log copied into the file and emptied
/// ([`crate::compose::checkpoint_embedded_store`]), so the next start knows the stop was clean.
/// A failure is logged (the next start then checks the whole file), never returned.
pub async fn stop_store(config: &Config) {
    match crate::compose::checkpoint_embedded_store(config).await {
        Ok(true) => tracing::debug!("embedded store: write-ahead log checkpointed"),
        Ok(false) => tracing::warn!(
            "embedded store: a writer still held the write-ahead log at the stop; the next start \
             checks the whole store"
        ),
        Err(e) => tracing::warn!(
            error = %e,
            "embedded store: cannot checkpoint the write-ahead log at the stop; the next start \
             checks the whole store"
        ),
    }
}

/// Whether a `crewbus serve` holds the embedded store of `config` now (its `serve.lock` is
/// locked by another process). `true` on any other store (nothing to tell). Never creates the
/// lock file. Errors: the store's kind cannot be decided → `Invalid`.
pub fn served(config: &Config) -> BusResult<bool> {
    if config.store()? != StorageKind::Sqlite {
        return Ok(true);
    }
    let path = absolute(config.storage.data_dir()?).join(LOCK_FILE);
    let Ok(file) = File::options().read(true).open(&path) else {
        return Ok(false);
    };
    Ok(matches!(file.try_lock(), Err(TryLockError::WouldBlock)))
}

/// Takes the exclusive lock of `<dir>/serve.lock` without waiting and writes this process's id
/// into the file (for the operator; the lock, not the content, is what counts).
fn lock(dir: &Path) -> BusResult<ServeLock> {
    let path = dir.join(LOCK_FILE);
    let mut file = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| BusError::unavailable_from(format!("cannot open {}", path.display()), e))?;
    match file.try_lock() {
        Ok(()) => {}
        Err(TryLockError::WouldBlock) => {
            return Err(BusError::conflict(format!(
                "another `crewbus serve` is running on the data directory {} (it holds {}): the \
                 embedded store serves one server; stop that one, or give this one another \
                 --data-dir (Postgres is the store for several servers)",
                dir.display(),
                LOCK_FILE
            )));
        }
        Err(TryLockError::Error(e)) => {
            return Err(BusError::unavailable_from(
                format!("cannot lock {}", path.display()),
                e,
            ));
        }
    }
    let _ = file.set_len(0);
    let _ = writeln!(file, "{}", std::process::id());
    Ok(ServeLock { _file: file, path })
}

/// Writes a fresh master key (base64) to `path`, mode 0600, refusing to replace an existing file.
fn write_master_key(path: &Path) -> BusResult<()> {
    let key = MasterKey::generate();
    let mut options = File::options();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let written = options.open(path).and_then(|mut f| {
        f.write_all(key.to_base64().as_bytes())?;
        f.sync_all()
    });
    written.map_err(|e| {
        BusError::unavailable_from(
            format!("cannot write the push master key {}", path.display()),
            e,
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn embedded(dir: &Path) -> Config {
        let mut c = Config::default();
        c.storage.data_dir = Some(dir.to_path_buf());
        c
    }

    /// Waits (10 s deadline) until no one holds `dir`'s `serve.lock`, after the test dropped its
    /// own: another test of this process may be spawning a child right now, and between its fork
    /// and its exec the child holds a copy of every descriptor, the lock's too.
    fn until_unlocked(dir: &Path) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while served(&embedded(dir)).unwrap() {
            assert!(
                std::time::Instant::now() < deadline,
                "serve.lock still held 10 s after the drop"
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }

    #[test]
    fn a_second_serve_on_the_same_directory_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let mut first = embedded(dir.path());
        let held = prepare_serve(&mut first).unwrap().expect("embedded store");
        let err = prepare_serve(&mut embedded(dir.path())).unwrap_err();
        assert!(matches!(err, BusError::Conflict { .. }), "{err:?}");
        drop(held);
        until_unlocked(dir.path());
        prepare_serve(&mut embedded(dir.path()))
            .unwrap()
            .expect("the lock is free again once dropped");
    }

    #[test]
    fn serve_makes_a_private_master_key_once() {
        let dir = tempfile::tempdir().unwrap();
        let mut c = embedded(dir.path());
        let p = prepare_serve(&mut c).unwrap().unwrap();
        let key = p.new_master_key.clone().expect("made at the first start");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = fs::metadata(&key).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o600);
        }
        assert!(MasterKey::from_file(&key).is_ok());
        assert_eq!(
            c.push.key_ring.as_ref().unwrap().master_key_file.as_deref(),
            Some(key.as_path())
        );
        drop(p);
        until_unlocked(dir.path());
        let again = prepare_serve(&mut embedded(dir.path())).unwrap().unwrap();
        assert!(
            again.new_master_key.is_none(),
            "the key is kept, not remade"
        );
    }

    #[test]
    fn a_store_without_its_master_key_is_refused_and_files_are_private() {
        let dir = tempfile::tempdir().unwrap();
        let p = prepare_serve(&mut embedded(dir.path())).unwrap().unwrap();
        let db = database_path(dir.path());
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = fs::metadata(&db).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o600, "the store is readable by its owner only");
        }
        drop(p);
        until_unlocked(dir.path());
        fs::remove_file(dir.path().join(MASTER_KEY_FILE)).unwrap();
        let err = prepare_serve(&mut embedded(dir.path())).unwrap_err();
        assert!(matches!(err, BusError::Conflict { .. }), "{err:?}");
        assert!(
            !dir.path().join(MASTER_KEY_FILE).exists(),
            "no new key is made for an existing store"
        );
    }

    #[test]
    fn a_data_directory_that_is_a_file_is_invalid() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("afile");
        fs::write(&file, b"x").unwrap();
        let err = prepare_serve(&mut embedded(&file)).unwrap_err();
        assert!(matches!(err, BusError::Invalid { .. }), "{err:?}");
    }

    #[test]
    fn other_commands_refuse_a_missing_store() {
        let dir = tempfile::tempdir().unwrap();
        let err = prepare_beside(&mut embedded(dir.path())).unwrap_err();
        assert!(matches!(err, BusError::NotFound { .. }), "{err:?}");
        assert!(
            !dir.path().join(LOCK_FILE).exists(),
            "nothing is created beside"
        );
    }

    #[test]
    fn other_stores_need_no_preparation() {
        let mut c = Config::default();
        c.storage.kind = Some(StorageKind::Memory);
        assert!(prepare_serve(&mut c).unwrap().is_none());
        prepare_beside(&mut c).unwrap();
    }
}
