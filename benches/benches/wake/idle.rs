//! Idle cost: armed Stop hooks (real `crewbus hook claude-code --headless` processes, their
//! watches parked), half of them over agents holding an old, already-reported, unfetched
//! message, against no hook, on one server.

use std::collections::HashMap;
use std::path::Path;
use std::process::Child;
use std::time::{Duration, Instant};

use crewbus_conformance::postgres::database_url_options;
use serde_json::Value;
use sqlx::{ConnectOptions as _, PgConnection};

use crate::processes::{HookSpec, prompt_event, stop_event, wait_hook};
use crate::scene::{Member, Scene, Store};
use crate::support::cpu::{cpu_ticks, tick_seconds};

/// `--wait` of an armed hook: far beyond the windows (each hook watches in requests of the
/// server's `bus.max_wait_ms`, 50 s, as it would in a session).
const ARMED_WAIT_SECONDS: u64 = 3_600;
/// How often a window samples the bench database's Postgres sessions (a session that starts
/// inside the window counts from its first sample).
const SESSION_SAMPLE: Duration = Duration::from_secs(5);
/// How old the already-reported message is, at least, when the window with hooks opens: past
/// `bus.topup_after_ms` (2 s), so the safety sweep would find it for its agent were it not
/// reported.
const OLD: Duration = Duration::from_secs(3);
/// Hook processes started at a time (each then waits for its watch).
const SPAWN_CHUNK: usize = 20;

/// CPU seconds spent in one window.
#[derive(Clone, Copy, Default, Debug)]
pub struct WindowCpu {
    pub seconds: f64,
    /// This process: the crewbus server, its workers (and the bench's idle main task); utime +
    /// stime, every thread's (clock ticks).
    pub crewbus: f64,
    /// The Postgres sessions of the bench's database (none on the embedded store).
    pub store: f64,
    /// The hook processes (none in the window without).
    pub hooks: f64,
    /// Watch reads (`crewbus_watch_reads_total`) and safety sweeps in the window.
    pub watch_reads: u64,
    pub sweeps: u64,
}

impl WindowCpu {
    /// crewbus and its store, cores.
    pub fn cores(&self) -> f64 {
        (self.crewbus + self.store) / self.seconds
    }
}

/// One store's idle figures.
pub struct IdleFigures {
    pub store: Store,
    pub hooks: usize,
    pub without: WindowCpu,
    pub with: WindowCpu,
    /// Seconds the hooks took to start and park.
    pub armed_in: f64,
}

/// CPU seconds `pid` has run so far: the sum of its threads' `se.sum_exec_runtime`
/// (`/proc/<pid>/task/*/sched`, nanosecond precision) when the kernel shows it, else utime +
/// stime in clock ticks (`/proc/<pid>/stat`: 10 ms steps, so a process that runs 0.5 ms in a
/// window mostly shows none). Only for processes whose threads live throughout (a thread that
/// exits takes its time with it): the hooks (one runtime thread) and Postgres sessions (one
/// thread each). `None`: the process is gone.
fn cpu_seconds(pid: u32) -> Option<f64> {
    let precise = std::fs::read_dir(format!("/proc/{pid}/task"))
        .ok()
        .and_then(|threads| {
            threads
                .flatten()
                .map(|t| {
                    let sched = std::fs::read_to_string(t.path().join("sched")).ok()?;
                    let line = sched
                        .lines()
                        .find(|l| l.starts_with("se.sum_exec_runtime"))?;
                    // Milliseconds, e.g. `se.sum_exec_runtime   :   1522.773316`.
                    let ms: f64 = line.rsplit(':').next()?.trim().parse().ok()?;
                    Some(ms / 1e3)
                })
                .sum::<Option<f64>>()
        });
    precise.or_else(|| Some(cpu_ticks(&pid.to_string())? as f64 * tick_seconds()))
}

