//! The lease port: fenced, expiring claims on path patterns, granted by the ledger.

use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use crewbus_domain::{
    Acquired, BusResult, FencingToken, Lease, LeaseClaim, LeaseEvent, LeaseFilter, RunId,
};
use uuid::Uuid;

/// Leases of one tenant's teams, kept by the ledger beside its agents and runs.
///
/// Implemented by every ledger (memory, SQLite, Postgres) over its own store; all pass the same
/// conformance functions (`crewbus_conformance::leases`). The rules of [`crate::Ledger`] hold:
/// time from the caller, one transaction per method, another team's ids are `NotFound`, store
/// outages `Unavailable`/`Timeout`.
///
/// # Guarantees
/// - **Serialised per team**: the overlap check and the grant of an `acquire` happen under one
///   lock per team (Postgres: the team's row in `lease_fences`, locked in the acquire
///   transaction; SQLite: its one writer; memory: its mutex), so no two servers sharing a store
///   ever grant two live, conflicting leases of different agents
///   ([`crewbus_domain::decide_acquire`]) — given the same `at`: liveness is judged at the
///   caller's time, so servers whose clocks differ by *d* may see a lease lapse up to *d* apart.
/// - **Fencing**: each grant takes the next value of one counter per team, bumped in the grant's
///   transaction: a later grant in a team carries a greater [`FencingToken`], never a reused one.
/// - **Liveness**: a lease holds until its `expires_at` (exclusive) unless it ends earlier; a
///   lapsed lease never conflicts and never fences, whether or not [`Leases::expire`] has
///   recorded its expiry yet.
/// - **Ends**: release ([`Leases::release`]), expiry ([`Leases::expire`]), the agent's
///   revocation (`Ledger::revoke_agent`, same transaction) and the seal of the run that took it
///   (`Journal::seal`, same transaction, before `RunSealed`).
/// - **Records**: every grant, renewal and end is an entry of the lease's own history
///   ([`Leases::lease`]) and, for a lease taken by a run, a record of that run
///   (`LeaseGranted`, `LeaseRenewed`, `LeaseEnded`) in the same transaction — so it reaches the
///   operator's push destinations like every other record. An end while the run is already
///   sealed is kept in the lease's history only.
#[cfg_attr(feature = "mock", mockall::automock)]
#[async_trait]
pub trait Leases: Send + Sync {
    /// Grants `agent` of `team` a lease on `claim` for `ttl`, unless another agent's live lease
    /// conflicts: then nothing is written and the conflicting leases come back
    /// ([`Acquired::Conflict`]). Never waits (waiting is the caller's, woken by wake-ups).
    ///
    /// Errors: unknown team, or an agent unknown or of another team → `NotFound`; a revoked
    /// agent → `Forbidden`; a TTL outside 1 ms..1 day → `Invalid`; the agent at
    /// [`crewbus_domain::MAX_LEASES_PER_AGENT`] live leases → `Conflict`; `run` as the
    /// [`crate::Ledger`] run rules (unknown or another team's → `NotFound`, another agent's →
    /// `Forbidden`, sealed → `Conflict`).
    async fn acquire(
        &self,
        team: Uuid,
        agent: Uuid,
        claim: &LeaseClaim,
        ttl: Duration,
        run: Option<RunId>,
        at: DateTime<Utc>,
    ) -> BusResult<Acquired>;

    /// Renews `agent`'s live `lease`: it now lapses at `at + ttl` (earlier than before if `ttl`
    /// is shorter). Its token stays. Errors: unknown lease, of another team or another agent →
    /// `NotFound`; ended or lapsed → `Conflict`; a TTL outside 1 ms..1 day → `Invalid`.
    async fn renew(
        &self,
        team: Uuid,
        agent: Uuid,
        lease: Uuid,
        ttl: Duration,
        at: DateTime<Utc>,
    ) -> BusResult<Lease>;

    /// Ends `lease` as released at `at`; `agent` `None` is an operator releasing any holder's.
    /// Idempotent: a lease that already ended (or lapsed: it is recorded as expired then) comes
    /// back as it ended, nothing more written. Errors: unknown lease, of another team or (with
    /// `agent`) another agent's → `NotFound`.
    async fn release(
        &self,
        team: Uuid,
        agent: Option<Uuid>,
        lease: Uuid,
        at: DateTime<Utc>,
    ) -> BusResult<Lease>;

    /// The leases of `team` live at `at` that pass `filter`, by token (oldest grant first), at
    /// most [`crewbus_domain::MAX_LEASE_LIST`]. Errors: unknown team → `NotFound`.
    async fn leases(
        &self,
        team: Uuid,
        filter: &LeaseFilter,
        at: DateTime<Utc>,
    ) -> BusResult<Vec<Lease>>;

    /// One lease of `team`, live or ended, with its whole history (grant, renewals, end) in
    /// order. Errors: unknown or another team's → `NotFound`.
    async fn lease(&self, team: Uuid, lease: Uuid) -> BusResult<(Lease, Vec<LeaseEvent>)>;

    /// Whether `token` is `agent`'s lease, live at `at`, whose pattern covers `path`
    /// ([`Lease::fences`]). `false` for any other token (unknown, another agent's, lapsed,
    /// ended, not covering). Errors: `path` not a concrete lease path → `Invalid`.
    async fn check(
        &self,
        team: Uuid,
        agent: Uuid,
        token: FencingToken,
        path: &str,
        at: DateTime<Utc>,
    ) -> BusResult<bool>;

    /// Records the expiry of up to `limit` leases of the tenant that lapsed at or before `at`
    /// and have not ended, oldest expiry first: each ends with reason `expired` at its
    /// `expires_at`, with its history entry and run record. Returns them (ended). Errors:
    /// `limit` 0 or above `MAX_PAGE` → `Invalid`.
    async fn expire(&self, at: DateTime<Utc>, limit: usize) -> BusResult<Vec<Lease>>;
}
