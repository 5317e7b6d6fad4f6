//! In-process wake-ups: the memory ledger's [`Wakeups`] (one server per store).

use async_trait::async_trait;
use crewbus_domain::{BusError, BusResult, Wakeup, WakeupTarget};
use crewbus_ports::{WakeupListener, Wakeups};
use tokio::sync::broadcast;
use uuid::Uuid;

/// How many notify batches a listener may fall behind before it is told to wake everyone.
const BACKLOG: usize = 1024;

/// [`Wakeups`] inside one process: a broadcast channel from every notify to every listener.
///
/// A listener that falls more than 1024 batches behind gets [`Wakeup::Everyone`] (nothing is
/// silently dropped). [`MemoryWakeups::losing_everything`] builds one that loses every
/// notification, to prove that waiting fetches are bounded without wake-ups.
#[derive(Clone)]
pub struct MemoryWakeups {
    tx: Option<broadcast::Sender<Wakeup>>,
}

impl std::fmt::Debug for MemoryWakeups {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryWakeups")
            .field("losing_everything", &self.tx.is_none())
            .finish()
    }
}

impl Default for MemoryWakeups {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryWakeups {
    /// Wake-ups delivered to every listener of this value and its clones.
    pub fn new() -> Self {
        MemoryWakeups {
            tx: Some(broadcast::channel(BACKLOG).0),
        }
    }

    /// A fault: every notify succeeds and reaches nobody; listeners never hear anything.
    pub fn losing_everything() -> Self {
        MemoryWakeups { tx: None }
    }
}

#[async_trait]
impl Wakeups for MemoryWakeups {
    async fn notify(&self, targets: &[WakeupTarget]) -> BusResult<()> {
        if let Some(tx) = &self.tx
            && !targets.is_empty()
        {
            // An error only means nobody listens now: nothing waits to be woken.
            let _ = tx.send(Wakeup::Agents(targets.to_vec()));
        }
        Ok(())
    }

    async fn notify_leases(&self, teams: &[Uuid]) -> BusResult<()> {
        if let Some(tx) = &self.tx
            && !teams.is_empty()
        {
            let _ = tx.send(Wakeup::Leases(teams.to_vec()));
        }
        Ok(())
    }

    async fn listen(&self) -> BusResult<Box<dyn WakeupListener>> {
        Ok(Box::new(MemoryListener {
            rx: self.tx.as_ref().map(broadcast::Sender::subscribe),
        }))
    }
}

struct MemoryListener {
    rx: Option<broadcast::Receiver<Wakeup>>,
}

#[async_trait]
impl WakeupListener for MemoryListener {
    async fn next(&mut self) -> BusResult<Wakeup> {
        let Some(rx) = &mut self.rx else {
            return std::future::pending().await;
        };
        match rx.recv().await {
            Ok(wakeup) => Ok(wakeup),
            Err(broadcast::error::RecvError::Lagged(_)) => Ok(Wakeup::Everyone),
            // The sender lives as long as any `MemoryWakeups` clone does.
            Err(broadcast::error::RecvError::Closed) => {
                Err(BusError::unavailable("in-process wake-ups closed"))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crewbus_domain::Uuid;

    #[tokio::test]
    async fn a_notify_reaches_every_listener_started_before_it() {
        let w = MemoryWakeups::new();
        let mut a = w.listen().await.unwrap();
        let mut b = w.clone().listen().await.unwrap();
        let t = WakeupTarget::new(Uuid::new_v4(), Uuid::new_v4());
        w.notify(&[t]).await.unwrap();
        assert_eq!(a.next().await.unwrap(), Wakeup::Agents(vec![t]));
        assert_eq!(b.next().await.unwrap(), Wakeup::Agents(vec![t]));
    }

    #[tokio::test]
    async fn a_listener_far_behind_is_told_to_wake_everyone() {
        let w = MemoryWakeups::new();
        let mut l = w.listen().await.unwrap();
        let t = WakeupTarget::new(Uuid::new_v4(), Uuid::new_v4());
        for _ in 0..=BACKLOG {
            w.notify(&[t]).await.unwrap();
        }
        assert_eq!(l.next().await.unwrap(), Wakeup::Everyone);
    }

    #[tokio::test]
    async fn losing_everything_never_wakes() {
        let w = MemoryWakeups::losing_everything();
        let mut l = w.listen().await.unwrap();
        w.notify(&[WakeupTarget::new(Uuid::new_v4(), Uuid::new_v4())])
            .await
            .unwrap();
        let woke = tokio::time::timeout(std::time::Duration::from_millis(50), l.next()).await;
        assert!(woke.is_err(), "a lost notify woke the listener");
    }
}
