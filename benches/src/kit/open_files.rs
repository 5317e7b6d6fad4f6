//! The soft open-files limit, raised for a run holding many sockets in one process.

/// Raises the soft `RLIMIT_NOFILE` to the hard limit and returns it; panics when the hard limit
/// is below `min`, with `why` (what holds the files) in the message.
pub fn raise_open_files(min: u64, why: &str) -> u64 {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit read and write the one struct passed, owned here.
    let got = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) };
    assert_eq!(got, 0, "getrlimit(RLIMIT_NOFILE) failed");
    let hard = limit.rlim_max;
    assert!(
        hard >= min,
        "RLIMIT_NOFILE: the hard limit is {hard} open files, below the {min} this run needs \
         ({why}); raise it (`ulimit -Hn`, limits.conf or the service's LimitNOFILE) and run again"
    );
    if limit.rlim_cur < hard {
        limit.rlim_cur = hard;
        // SAFETY: as above.
        let set = unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) };
        assert_eq!(set, 0, "setrlimit(RLIMIT_NOFILE, {hard}) failed");
    }
    hard
}