/// Process ids of the Postgres sessions on the bench's database, read through a connection to
/// `DATABASE_URL`'s own database (so the bench's reads are not counted as the store's).
async fn sessions(admin: &mut PgConnection, database: &str) -> Vec<u32> {
    let pids: Vec<i32> = sqlx::query_scalar("SELECT pid FROM pg_stat_activity WHERE datname = $1")
        .bind(database)
        .fetch_all(admin)
        .await
        .expect("pg_stat_activity");
    pids.into_iter().map(|p| p as u32).collect()
}

/// One measured window of `length`: the CPU seconds of this process, of the bench database's
/// Postgres sessions (each from its first sample to its last) and of `hooks` (each must run
/// throughout).
async fn measure_window(s: &Scene, length: Duration, hooks: &mut [Child]) -> WindowCpu {
    let mut admin = match s.db() {
        Some(_) => Some(
            database_url_options()
                .connect()
                .await
                .expect("a connection to DATABASE_URL"),
        ),
        None => None,
    };
    // (CPU seconds when first seen, when last seen) per session.
    let mut store: HashMap<u32, (f64, f64)> = HashMap::new();
    let sample = |store: &mut HashMap<u32, (f64, f64)>, pids: Vec<u32>| {
        for pid in pids {
            if let Some(t) = cpu_seconds(pid) {
                store.entry(pid).or_insert((t, t)).1 = t;
            }
        }
    };
    let hook_pids: Vec<u32> = hooks.iter().map(Child::id).collect();
    let hook_seconds = |pids: &[u32]| -> f64 {
        pids.iter()
            .map(|p| cpu_seconds(*p).expect("a hook process runs throughout the window"))
            .sum()
    };
    let metrics = s.bus.metrics();
    let (reads, sweeps) = (metrics.watch_reads.get(), metrics.wait_sweeps.get());
    if let (Some(a), Some(db)) = (admin.as_mut(), s.db()) {
        let pids = sessions(a, db.name()).await;
        sample(&mut store, pids);
    }
    let start = Instant::now();
    let crewbus = cpu_ticks("self").expect("/proc/self/stat");
    let hooks_before = hook_seconds(&hook_pids);
    let end = start + length;
    // The window is the measurement: nothing to wait for but time, sampled as it passes.
    loop {
        let now = Instant::now();
        if now >= end {
            break;
        }
        tokio::time::sleep((end - now).min(SESSION_SAMPLE)).await;
        if let (Some(a), Some(db)) = (admin.as_mut(), s.db()) {
            let pids = sessions(a, db.name()).await;
            sample(&mut store, pids);
        }
    }
    let crewbus = cpu_ticks("self").expect("/proc/self/stat") - crewbus;
    let hooks_spent = hook_seconds(&hook_pids) - hooks_before;
    let seconds = start.elapsed().as_secs_f64();
    for (k, child) in hooks.iter_mut().enumerate() {
        assert!(
            child.try_wait().expect("try_wait").is_none(),
            "armed hook {k} ended inside the window"
        );
    }
    WindowCpu {
        seconds,
        crewbus: crewbus as f64 * tick_seconds(),
        store: store.values().fold(0.0, |sum, (a, b)| sum + (b - a)),
        hooks: hooks_spent,
        watch_reads: metrics.watch_reads.get() - reads,
        sweeps: metrics.wait_sweeps.get() - sweeps,
    }
}

fn spec<'a>(s: &'a Scene, bin: &'a Path, url: &'a str, member: &'a Member) -> HookSpec<'a> {
    HookSpec {
        bin,
        home: s.home.path(),
        url,
        token_file: &member.token_file,
    }
}

/// Runs every child to its end (blocking tasks, `within`): how each ended, in order.
async fn ends(children: Vec<Child>, within: Duration) -> Vec<crate::processes::HookEnd> {
    let tasks: Vec<_> = children
        .into_iter()
        .map(|c| tokio::task::spawn_blocking(move || wait_hook(c)))
        .collect();
    let mut out = Vec::with_capacity(tasks.len());
    for t in tasks {
        out.push(
            tokio::time::timeout(within, t)
                .await
                .expect("the hook ends in time")
                .expect("hook task"),
        );
    }
    out
}

