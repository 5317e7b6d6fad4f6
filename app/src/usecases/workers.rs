//! The background workers: relay, reference worker, search index worker, push delivery worker
//! and retention job. Each runs passes until shutdown; a pass in progress completes (in-flight
//! work is drained) unless the shutdown grace runs out first, then it is abandoned: its leases
//! lapse and another process (or the next start) retries the work. A worker that fails pass
//! after pass (its store damaged or gone) logs one line per 5 s, counting the failures
//! ([`RepeatedWarning`]).

use std::future::Future;
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::logging::RepeatedWarning;
use crate::shutdown::Shutdown;
use crate::usecases::bus::Bus;
use crate::usecases::search::INDEX_EVERY;

/// How often expired sign-in codes and idle console sessions are removed (10 minutes).
const SIGN_IN_PRUNE_EVERY: Duration = Duration::from_secs(600);

/// How often lapsed leases' expiries are recorded (5 s): a lease stops counting at its expiry
/// whatever the sweep does; the sweep writes the end into its history and its run's journal.
const LEASE_SWEEP_EVERY: Duration = Duration::from_secs(5);

/// How long a worker keeps looking for work at its short interval after a pass that found
/// some, or failed (30 s): retries come due (a relay slot's backoff, a reference marker's lapsed
/// lease, a body a backend could not give), and so does work another server left.
const HOT_FOR: Duration = Duration::from_secs(30);

/// How often an idle worker looks for work it was not woken for, once nothing was found for
/// [`HOT_FOR`] (5 s): the relay and the reference worker are woken by each send (and the
/// reference worker by each relayed body), so this finds only what a server that stopped left
/// behind, or a retry due after a long backoff. On an idle server it is what they cost.
const IDLE_SWEEP: Duration = Duration::from_secs(5);

/// The search index worker's look when idle for [`HOT_FOR`] (10 s): each stored message wakes
/// it, so this bounds only the lag of a message whose server stopped before indexing it.
const INDEX_IDLE_SWEEP: Duration = Duration::from_secs(10);

/// What a worker's pass found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Found {
    /// A full batch: more may wait, the next pass starts at once.
    Full,
    /// Some work, less than a batch.
    Some,
    /// Nothing.
    Nothing,
}

impl Found {
    /// What a pass that took `n` items of a batch of `batch` found.
    fn of(n: usize, batch: usize) -> Found {
        match n {
            0 => Found::Nothing,
            n if n >= batch => Found::Full,
            _ => Found::Some,
        }
    }
}

/// The wait after a pass that found nothing: the short `poll` while the worker found work (or
/// failed) within [`HOT_FOR`], else `idle` (never shorter than `poll`).
fn idle_wait(last_busy: Instant, poll: Duration, idle: Duration) -> Duration {
    if last_busy.elapsed() < HOT_FOR {
        poll
    } else {
        idle.max(poll)
    }
}

