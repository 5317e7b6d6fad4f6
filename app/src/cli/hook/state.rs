//! The hook's state: one small file per (server, agent, host session) holding the watch cursor
//! (everything already reported), the count of consecutive wakes and the current background
//! waiter.
//!
//! The directory is `$XDG_STATE_HOME/crewbus/hooks` (else `~/.local/state/crewbus/hooks`),
//! created 0700. A file's name is the hex SHA-256 of the server URL, the SHA-256 of the agent's
//! token (the agent's identity, never the token itself), the host and the host's session id
//! (untrusted input, only ever hashed). Every read-modify-write holds an exclusive `flock` on
//! the directory's `.lock` file, so a reader never sees half a write. A state file read and
//! believed under the same lock (this user's regular 0600 file with one link) is rewritten in
//! place (padded with spaces to its old length, which JSON ignores, so a shorter state never
//! needs a truncate); any other — a first state, or one not believed — is a fresh 0600 temporary
//! file renamed over the path (`tempfile`'s `persist`). A file someone else
//! wrote — not a regular file, another owner, readable by others, malformed, or naming another
//! key — is not believed ([`Discarded`], which the hook reports on stderr): the hook goes on from
//! a fresh state, which replaces it at the next write. Files untouched for [`PRUNE_AFTER`] are
//! removed.

use std::cell::RefCell;
use std::fs::{File, OpenOptions};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

/// How long an untouched state file is kept.
pub const PRUNE_AFTER: Duration = Duration::from_secs(7 * 24 * 3600);

/// How long taking the lock may take before the hook gives up (it is held for microseconds).
const LOCK_WAIT: Duration = Duration::from_millis(1500);

/// The file format's version.
const VERSION: u32 = 1;

/// The largest state file believed (its cursor is at most 8 256 characters).
const MAX_FILE_BYTES: u64 = 64 * 1024;

/// A state file that was not believed (see [`Locked::load`]). Its `Display` is a stderr line's
/// reason.
#[derive(Debug, thiserror::Error)]
#[error(
    "ignored the state file {} ({reason}): starting from a fresh state, which replaces it",
    path.display()
)]
pub struct Discarded {
    /// The file.
    pub path: PathBuf,
    /// Why it was not believed.
    pub reason: Reason,
}

/// Why a state file was not believed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Reason {
    /// A directory, a symbolic link, a device.
    #[error("not a regular file")]
    NotAFile,
    /// Larger than any state the hook writes.
    #[error("larger than {MAX_FILE_BYTES} bytes")]
    TooLarge,
    /// Another user's.
    #[error("owned by another user")]
    Owner,
    /// Others may read or write it (the mode is shown in octal).
    #[error("mode {0:o}: others may read or write it, the hook writes 600")]
    Mode(u32),
    /// It cannot be read.
    #[error("cannot be read")]
    Unreadable,
    /// Not JSON of the hook's state.
    #[error("not a hook state: malformed")]
    Malformed,
    /// A state of another format version.
    #[error("format version {0}, this hook reads {VERSION}")]
    Version(u32),
    /// Another session's (or server's, or agent's) state under this name.
    #[error("it names another session: copied or renamed")]
    OtherKey,
}

/// One session's state.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionState {
    /// The format's version ([`VERSION`]).
    pub v: u32,
    /// The file's own key: a file copied under another name is not believed.
    pub key: String,
    /// The watch cursor: everything reported to this session so far.
    pub cursor: Option<String>,
    /// Consecutive wakes (a blocked or woken stop) since the user last spoke.
    pub wakes: u32,
    /// The background Stop waiter that is current; an older one gives way.
    pub waiter: Option<String>,
}

impl SessionState {
    /// A state that records nothing: no cursor, no wakes, no waiter.
    pub fn fresh(key: &str) -> SessionState {
        SessionState {
            v: VERSION,
            key: key.to_owned(),
            ..SessionState::default()
        }
    }
}

