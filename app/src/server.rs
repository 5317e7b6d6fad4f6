//! Running the bus: the HTTP server and the workers, with graceful shutdown bounded by the
//! shutdown grace (`bus.shutdown_grace_ms`).

use std::net::SocketAddr;

use crewbus_domain::{BusError, BusResult};
use tokio::task::JoinHandle;

use crate::bus::Bus;
use crate::http::router;
use crate::shutdown::Shutdown;
use crate::workers::Workers;

/// A running server: HTTP API plus relay, reference and retention workers.
pub struct Server {
    addr: SocketAddr,
    shutdown: Shutdown,
    task: JoinHandle<()>,
}

impl Server {
    /// Binds `listen` (port 0 picks a free port), starts the workers and serves until the
    /// shutdown fires. Then it stops accepting, waits for open connections and the workers'
    /// passes in progress for at most the bus's `shutdown_grace`, and abandons what is left (a
    /// warning names it). Errors: the address cannot be bound → `Unavailable`.
    pub async fn start(bus: Bus, listen: SocketAddr, shutdown: Shutdown) -> BusResult<Server> {
        let listener = tokio::net::TcpListener::bind(listen)
            .await
            .map_err(|e| BusError::unavailable_from(format!("cannot listen on {listen}"), e))?;
        let addr = listener
            .local_addr()
            .map_err(|e| BusError::unavailable_from("listener address", e))?;
        // Waiting fetches end (with an empty page) when this server's shutdown fires.
        let bus = bus.with_shutdown(shutdown.clone());
        let workers = Workers::spawn(&bus, &shutdown);
        let grace = bus.settings.shutdown_grace;
        let app = router(bus);
        let s = shutdown.clone();
        let task = tokio::spawn(async move {
            let signal = s.clone();
            let mut http = tokio::spawn(async move {
                let serve = axum::serve(listener, app)
                    .with_graceful_shutdown(async move { signal.wait().await });
                if let Err(e) = serve.await {
                    tracing::error!(error = %e, "HTTP server failed");
                }
            });
            s.wait().await;
            let deadline = tokio::time::Instant::now() + grace;
            match tokio::time::timeout_at(deadline, &mut http).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => tracing::error!(error = %e, "HTTP server panicked"),
                Err(_) => {
                    // Connection tasks end with the runtime when the process exits.
                    http.abort();
                    tracing::warn!(
                        grace_ms = grace.as_millis() as u64,
                        "shutdown grace over: abandoning open HTTP connections"
                    );
                }
            }
            // Requests have drained (or were abandoned); the workers finish their passes within
            // what is left of the grace.
            let abandoned = workers.join_until(deadline).await;
            if abandoned.is_empty() {
                tracing::info!("stopped");
            } else {
                tracing::warn!(abandoned = ?abandoned, "stopped before every worker drained");
            }
        });
        Ok(Server {
            addr,
            shutdown,
            task,
        })
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://<addr>`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The shutdown trigger.
    pub fn shutdown(&self) -> &Shutdown {
        &self.shutdown
    }

    /// Fires the shutdown and waits until requests and worker passes have drained.
    pub async fn stop(self) {
        self.shutdown.trigger();
        let _ = self.task.await;
    }

    /// Waits until the server stopped (after the shutdown fired elsewhere, e.g. a signal).
    pub async fn wait(self) {
        let _ = self.task.await;
    }
}