/// Handles of the running workers.
pub struct Workers {
    handles: Vec<(&'static str, JoinHandle<()>)>,
}

impl Workers {
    /// Starts the relay, the reference worker, the wake-up listener and the waiting fetches'
    /// sweep, the activity writer, the sign-in pruning, the lease expiry sweep, the search index
    /// worker, the push delivery worker (when the bus has a push outbox) and the retention job.
    pub fn spawn(bus: &Bus, shutdown: &Shutdown) -> Workers {
        let mut handles = Vec::new();
        {
            let bus = bus.clone();
            let s = shutdown.clone();
            handles.push((
                "relay",
                tokio::spawn(run_loop("relay", s, bus.clone(), move || {
                    let bus = bus.clone();
                    async move {
                        bus.relay_pass()
                            .await
                            .map(|p| Found::of(p.leased, bus.settings.relay_batch))
                    }
                })),
            ));
        }
        {
            let bus = bus.clone();
            let s = shutdown.clone();
            handles.push((
                "references",
                tokio::spawn(run_loop("references", s, bus.clone(), move || {
                    let bus = bus.clone();
                    async move {
                        bus.reference_pass()
                            .await
                            .map(|p| Found::of(p.messages, bus.settings.reference_batch))
                    }
                })),
            ));
        }
        handles.push((
            "wake-up listener",
            tokio::spawn(crate::usecases::wait::run_listener(
                bus.clone(),
                shutdown.clone(),
            )),
        ));
        handles.push((
            "wait sweep",
            tokio::spawn(crate::usecases::wait::run_sweep(
                bus.clone(),
                shutdown.clone(),
            )),
        ));
        handles.push((
            "activity",
            tokio::spawn(crate::usecases::activity::run_activity(
                bus.clone(),
                shutdown.clone(),
            )),
        ));
        {
            let bus = bus.clone();
            let s = shutdown.clone();
            handles.push((
                "sign-in pruning",
                tokio::spawn(async move {
                    loop {
                        tokio::select! {
                            () = s.wait() => break,
                            () = tokio::time::sleep(SIGN_IN_PRUNE_EVERY) => {}
                        }
                        match bus.prune_sign_ins().await {
                            Ok(0) => {}
                            Ok(n) => tracing::debug!(removed = n, "expired console sign-ins removed"),
                            Err(error) => tracing::debug!(code = error.code(), error = ?error, "removing expired console sign-ins failed"),
                        }
                    }
                }),
            ));
        }
        {
            let bus = bus.clone();
            let s = shutdown.clone();
            handles.push((
                "lease expiry",
                tokio::spawn(async move {
                    let mut failed = RepeatedWarning::default();
                    loop {
                        tokio::select! {
                            () = s.wait() => break,
                            () = tokio::time::sleep(LEASE_SWEEP_EVERY) => {}
                        }
                        match bus.lease_sweep().await {
                            Ok(0) => {}
                            Ok(n) => tracing::debug!(expired = n, "lapsed leases recorded"),
                            Err(error) => {
                                if let Some(repeated) = failed.note(std::time::Instant::now()) {
                                    tracing::info!(code = error.code(), error = ?error, repeated, "recording lapsed leases failed; retrying");
                                }
                            }
                        }
                    }
                }),
            ));
        }
        {
            let bus = bus.clone();
            let s = shutdown.clone();
            handles.push((
                "search index",
                tokio::spawn(async move {
                    let mut failed = RepeatedWarning::default();
                    let mut last_busy = Instant::now();
                    loop {
                        // At once again after a full batch; else woken by a stored message, or
                        // the next look in INDEX_EVERY while busy within HOT_FOR, else in
                        // INDEX_IDLE_SWEEP (the lag bound: usecases/search.rs).
                        let wait = match bus.index_pass().await {
                            Ok(p) => {
                                if p.indexed > 0 || p.skipped > 0 {
                                    last_busy = Instant::now();
                                    tracing::debug!(indexed = p.indexed, skipped = p.skipped, "messages indexed for search");
                                }
                                if p.more {
                                    Duration::ZERO
                                } else {
                                    idle_wait(last_busy, INDEX_EVERY, INDEX_IDLE_SWEEP)
                                }
                            }
                            Err(error) => {
                                last_busy = Instant::now();
                                if let Some(repeated) = failed.note(std::time::Instant::now()) {
                                    tracing::info!(code = error.code(), error = ?error, repeated, "indexing messages for search failed; retrying");
                                }
                                INDEX_EVERY
                            }
                        };
                        tokio::select! {
                            () = s.wait() => break,
                            () = bus.wakers.index.notified() => {}
                            () = tokio::time::sleep(wait) => {}
                        }
                    }
                }),
            ));
        }
        if let Some(push) = bus.push.clone() {
            let s = shutdown.clone();
            let clock = bus.ports.clock.clone();
            handles.push((
                "push",
                tokio::spawn(async move {
                    push.run(clock, async move { s.wait().await }).await;
                    tracing::debug!(worker = "push", "stopped");
                }),
            ));
        }
        if bus.settings.retention.is_some() {
            let bus = bus.clone();
            let s = shutdown.clone();
            handles.push(("retention", tokio::spawn(async move {
                let mut failed = RepeatedWarning::default();
                loop {
                    match bus.retention_run().await {
                        Ok(r) if r.removed + r.marked > 0 => {
                            tracing::info!(removed = r.removed, marked = r.marked, "retention run")
                        }
                        Ok(_) => {}
                        Err(error) => {
                            if let Some(repeated) = failed.note(std::time::Instant::now()) {
                                tracing::warn!(code = error.code(), error = ?error, repeated, "retention run failed")
                            }
                        }
                    }
                    tokio::select! {
                        () = s.wait() => break,
                        () = tokio::time::sleep(bus.settings.retention_interval) => {}
                    }
                }
            })));
        }
        Workers { handles }
    }