/// The state file's key for `host`'s `session` of the agent holding `token` on `url` (its
/// trailing `/` or `/mcp` aside).
pub fn key(url: &str, token: &str, host: &str, session: &str) -> String {
    let agent = hex::encode(Sha256::digest(token.as_bytes()));
    let url = url.trim_end_matches('/');
    let url = url.strip_suffix("/mcp").unwrap_or(url);
    let mut h = Sha256::new();
    for field in ["crewbus hook state", url, &agent, host, session] {
        h.update((field.len() as u64).to_be_bytes());
        h.update(field.as_bytes());
    }
    hex::encode(h.finalize())
}

/// The state directory: `$XDG_STATE_HOME/crewbus/hooks` when that is an absolute path, else
/// `$HOME/.local/state/crewbus/hooks`. Errors: neither is set.
pub fn default_dir() -> Result<PathBuf, String> {
    if let Some(x) = std::env::var_os("XDG_STATE_HOME").map(PathBuf::from)
        && x.is_absolute()
    {
        return Ok(x.join("crewbus").join("hooks"));
    }
    match std::env::var_os("HOME").map(PathBuf::from) {
        Some(home) if home.is_absolute() => Ok(home.join(".local/state/crewbus/hooks")),
        _ => Err("no state directory: neither $XDG_STATE_HOME nor $HOME is set".to_owned()),
    }
}

/// The state directory, opened: it exists, is a directory of this user's and nobody else can
/// write to it.
#[derive(Debug)]
pub struct StateDir {
    dir: PathBuf,
}

impl StateDir {
    /// Creates `dir` (0700, with its parents) when missing and checks it. Errors (a message):
    /// it cannot be created, is not a directory, belongs to another user or is writable by
    /// others.
    pub fn open(dir: PathBuf) -> Result<StateDir, String> {
        let mut builder = std::fs::DirBuilder::new();
        builder.recursive(true);
        #[cfg(unix)]
        std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
        builder
            .create(&dir)
            .map_err(|e| format!("cannot create the state directory {}: {e}", dir.display()))?;
        let meta = std::fs::symlink_metadata(&dir)
            .map_err(|e| format!("cannot read the state directory {}: {e}", dir.display()))?;
        if !meta.is_dir() {
            return Err(format!(
                "the state path {} is not a directory",
                dir.display()
            ));
        }
        #[cfg(unix)]
        {
            use std::os::unix::fs::MetadataExt as _;
            if meta.uid() != rustix::process::geteuid().as_raw() || meta.mode() & 0o022 != 0 {
                return Err(format!(
                    "the state directory {} belongs to another user or others can write to it",
                    dir.display()
                ));
            }
        }
        Ok(StateDir { dir })
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// Takes the directory's exclusive lock (waiting at most 1.5 s). Errors: it cannot be
    /// opened, or another process holds it that long.
    pub fn lock(&self) -> Result<Locked<'_>, String> {
        let path = self.dir.join(".lock");
        let mut options = OpenOptions::new();
        options.create(true).truncate(false).write(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        let file = options
            .open(&path)
            .map_err(|e| format!("cannot open the state lock {}: {e}", path.display()))?;
        let deadline = Instant::now() + LOCK_WAIT;
        loop {
            match file.try_lock() {
                Ok(()) => {
                    return Ok(Locked {
                        dir: self,
                        _file: file,
                        believed: RefCell::new(None),
                    });
                }
                Err(std::fs::TryLockError::WouldBlock) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(e) => {
                    return Err(format!("cannot lock the state {}: {e}", path.display()));
                }
            }
        }
    }
}

/// The state directory while its lock is held (released when dropped).
#[derive(Debug)]
pub struct Locked<'a> {
    dir: &'a StateDir,
    _file: File,
    /// The key whose file [`Locked::load`] read and believed under this lock: the one
    /// [`Locked::save`] may rewrite in place.
    believed: RefCell<Option<String>>,
}

