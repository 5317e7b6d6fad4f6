//! Child processes and directories that do not outlive the test binary, however it ends.
//!
//! A fixture's server (`nats-server`, `crewbus serve`, a Postgres cluster) must not outlive the
//! binary that started it, and neither may its store directory. A destructor is not enough: a
//! `libtest-mimic` harness ends with `process::exit`, which runs no destructor (a server held by a
//! suite-wide static is never dropped), and a test binary may panic in a thread that holds no
//! guard, or be killed.
//!
//! The mechanism is a **watchdog**: one small supervisor per test process (`sh -c`, started
//! on first use), whose stdin is a pipe whose only write end this process holds. The kernel
//! closes that write end when this process ends by any path — returning, `exit`, a panic, a
//! signal, `SIGKILL` — and only then does the watchdog read end-of-file. It then signals every
//! process registered with it that still runs ([`spawn`]: `SIGKILL`; [`tie_pid`]: the signal
//! given), waits until each is gone (`SIGKILL` after 10 s), and removes every directory
//! registered with [`remove_when_ended`].
//!
//! Why not `PR_SET_PDEATHSIG`: it fires when the spawning *thread* ends (a test harness or tokio
//! worker thread may end long before the process), it is silently cleared when the child execs a
//! set-uid or file-capability binary, it cannot remove a directory after the process died, and it
//! cannot cover a process that is not our child (a daemonized postmaster). Why not a process
//! group: killing the group needs someone alive to do it, which is exactly what is missing when
//! the test binary was killed. The pipe needs no cooperation from the dying process and no
//! thread to stay alive.
//!
//! Guarantees and limits:
//! - A process is registered by itself, between `fork` and `exec` (a `pre_exec` hook writes its
//!   pid and start time to the watchdog's pipe; until it `exec`s it holds a copy of the write end,
//!   so the watchdog cannot see end-of-file before the registration): there is no window in which
//!   a spawned child runs unregistered.
//! - A process is known by its pid *and* its start time (`/proc/<pid>/stat`, field 22): a child
//!   that exited and whose pid was reused by another process is never signalled.
//! - The watchdog runs in its own process group, so a Ctrl-C or a signal sent to the test's
//!   group does not stop it before it has cleaned up; it ignores `SIGHUP`, `SIGINT` and `SIGPIPE`.
//!   It can still be killed deliberately (`SIGKILL`, `SIGTERM`); then nothing is cleaned up.
//! - Linux only (`/proc`); `sh`, `cat`, `kill`, `sleep` and `rm` from the system.

use std::io::{self, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::OnceLock;

/// The watchdog, read from stdin: `p PID:START:SIG` registers a process, `d PATH` a directory.
/// At end-of-file: signals each registered process still running (same pid and start time,
/// not a zombie), waits until each is gone (`SIGKILL` after ~10 s, gives up after ~60 s), then
/// removes each directory.
const WATCHDOG: &str = r#"
set -f
trap '' HUP INT PIPE
nl='
'
procs=
dirs=
while IFS= read -r line; do
  case $line in
    "p "*) procs="$procs ${line#p }" ;;
    "d "*) dirs="$dirs$nl${line#d }" ;;
  esac
