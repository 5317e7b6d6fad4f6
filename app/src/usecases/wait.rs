//! The waiting fetch: an agent's fetch that waits (bounded) until a delivery can be handed out.
//!
//! # How a wait works
//! 1. The waiter subscribes to its `(team, agent)` in this process's [`WaitRoom`] **before** it
//!    fetches, so a wake-up that lands between an empty fetch and the wait is kept (a stored
//!    permit), never lost.
//! 2. It fetches. Something handed out → answered at once.
//! 3. Else it waits, holding no database connection and no transaction, until one of: a
//!    wake-up for it, the deadline (→ an empty page), the bus's shutdown (→ an empty page).
//! 4. Woken, it checks that the agent is still active (revoked → `Unauthenticated`) while it
//!    fetches again, and goes back to 3 with an empty result. A re-fetch that fails is logged
//!    and the wait goes on: only the deadline ends it — except a re-fetch the ledger refuses
//!    with `Unauthenticated` (the agent revoked), which ends the wait with it.
//!
//! # Where wake-ups come from
//! - The reference worker, as soon as the inbox confirmed a pass's references (the delivery is
//!   possible from then on) and before it marks them published, a commit no fetch waits for:
//!   this process's waiters are woken at once, and one notify per agent per pass goes through
//!   the [`Wakeups`](crewbus_ports::Wakeups) port, so a message sent through one server wakes an
//!   agent waiting on another that shares the ledger. The worker itself is woken by the commit
//!   that stores the body (a local send, or the relay's settlement). Never inside a
//!   transaction.
//! - A revocation (`Bus::revoke_agent`), so a revoked agent's wait ends at once with 401.
//! - The **safety sweep**: every [`topup_interval`] (half of `topup_after`), one ledger read
//!   ([`Ledger::wakeable`](crewbus_ports::Ledger::wakeable)) over every agent waiting in this
//!   process finds those with a message they could be handed (or that were revoked) and wakes
//!   them with a top-up forced. So a message whose wake-up was lost, or that only the ledger
//!   top-up can hand out, is returned within `1.5 × topup_after` of being stored (3 s by
//!   default), and a revocation whose wake-up was lost ends the wait within `topup_after / 2`.
//!   One read per interval for all waiters (not one fetch per waiter) keeps idle waiters cheap.
//! - The listener started again after its session was lost (or falling behind): every local
//!   waiter is woken. A loss is logged at WARN and counted
//!   (`crewbus_wakeup_listener_lost_total`), the listener started again at once (after a pause
//!   when the lost one had lived less than it, or when starting fails) and its return logged at
//!   INFO and counted (`crewbus_wakeup_listener_reconnected_total`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use crewbus_domain::{Agent, BusError, BusResult, MAX_PAGE, SweepTarget, Wakeup, WakeupTarget};
use tokio::sync::Notify;

use crate::metrics::Metrics;
use crate::shutdown::Shutdown;
use crate::usecases::bus::Bus;
use crate::usecases::deliver::{Delivery, Fetched, ROOM_WAIT_MIN, topup_interval};

/// Each waiting agent's waiters: (waiter id, its wake-up slot).
type Waiting = HashMap<WakeupTarget, Vec<(u64, Arc<Slot>)>>;

/// The agents waiting in this process, each with its waiters' wake-up slots.
#[derive(Default)]
pub(crate) struct WaitRoom {
    waiters: Mutex<Waiting>,
    next_id: AtomicU64,
    /// Waiters past their first fetch, waiting now.
    parked: AtomicUsize,
    /// Watches past their first read, waiting now.
    watching: AtomicUsize,
}

/// Counts a waiter as waiting (past its first, empty fetch or read) while it lives.
pub(crate) struct Parked<'a>(&'a AtomicUsize);

impl<'a> Parked<'a> {
    fn new(count: &'a AtomicUsize) -> Self {
        count.fetch_add(1, Ordering::AcqRel);
        Parked(count)
    }
}

impl Drop for Parked<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// One waiter's wake-up: a stored permit (a wake-up before the wait begins is kept), whether
/// the sweep woke it (its next fetch runs the ledger top-up), and which messages are worth a
/// sweep's wake-up (only those stored after `stored_after`, when set: a watch's newest
/// reported message).
#[derive(Default)]
struct Slot {
    notify: Notify,
    swept: AtomicBool,
    stored_after: Option<DateTime<Utc>>,
}

/// A subscription to a `(team, agent)`'s wake-ups; leaves the room when dropped.
pub(crate) struct Waiter {
    room: Arc<WaitRoom>,
    target: WakeupTarget,
    id: u64,
    slot: Arc<Slot>,
}

impl Waiter {
    /// Resolves at the next wake-up since the subscription (or the last one); answers whether
    /// the safety sweep sent it.
    pub(crate) async fn woken(&self) -> bool {
        self.slot.notify.notified().await;
        self.slot.swept.swap(false, Ordering::AcqRel)
    }
}

