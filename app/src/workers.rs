//! The background workers: relay, reference worker, push delivery worker and retention job. Each runs passes until
//! shutdown; a pass in progress always completes (in-flight work is drained), then the worker
//! stops.

use std::future::Future;
use std::time::Duration;

use tokio::task::JoinHandle;

use crate::bus::Bus;
use crate::shutdown::Shutdown;

/// Handles of the running workers.
pub struct Workers {
    handles: Vec<JoinHandle<()>>,
}

impl Workers {
    /// Starts the relay, the reference worker, the push delivery worker (when the bus has a push
    /// outbox) and the retention job.
    pub fn spawn(bus: &Bus, shutdown: &Shutdown) -> Workers {
        let mut handles = Vec::new();
        {
            let bus = bus.clone();
            let s = shutdown.clone();
            handles.push(tokio::spawn(run_loop("relay", s, bus.clone(), move || {
                let bus = bus.clone();
                async move {
                    bus.relay_pass()
                        .await
                        .map(|p| p.leased >= bus.settings.relay_batch)
                }
            })));
        }
        {
            let bus = bus.clone();
            let s = shutdown.clone();
            handles.push(tokio::spawn(run_loop(
                "references",
                s,
                bus.clone(),
                move || {
                    let bus = bus.clone();
                    async move {
                        bus.reference_pass()
                            .await
                            .map(|p| p.leased >= bus.settings.reference_batch)
                    }
                },
            )));
        }
        if let Some(push) = bus.push.clone() {
            let s = shutdown.clone();
            let clock = bus.ports.clock.clone();
            handles.push(tokio::spawn(async move {
                push.run(clock, async move { s.wait().await }).await;
                tracing::debug!(worker = "push", "stopped");
            }));
        }
        if bus.settings.retention.is_some() {
            let bus = bus.clone();
            let s = shutdown.clone();
            handles.push(tokio::spawn(async move {
                loop {
                    match bus.retention_run().await {
                        Ok(r) if r.removed + r.marked > 0 => {
                            tracing::info!(removed = r.removed, marked = r.marked, "retention run")
                        }
                        Ok(_) => {}
                        Err(error) => {
                            tracing::warn!(code = error.code(), error = ?error, "retention run failed")
                        }
                    }
                    tokio::select! {
                        () = s.wait() => break,
                        () = tokio::time::sleep(bus.settings.retention_interval) => {}
                    }
                }
            }));
        }
        Workers { handles }
    }

    /// Waits for every worker to finish its pass and stop (after the shutdown fired).
    pub async fn join(self) {
        for h in self.handles {
            if let Err(e) = h.await {
                tracing::error!(error = %e, "worker panicked");
            }
        }
    }
}

/// Runs `pass` until shutdown: at once again when it reported a full batch, else after a wake-up
/// or the idle poll. Errors are logged and the pass is retried after the idle poll.
async fn run_loop<F, Fut>(name: &'static str, shutdown: Shutdown, bus: Bus, mut pass: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = crewbus_domain::BusResult<bool>>,
{
    let notify = match name {
        "relay" => &bus.wakers.relay,
        _ => &bus.wakers.references,
    };
    let mut failures: u32 = 0;
    while !shutdown.is_triggered() {
        let wait = match pass().await {
            Ok(true) => {
                failures = 0;
                continue;
            }
            Ok(false) => {
                failures = 0;
                bus.settings.idle_poll
            }
            Err(error) => {
                failures = failures.saturating_add(1);
                tracing::warn!(worker = name, code = error.code(), error = ?error, "worker pass failed");
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