done
alive() {
  want=$2
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  set -- ${stat##*") "}
  [ "$1" != Z ] && [ "${20}" = "$want" ]
}
for p in $procs; do
  pid=${p%%:*}; rest=${p#*:}; start=${rest%%:*}; sig=${rest#*:}
  if alive "$pid" "$start"; then kill "-$sig" "$pid" 2>/dev/null; fi
done
for p in $procs; do
  pid=${p%%:*}; rest=${p#*:}; start=${rest%%:*}
  n=0
  while alive "$pid" "$start"; do
    n=$((n + 1))
    if [ "$n" -eq 200 ]; then kill -9 "$pid" 2>/dev/null; fi
    if [ "$n" -ge 1200 ]; then break; fi
    sleep 0.05
  done
done
printf '%s\n' "$dirs" | while IFS= read -r d; do
  if [ -n "$d" ]; then rm -rf -- "$d"; fi
done
"#;

/// The write end of this process's watchdog pipe (started on first use, lives as long as the
/// process: only the kernel closes it).
fn watchdog() -> io::Result<&'static ChildStdin> {
    static WATCHDOG_STDIN: OnceLock<ChildStdin> = OnceLock::new();
    if let Some(stdin) = WATCHDOG_STDIN.get() {
        return Ok(stdin);
    }
    let mut child = Command::new("/bin/sh")
        .arg("-c")
        .arg(WATCHDOG)
        .arg("crewbus-fixture-watchdog")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        // Not in the test's process group: a Ctrl-C or a group kill must leave it to clean up.
        .process_group(0)
        .spawn()?;
    let stdin = child.stdin.take().expect("the watchdog's stdin is piped");
    // Two threads may start one each; the loser's pipe closes here and its watchdog, with
    // nothing registered, just exits. The `Child` is never waited on: it outlives us.
    Ok(WATCHDOG_STDIN.get_or_init(|| stdin))
}

/// Writes one line to the watchdog in a single `write` (≤ `PIPE_BUF` bytes: atomic, never
/// interleaved with another process's or thread's line).
fn send(line: &[u8]) -> io::Result<()> {
    if line.len() > libc::PIPE_BUF {
        return Err(io::Error::other("a watchdog line longer than PIPE_BUF"));
    }
    let n = watchdog()?.write(line)?;
    if n != line.len() {
        return Err(io::Error::other("a short write to the watchdog"));
    }
    Ok(())
}

/// The start time (clock ticks since boot, `/proc/<pid>/stat` field 22) in `stat`.
fn start_time_in(stat: &[u8]) -> Option<u64> {
    let close = stat.iter().rposition(|&b| b == b')')?;
    // After "pid (comm)" come field 3 (state) onwards: field 22 is the 20th of them.
    let field = stat[close + 1..]
        .split(|&b| b == b' ')
        .filter(|f| !f.is_empty())
        .nth(19)?;
    let mut value: u64 = 0;
    for &b in field {
        if !b.is_ascii_digit() {
            return None;
        }
        value = value.checked_mul(10)?.checked_add(u64::from(b - b'0'))?;
    }
    Some(value)
}

/// The start time of process `pid`, when it exists.
pub fn start_time(pid: u32) -> Option<u64> {
    start_time_in(&std::fs::read(format!("/proc/{pid}/stat")).ok()?)
}

/// Whether process `pid` started at `start` still runs (exists and is not a zombie): a pid
/// reused by another process does not count.
pub fn runs(pid: u32, start: u64) -> bool {
    let Ok(stat) = std::fs::read(format!("/proc/{pid}/stat")) else {
        return false;
    };
    let state = stat
        .iter()
        .rposition(|&b| b == b')')
        .and_then(|i| stat.get(i + 2).copied());
    state.is_some_and(|s| s != b'Z') && start_time_in(&stat) == Some(start)
}

/// Appends the decimal digits of `value` to `buf` at `*len` (no allocation: usable between
/// `fork` and `exec`).
fn push_decimal(buf: &mut [u8], len: &mut usize, mut value: u64) -> Option<()> {
    let mut digits = [0u8; 20];
    let mut n = 0;
    loop {
        digits[n] = b'0' + (value % 10) as u8;
        n += 1;
        value /= 10;
        if value == 0 {
            break;
        }
    }
    for &d in digits[..n].iter().rev() {
        *buf.get_mut(*len)? = d;
        *len += 1;
    }
    Some(())
}

/// `p PID:START:SIG\n` for the calling process, read from `/proc/self/stat`, written to `fd` in
/// one `write`. Runs between `fork` and `exec`: only async-signal-safe calls, no allocation.
fn register_self(fd: RawFd, signal: i32) -> io::Result<()> {
    let mut stat = [0u8; 1024];
    // SAFETY: open/read/close on a NUL-terminated literal and a stack buffer of the given size.
    let read = unsafe {
        let f = libc::open(
            c"/proc/self/stat".as_ptr(),
            libc::O_RDONLY | libc::O_CLOEXEC,
        );
        if f < 0 {
            return Err(io::Error::last_os_error());
        }
        let n = libc::read(f, stat.as_mut_ptr().cast(), stat.len());
        libc::close(f);
        n
    };
    let Ok(read) = usize::try_from(read) else {
        return Err(io::Error::last_os_error());
    };
    let bad = || io::Error::from_raw_os_error(libc::EINVAL);
    let start = start_time_in(&stat[..read]).ok_or_else(bad)?;
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() };
    let mut line = [0u8; 64];
    let mut len = 2;
    line[..2].copy_from_slice(b"p ");
    push_decimal(&mut line, &mut len, u64::try_from(pid).map_err(|_| bad())?).ok_or_else(bad)?;
    *line.get_mut(len).ok_or_else(bad)? = b':';
    len += 1;
    push_decimal(&mut line, &mut len, start).ok_or_else(bad)?;
    *line.get_mut(len).ok_or_else(bad)? = b':';
    len += 1;
    push_decimal(
        &mut line,
        &mut len,
        u64::try_from(signal).map_err(|_| bad())?,
    )
    .ok_or_else(bad)?;
    *line.get_mut(len).ok_or_else(bad)? = b'\n';
    len += 1;
    // SAFETY: write from a stack buffer of at least `len` bytes.
    let written = unsafe { libc::write(fd, line.as_ptr().cast(), len) };
    if written < 0 {
        return Err(io::Error::last_os_error());
    }
    if written as usize != len {
        return Err(bad());
    }
    Ok(())
}

/// Spawns `command` as a child that is killed (`SIGKILL`) once this process has ended, by any
/// path (see the module docs). The returned [`Child`] is an ordinary direct child: its pid,
/// pipes, `kill`, `wait` and signals sent to it behave as with [`Command::spawn`]; a child that
/// already exited is left alone.
///
/// Errors: what [`Command::spawn`] returns (the program missing, not executable, …), or the
/// watchdog could not be started or written to (then no child is left running).
pub fn spawn(mut command: Command) -> io::Result<Child> {
    let fd = watchdog()?.as_raw_fd();
    // SAFETY: the hook runs in the forked child before exec and calls only async-signal-safe
    // functions (open, read, close, getpid, write) on stack buffers; it allocates nothing and
    // touches no lock. `fd` is this process's watchdog pipe, inherited by the fork (it is
    // close-on-exec, so the program run does not keep it).
    unsafe {
        command.pre_exec(move || register_self(fd, libc::SIGKILL));
    }
    command.spawn()
}

/// Registers a running process that this process did not spawn (e.g. a daemon started by a
/// control program, such as Postgres's postmaster from `pg_ctl start`): once this process has
/// ended, the watchdog sends it `signal` if it still runs (same pid and start time), and
/// `SIGKILL` if it has not gone 10 s later. The caller must know `pid` is the process it means
/// right now (e.g. it was just read from the daemon's pid file and the daemon answers); there is
/// a window between the daemon's start and this call in which it is not covered.
///
/// Errors: `pid` does not exist, or the watchdog could not be started or written to.
pub fn tie_pid(pid: u32, signal: i32) -> io::Result<()> {
    let start = start_time(pid).ok_or_else(|| {
        io::Error::new(io::ErrorKind::NotFound, format!("no process {pid} to tie"))
    })?;
    send(format!("p {pid}:{start}:{signal}\n").as_bytes())
}

/// Registers `path` with the watchdog: once this process has ended and the processes tied to it
/// are gone, `path` is removed recursively (`rm -rf`). Removing it earlier (a destructor that
/// ran) does no harm.
///
/// Errors: `path` contains a newline or is not absolute, or the watchdog could not be started or
/// written to.
pub fn remove_when_ended(path: &Path) -> io::Result<()> {
    let text = path
        .to_str()
        .filter(|t| !t.contains('\n') && path.is_absolute())
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("not an absolute one-line UTF-8 path: {}", path.display()),
            )
        })?;
    send(format!("d {text}\n").as_bytes())
}

