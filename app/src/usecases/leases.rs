//! Leases: an agent's fenced, expiring claims on path patterns, and the acquire that waits.
//!
//! # How a waiting acquire works
//! 1. It subscribes to its team in this process's [`LeaseRoom`] **before** it asks the ledger,
//!    so a release that lands between a conflict and the wait is kept, never lost.
//! 2. It asks the ledger ([`crewbus_ports::Leases::acquire`]). Granted → answered at once.
//! 3. On a conflict it waits, holding no connection, until the first of: a lease of its team
//!    ended (a wake-up), the earliest conflicting lease's expiry (no wake-up needed: the ledger
//!    stops counting a lease at its `expires_at`), [`LEASE_RECHECK`], its deadline, shutdown.
//!    Then it asks again; once the deadline has passed it answers the last conflicts.
//!
//! # Where wake-ups come from
//! A release, a revocation and a seal (every end but an expiry) wake this process's waiters of
//! the team at once and every other server's through the wake-up port
//! ([`crewbus_ports::Wakeups::notify_leases`], after the commit). A wake-up may be lost (a
//! listener's session lost, a notify that failed): a waiter then asks again within
//! [`LEASE_RECHECK`], so **a lost wake-up delays a grant by at most 1 s**, never loses it.

use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use crewbus_domain::{
    Acquired, Agent, BusError, BusResult, FeedEvent, FeedKind, FencingToken, Lease, LeaseClaim,
    LeaseEvent, LeaseFilter, MAX_PAGE, OperatorScope, RunId, Uuid, validate_lease_path,
};
use tokio::sync::watch;

use crate::usecases::bus::Bus;

/// Longest a waiting acquire goes without asking the ledger again: the bound on what a lost
/// wake-up costs (1 s).
pub const LEASE_RECHECK: Duration = Duration::from_secs(1);

/// Shortest TTL an agent may ask for (1 s): shorter leases lapse before a round trip ends.
pub const MIN_LEASE_TTL: Duration = Duration::from_secs(1);

/// The teams with acquires waiting in this process: one change counter per team, bumped when a
/// lease of the team ends.
#[derive(Default)]
pub(crate) struct LeaseRoom {
    teams: Mutex<HashMap<Uuid, watch::Sender<u64>>>,
    /// Acquires waiting now, past a conflict.
    parked: AtomicUsize,
}

/// Counts an acquire as waiting while it lives.
struct Parked<'a>(&'a AtomicUsize);

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

impl LeaseRoom {
    /// A subscription to `team`'s lease ends from now on.
    fn subscribe(&self, team: Uuid) -> watch::Receiver<u64> {
        let mut teams = self.teams.lock().unwrap_or_else(|e| e.into_inner());
        // Teams nobody waits on any more are dropped as others subscribe.
        teams.retain(|_, tx| tx.receiver_count() > 0);
        teams
            .entry(team)
            .or_insert_with(|| watch::channel(0).0)
            .subscribe()
    }

    /// How many acquires wait now, past a conflict.
    pub(crate) fn parked(&self) -> usize {
        self.parked.load(Ordering::Acquire)
    }

    /// Wakes `team`'s waiters.
    pub(crate) fn wake(&self, team: Uuid) {
        let teams = self.teams.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(tx) = teams.get(&team) {
            tx.send_modify(|n| *n = n.wrapping_add(1));
        }
    }

    /// Wakes every waiter (wake-ups may have been missed).
    pub(crate) fn wake_everyone(&self) {
        let teams = self.teams.lock().unwrap_or_else(|e| e.into_inner());
        for tx in teams.values() {
            tx.send_modify(|n| *n = n.wrapping_add(1));
        }
    }
}

impl Bus {
    /// Lease acquires waiting in this process now, past a conflict (as
    /// [`Bus::waiting_fetches`] counts fetches).
    pub fn waiting_acquires(&self) -> usize {
        self.lease_room.parked()
    }

    /// The TTL an acquire or renewal asked for, or the default. Errors: under [`MIN_LEASE_TTL`]
    /// or above `bus.lease_max_ttl_ms` → `Invalid`.
    fn lease_ttl(&self, asked: Option<Duration>) -> BusResult<Duration> {
        let ttl = asked.unwrap_or(self.settings.lease_default_ttl);
        let max = self.settings.lease_max_ttl;
        if ttl < MIN_LEASE_TTL || ttl > max {
            return Err(BusError::invalid(format!(
                "a lease TTL must be between {} and {} ms",
                MIN_LEASE_TTL.as_millis(),
                max.as_millis()
            )));
        }
        Ok(ttl)
    }

