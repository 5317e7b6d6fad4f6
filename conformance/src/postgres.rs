//! Real-Postgres fixtures.
//!
//! - [`TestDatabase`]: one fresh, uniquely named database per test on the server named by
//!   `DATABASE_URL`, with the migrations applied. It is dropped when the test reports success
//!   ([`TestDatabase::passed`]) and kept — its name printed — when the test fails or panics, so
//!   it can be inspected. A missing or unreachable `DATABASE_URL` fails the test loudly; nothing
//!   is ever skipped.
//! - [`PgCluster`]: a private throwaway cluster (`initdb` + `pg_ctl` from Debian's `postgresql`
//!   package) on its own port and data directory in a temp dir, stoppable and restartable on the
//!   same port, stopped and removed on drop — and, when the test binary ends without dropping it,
//!   stopped and removed once the binary is gone ([`crate::child`]). For tests that restart
//!   Postgres, never the shared server. `initdb` and `postgres` refuse to run as root, so as root
//!   they run as an unprivileged user (`PG_RUN_USER`, default `postgres`) through `runuser`.

use std::fmt;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::str::FromStr;
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{ConnectOptions, Connection, PgPool};
use uuid::Uuid;

use crate::wait::Deadline;

/// The environment variable naming the shared test server.
pub const DATABASE_URL: &str = "DATABASE_URL";

/// Connections in each test database's pool unless [`TestDatabase::create_with`] says otherwise.
pub const DEFAULT_POOL_SIZE: u32 = 8;

/// How long a test waits for a connection from its pool.
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(10);

/// `host:port/database` of a connect options value: what may be printed (never the password).
fn describe(options: &PgConnectOptions) -> String {
    format!(
        "{}:{}/{}",
        options.get_host(),
        options.get_port(),
        options.get_database().unwrap_or("")
    )
}

/// The options of `DATABASE_URL`. Panics (the test fails loudly) when it is unset or malformed.
pub fn database_url_options() -> PgConnectOptions {
    let url = std::env::var(DATABASE_URL).unwrap_or_else(|_| {
        panic!(
            "{DATABASE_URL} is not set: the Postgres tests need a real server \
             (scripts/test starts a throwaway cluster when it is unset)"
        )
    });
    PgConnectOptions::from_str(&url)
        .unwrap_or_else(|e| panic!("{DATABASE_URL} is not a Postgres URL: {e}"))
}

/// A fresh database for one test, migrated, on the shared server.
pub struct TestDatabase {
    name: String,
    label: String,
    admin: PgConnectOptions,
    pool: PgPool,
    finished: bool,
    drop_unless_panicking: bool,
}

impl fmt::Debug for TestDatabase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TestDatabase")
            .field("name", &self.name)
            .field("server", &describe(&self.admin))
            .finish_non_exhaustive()
    }
}

impl TestDatabase {
    /// Creates `crewbus_t_<random>` on `DATABASE_URL`'s server, connects a pool of
    /// [`DEFAULT_POOL_SIZE`] and runs `migrate` on it. `label` (the test's name) is printed if
    /// the database is kept. Panics — failing the test — when the server is unset, unreachable,
    /// or the migrations fail.
    pub async fn create<F, Fut, E>(label: &str, migrate: F) -> Self
    where
        F: FnOnce(PgPool) -> Fut,
        Fut: Future<Output = Result<(), E>>,
        E: fmt::Debug,
    {
        Self::create_with(database_url_options(), label, DEFAULT_POOL_SIZE, migrate).await
    }