/// [`spawn`] at the end of a builder chain (`Command::new(…).arg(…).spawn_tied()`): takes the
/// command out of `self`, leaving an empty one in its place.
pub trait SpawnTied {
    /// As [`spawn`]. Errors: as [`spawn`].
    fn spawn_tied(&mut self) -> io::Result<Child>;
}

impl SpawnTied for Command {
    fn spawn_tied(&mut self) -> io::Result<Child> {
        spawn(std::mem::replace(self, Command::new("false")))
    }
}

#[cfg(test)]
mod tests {
    //! The mechanism without any server: this test binary runs itself again as a probe that
    //! spawns a tied `sleep` (or ties one by pid), registers a directory, and ends without a
    //! destructor (`exit`, a failing test — libtest catches the panic and exits —, or killed
    //! with `SIGKILL`); the sleep must be gone and the directory removed within a deadline.

    use std::io::{BufRead, BufReader, Write as _};
    use std::path::PathBuf;
    use std::process::{Command, Stdio};
    use std::time::Duration;

    use super::*;
    use crate::wait::Deadline;

    const PROBE: &str = "CREWBUS_CHILD_PROBE";

    #[test]
    fn start_time_reads_field_22_past_a_comm_with_spaces_and_parens() {
        let mut stat = b"42 (a b) c) S".to_vec();
        for field in 4..=21 {
            stat.extend_from_slice(format!(" {field}").as_bytes());
        }
        stat.extend_from_slice(b" 987654 23 24\n");
        assert_eq!(start_time_in(&stat), Some(987654));
        let me = std::process::id();
        assert!(runs(me, start_time(me).expect("our own start time")));
        assert!(!runs(me, start_time(me).unwrap() + 1), "another start time");
    }

