//! Graceful shutdown: a signal (Ctrl-C, SIGTERM) or a programmatic trigger stops intake, then
//! workers drain their in-flight work.

use tokio::sync::watch;

/// A shutdown trigger shared by the HTTP server and the workers. Cloning shares it.
#[derive(Clone)]
pub struct Shutdown {
    tx: watch::Sender<bool>,
}

impl Default for Shutdown {
    fn default() -> Self {
        Self::new()
    }
}

impl Shutdown {
    /// A trigger that has not fired.
    pub fn new() -> Self {
        Shutdown {
            tx: watch::channel(false).0,
        }
    }

    /// Fires the trigger (idempotent).
    pub fn trigger(&self) {
        self.tx.send_replace(true);
    }

    /// Whether it fired.
    pub fn is_triggered(&self) -> bool {
        *self.tx.borrow()
    }

    /// Resolves once the trigger fires (at once when it already has).
    pub async fn wait(&self) {
        let mut rx = self.tx.subscribe();
        // An error means the sender is gone, which cannot happen while `self` lives.
        let _ = rx.wait_for(|fired| *fired).await;
    }

    /// Fires the trigger on Ctrl-C or SIGTERM. Spawn it once per process.
    pub async fn on_signals(self) {
        let ctrl_c = async {
            let _ = tokio::signal::ctrl_c().await;
        };
        #[cfg(unix)]
        let term = async {
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(mut s) => {
                    s.recv().await;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "cannot listen for SIGTERM");
                    std::future::pending::<()>().await;
                }
            }
        };
        #[cfg(not(unix))]
        let term = std::future::pending::<()>();
        tokio::select! {
            () = ctrl_c => tracing::info!("Ctrl-C: shutting down"),
            () = term => tracing::info!("SIGTERM: shutting down"),
            () = self.wait() => return,
        }
        self.trigger();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn wait_resolves_after_trigger() {
        let s = Shutdown::new();
        assert!(!s.is_triggered());
        let waiter = tokio::spawn({
            let s = s.clone();
            async move { s.wait().await }
        });
        s.trigger();
        waiter.await.unwrap();
        assert!(s.is_triggered());
        s.wait().await; // already fired: returns at once
    }
}
