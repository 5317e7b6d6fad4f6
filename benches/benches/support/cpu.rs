//! CPU time of processes from `/proc/<pid>/stat` (Linux), shared by the benches that measure
//! what idle connections cost (`waiting_fetch`, `console_viewers`).
#![allow(dead_code)]

use std::collections::HashMap;

/// CPU seconds per clock tick of `/proc/<pid>/stat`.
pub fn tick_seconds() -> f64 {
    // SAFETY: sysconf reads a constant of the system; no memory is shared.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    assert!(ticks > 0, "sysconf(_SC_CLK_TCK) failed");
    1.0 / ticks as f64
}

/// utime + stime of `pid` (a number, or `self`) in clock ticks (`None`: the process is gone).
pub fn cpu_ticks(pid: &str) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may hold spaces) in parentheses: state is field 3,
    // utime 14 and stime 15.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split(' ').collect();
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

/// Every process whose `comm` is `postgres`, with its CPU ticks.
pub fn postgres_ticks() -> HashMap<u32, u64> {
    let mut out = HashMap::new();
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
        if comm.trim_end() == "postgres"
            && let Some(t) = cpu_ticks(&pid.to_string())
        {
            out.insert(pid, t);
        }
    }
    out
}

/// The CPU ticks of the postgres processes over a window, sampled as it passes: each process
/// counts from its first sample (from 0 when it started inside the window) to its last; what a
/// process spends after its last sample before it exits is lost.
#[derive(Default)]
pub struct PostgresWindow(HashMap<u32, (u64, u64)>);

impl PostgresWindow {
    /// The window opening now: every postgres process alive, from its ticks now.
    pub fn open() -> PostgresWindow {
        PostgresWindow(
            postgres_ticks()
                .into_iter()
                .map(|(p, t)| (p, (t, t)))
                .collect(),
        )
    }

    /// One sample: every postgres process alive now, up to its ticks now.
    pub fn sample(&mut self) {
        for (pid, t) in postgres_ticks() {
            self.0.entry(pid).or_insert((0, t)).1 = t;
        }
    }

    /// Ticks spent in the window by the processes `counted` picks.
    pub fn spent(&self, counted: impl Fn(u32) -> bool) -> u64 {
        self.0
            .iter()
            .filter(|(pid, _)| counted(**pid))
            .map(|(_, (first, last))| last.saturating_sub(*first))
            .sum()
    }
}

/// The 1, 5 and 15 minute load averages, as `/proc/loadavg` gives them.
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split(' ').take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}