/// The idle phase: `hooks` agents, the first half holding one message each that a
/// `UserPromptSubmit` check of their session already reported; a window with no hook, then one
/// with a Stop hook armed per agent (session as the check's); then one new message to every
/// agent, and every hook must block with exactly that one as news.
pub async fn run(s: &Scene, bin: &Path, hooks: usize, window: Duration) -> IdleFigures {
    let url = s.server.url();
    let sender = s.member("idle-sender").await;
    let mut members = Vec::with_capacity(hooks);
    for k in 0..hooks {
        members.push(s.member(&format!("armed-{k}")).await);
    }
    let (old, quiet) = members.split_at(hooks / 2);
    let ids = |m: &[Member]| m.iter().map(|m| m.id).collect::<Vec<_>>();
    let old_conversation = s.conversation(&sender, "old news", &ids(old)).await;
    let quiet_conversation = s.conversation(&sender, "quiet", &ids(quiet)).await;

    sender
        .client
        .send(old_conversation, "old", "an old message nobody fetches")
        .await
        .expect("send the old message");
    let sent_old = Instant::now();
    for (chunk_index, chunk) in old.chunks(SPAWN_CHUNK).enumerate() {
        let children = chunk
            .iter()
            .enumerate()
            .map(|(i, m)| {
                let k = chunk_index * SPAWN_CHUNK + i;
                spec(s, bin, &url, m).spawn(0, &prompt_event(&format!("idle-{k}")))
            })
            .collect();
        for (i, end) in ends(children, Duration::from_secs(10))
            .await
            .into_iter()
            .enumerate()
        {
            assert_eq!(end.code, Some(0), "check {i}: {end:?}");
            let v: Value = serde_json::from_str(end.stdout.trim())
                .unwrap_or_else(|_| panic!("check {i}: no additionalContext: {end:?}"));
            let context = v["hookSpecificOutput"]["additionalContext"]
                .as_str()
                .unwrap_or_default();
            assert!(
                context.starts_with("crewbus: 1 new message from «idle-sender» in «old news»"),
                "check {i}: {end:?}"
            );
        }
    }

    let without = measure_window(s, window, &mut []).await;

    // Old: past the top-up age, so the sweep would wake its agent but for the cursor.
    tokio::time::sleep(OLD.saturating_sub(sent_old.elapsed())).await;
    let arming = Instant::now();
    let mut children = Vec::with_capacity(hooks);
    for chunk in members.chunks(SPAWN_CHUNK) {
        for m in chunk {
            let k = children.len();
            children.push(
                spec(s, bin, &url, m).spawn(ARMED_WAIT_SECONDS, &stop_event(&format!("idle-{k}"))),
            );
        }
        let armed = children.len();
        s.until(
            &format!("{armed} armed hooks' watches parked"),
            Duration::from_secs(60),
            || s.bus.waiting_watches() >= armed,
        )
        .await;
    }
    let armed_in = arming.elapsed().as_secs_f64();
    assert_eq!(s.bus.waiting_watches(), hooks, "one watch per armed hook");

    let with = measure_window(s, window, &mut children).await;

    let new_old = sender
        .client
        .send(old_conversation, "new-old", "wake up")
        .await
        .expect("send");
    let new_quiet = sender
        .client
        .send(quiet_conversation, "new-quiet", "wake up")
        .await
        .expect("send");
    assert!(new_old["message"]["id"].is_string() && new_quiet["message"]["id"].is_string());
    for (k, end) in ends(children, Duration::from_secs(30))
        .await
        .into_iter()
        .enumerate()
    {
        let reason = end.reason(&format!("armed hook {k}"));
        if k < old.len() {
            assert_eq!(
                reason,
                "crewbus: 1 new message from «idle-sender» in «old news» (2 waiting in all); \
                 fetch_inbox returns it",
                "armed hook {k}: only the new message is news"
            );
        } else {
            assert_eq!(
                reason,
                "crewbus: 1 new message from «idle-sender» in «quiet»; fetch_inbox returns it",
                "armed hook {k}"
            );
        }
    }
    IdleFigures {
        store: s.store,
        hooks,
        without,
        with,
        armed_in,
    }
}