impl Locked<'_> {
    fn file(&self, key: &str) -> PathBuf {
        self.dir.dir.join(format!("{key}.json"))
    }

    /// The session's state; a missing file reads as a fresh state. Errors: a file someone else
    /// wrote (see the module documentation) is not believed: [`Discarded`] says why, and the
    /// caller goes on with [`SessionState::fresh`] (the file is replaced at the next write).
    pub fn load(&self, key: &str) -> Result<SessionState, Discarded> {
        self.believed.borrow_mut().take();
        let path = self.file(key);
        let discarded = |reason| Discarded {
            path: path.clone(),
            reason,
        };
        let meta = match std::fs::symlink_metadata(&path) {
            Ok(meta) => meta,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(SessionState::fresh(key));
            }
            Err(_) => return Err(discarded(Reason::Unreadable)),
        };
        if !meta.is_file() {
            return Err(discarded(Reason::NotAFile));
        }
        if meta.len() > MAX_FILE_BYTES {
            return Err(discarded(Reason::TooLarge));
        }
        #[cfg(unix)]
        {
            use std::os::unix::fs::MetadataExt as _;
            if meta.uid() != rustix::process::geteuid().as_raw() {
                return Err(discarded(Reason::Owner));
            }
            if meta.mode() & 0o077 != 0 {
                return Err(discarded(Reason::Mode(meta.mode() & 0o777)));
            }
        }
        let bytes = read_quietly(&path).map_err(|_| discarded(Reason::Unreadable))?;
        match serde_json::from_slice::<SessionState>(&bytes) {
            Ok(s) if s.v != VERSION => Err(discarded(Reason::Version(s.v))),
            Ok(s) if s.key != key => Err(discarded(Reason::OtherKey)),
            Ok(s) => {
                *self.believed.borrow_mut() = Some(key.to_owned());
                Ok(s)
            }
            Err(_) => Err(discarded(Reason::Malformed)),
        }
    }

    /// Writes the session's state (see the module documentation): in place over the file
    /// [`Locked::load`] believed under this lock (checked again: this user's regular 0600 file
    /// with one link), else a new 0600 file renamed over the path. Errors: the I/O error, as a
    /// message.
    ///
    /// In place, because a new inode and a rename over the old one cost a Stop hook about
    /// 0.35 ms between the news and its decision on ext4 (`strace -T`; `benches/benches/wake`),
    /// and every reader holds the lock, so none sees half a write. A write torn by the process's
    /// death (a state past one page can be cut at a page boundary) or by a crash of the machine
    /// (nothing is flushed: a flush would cost every Stop hook 0.4–0.6 ms more) leaves a file
    /// the next hook discards as malformed: it reports the session's pending news once more and
    /// counts wakes from zero — a message is never lost.
    pub fn save(&self, state: &SessionState) -> Result<(), String> {
        match self.in_place(state)? {
            Some(write) => write.now().map_err(|e| self.fail(&e)),
            None => self.replace(state),
        }
    }

    /// As [`Locked::save`], but an in-place rewrite within the file's length is left to a child
    /// process (`fork`) that inherits this lock, so the caller can answer before the write: the
    /// lock is released when the child has written and exited, so the next reader — who takes
    /// the lock — reads this state. Any other write (a first one, one that grows the file), or
    /// a child that cannot be started, is done here before returning. Errors: as
    /// [`Locked::save`]'s; the child's own failure (an overwrite needs no new space, so only an
    /// I/O error of the disk) is not reported: the next hook reads the previous state and
    /// reports the same news once more.
    ///
    /// Why: a write to a file on ext4 updates its times, which takes a handle on the file
    /// system's journal, and that waits while the journal commits — which the store's own
    /// `fsync`s start. Measured (`benches/benches/wake`, 2026-12-07 runs 4–6): with the store and
    /// the state on disk, the Stop hook's p99 from send to decision was 1.45–1.85 × the waiting
    /// fetch's; with both on tmpfs, 1.00. The host waits for the hook's exit and its closed
    /// pipes, not for the child (whose standard streams are `/dev/null`).
    pub fn save_behind(self, state: &SessionState) -> Result<(), String> {
        match self.in_place(state)? {
            // A rewrite that grows the file may need space the file system lacks: written
            // here, so a failure is this run's (one stderr line, no decision) and the cursor
            // never silently stays behind a reported decision. Within the file's length it
            // only overwrites, which needs no new space.
            Some(write) if write.grows => write.now().map_err(|e| self.fail(&e)),
            #[cfg(unix)]
            Some(write) => match write.in_child() {
                Ok(()) => Ok(()),
                Err(write) => write.now().map_err(|e| self.fail(&e)),
            },
            #[cfg(not(unix))]
            Some(write) => write.now().map_err(|e| self.fail(&e)),
            None => self.replace(state),
        }
    }

    fn fail(&self, e: &dyn std::fmt::Display) -> String {
        format!(
            "cannot write the hook state in {}: {e}",
            self.dir.dir.display()
        )
    }

    /// The in-place rewrite of `state`'s file when [`Locked::load`] believed it under this lock
    /// and it is still this user's own file (see [`own_file`]); `None` when it must be replaced.
    fn in_place(&self, state: &SessionState) -> Result<Option<InPlace<'_>>, String> {
        if self.believed.borrow().as_deref() != Some(state.key.as_str()) {
            return Ok(None);
        }
        let Some((file, len)) = own_file(&self.file(&state.key)) else {
            return Ok(None);
        };
        let mut bytes = serde_json::to_vec(state).map_err(|e| self.fail(&e))?;
        // Padded with spaces (which JSON ignores) to the old length: no truncate needed.
        let old = usize::try_from(len).unwrap_or(usize::MAX);
        let grows = bytes.len() > old;
        bytes.resize(old.max(bytes.len()), b' ');
        Ok(Some(InPlace {
            file,
            bytes,
            grows,
            _lock: self,
        }))
    }

    /// A new 0600 temporary file renamed over the state's path.
    fn replace(&self, state: &SessionState) -> Result<(), String> {
        let text = serde_json::to_vec(state).map_err(|e| self.fail(&e))?;
        let mut tmp = tempfile::Builder::new()
            .prefix(".tmp-")
            .tempfile_in(&self.dir.dir)
            .map_err(|e| self.fail(&e))?;
        tmp.write_all(&text).map_err(|e| self.fail(&e))?;
        tmp.persist(self.file(&state.key))
            .map_err(|e| self.fail(&e.error))?;
        Ok(())
    }

    /// Removes state files (and left-over temporary files) not modified for `older_than`;
    /// returns how many. Errors are ignored: pruning is housekeeping.
    pub fn prune(&self, older_than: Duration) -> usize {
        let Some(cutoff) = SystemTime::now().checked_sub(older_than) else {
            return 0;
        };
        let Ok(entries) = std::fs::read_dir(&self.dir.dir) else {
            return 0;
        };
        let mut removed = 0;
        for entry in entries.flatten() {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if !(name.ends_with(".json") || name.starts_with(".tmp-")) {
                continue;
            }
            let old = entry
                .metadata()
                .and_then(|m| m.modified())
                .is_ok_and(|t| t < cutoff);
            if old && std::fs::remove_file(entry.path()).is_ok() {
                removed += 1;
            }
        }
        removed
    }
}