impl Drop for Waiter {
    fn drop(&mut self) {
        if let Ok(mut waiters) = self.room.waiters.lock()
            && let Some(slots) = waiters.get_mut(&self.target)
        {
            slots.retain(|(id, _)| *id != self.id);
            if slots.is_empty() {
                waiters.remove(&self.target);
            }
        }
    }
}

impl WaitRoom {
    /// Subscribes to `target`'s wake-ups (before fetching).
    pub(crate) fn subscribe(self: &Arc<Self>, target: WakeupTarget) -> Waiter {
        self.subscribe_after(target, None)
    }

    /// Subscribes to `target`'s wake-ups, the safety sweep waking it only for a message stored
    /// after `stored_after` (when set; other wake-ups wake it whatever they are for).
    pub(crate) fn subscribe_after(
        self: &Arc<Self>,
        target: WakeupTarget,
        stored_after: Option<DateTime<Utc>>,
    ) -> Waiter {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let slot = Arc::new(Slot {
            stored_after,
            ..Slot::default()
        });
        if let Ok(mut waiters) = self.waiters.lock() {
            waiters
                .entry(target)
                .or_default()
                .push((id, Arc::clone(&slot)));
        }
        Waiter {
            room: Arc::clone(self),
            target,
            id,
            slot,
        }
    }

    /// Wakes every waiter of `target` (`swept`: the sweep found something for it).
    pub(crate) fn wake(&self, target: WakeupTarget, swept: bool) {
        if let Ok(waiters) = self.waiters.lock()
            && let Some(slots) = waiters.get(&target)
        {
            for (_, slot) in slots {
                if swept {
                    slot.swept.store(true, Ordering::Release);
                }
                slot.notify.notify_one();
            }
        }
    }

    /// Wakes every waiter of this process (wake-ups may have been missed).
    pub(crate) fn wake_everyone(&self) {
        if let Ok(waiters) = self.waiters.lock() {
            for (_, slot) in waiters.values().flatten() {
                slot.notify.notify_one();
            }
        }
    }

