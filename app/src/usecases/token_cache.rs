//! A short-lived cache of bearer-token lookups, so a burst of requests from one agent costs one
//! `Ledger::agent_by_token` round trip, not one per request.
//!
//! # Bounds
//! - An entry answers for at most `bus.token_cache_ms` (default 1000, at most
//!   [`MAX_TOKEN_CACHE_MS`]; 0 disables the cache), counted from **before** the ledger read that
//!   filled it (tokio's clock, so tests can pause it).
//! - At most [`TOKEN_CACHE_ENTRIES`] entries. Inserting into a full cache first drops the
//!   expired entries, and everything when that freed less than half (so a full pass over the
//!   map happens at most once per `capacity / 2` inserts: amortised O(1)).
//! - Only an active agent's successful lookup is kept; a miss or a revoked agent never is.
//!
//! # Revocation
//! An agent's entry is dropped at once when this server revokes it (`Bus::revoke_agent`), when a
//! wake-up for it arrives from the [`Wakeups`](crewbus_ports::Wakeups) port (another server
//! revoked it; the wake-up listener drops it), when the waiting fetches' sweep finds it, and the
//! whole cache is dropped on `Wakeup::Everyone` and whenever the listener (re)starts (wake-ups
//! may have been missed). A lookup that was in flight when any drop happened is not kept (an
//! epoch taken before the read), so a read from before a revocation never re-fills the cache
//! after it. A revocation this server hears of by no wake-up at all (an operator command beside
//! an embedded server, a lost notification) takes effect for authentication within the
//! `token_cache_ms` bound; the ledger refuses a revoked agent's sends, hand-outs, top-ups and
//! confirms at once, whatever this cache says.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use crewbus_domain::{Agent, TokenHash, Uuid, WakeupTarget};
use tokio::time::Instant;

pub use crate::config::MAX_TOKEN_CACHE_MS;

/// Most cached tokens per bus.
pub const TOKEN_CACHE_ENTRIES: usize = 10_000;

/// Bearer-token lookups of active agents, each answering for at most `ttl` (see the module
/// docs).
pub(crate) struct TokenCache {
    ttl: Duration,
    capacity: usize,
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    entries: HashMap<TokenHash, (Agent, Instant)>,
    /// Each cached agent's token (an agent has one), to drop it by agent in O(1).
    by_agent: HashMap<Uuid, TokenHash>,
    /// Bumped by every drop; a lookup started under an older epoch is not kept.
    epoch: u64,
}

impl Inner {
    fn remove(&mut self, hash: &TokenHash) {
        if let Some((agent, _)) = self.entries.remove(hash)
            && self.by_agent.get(&agent.id) == Some(hash)
        {
            self.by_agent.remove(&agent.id);
        }
    }

    fn clear(&mut self) {
        self.entries.clear();
        self.by_agent.clear();
    }
}

/// Taken before a ledger lookup: when it started, and the epoch then.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ticket {
    at: Instant,
    epoch: u64,
}

impl TokenCache {
    /// A cache whose entries answer for `ttl` (zero: disabled), holding at most `capacity`.
    pub(crate) fn new(ttl: Duration, capacity: usize) -> Self {
        TokenCache {
            ttl,
            capacity,
            inner: Mutex::new(Inner::default()),
        }
    }

    fn enabled(&self) -> bool {
        !self.ttl.is_zero() && self.capacity > 0
    }

    /// The cached agent of `hash`, if looked up less than `ttl` ago and not dropped since.
    pub(crate) fn get(&self, hash: &TokenHash) -> Option<Agent> {
        if !self.enabled() {
            return None;
        }
        let now = Instant::now();
        let mut inner = self.inner.lock().ok()?;
        match inner.entries.get(hash) {
            Some((agent, at)) if now.saturating_duration_since(*at) < self.ttl => {
                Some(agent.clone())
            }
            Some(_) => {
                inner.remove(hash);
                None
            }
            None => None,
        }
    }

    /// A ticket for a lookup about to start (pass it to [`TokenCache::insert`]).
    pub(crate) fn ticket(&self) -> Ticket {
        let epoch = self.inner.lock().map(|i| i.epoch).unwrap_or(u64::MAX);
        Ticket {
            at: Instant::now(),
            epoch,
        }
    }

    /// Keeps `agent` for `hash`, as looked up under `ticket`: not when the agent is revoked,
    /// nor when anything was dropped since the ticket was taken.
    pub(crate) fn insert(&self, hash: TokenHash, agent: &Agent, ticket: Ticket) {
        if !self.enabled() || agent.revoked() {
            return;
        }
        let Ok(mut inner) = self.inner.lock() else {
            return;
        };
        if inner.epoch != ticket.epoch {
            return;
        }
        if !inner.entries.contains_key(&hash) && inner.entries.len() >= self.capacity {
            let now = Instant::now();
            let ttl = self.ttl;
            inner
                .entries
                .retain(|_, (_, at)| now.saturating_duration_since(*at) < ttl);
            if inner.entries.len() > self.capacity / 2 {
                inner.clear();
            } else {
                let Inner {
                    entries, by_agent, ..
                } = &mut *inner;
                by_agent.retain(|_, h| entries.contains_key(h));
            }
        }
        if let Some(old) = inner.by_agent.insert(agent.id, hash)
            && old != hash
        {
            inner.entries.remove(&old);
        }
        inner.entries.insert(hash, (agent.clone(), ticket.at));
    }

