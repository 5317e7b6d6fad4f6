//! The hook state's tests.

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