    /// The agents waiting now, each once, with the least restrictive `stored_after` of its
    /// waiters (`None` when any has none).
    pub(crate) fn targets(&self) -> Vec<SweepTarget> {
        self.waiters
            .lock()
            .map(|w| {
                w.iter()
                    .map(|(target, slots)| SweepTarget {
                        target: *target,
                        stored_after: slots
                            .iter()
                            .map(|(_, slot)| slot.stored_after)
                            .min()
                            .flatten(),
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Fetches waiting in this process now (past their first, empty fetch).
    pub(crate) fn waiting(&self) -> usize {
        self.parked.load(Ordering::Acquire)
    }

    /// Counts a watch as waiting (past its first read, which found no news) while the guard
    /// lives.
    pub(crate) fn park_watch(&self) -> Parked<'_> {
        Parked::new(&self.watching)
    }

    /// Watches waiting in this process now (past their first read, which found no news).
    pub(crate) fn watching(&self) -> usize {
        self.watching.load(Ordering::Acquire)
    }
}

impl Bus {
    /// Hands out up to `limit` messages to `agent` like [`Bus::fetch`], waiting up to `wait` for
    /// one when there is none now (see the module docs).
    ///
    /// Answers as soon as at least one delivery is handed out; else an empty page once `wait`
    /// has passed (a re-fetch already running then finishes first), or at once when the bus
    /// shuts down. `wait` zero is [`Bus::fetch`]. While it waits it holds no database
    /// connection and no transaction. A fetch that finds no room for its bodies
    /// (`bus.max_body_bytes_in_flight`) waits for it within the same deadline (at least
    /// [`ROOM_WAIT_MIN`]); the room is given back when this returns.
    ///
    /// Errors: `wait` above `bus.max_wait_ms` → `Invalid`; the agent revoked while waiting →
    /// `Unauthenticated`; as [`Bus::fetch`] for the first fetch (a failing re-fetch is logged
    /// and the wait goes on); not answered within `bus.request_timeout_ms` plus `wait` (at
    /// least [`ROOM_WAIT_MIN`]) → `Timeout` ([`Bus::within_deadline`]).
    pub async fn fetch_waiting(
        &self,
        agent: &Agent,
        limit: usize,
        wait: Duration,
    ) -> BusResult<Vec<Delivery>> {
        Ok(self
            .wait_and_fetch(agent, limit, wait, None)
            .await?
            .deliveries)
    }

    /// [`Bus::fetch_waiting`] handing out at most `max_body_bytes` of bodies per answer, as
    /// [`Bus::fetch_within`] does (what does not fit is not handed out — the agent's next
    /// fetch gets it; the first delivery always is), with the room the bodies hold in this
    /// process ([`Fetched::held`]): the one fetch both driving adapters (HTTP, MCP) call. Keep
    /// the answer until it has been written out, so the room bounds the bodies in memory.
    ///
    /// Errors: `max_body_bytes` 0 or above `bus.max_fetch_bytes` → `Invalid`; as
    /// [`Bus::fetch_waiting`].
    pub async fn fetch_waiting_within(
        &self,
        agent: &Agent,
        limit: usize,
        wait: Duration,
        max_body_bytes: usize,
    ) -> BusResult<Fetched> {
        self.wait_and_fetch(agent, limit, wait, Some(max_body_bytes))
            .await
    }

    /// The waiting fetch within its deadline: `bus.request_timeout_ms` plus `wait` (at least
    /// [`ROOM_WAIT_MIN`], the room's own least wait), see [`Bus::within_deadline`].
    async fn wait_and_fetch(
        &self,
        agent: &Agent,
        limit: usize,
        wait: Duration,
        max_body_bytes: Option<usize>,
    ) -> BusResult<Fetched> {
        self.within_deadline(
            wait.max(ROOM_WAIT_MIN),
            self.wait_and_fetch_unbounded(agent, limit, wait, max_body_bytes),
        )
        .await
    }

    async fn wait_and_fetch_unbounded(
        &self,
        agent: &Agent,
        limit: usize,
        wait: Duration,
        max_body_bytes: Option<usize>,
    ) -> BusResult<Fetched> {
        if wait > self.settings.max_wait {
            return Err(BusError::invalid(format!(
                "wait_ms must be between 0 and {}",
                self.settings.max_wait.as_millis()
            )));
        }
        let started = tokio::time::Instant::now();
        let deadline = started + wait;
        // Room for bodies is waited for within the fetch's own deadline, at least ROOM_WAIT_MIN.
        let room_until = started + wait.max(ROOM_WAIT_MIN);
        if wait.is_zero() {
            return self
                .fetch_with(agent, limit, false, max_body_bytes, room_until)
                .await;
        }
        let target = WakeupTarget::new(agent.team, agent.id);
        let waiter = self.room.subscribe(target);
        let first = self
            .fetch_with(agent, limit, false, max_body_bytes, room_until)
            .await?;
        if !first.deliveries.is_empty() {
            return Ok(first);
        }
        drop(first);
        let _parked = Parked::new(&self.room.parked);
        loop {
            let swept = tokio::select! {
                swept = waiter.woken() => swept,
                () = tokio::time::sleep_until(deadline) => return Ok(Fetched::empty()),
                () = self.shutdown.wait() => return Ok(Fetched::empty()),
            };
            Metrics::inc(&self.metrics.fetch_wakeups);
            // The agent check and the re-fetch run at once (one round trip of latency, not
            // two); a revoked agent gets 401 whatever the fetch found (its hand-outs lapse).
            let (check, fetched) = tokio::join!(
                self.ports.ledger.agent(agent.team, agent.id),
                self.fetch_with(agent, limit, swept, max_body_bytes, room_until)
            );
            match check {
                Ok(a) if a.revoked() => return Err(BusError::Unauthenticated),
                Err(BusError::NotFound { .. }) => return Err(BusError::Unauthenticated),
                Err(error) => {
                    Metrics::inc(&self.metrics.fetch_wait_errors);
                    tracing::warn!(agent = %agent.id, code = error.code(), error = ?error, "waiting fetch: agent check failed");
                }
                Ok(_) => {}
            }
            match fetched {
                Ok(f) if !f.deliveries.is_empty() => return Ok(f),
                Ok(_) => {}
                // The ledger refuses a revoked agent's hand-outs and top-up: the wait ends with
                // 401 even when the agent check above failed.
                Err(BusError::Unauthenticated) => return Err(BusError::Unauthenticated),
                Err(error) => {
                    Metrics::inc(&self.metrics.fetch_wait_errors);
                    tracing::warn!(agent = %agent.id, code = error.code(), error = ?error, "waiting fetch: re-fetch failed; still waiting");
                }
            }
        }
    }

    /// Wake-ups of agents `targets` on every server (after the change is committed). A failure
    /// is logged: the safety sweep covers it.
    pub(crate) async fn notify_waiters(&self, targets: &mut Vec<WakeupTarget>) {
        targets.sort_unstable();
        targets.dedup();
        // This process's own waiters at once, without the round trip through the port (which
        // may wake them once more: a re-fetch that finds nothing and waits again).
        for t in targets.iter() {
            self.room.wake(*t, false);
        }
        for chunk in targets.chunks(MAX_PAGE) {
            if let Err(error) = self.ports.wakeups.notify(chunk).await {
                tracing::warn!(code = error.code(), error = ?error, "wake-up notify failed; the waiters' sweep will find the messages");
            }
        }
    }

    /// One safety sweep over the agents waiting in this process (see the module docs). Returns
    /// how many were woken. Errors: the ledger failing.
    pub async fn wait_sweep(&self) -> BusResult<usize> {
        Metrics::inc(&self.metrics.wait_sweeps);
        let targets = self.room.targets();
        let now = self.now();
        let mut woken = 0;
        for chunk in targets.chunks(MAX_PAGE) {
            for t in self.ports.ledger.wakeable(chunk, now, now).await? {
                // Perhaps revoked: its token is looked up again.
                self.tokens.forget(&[t]);
                self.room.wake(t, true);
                woken += 1;
            }
        }
        Ok(woken)
    }

    /// Fetches waiting in this process now: past their first fetch, which found nothing
    /// (a re-fetch after a wake-up counts as waiting).
    pub fn waiting_fetches(&self) -> usize {
        self.room.waiting()
    }

    /// Inbox watches (`Bus::watch` with a wait) waiting in this process now: past their first
    /// read, which found no news (a read again after a wake-up counts as waiting).
    pub fn waiting_watches(&self) -> usize {
        self.room.watching()
    }
}

/// The wake-up listener: hands every wake-up from the [`Wakeups`](crewbus_ports::Wakeups) port
/// to this process's waiters until shutdown, and drops the woken agents' cached tokens (a
/// wake-up may be a revocation on another server; `Everyone` drops the whole token cache).
///
/// A listener that ends with an error (its session lost) is logged at WARN, counted in
/// [`Metrics::wakeup_listener_lost`], and started again at once — after [`LISTEN_PAUSE`] when it
/// lived less than that (a session lost as soon as it is made does not spin), and every
/// [`LISTEN_PAUSE`] while starting fails. The one that then starts is logged at INFO and counted
/// in [`Metrics::wakeup_listener_reconnected`]. Whenever a listener starts, every waiter is woken
/// and the token cache dropped (wake-ups, revocations among them, may have been missed).
pub(crate) async fn run_listener(bus: Bus, shutdown: Shutdown) {
    // Set while the last listener was lost and no other has started since.
    let mut lost = false;
    while !shutdown.is_triggered() {
        let pause = match bus.ports.wakeups.listen().await {
            Ok(mut listener) => {
                let started = tokio::time::Instant::now();
                if std::mem::take(&mut lost) {
                    Metrics::inc(&bus.metrics.wakeup_listener_reconnected);
                    tracing::info!("wake-up listener reconnected; waking every waiting fetch");
                }
                // Wake-ups (revocations among them) may have been missed meanwhile.
                bus.tokens.forget_all();
                bus.room.wake_everyone();
                bus.lease_room.wake_everyone();
                loop {
                    let next = tokio::select! {
                        () = shutdown.wait() => return,
                        next = listener.next() => next,
                    };
                    match next {
                        Ok(Wakeup::Agents(targets)) => {
                            // A wake-up may be a revocation: the agents' tokens are looked up
                            // again on their next request.
                            bus.tokens.forget(&targets);
                            for t in targets {
                                bus.room.wake(t, false);
                            }
                        }
                        Ok(Wakeup::Leases(teams)) => {
                            for team in teams {
                                bus.lease_room.wake(team);
                            }
                        }
                        Ok(Wakeup::Everyone) => {
                            bus.tokens.forget_all();
                            bus.room.wake_everyone();
                            bus.lease_room.wake_everyone();
                        }
                        Err(error) => {
                            Metrics::inc(&bus.metrics.wakeup_listener_lost);
                            tracing::warn!(code = error.code(), error = ?error, "wake-up listener lost; reconnecting");
                            lost = true;
                            break;
                        }
                    }
                }
                LISTEN_PAUSE.saturating_sub(started.elapsed())
            }
            Err(error) => {
                tracing::warn!(code = error.code(), error = ?error, "wake-up listener cannot start; retrying");
                LISTEN_PAUSE
            }
        };
        tokio::select! {
            () = shutdown.wait() => return,
            () = tokio::time::sleep(pause) => {}
        }
    }
}

/// The wake-up listener's pause between starts that fail, and the least time between two starts
/// (1 s).
pub(crate) const LISTEN_PAUSE: Duration = Duration::from_secs(1);

/// The safety sweep, every [`topup_interval`], until shutdown.
pub(crate) async fn run_sweep(bus: Bus, shutdown: Shutdown) {
    let every = topup_interval(bus.settings.topup_after).max(Duration::from_millis(10));
    let mut ticks = tokio::time::interval(every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = shutdown.wait() => return,
            _ = ticks.tick() => {}
        }
        if let Err(error) = bus.wait_sweep().await {
            tracing::warn!(code = error.code(), error = ?error, "waiting fetches' sweep failed");
        }
    }
}
