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
mod tests {
    use super::*;

    fn open(dir: &Path) -> StateDir {
        StateDir::open(dir.join("hooks")).unwrap()
    }

    #[test]
    fn keys_separate_servers_agents_hosts_and_sessions() {
        let k = key("http://h:1", "t", "claude-code", "s");
        assert_eq!(k, key("http://h:1/", "t", "claude-code", "s"));
        assert_eq!(k, key("http://h:1/mcp", "t", "claude-code", "s"));
        assert_eq!(k.len(), 64);
        for other in [
            key("http://h:2", "t", "claude-code", "s"),
            key("http://h:1", "u", "claude-code", "s"),
            key("http://h:1", "t", "codex", "s"),
            key("http://h:1", "t", "claude-code", "s2"),
            // no ambiguity between where one field ends and the next begins
            key("http://h:1", "t", "claude-cod", "es"),
        ] {
            assert_ne!(k, other);
        }
        assert!(k.chars().all(|c| c.is_ascii_hexdigit()));
    }

    #[test]
    fn state_round_trips_through_a_private_file() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = open(tmp.path());
        let k = key("http://h", "t", "claude-code", "../../etc/passwd");
        let lock = dir.lock().unwrap();
        let fresh = lock.load(&k).unwrap();
        assert_eq!(fresh, SessionState::fresh(&k));
        let s = SessionState {
            cursor: Some("c1".into()),
            wakes: 3,
            ..fresh
        };
        lock.save(&s).unwrap();
        assert_eq!(lock.load(&k).unwrap(), s);
        let file = dir.path().join(format!("{k}.json"));
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = std::fs::metadata(&file).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
            let dmode = std::fs::metadata(dir.path()).unwrap().permissions().mode();
            assert_eq!(dmode & 0o777, 0o700);
        }
        // Only hex file names, whatever the session id held.
        for e in std::fs::read_dir(dir.path()).unwrap() {
            let n = e.unwrap().file_name().into_string().unwrap();
            assert!(
                n == ".lock"
                    || n.trim_end_matches(".json")
                        .chars()
                        .all(|c| c.is_ascii_hexdigit()),
                "{n}"
            );
        }
    }

    #[test]
    fn a_state_file_someone_else_wrote_is_not_believed_and_says_why() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = open(tmp.path());
        let k = key("http://h", "t", "claude-code", "s");
        let file = dir.path().join(format!("{k}.json"));
        let lock = dir.lock().unwrap();
        let reason = |lock: &Locked<'_>| lock.load(&k).map(|_| ()).unwrap_err().reason;
        // Malformed.
        std::fs::write(&file, "{not json").unwrap();
        set_mode(&file, 0o600);
        assert_eq!(reason(&lock), Reason::Malformed);
        let e = lock.load(&k).unwrap_err().to_string();
        assert!(e.contains(&file.display().to_string()), "{e}");
        // Another key's state copied under this name.
        let other = SessionState {
            cursor: Some("theirs".into()),
            ..SessionState::fresh("ff")
        };
        std::fs::write(&file, serde_json::to_vec(&other).unwrap()).unwrap();
        assert_eq!(reason(&lock), Reason::OtherKey);
        // Another format version.
        let future = SessionState {
            v: VERSION + 1,
            ..SessionState::fresh(&k)
        };
        std::fs::write(&file, serde_json::to_vec(&future).unwrap()).unwrap();
        assert_eq!(reason(&lock), Reason::Version(VERSION + 1));
        // Readable by others.
        let mine = SessionState {
            cursor: Some("mine".into()),
            ..SessionState::fresh(&k)
        };
        std::fs::write(&file, serde_json::to_vec(&mine).unwrap()).unwrap();
        set_mode(&file, 0o644);
        #[cfg(unix)]
        assert_eq!(reason(&lock), Reason::Mode(0o644));
        set_mode(&file, 0o600);
        assert_eq!(lock.load(&k).unwrap().cursor.as_deref(), Some("mine"));
        // Too large.
        std::fs::write(&file, vec![b' '; MAX_FILE_BYTES as usize + 1]).unwrap();
        assert_eq!(reason(&lock), Reason::TooLarge);
        // A symbolic link is not followed.
        std::fs::remove_file(&file).unwrap();
        assert_eq!(
            lock.load(&k).unwrap(),
            SessionState::fresh(&k),
            "missing: fresh"
        );
        let target = tmp.path().join("elsewhere.json");
        std::fs::write(&target, serde_json::to_vec(&mine).unwrap()).unwrap();
        set_mode(&target, 0o600);
        #[cfg(unix)]
        {
            std::os::unix::fs::symlink(&target, &file).unwrap();
            assert_eq!(reason(&lock), Reason::NotAFile);
            // And a save replaces the link, leaving its target alone.
            lock.save(&SessionState::fresh(&k)).unwrap();
            assert!(!std::fs::symlink_metadata(&file).unwrap().is_symlink());
            assert!(std::fs::read_to_string(&target).unwrap().contains("mine"));
            assert_eq!(lock.load(&k).unwrap(), SessionState::fresh(&k));
        }
    }

    #[cfg(unix)]
    #[test]
    fn a_believed_file_is_rewritten_in_place_and_any_other_replaced() {
        use std::os::unix::fs::MetadataExt as _;
        let tmp = tempfile::tempdir().unwrap();
        let dir = open(tmp.path());
        let k = key("http://h", "t", "claude-code", "s");
        let file = dir.path().join(format!("{k}.json"));
        let lock = dir.lock().unwrap();
        let long = SessionState {
            cursor: Some("c".repeat(500)),
            ..SessionState::fresh(&k)
        };
        lock.save(&long).unwrap();
        let first = std::fs::metadata(&file).unwrap();
        // Read and believed, then a shorter state: the same file, padded to its old length, read
        // back as written.
        assert_eq!(lock.load(&k).unwrap(), long);
        let short = SessionState {
            cursor: Some("c2".into()),
            wakes: 1,
            ..SessionState::fresh(&k)
        };
        lock.save(&short).unwrap();
        let second = std::fs::metadata(&file).unwrap();
        assert_eq!(second.ino(), first.ino(), "rewritten in place");
        assert_eq!(second.len(), first.len(), "padded, not truncated");
        assert_eq!(second.mode() & 0o777, 0o600);
        assert_eq!(lock.load(&k).unwrap(), short);
        // A longer one grows it.
        lock.save(&SessionState {
            cursor: Some("d".repeat(900)),
            ..short.clone()
        })
        .unwrap();
        assert!(std::fs::metadata(&file).unwrap().len() > first.len());
        assert_eq!(
            lock.load(&k).unwrap().cursor.as_deref(),
            Some("d".repeat(900).as_str())
        );
        // Not read under this lock (another lock's load does not count): replaced.
        drop(lock);
        let lock = dir.lock().unwrap();
        let before = std::fs::metadata(&file).unwrap().ino();
        lock.save(&short).unwrap();
        assert_ne!(std::fs::metadata(&file).unwrap().ino(), before);
        // A file not believed is replaced by a new private one: readable by others, malformed
        // (though this user's 0600 file), or a hard link to another file, which stays as it was.
        let replaced = |prepare: &dyn Fn()| {
            prepare();
            let before = std::fs::metadata(&file).unwrap().ino();
            assert!(lock.load(&k).is_err(), "not believed");
            lock.save(&short).unwrap();
            let after = std::fs::metadata(&file).unwrap();
            assert_ne!(after.ino(), before, "replaced, not written through");
            assert_eq!(after.mode() & 0o777, 0o600);
            assert_eq!(after.nlink(), 1);
            assert_eq!(lock.load(&k).unwrap(), short);
        };
        replaced(&|| set_mode(&file, 0o644));
        replaced(&|| {
            std::fs::write(&file, "{not json").unwrap();
        });
        let precious = tmp.path().join("precious");
        std::fs::write(&precious, "mine").unwrap();
        set_mode(&precious, 0o600);
        replaced(&|| {
            std::fs::remove_file(&file).unwrap();
            std::fs::hard_link(&precious, &file).unwrap();
        });
        assert_eq!(std::fs::read_to_string(&precious).unwrap(), "mine");
        // A hard link that reads as a believable state is not written through either.
        std::fs::write(&precious, serde_json::to_vec(&long).unwrap()).unwrap();
        std::fs::remove_file(&file).unwrap();
        std::fs::hard_link(&precious, &file).unwrap();
        assert_eq!(lock.load(&k).unwrap(), long, "its contents are believed");
        lock.save(&short).unwrap();
        assert_eq!(
            std::fs::read(&precious).unwrap(),
            serde_json::to_vec(&long).unwrap(),
            "the other name keeps its contents"
        );
        assert_eq!(lock.load(&k).unwrap(), short);
    }

    #[cfg(unix)]
    #[test]
    fn a_write_left_behind_is_in_place_and_read_by_the_next_holder_of_the_lock() {
        use std::os::unix::fs::MetadataExt as _;
        let tmp = tempfile::tempdir().unwrap();
        let dir = open(tmp.path());
        let k = key("http://h:1", "t", "claude-code", "s");
        dir.lock().unwrap().save(&SessionState::fresh(&k)).unwrap();
        let path = dir.path().join(format!("{k}.json"));
        let inode = std::fs::metadata(&path).unwrap().ino();
        // Lengths across a page and back, so a reader not held off by the lock would see a
        // torn or stale file.
        for (i, n) in [10, 3000, 6000, 40, 7000, 1].into_iter().enumerate() {
            let lock = dir.lock().unwrap();
            let mut state = lock.load(&k).unwrap();
            state.cursor = Some("c".repeat(n));
            state.wakes = u32::try_from(i).unwrap();
            lock.save_behind(&state).unwrap();
            assert_eq!(dir.lock().unwrap().load(&k).unwrap(), state);
            assert_eq!(std::fs::metadata(&path).unwrap().ino(), inode, "in place");
        }
        // A rewrite that grows the file is written here, before the call returns: read
        // without the lock, the file already holds it.
        let lock = dir.lock().unwrap();
        let mut state = lock.load(&k).unwrap();
        state.cursor = Some("g".repeat(9000));
        lock.save_behind(&state).unwrap();
        let read: SessionState = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        assert_eq!(read, state, "grown in place before returning");
        // A file not believed under this lock is replaced here, before the call returns.
        let lock = dir.lock().unwrap();
        let state = SessionState {
            wakes: 9,
            ..SessionState::fresh(&k)
        };
        lock.save_behind(&state).unwrap();
        assert_ne!(std::fs::metadata(&path).unwrap().ino(), inode, "replaced");
        assert_eq!(dir.lock().unwrap().load(&k).unwrap(), state);
    }

    fn set_mode(path: &Path, mode: u32) {
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
        }
        let _ = (path, mode);
    }

    #[test]
    fn a_directory_others_can_write_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path().join("open");
        std::fs::create_dir(&d).unwrap();
        set_mode(&d, 0o777);
        #[cfg(unix)]
        assert!(StateDir::open(d).is_err());
    }

    #[test]
    fn the_lock_is_exclusive() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = open(tmp.path());
        let held = dir.lock().unwrap();
        let other = StateDir::open(dir.path().to_owned()).unwrap();
        let started = Instant::now();
        assert!(
            other.lock().is_err(),
            "a second lock while the first is held"
        );
        assert!(started.elapsed() >= LOCK_WAIT);
        drop(held);
        assert!(other.lock().is_ok());
    }

    #[test]
    fn old_files_are_pruned_and_recent_ones_kept() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = open(tmp.path());
        let lock = dir.lock().unwrap();
        let old = SessionState::fresh(&key("u", "t", "h", "old"));
        let new = SessionState::fresh(&key("u", "t", "h", "new"));
        lock.save(&old).unwrap();
        lock.save(&new).unwrap();
        let eight_days = SystemTime::now() - Duration::from_secs(8 * 24 * 3600);
        File::options()
            .write(true)
            .open(dir.path().join(format!("{}.json", old.key)))
            .unwrap()
            .set_modified(eight_days)
            .unwrap();
        assert_eq!(lock.prune(PRUNE_AFTER), 1);
        assert_eq!(lock.load(&old.key).unwrap(), SessionState::fresh(&old.key));
        assert!(dir.path().join(format!("{}.json", new.key)).exists());
    }
}
