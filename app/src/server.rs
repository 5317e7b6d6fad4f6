//! Running the bus: the HTTP server and the workers, with graceful shutdown bounded by the
//! shutdown grace (`bus.shutdown_grace_ms`).
//!
//! The accept loop is our own (hyper's HTTP/1 connections on a Tokio timer), so that slow clients
//! are bounded: a connection that has not sent a complete request head within
//! `bus.header_read_timeout_ms` of opening (or of its previous answer) is closed, at most
//! `bus.max_http_connections` connections are open at once (one beyond is closed at once), and
//! the request body deadline ([`crate::http::body_deadline`]) bounds reading a body. Every
//! accepted socket has `TCP_NODELAY` (an answer's small writes never wait for the client's
//! delayed ACK). Each request carries its client's address as axum's `ConnectInfo<SocketAddr>`
//! extension.

use std::net::SocketAddr;
use std::pin::pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::ConnectInfo;
use crewbus_domain::{BusError, BusResult};
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio::task::{JoinHandle, JoinSet};
use tower::ServiceExt;

use crate::http::router;
use crate::logging::RepeatedWarning;
use crate::shutdown::Shutdown;
use crate::usecases::bus::Bus;
use crate::usecases::workers::Workers;

/// A running server: HTTP API plus relay, reference and retention workers.
pub struct Server {
    addr: SocketAddr,
    shutdown: Shutdown,
    task: JoinHandle<()>,
}

/// The bounds on connections the accept loop enforces.
#[derive(Debug, Clone, Copy)]
struct ConnectionLimits {
    header_read_timeout: Duration,
    max_connections: usize,
}

/// Serves `app` on `listener` until `shutdown` fires; then stops accepting, lets every open
/// connection finish its request in flight (idle ones close at once) and returns once all are
/// closed. Dropping (aborting) this future drops the connections still open.
async fn serve(listener: TcpListener, app: Router, limits: ConnectionLimits, shutdown: Shutdown) {
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout);
    let permits = Arc::new(Semaphore::new(limits.max_connections));
    // At most one "connection limit reached" warning per period, with a count.
    let mut refusals = RepeatedWarning::default();
    let mut connections = JoinSet::new();
    let mut stopped = pin!(shutdown.wait());
    loop {
        let (stream, peer) = tokio::select! {
            () = &mut stopped => break,
            Some(done) = connections.join_next(), if !connections.is_empty() => {
                if let Err(e) = done
                    && e.is_panic()
                {
                    tracing::error!(error = %e, "HTTP connection task panicked");
                }
                continue;
            }
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) if is_connection_error(&e) => continue,
                Err(e) => {
                    // Out of file descriptors and the like: wait before trying again.
                    tracing::error!(error = %e, "cannot accept HTTP connections");
                    tokio::select! {
                        () = &mut stopped => break,
                        () = tokio::time::sleep(Duration::from_secs(1)) => continue,
                    }
                }
            },
        };
        let Ok(permit) = permits.clone().try_acquire_owned() else {
            // Closed at once: dropping the stream closes the socket.
            drop(stream);
            if let Some(refused) = refusals.note(Instant::now()) {
                tracing::warn!(
                    max_http_connections = limits.max_connections,
                    refused,
                    "HTTP connection limit reached: closing new connections \
                     (bus.max_http_connections)"
                );
            }
            continue;
        };
        // An answer leaves in several small writes (an SSE answer: the head, each event, the
        // end of the body): with Nagle's algorithm each write after the first would wait for
        // the client's ACK of the one before, which a client reading an answer delays (Linux:
        // 40 ms), so every answer on a kept-alive connection would take 40 ms more.
        if let Err(e) = stream.set_nodelay(true) {
            tracing::debug!(error = %e, "cannot set TCP_NODELAY on an HTTP connection");
        }
        // Every request carries its client's address (the console slows failed sign-ins per
        // client): axum's `ConnectInfo`, read as an extension.
        let service = app.clone().map_request(
            move |mut req: axum::extract::Request<hyper::body::Incoming>| {
                req.extensions_mut().insert(ConnectInfo(peer));
                req
            },
        );
        let connection =
            builder.serve_connection(TokioIo::new(stream), TowerToHyperService::new(service));
        let shutdown = shutdown.clone();
        connections.spawn(async move {
            let _permit = permit;
            let mut connection = pin!(connection);
            let result = tokio::select! {
                result = connection.as_mut() => result,
                () = shutdown.wait() => {
                    // Finish the request in flight, then close; an idle connection closes now.
                    connection.as_mut().graceful_shutdown();
                    connection.await
                }
            };
            if let Err(e) = result {
                // A client that went away, sent garbage or too slow a request head.
                tracing::debug!(error = %e, "HTTP connection ended with an error");
            }
        });
    }
    drop(listener);
    while let Some(done) = connections.join_next().await {
        if let Err(e) = done
            && e.is_panic()
        {
            tracing::error!(error = %e, "HTTP connection task panicked");
        }
    }
}

/// Errors of one incoming connection, not of the listener: accepting goes on at once.
fn is_connection_error(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::ConnectionRefused
            | std::io::ErrorKind::ConnectionAborted
            | std::io::ErrorKind::ConnectionReset
    )
}

impl Server {
    /// Binds `listen` (port 0 picks a free port), starts the workers and serves until the
    /// shutdown fires. Then it stops accepting, waits for open connections and the workers'
    /// passes in progress for at most the bus's `shutdown_grace`, and abandons what is left (a
    /// warning names it). Errors: the address cannot be bound → `Unavailable`.
    pub async fn start(bus: Bus, listen: SocketAddr, shutdown: Shutdown) -> BusResult<Server> {
        let listener = TcpListener::bind(listen).await.map_err(|e| {
            let hint = if e.kind() == std::io::ErrorKind::AddrInUse {
                " (the address is in use: another crewbus may be running; choose another \
                     with --listen or CREWBUS_LISTEN)"
            } else {
                ""
            };
            BusError::unavailable_from(format!("cannot listen on {listen}{hint}"), e)
        })?;
        let addr = listener
            .local_addr()
            .map_err(|e| BusError::unavailable_from("listener address", e))?;
        // Waiting fetches end (with an empty page) when this server's shutdown fires.
        let bus = bus.with_shutdown(shutdown.clone());
        let workers = Workers::spawn(&bus, &shutdown);
        let grace = bus.settings.shutdown_grace;
        let limits = ConnectionLimits {
            header_read_timeout: bus.settings.header_read_timeout,
            max_connections: bus.settings.max_http_connections,
        };
        // The MCP endpoint `/mcp` and the console `/console` share the API's listener and its
        // request bounds.
        let mut mounted = crate::mcp::router(bus.clone());
        if bus.settings.console.enabled {
            mounted = mounted.merge(crate::console::router(bus.clone()));
        }
        let app = router(bus, mounted);
        let s = shutdown.clone();
        let task = tokio::spawn(async move {
            let mut http = tokio::spawn(serve(listener, app, limits, s.clone()));
            s.wait().await;
            let deadline = tokio::time::Instant::now() + grace;
            match tokio::time::timeout_at(deadline, &mut http).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => tracing::error!(error = %e, "HTTP server panicked"),
                Err(_) => {
                    // Aborting the accept loop drops its connection tasks with it.
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