/// The file's bytes, read without updating its access time where the system allows
/// (`O_NOATIME`: the file's owner): after each write its access time is older than its
/// modification time, so under `relatime` a plain read would write the inode — a journal
/// handle on ext4, between the news and the decision (see [`Locked::save_behind`]).
fn read_quietly(path: &Path) -> std::io::Result<Vec<u8>> {
    #[cfg(target_os = "linux")]
    {
        use std::io::Read as _;
        let mut options = OpenOptions::new();
        options.read(true);
        std::os::unix::fs::OpenOptionsExt::custom_flags(
            &mut options,
            (rustix::fs::OFlags::NOATIME | rustix::fs::OFlags::NOFOLLOW).bits() as i32,
        );
        if let Ok(mut file) = options.open(path) {
            let mut bytes = Vec::new();
            file.read_to_end(&mut bytes)?;
            return Ok(bytes);
        }
    }
    std::fs::read(path)
}

/// `path` opened for writing when it is this user's regular state file with one link (a hard
/// link would write through to another file), mode 0600 or stricter, no larger than
/// [`MAX_FILE_BYTES`], with its length; else (missing, a symbolic link, another owner's, …)
/// `None`.
fn own_file(path: &Path) -> Option<(File, u64)> {
    let mut options = OpenOptions::new();
    options.write(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::custom_flags(
        &mut options,
        (rustix::fs::OFlags::NOFOLLOW | rustix::fs::OFlags::NONBLOCK).bits() as i32,
    );
    let file = options.open(path).ok()?;
    let meta = file.metadata().ok()?;
    if !meta.is_file() || meta.len() > MAX_FILE_BYTES {
        return None;
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt as _;
        if meta.uid() != rustix::process::geteuid().as_raw()
            || meta.mode() & 0o077 != 0
            || meta.nlink() != 1
        {
            return None;
        }
    }
    Some((file, meta.len()))
}

/// A believed state file's rewrite, prepared under the lock (`_lock`): the whole file's new
/// bytes, written at offset 0.
struct InPlace<'a> {
    file: File,
    bytes: Vec<u8>,
    /// The new bytes are longer than the file.
    grows: bool,
    _lock: &'a Locked<'a>,
}