    /// [`TestDatabase::create`] on the server of `admin` (connected to any existing database
    /// there), with a pool of `pool_size` connections.
    pub async fn create_with<F, Fut, E>(
        admin: PgConnectOptions,
        label: &str,
        pool_size: u32,
        migrate: F,
    ) -> Self
    where
        F: FnOnce(PgPool) -> Fut,
        Fut: Future<Output = Result<(), E>>,
        E: fmt::Debug,
    {
        let name = format!("crewbus_t_{}", Uuid::new_v4().simple());
        let mut conn = admin.connect().await.unwrap_or_else(|e| {
            panic!(
                "Postgres at {} is unreachable for test `{label}`: {e}",
                describe(&admin)
            )
        });
        sqlx::query(&format!("CREATE DATABASE \"{name}\""))
            .execute(&mut conn)
            .await
            .unwrap_or_else(|e| panic!("creating database {name} failed: {e}"));
        let _ = conn.close().await;
        let pool = PgPoolOptions::new()
            .max_connections(pool_size)
            .acquire_timeout(ACQUIRE_TIMEOUT)
            .connect_with(admin.clone().database(&name))
            .await
            .unwrap_or_else(|e| panic!("connecting to {name} failed: {e}"));
        let db = TestDatabase {
            name,
            label: label.to_owned(),
            admin,
            pool,
            finished: false,
            drop_unless_panicking: false,
        };
        if let Err(e) = migrate(db.pool.clone()).await {
            panic!("migrating {} failed: {e:?}", db.name);
        }
        db
    }

    /// The pool connected to this test's database.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// The database's name (`crewbus_t_<32 hex>`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// For fixtures whose owner cannot report success (the shared harness drops its fixture at
    /// the end of the trial): dropping this value then drops the database too, unless the thread
    /// is panicking (a failed assertion), in which case it is kept and its name printed.
    pub fn drop_unless_panicking(mut self) -> Self {
        self.drop_unless_panicking = true;
        self
    }

    /// The test passed: closes the pool and drops the database. A database whose test never
    /// calls this (failed, returned early, panicked) is kept and its name printed on drop.
    pub async fn passed(mut self) {
        self.pool.close().await;
        let dropped = async {
            let mut conn = self.admin.connect().await?;
            sqlx::query(&format!(
                "DROP DATABASE IF EXISTS \"{}\" WITH (FORCE)",
                self.name
            ))
            .execute(&mut conn)
            .await?;
            conn.close().await
        }
        .await;
        if let Err(e) = dropped {
            eprintln!("could not drop test database {}: {e}", self.name);
        }
        self.finished = true;
    }
}

/// Drops database `name` from a helper thread with its own runtime (usable from `Drop`, inside
/// or outside an async runtime).
fn drop_database_now(admin: PgConnectOptions, name: String) {
    let done = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| e.to_string())?;
        runtime.block_on(async {
            let mut conn = admin.connect().await.map_err(|e| e.to_string())?;
            sqlx::query(&format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)"))
                .execute(&mut conn)
                .await
                .map_err(|e| e.to_string())?;
            conn.close().await.map_err(|e| e.to_string())
        })
    })
    .join();
    if let Ok(Err(e)) | Err(e) = done.map_err(|_| "panicked".to_owned()) {
        eprintln!("could not drop a test database: {e}");
    }
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        if !self.finished && self.drop_unless_panicking && !std::thread::panicking() {
            drop_database_now(self.admin.clone(), self.name.clone());
        } else if !self.finished {
            eprintln!(
                "test `{}` did not pass: kept database `{}` on {} for inspection",
                self.label,
                self.name,
                describe(&self.admin)
            );
        }
    }
}

/// The directory holding `initdb` and `pg_ctl`: `PG_BIN_DIR`, else the newest
/// `/usr/lib/postgresql/<version>/bin`. Panics when there is none.
fn pg_bin_dir() -> PathBuf {
    if let Ok(dir) = std::env::var("PG_BIN_DIR") {
        return PathBuf::from(dir);
    }
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let version = e.file_name().to_str()?.parse::<u32>().ok()?;
            let bin = e.path().join("bin");
            bin.join("pg_ctl").exists().then_some((version, bin))
        })
        .collect();
    found.sort();
    found.pop().map(|(_, bin)| bin).unwrap_or_else(|| {
        panic!("no initdb/pg_ctl: install Debian's `postgresql` package or set PG_BIN_DIR")
    })
}