    /// Takes a lease on `claim` for `agent` for `ttl` (default `bus.lease_default_ttl_ms`),
    /// recorded in `run` when given. Without `wait` (zero) it answers at once: granted, or the
    /// conflicting holders. With `wait` it waits up to that long for the conflicts to clear
    /// (see the module docs), then answers the last conflicts.
    ///
    /// Errors: a TTL out of bounds or `wait` above `bus.max_wait_ms` → `Invalid`; the agent at
    /// its lease limit, or `run` sealed → `Conflict`; `run` unknown → `NotFound`, another
    /// agent's → `Forbidden`; the agent revoked → `Forbidden`; as the ledger otherwise.
    pub async fn acquire_lease(
        &self,
        agent: &Agent,
        claim: &LeaseClaim,
        ttl: Option<Duration>,
        run: Option<RunId>,
        wait: Duration,
    ) -> BusResult<Acquired> {
        let ttl = self.lease_ttl(ttl)?;
        if wait > self.settings.max_wait {
            return Err(BusError::invalid(format!(
                "wait_ms must be at most {} (bus.max_wait_ms)",
                self.settings.max_wait.as_millis()
            )));
        }
        let mut woken = self.lease_room.subscribe(agent.team);
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            woken.borrow_and_update();
            let now = self.now();
            let answer = self
                .ports
                .leases
                .acquire(agent.team, agent.id, claim, ttl, run, now)
                .await?;
            let Acquired::Conflict(conflicts) = &answer else {
                self.lease_changed(agent.team, agent.id);
                return Ok(answer);
            };
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            if left.is_zero() || self.shutdown.is_triggered() {
                return Ok(answer);
            }
            // The earliest conflict lapses by itself: ask again just after it.
            let lapse = conflicts
                .iter()
                .map(|l| (l.expires_at - now).to_std().unwrap_or(Duration::ZERO))
                .min()
                .unwrap_or(LEASE_RECHECK)
                + Duration::from_millis(1);
            let pause = left.min(LEASE_RECHECK).min(lapse);
            // Counted while it waits, also when the request is dropped mid-wait.
            let _parked = Parked::new(&self.lease_room.parked);
            tokio::select! {
                _ = woken.changed() => {}
                () = tokio::time::sleep(pause) => {}
                () = self.shutdown.wait() => {}
            }
        }
    }

    /// Renews `agent`'s live lease for `ttl` (default `bus.lease_default_ttl_ms`) from now.
    /// Errors: a TTL out of bounds → `Invalid`; unknown or another agent's → `NotFound`; ended
    /// or lapsed → `Conflict`.
    pub async fn renew_lease(
        &self,
        agent: &Agent,
        lease: Uuid,
        ttl: Option<Duration>,
    ) -> BusResult<Lease> {
        let ttl = self.lease_ttl(ttl)?;
        let renewed = self
            .ports
            .leases
            .renew(agent.team, agent.id, lease, ttl, self.now())
            .await?;
        self.lease_changed(agent.team, agent.id);
        Ok(renewed)
    }

    /// Releases `agent`'s lease (idempotent) and wakes the team's waiting acquires on every
    /// server. Errors: unknown or another agent's → `NotFound`.
    pub async fn release_lease(&self, agent: &Agent, lease: Uuid) -> BusResult<Lease> {
        let released = self
            .ports
            .leases
            .release(agent.team, Some(agent.id), lease, self.now())
            .await?;
        self.leases_ended(agent.team).await;
        Ok(released)
    }

    /// An operator's release of any lease of `team` (`crewbus lease release`). Errors: unknown
    /// lease or team → `NotFound`.
    pub async fn release_team_lease(&self, team: Uuid, lease: Uuid) -> BusResult<Lease> {
        let released = self
            .ports
            .leases
            .release(team, None, lease, self.now())
            .await?;
        self.leases_ended(team).await;
        Ok(released)
    }

    /// The live leases of `agent`'s team passing `filter`, by token.
    pub async fn leases_for(&self, agent: &Agent, filter: &LeaseFilter) -> BusResult<Vec<Lease>> {
        self.team_leases(agent.team, filter).await
    }

    /// The live leases of `team` passing `filter`, by token (operators' listing). Errors:
    /// unknown team → `NotFound`.
    pub async fn team_leases(&self, team: Uuid, filter: &LeaseFilter) -> BusResult<Vec<Lease>> {
        self.ports.leases.leases(team, filter, self.now()).await
    }

    /// One lease of `agent`'s team with its history. Errors: unknown → `NotFound`.
    pub async fn lease_history(
        &self,
        agent: &Agent,
        lease: Uuid,
    ) -> BusResult<(Lease, Vec<LeaseEvent>)> {
        self.ports.leases.lease(agent.team, lease).await
    }

    /// Whether `agent` holds `path` now: with `token`, whether that token is its live lease
    /// covering `path` (the fencing check); without, whether any live lease of its covers it.
    /// Errors: `path` not a concrete lease path → `Invalid`.
    pub async fn check_lease(
        &self,
        agent: &Agent,
        token: Option<FencingToken>,
        path: &str,
    ) -> BusResult<Option<Lease>> {
        validate_lease_path(path)?;
        let now = self.now();
        let mine = LeaseFilter {
            agent: Some(agent.id),
            overlapping: None,
        };
        if let Some(token) = token
            && !self
                .ports
                .leases
                .check(agent.team, agent.id, token, path, now)
                .await?
        {
            return Ok(None);
        }
        // The lease that holds it, to show the caller (a listing of its own, at most 64).
        let held = self.ports.leases.leases(agent.team, &mine, now).await?;
        Ok(held
            .into_iter()
            .find(|l| token.is_none_or(|t| l.token == t) && l.fences(agent.id, l.token, path, now)))
    }

    /// Wakes the waiting acquires of `team`: here at once, elsewhere through the wake-up port
    /// (a failed notify is logged; the waiters' re-check covers it).
    pub(crate) async fn leases_ended(&self, team: Uuid) {
        self.emit(vec![FeedEvent::new(team, FeedKind::LeaseChanged)]);
        self.lease_room.wake(team);
        if let Err(error) = self.ports.wakeups.notify_leases(&[team]).await {
            tracing::info!(code = error.code(), error = ?error, "lease wake-up not sent; waiters re-check within 1 s");
        }
    }

    /// Tells the console feed that `agent` was granted or renewed a lease of `team`.
    fn lease_changed(&self, team: Uuid, agent: Uuid) {
        self.emit(vec![
            FeedEvent::new(team, FeedKind::LeaseChanged).agent(agent),
        ]);
    }

    /// An operator's listing of `team`'s live leases. Errors: a team outside `scope`, or
    /// unknown → `NotFound`.
    pub async fn admin_leases(
        &self,
        scope: &OperatorScope,
        team: Uuid,
        filter: &LeaseFilter,
    ) -> BusResult<Vec<Lease>> {
        if !scope.covers(team) {
            return Err(BusError::not_found(format!("team {team}")));
        }
        self.team_leases(team, filter).await
    }

    /// An operator's release of `team`'s `lease`, whoever holds it. Errors: a team outside
    /// `scope`, or an unknown team or lease → `NotFound`.
    pub async fn admin_release_lease(
        &self,
        scope: &OperatorScope,
        team: Uuid,
        lease: Uuid,
    ) -> BusResult<Lease> {
        if !scope.covers(team) {
            return Err(BusError::not_found(format!("team {team}")));
        }
        self.release_team_lease(team, lease).await
    }

    /// One pass of the expiry sweep: records the expiry of every lease that lapsed (batches of
    /// `MAX_PAGE`). Returns how many ended.
    pub async fn lease_sweep(&self) -> BusResult<usize> {
        let mut ended = 0;
        loop {
            let batch = self.ports.leases.expire(self.now(), MAX_PAGE).await?;
            ended += batch.len();
            let teams: BTreeSet<Uuid> = batch.iter().map(|l| l.team).collect();
            self.emit(
                teams
                    .into_iter()
                    .map(|team| FeedEvent::new(team, FeedKind::LeaseChanged))
                    .collect(),
            );
            if batch.len() < MAX_PAGE {
                return Ok(ended);
            }
        }
    }
}