    /// The probe, run by [`probe`] (`--ignored --exact`, [`PROBE`] set); without [`PROBE`] it
    /// does nothing.
    #[test]
    #[ignore = "a helper: the probe the tied-child tests run in a process of its own"]
    #[allow(
        clippy::zombie_processes,
        reason = "the probe ends without waiting, on purpose"
    )]
    fn probe_child() {
        let Ok(mode) = std::env::var(PROBE) else {
            return;
        };
        let mut sleep = Command::new("sleep");
        sleep.arg("600").stdin(Stdio::null()).stdout(Stdio::null());
        let sleeper = if mode == "tie" {
            // Not spawned tied: registered afterwards by pid, as a daemon is (`tie_pid`).
            let sleeper = sleep.spawn().expect("spawn a sleep");
            tie_pid(sleeper.id(), libc::SIGTERM).expect("tie the sleep");
            sleeper
        } else {
            sleep.spawn_tied().expect("spawn a tied sleep")
        };
        let dir = tempfile::Builder::new()
            .prefix("crewbus-child-probe-")
            .tempdir()
            .expect("a temp dir")
            .keep();
        std::fs::write(dir.join("file"), "x").unwrap();
        remove_when_ended(&dir).expect("register the dir");
        println!("pid {} dir {}", sleeper.id(), dir.display());
        std::io::stdout().flush().unwrap();
        let mut go = String::new();
        let _ = std::io::stdin().read_line(&mut go);
        match mode.as_str() {
            "exit" | "tie" => std::process::exit(3),
            "panic" => panic!("the probe fails on purpose"),
            _ => loop {
                std::thread::park();
            },
        }
    }

    fn probe(mode: &str) {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "child::tests::probe_child",
                "--ignored",
                "--nocapture",
            ])
            .args(["--test-threads", "1"])
            .env(PROBE, mode)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let (pid, dir) = loop {
            let mut line = String::new();
            assert_ne!(
                out.read_line(&mut line).unwrap(),
                0,
                "the probe said no pid"
            );
            // libtest prints `test <name> ... ` before the test's own output, on the same line.
            if let Some((pid, dir)) = line
                .trim()
                .split_once("pid ")
                .and_then(|(_, rest)| rest.split_once(" dir "))
            {
                break (pid.parse::<u32>().unwrap(), PathBuf::from(dir));
            }
        };
        let start = start_time(pid).expect("the probe's sleep runs");
        assert!(runs(pid, start));
        assert!(dir.join("file").exists());
        writeln!(child.stdin.take().unwrap(), "go").unwrap();
        if mode == "hang" {
            child.kill().unwrap();
        }
        let status = child.wait().unwrap();
        assert!(
            !status.success(),
            "the probe ended as asked ({mode}): {status}"
        );
        let mut deadline = Deadline::new(
            Duration::from_secs(15),
            format!("sleep {pid} and {} to go with the probe", dir.display()),
        );
        while runs(pid, start) || dir.exists() {
            assert!(
                !deadline.passed(),
                "after the probe ended ({mode}): sleep {pid} runs: {}, dir {} exists: {}",
                runs(pid, start),
                dir.display(),
                dir.exists()
            );
            deadline.tick_blocking();
        }
    }

    #[test]
    fn a_tied_child_and_dir_go_when_the_process_exits() {
        probe("exit");
    }

    #[test]
    fn a_process_tied_by_pid_goes_when_the_process_exits() {
        probe("tie");
    }

    #[test]
    fn a_tied_child_and_dir_go_when_a_test_of_the_process_fails() {
        probe("panic");
    }

    #[test]
    fn a_tied_child_and_dir_go_when_the_process_is_killed() {
        probe("hang");
    }
}
