//! Child processes that die with the test binary, however it ends.
//!
//! A fixture's server (`nats-server`) must not outlive the binary that started it: a
//! `libtest-mimic` harness ends with `process::exit`, which runs no destructor (a server held by
//! a suite-wide `Arc` was never dropped: two `nats-server`s outlived every `scripts/test`), and a
//! test binary may panic or be killed. [`spawn`] asks the kernel to kill the child when its
//! parent thread ends (`PR_SET_PDEATHSIG` = `SIGKILL`, Linux), and makes every child from one
//! thread that lives as long as the process, so "its parent thread ended" means "the test
//! binary ended" — by returning, exiting, panicking or being killed.

use std::io;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command};
use std::sync::Mutex;
use std::sync::OnceLock;
use std::sync::mpsc::{self, Sender};

type Request = (Command, Sender<io::Result<Child>>);

/// The spawning thread's queue; the thread runs until the process ends.
fn spawner() -> &'static Mutex<Sender<Request>> {
    static SPAWNER: OnceLock<Mutex<Sender<Request>>> = OnceLock::new();
    SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<Request>();
        std::thread::Builder::new()
            .name("fixture-spawner".into())
            .spawn(move || {
                for (mut command, reply) in rx {
                    let _ = reply.send(command.spawn());
                }
                // The sender lives in a static: the queue never closes, so this thread (the
                // children's parent) ends only with the process.
                loop {
                    std::thread::park();
                }
            })
            .expect("spawn the fixture spawner thread");
        Mutex::new(tx)
    })
}

/// Spawns `command` as a child killed with `SIGKILL` when this process ends, by any path.
///
/// Errors: what [`Command::spawn`] returns (the program missing, not executable, …).
pub fn spawn(mut command: Command) -> io::Result<Child> {
    // SAFETY: getpid reads this process's id; nothing is shared.
    let parent = unsafe { libc::getpid() };
    // SAFETY: the closure runs in the forked child before exec and calls only async-signal-safe
    // functions (prctl, getppid, _exit); it touches no memory of the parent.
    unsafe {
        command.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(io::Error::last_os_error());
            }
            // The parent may have died between fork and prctl: then nothing will signal us.
            if libc::getppid() != parent {
                libc::_exit(1);
            }
            Ok(())
        });
    }
    let (tx, rx) = mpsc::channel();
    spawner()
        .lock()
        .expect("the fixture spawner's queue")
        .send((command, tx))
        .map_err(|_| io::Error::other("the fixture spawner thread is gone"))?;
    rx.recv()
        .map_err(|_| io::Error::other("the fixture spawner thread is gone"))?
}

/// [`spawn`] at the end of a builder chain (`Command::new(…).arg(…).spawn_tied()`): takes the
/// command out of `self`, leaving an empty one in its place.
pub trait SpawnTied {
    /// As [`spawn`]. Errors: what [`Command::spawn`] returns.
    fn spawn_tied(&mut self) -> io::Result<Child>;
}

impl SpawnTied for Command {
    fn spawn_tied(&mut self) -> io::Result<Child> {
        spawn(std::mem::replace(self, Command::new("false")))
    }
}