fn command_output(program: &str, args: &[&str]) -> Option<String> {
    let out = Command::new(program).args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// The unprivileged user the cluster runs as when we are root, with its uid and gid.
fn run_as() -> Option<(String, u32, u32)> {
    if command_output("id", &["-u"]).as_deref() != Some("0") {
        return None;
    }
    let user = std::env::var("PG_RUN_USER").unwrap_or_else(|_| "postgres".to_owned());
    let id = |flag: &str| {
        command_output("id", &[flag, &user])
            .and_then(|s| s.parse::<u32>().ok())
            .unwrap_or_else(|| {
                panic!("running as root needs an unprivileged user `{user}` (PG_RUN_USER)")
            })
    };
    let (uid, gid) = (id("-u"), id("-g"));
    Some((user, uid, gid))
}

/// How to run one cluster's binaries: where they are, as whom, on which directory and port.
/// Movable into a blocking task.
#[derive(Clone)]
struct Control {
    bin: PathBuf,
    user: Option<String>,
    dir: PathBuf,
    port: u16,
}

impl Control {
    fn data_dir(&self) -> PathBuf {
        self.dir.join("data")
    }

    fn log_path(&self) -> PathBuf {
        self.dir.join("postgres.log")
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    /// Runs one of the cluster's binaries as the cluster's user; whether it succeeded (its
    /// output is printed when it did not).
    fn run(&self, program: &str, args: &[&str]) -> bool {
        let exe = self.bin.join(program);
        let mut cmd = match &self.user {
            Some(user) => {
                let mut c = Command::new("runuser");
                c.args(["-u", user, "--"]).arg(&exe);
                c
            }
            None => Command::new(&exe),
        };
        let out = cmd
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", exe.display()));
        if !out.status.success() {
            eprintln!(
                "{program} exited with {}: {}{}",
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        out.status.success()
    }

    fn initdb(&self) {
        let data = self.data_dir();
        let args = [
            "-D",
            path_str(&data),
            "-U",
            "postgres",
            "-A",
            "trust",
            "-E",
            "UTF8",
            "--locale=C",
            "--no-sync",
        ];
        assert!(self.run("initdb", &args), "initdb failed");
    }

    /// `pg_ctl start -w` on this port, the socket in the cluster's own directory.
    fn start(&self) -> bool {
        let options = format!("-p {} -h 127.0.0.1 -k {}", self.port, path_str(&self.dir));
        let (data, log) = (self.data_dir(), self.log_path());
        let args = [
            "-D",
            path_str(&data),
            "-l",
            path_str(&log),
            "-o",
            &options,
            "-w",
            "-t",
            "60",
            "start",
        ];
        if !self.run("pg_ctl", &args) {
            return false;
        }
        // The postmaster is pg_ctl's daemon, not our child: tie it by its pid file (it answers
        // now: `-w` waited), so that it stops (SIGQUIT: an immediate shutdown, its backends
        // with it) when this test binary ends without dropping the cluster.
        let pid_file = data.join("postmaster.pid");
        let pid = std::fs::read_to_string(&pid_file)
            .ok()
            .and_then(|t| t.lines().next()?.trim().parse::<u32>().ok())
            .unwrap_or_else(|| panic!("no pid in {}", pid_file.display()));
        crate::child::tie_pid(pid, libc::SIGQUIT)
            .unwrap_or_else(|e| panic!("tie the postmaster {pid} to this test binary: {e}"));
        true
    }

    /// `pg_ctl stop -w -m <mode>`.
    fn stop(&self, mode: &str) -> bool {
        let data = self.data_dir();
        self.run(
            "pg_ctl",
            &["-D", path_str(&data), "-m", mode, "-w", "-t", "60", "stop"],
        )
    }
}

fn path_str(path: &Path) -> &str {
    path.to_str().expect("temp paths are UTF-8")
}

/// A private Postgres cluster for one test: own data directory, socket directory, log and port.
pub struct PgCluster {
    // Field order matters on drop: the server is stopped (Drop) before the directory goes.
    control: Control,
    running: bool,
    _dir: tempfile::TempDir,
}

impl fmt::Debug for PgCluster {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PgCluster")
            .field("dir", &self.control.dir)
            .field("port", &self.control.port)
            .field("running", &self.running)
            .finish()
    }
}

impl PgCluster {
    /// `initdb` a new cluster in a temp dir (trust auth, superuser `postgres`) and start it on a
    /// free port; waits (with a deadline) until it accepts connections. Panics with the server's
    /// log when it cannot.
    pub async fn start() -> Self {
        let cluster = tokio::task::spawn_blocking(Self::start_blocking)
            .await
            .expect("cluster start panicked");
        cluster.wait_ready(Duration::from_secs(60)).await;
        cluster
    }

    fn start_blocking() -> Self {
        let owner = run_as();
        let dir = tempfile::Builder::new()
            .prefix("crewbus-pg-")
            .tempdir()
            .expect("temp dir for a Postgres cluster");
        // Removed by the watchdog (after the postmaster is gone) once this process has ended,
        // should no destructor run.
        crate::child::remove_when_ended(dir.path()).expect("the fixture watchdog");
        if let Some((_, uid, gid)) = &owner {
            std::os::unix::fs::chown(dir.path(), Some(*uid), Some(*gid))
                .expect("chown the cluster's temp dir");
        }
        let mut control = Control {
            bin: pg_bin_dir(),
            user: owner.map(|(user, _, _)| user),
            dir: dir.path().to_owned(),
            port: 0,
        };
        control.initdb();
        // A port picked from the kernel may be taken before the server binds it: try a few.
        for attempt in 0.. {
            control.port = crate::nats::free_port();
            if control.start() {
                break;
            }
            assert!(
                attempt < 4,
                "cluster would not start; log:\n{}",
                control.log()
            );
        }
        PgCluster {
            control,
            running: true,
            _dir: dir,
        }
    }

    /// The port the cluster listens on (kept across restarts).
    pub fn port(&self) -> u16 {
        self.control.port
    }

    /// Connect options for the cluster's `postgres` database as superuser `postgres`.
    pub fn options(&self) -> PgConnectOptions {
        PgConnectOptions::new()
            .host("127.0.0.1")
            .port(self.control.port)
            .username("postgres")
            .database("postgres")
    }

    /// `postgres://postgres@127.0.0.1:<port>/postgres` (no password: trust auth).
    pub fn url(&self) -> String {
        format!(
            "postgres://postgres@127.0.0.1:{}/postgres",
            self.control.port
        )
    }

    /// Stops the server and waits until it is down: `fast` (disconnects clients, rolls back open
    /// transactions, checkpoints) or, with `immediate`, an abort without a checkpoint (the next
    /// start replays the WAL, as after a crash). Panics when `pg_ctl` fails.
    pub async fn stop(&mut self, immediate: bool) {
        let mode = if immediate { "immediate" } else { "fast" };
        let control = self.control.clone();
        let ok = tokio::task::spawn_blocking(move || control.stop(mode))
            .await
            .expect("pg_ctl stop panicked");
        assert!(ok, "pg_ctl stop failed; log:\n{}", self.control.log());
        self.running = false;
    }

    /// Starts a stopped cluster again on the same port and data directory and waits until it
    /// accepts connections. Panics with the log when it cannot.
    pub async fn restart(&mut self) {
        assert!(!self.running, "restart needs a stopped cluster");
        let control = self.control.clone();
        let ok = tokio::task::spawn_blocking(move || control.start())
            .await
            .expect("pg_ctl start panicked");
        assert!(
            ok,
            "cluster would not restart; log:\n{}",
            self.control.log()
        );
        self.running = true;
        self.wait_ready(Duration::from_secs(60)).await;
    }

    /// Polls until a connection succeeds; panics with the log once `deadline` has passed.
    pub async fn wait_ready(&self, deadline: Duration) {
        let mut until = Deadline::new(deadline, "the cluster to accept connections");
        loop {
            match self.options().connect().await {
                Ok(conn) => {
                    let _ = conn.close().await;
                    return;
                }
                Err(e) if until.passed() => panic!(
                    "cluster not ready after {deadline:?}: {e}; log:\n{}",
                    self.control.log()
                ),
                Err(_) => until.tick().await,
            }
        }
    }
}

impl Drop for PgCluster {
    fn drop(&mut self) {
        if self.running {
            self.control.stop("immediate");
        }
    }
}