    /// Waits for every worker to finish its pass and stop (after the shutdown fired), at most
    /// until `deadline`: a worker still running then is aborted and logged as abandoned (a
    /// warning naming the worker). Returns the names of the abandoned workers.
    pub async fn join_until(self, deadline: Instant) -> Vec<&'static str> {
        let mut abandoned = Vec::new();
        for (name, mut handle) in self.handles {
            match tokio::time::timeout_at(deadline, &mut handle).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => tracing::error!(worker = name, error = %e, "worker panicked"),
                Err(_) => {
                    handle.abort();
                    tracing::warn!(
                        worker = name,
                        "shutdown grace over: abandoning the worker's pass in progress (its \
                         leases lapse and the work is retried)"
                    );
                    abandoned.push(name);
                }
            }
        }
        abandoned
    }
}

/// Runs `pass` until shutdown: at once again when it reported a full batch, else after a wake-up
/// or the idle poll (`bus.idle_poll_ms` while it found work or failed within [`HOT_FOR`], else
/// [`IDLE_SWEEP`]). Errors are logged and the pass is retried after a growing multiple of the
/// idle poll (at most 5 s).
async fn run_loop<F, Fut>(name: &'static str, shutdown: Shutdown, bus: Bus, mut pass: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = crewbus_domain::BusResult<Found>>,
{
    let notify = match name {
        "relay" => &bus.wakers.relay,
        _ => &bus.wakers.references,
    };
    let mut failures: u32 = 0;
    let mut failed = RepeatedWarning::default();
    // A start is busy: what the last process left is looked for at the short interval.
    let mut last_busy = Instant::now();
    while !shutdown.is_triggered() {
        let wait = match pass().await {
            Ok(Found::Full) => {
                failures = 0;
                last_busy = Instant::now();
                continue;
            }
            Ok(found) => {
                failures = 0;
                if found == Found::Some {
                    last_busy = Instant::now();
                }
                idle_wait(last_busy, bus.settings.idle_poll, IDLE_SWEEP)
            }
            Err(error) => {
                last_busy = Instant::now();
                failures = failures.saturating_add(1);
                if let Some(repeated) = failed.note(std::time::Instant::now()) {
                    tracing::warn!(worker = name, code = error.code(), error = ?error, repeated, "worker pass failed");
                }
                bus.settings
                    .idle_poll
                    .saturating_mul(failures.min(100))
                    .min(Duration::from_secs(5))
            }
        };
        tokio::select! {
            () = shutdown.wait() => {}
            () = notify.notified() => {}
            () = tokio::time::sleep(wait) => {}
        }
    }
    tracing::debug!(worker = name, "stopped");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pass_is_full_at_its_batch_and_found_nothing_at_zero() {
        assert_eq!(Found::of(0, 10), Found::Nothing);
        assert_eq!(Found::of(3, 10), Found::Some);
        assert_eq!(Found::of(10, 10), Found::Full);
    }

    #[tokio::test(start_paused = true)]
    async fn an_idle_worker_looks_at_its_short_interval_only_within_hot_for() {
        let poll = Duration::from_millis(50);
        let busy = Instant::now();
        assert_eq!(idle_wait(busy, poll, IDLE_SWEEP), poll);
        tokio::time::advance(HOT_FOR - Duration::from_millis(1)).await;
        assert_eq!(idle_wait(busy, poll, IDLE_SWEEP), poll);
        tokio::time::advance(Duration::from_millis(1)).await;
        assert_eq!(idle_wait(busy, poll, IDLE_SWEEP), IDLE_SWEEP);
        // A poll configured longer than the sweep is kept.
        let slow = Duration::from_secs(9);
        assert_eq!(idle_wait(busy, slow, IDLE_SWEEP), slow);
    }
}