impl InPlace<'_> {
    /// Writes here. Errors: the I/O error.
    fn now(self) -> std::io::Result<()> {
        #[cfg(unix)]
        {
            use std::os::unix::fs::FileExt as _;
            self.file.write_all_at(&self.bytes, 0)
        }
        #[cfg(not(unix))]
        {
            use std::io::{Seek as _, SeekFrom};
            let mut file = self.file;
            file.seek(SeekFrom::Start(0))?;
            file.write_all(&self.bytes)
        }
    }

    /// Leaves the write to a child process, which holds the lock's file (so the lock) until it
    /// has written and exits; `Err(self)` when no child could be started.
    #[cfg(unix)]
    fn in_child(self) -> Result<(), Self> {
        use std::os::fd::AsRawFd as _;
        // Opened before the fork: the child calls only async-signal-safe functions (`dup2`,
        // `pwrite`, `_exit`), on memory and descriptors prepared here.
        let Ok(null) = OpenOptions::new().read(true).write(true).open("/dev/null") else {
            return Err(self);
        };
        let (fd, null) = (self.file.as_raw_fd(), null.as_raw_fd());
        let (bytes, len) = (self.bytes.as_ptr(), self.bytes.len());
        // SAFETY: the child runs no Rust code that could take a lock another thread held at
        // the fork (no allocation, no I/O through `std`): it only makes the system calls
        // below, on the descriptors and the buffer above, which the child's copy of this
        // process holds unchanged, and leaves with `_exit` (no destructors, no atexit).
        match unsafe { libc::fork() } {
            -1 => Err(self),
            0 => unsafe {
                // The host waits until every copy of the hook's stdout and stderr is closed.
                for target in 0..=2 {
                    libc::dup2(null, target);
                }
                let mut done = 0usize;
                while done < len {
                    let n =
                        libc::pwrite(fd, bytes.add(done).cast(), len - done, done as libc::off_t);
                    if n > 0 {
                        done += n as usize;
                    } else if n == 0
                        || std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR)
                    {
                        libc::_exit(1);
                    }
                }
                libc::_exit(0)
            },
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests;
