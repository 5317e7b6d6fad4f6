//! Each agent's last activity (its last authenticated call), kept by the ledger for the
//! operator's console and admin API, at a cost the send path does not notice.
//!
//! [`Bus::authenticate`](crate::usecases::bus::Bus::authenticate) notes every authenticated call
//! here (an in-process map: a lock and a lookup, also on the token cache's hits, so activity is
//! the caller's, not the lookup's). An agent is queued for the ledger at most once per
//! [`ACTIVITY_EVERY`]; the activity worker writes the queue in one `Oversight::touch_agents` per
//! flush, at most once per [`ACTIVITY_FLUSH`]. So the ledger is at most `ACTIVITY_EVERY +
//! ACTIVITY_FLUSH` behind an agent's last call, and a busy agent costs one row write per
//! `ACTIVITY_EVERY`, never one per request.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use crewbus_domain::{Agent, MAX_PAGE, Uuid, WakeupTarget};
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::shutdown::Shutdown;
use crate::usecases::bus::Bus;

/// An agent's activity is queued for the ledger at most this often (5 s).
pub const ACTIVITY_EVERY: Duration = Duration::from_secs(5);

/// The activity worker writes its queue at most this often (1 s).
pub const ACTIVITY_FLUSH: Duration = Duration::from_secs(1);

/// Most agents remembered before the map is cleared (each costs one more write, at most).
const REMEMBERED: usize = 100_000;

/// Agents' recent calls, not yet written (see the module docs).
#[derive(Default)]
pub(crate) struct ActivityTracker {
    inner: Mutex<Inner>,
    queued: Notify,
}

#[derive(Default)]
struct Inner {
    /// When each agent was last queued.
    noted: HashMap<Uuid, Instant>,
    /// What the next flush writes.
    queue: Vec<WakeupTarget>,
}

impl ActivityTracker {
    /// Notes a call of `agent` now; queues it when it was not queued within [`ACTIVITY_EVERY`].
    pub(crate) fn note(&self, agent: &Agent) {
        let now = Instant::now();
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if inner
            .noted
            .get(&agent.id)
            .is_some_and(|at| now.saturating_duration_since(*at) < ACTIVITY_EVERY)
        {
            return;
        }
        if inner.noted.len() >= REMEMBERED {
            inner.noted.clear();
        }
        inner.noted.insert(agent.id, now);
        inner.queue.push(WakeupTarget::new(agent.team, agent.id));
        drop(inner);
        self.queued.notify_one();
    }

    /// Takes what is queued.
    fn take(&self) -> Vec<WakeupTarget> {
        std::mem::take(&mut self.inner.lock().unwrap_or_else(|e| e.into_inner()).queue)
    }
}

impl Bus {
    /// Writes the queued activity now (one `touch_agents` per `MAX_PAGE` agents). Returns how
    /// many agents were written. Errors: the ledger's (the batch is dropped: activity is a
    /// hint, and the agents are queued again at their next call after `ACTIVITY_EVERY`).
    pub async fn flush_activity(&self) -> crewbus_domain::BusResult<usize> {
        let queued = self.activity.take();
        let at = self.now();
        for chunk in queued.chunks(MAX_PAGE) {
            self.ports.oversight.touch_agents(chunk, at).await?;
        }
        Ok(queued.len())
    }
}

/// The activity worker: flushes the queue when something is queued, at most once per
/// [`ACTIVITY_FLUSH`], until shutdown (then once more).
pub(crate) async fn run_activity(bus: Bus, shutdown: Shutdown) {
    loop {
        tokio::select! {
            () = shutdown.wait() => break,
            () = bus.activity.queued.notified() => {}
        }
        tokio::select! {
            () = shutdown.wait() => break,
            () = tokio::time::sleep(ACTIVITY_FLUSH) => {}
        }
        if let Err(error) = bus.flush_activity().await {
            tracing::debug!(code = error.code(), error = ?error, "writing agents' last activity failed");
        }
    }
    if let Err(error) = bus.flush_activity().await {
        tracing::debug!(code = error.code(), error = ?error, "writing agents' last activity failed");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crewbus_domain::{AgentKind, TokenHash};

    fn agent() -> Agent {
        Agent {
            id: Uuid::new_v4(),
            team: Uuid::new_v4(),
            name: "a".into(),
            recipient_key: "a".into(),
            token_hash: TokenHash::of("t"),
            created_at: chrono::Utc::now(),
            revoked_at: None,
            kind: AgentKind::Agent,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn an_agent_is_queued_at_most_once_per_period() {
        let t = ActivityTracker::default();
        let (a, b) = (agent(), agent());
        for _ in 0..100 {
            t.note(&a);
        }
        t.note(&b);
        assert_eq!(t.take().len(), 2);
        t.note(&a);
        assert!(t.take().is_empty());
        tokio::time::advance(ACTIVITY_EVERY).await;
        t.note(&a);
        assert_eq!(t.take(), vec![WakeupTarget::new(a.team, a.id)]);
    }
}