    /// Drops the entries of `targets`' agents (a revocation, or a wake-up that may be one).
    pub(crate) fn forget(&self, targets: &[WakeupTarget]) {
        if let Ok(mut inner) = self.inner.lock() {
            inner.epoch = inner.epoch.wrapping_add(1);
            for t in targets {
                if let Some(hash) = inner.by_agent.remove(&t.agent) {
                    inner.entries.remove(&hash);
                }
            }
        }
    }

    /// Drops every entry (wake-ups may have been missed).
    pub(crate) fn forget_all(&self) {
        if let Ok(mut inner) = self.inner.lock() {
            inner.epoch = inner.epoch.wrapping_add(1);
            inner.clear();
        }
    }

    /// Entries held now (expired ones not yet dropped included).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.inner.lock().map(|i| i.entries.len()).unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;
    use crewbus_domain::Utc;

    fn agent(token: &str) -> (TokenHash, Agent) {
        let hash = TokenHash::of(token);
        let agent = Agent {
            id: Uuid::new_v4(),
            team: Uuid::nil(),
            name: token.into(),
            recipient_key: token.into(),
            token_hash: hash,
            created_at: Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap(),
            revoked_at: None,
            kind: crewbus_domain::AgentKind::Agent,
        };
        (hash, agent)
    }

    fn target(a: &Agent) -> WakeupTarget {
        WakeupTarget::new(a.team, a.id)
    }

    #[tokio::test(start_paused = true)]
    async fn an_entry_answers_until_the_bound_counted_from_before_the_lookup() {
        let cache = TokenCache::new(Duration::from_millis(1_000), 10);
        let (h, a) = agent("a");
        let ticket = cache.ticket();
        tokio::time::advance(Duration::from_millis(300)).await; // the ledger round trip
        cache.insert(h, &a, ticket);
        assert_eq!(cache.get(&h).map(|x| x.id), Some(a.id));
        tokio::time::advance(Duration::from_millis(699)).await;
        assert!(cache.get(&h).is_some(), "999 ms after the lookup began");
        tokio::time::advance(Duration::from_millis(1)).await;
        assert!(cache.get(&h).is_none(), "1000 ms after the lookup began");
        assert_eq!(cache.len(), 0, "the expired entry is dropped");
    }

    #[tokio::test(start_paused = true)]
    async fn revoked_agents_disabled_caches_and_raced_lookups_are_not_kept() {
        let cache = TokenCache::new(Duration::from_millis(1_000), 10);
        let (h, mut a) = agent("a");
        a.revoked_at = Some(a.created_at);
        cache.insert(h, &a, cache.ticket());
        assert!(cache.get(&h).is_none());

        let (h, a) = agent("b");
        let ticket = cache.ticket();
        cache.forget(&[]); // a drop while the lookup was in flight
        cache.insert(h, &a, ticket);
        assert!(cache.get(&h).is_none());

        let off = TokenCache::new(Duration::ZERO, 10);
        off.insert(h, &a, off.ticket());
        assert!(off.get(&h).is_none());
        assert_eq!(off.len(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn forget_drops_one_agent_and_forget_all_everything() {
        let cache = TokenCache::new(Duration::from_millis(1_000), 10);
        let (ha, a) = agent("a");
        let (hb, b) = agent("b");
        cache.insert(ha, &a, cache.ticket());
        cache.insert(hb, &b, cache.ticket());
        cache.forget(&[target(&a)]);
        assert!(cache.get(&ha).is_none());
        assert!(cache.get(&hb).is_some());
        cache.forget_all();
        assert!(cache.get(&hb).is_none());
        assert_eq!(cache.len(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_full_cache_drops_expired_entries_first_then_everything() {
        let cache = TokenCache::new(Duration::from_millis(1_000), 4);
        let agents: Vec<_> = (0..6).map(|i| agent(&format!("t{i}"))).collect();
        for (h, a) in &agents[..2] {
            cache.insert(*h, a, cache.ticket());
        }
        tokio::time::advance(Duration::from_millis(1_000)).await;
        for (h, a) in &agents[2..4] {
            cache.insert(*h, a, cache.ticket());
        }
        assert_eq!(cache.len(), 4);
        // Full: the two expired entries go, the fifth fits beside the two fresh ones.
        cache.insert(agents[4].0, &agents[4].1, cache.ticket());
        assert_eq!(cache.len(), 3);
        assert!(agents[2..5].iter().all(|(h, _)| cache.get(h).is_some()));
        cache.insert(agents[5].0, &agents[5].1, cache.ticket());
        assert_eq!(cache.len(), 4);
        // Full of fresh entries: all dropped, then the newcomer kept.
        let (h, a) = agent("t6");
        cache.insert(h, &a, cache.ticket());
        assert_eq!(cache.len(), 1);
        assert!(cache.get(&h).is_some());
        // The agent index followed: forgetting a dropped agent is harmless.
        cache.forget(&[target(&agents[2].1)]);
        assert_eq!(cache.len(), 1);
    }
}
