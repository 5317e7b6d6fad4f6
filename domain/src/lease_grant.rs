//! Leases as the ledger grants them: a held claim with its fencing token, expiry and end, and the
//! pure rules every ledger applies to grant, renew, list and check them.

use std::fmt;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::{BusError, BusResult, FencingToken, LeaseClaim, LeasePattern, MAX_PAGE, RunId};

/// Most live leases one agent may hold at once: an acquire beyond it is refused with
/// [`BusError::Conflict`] (release some first). It also bounds what an acquire reads: at most this
/// many live leases per agent of the team.
pub const MAX_LEASES_PER_AGENT: usize = 64;

/// Why a lease ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LeaseEnd {
    /// Its holder (or an operator) released it.
    Released,
    /// Its TTL passed without a renewal (recorded by the ledger's expiry sweep; the lease stopped
    /// counting at its `expires_at` whether or not the sweep has run).
    Expired,
    /// Its agent was revoked (in the revocation's transaction).
    Revoked,
    /// The run that took it was sealed (in the seal's transaction).
    RunSealed,
}

impl LeaseEnd {
    /// The snake_case name (`released`, `expired`, `revoked`, `run_sealed`), as stored.
    pub fn as_str(self) -> &'static str {
        match self {
            LeaseEnd::Released => "released",
            LeaseEnd::Expired => "expired",
            LeaseEnd::Revoked => "revoked",
            LeaseEnd::RunSealed => "run_sealed",
        }
    }

    /// The end whose [`LeaseEnd::as_str`] is `name`; `None` for any other name.
    pub fn from_name(name: &str) -> Option<LeaseEnd> {
        [
            LeaseEnd::Released,
            LeaseEnd::Expired,
            LeaseEnd::Revoked,
            LeaseEnd::RunSealed,
        ]
        .into_iter()
        .find(|e| e.as_str() == name)
    }
}

impl fmt::Display for LeaseEnd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One lease as the ledger keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lease {
    /// The lease's id (minted by the ledger).
    pub id: Uuid,
    /// Its team.
    pub team: Uuid,
    /// The agent holding it.
    pub agent: Uuid,
    /// That agent's name (as stored when read).
    pub agent_name: String,
    /// What it claims.
    pub claim: LeaseClaim,
    /// Its fencing token: from the team's one counter, bumped by the acquire that granted it.
    pub token: FencingToken,
    /// The run that took it, when one did: its grants, renewals and end are that run's records.
    pub run: Option<RunId>,
    /// When it was granted.
    pub acquired_at: DateTime<Utc>,
    /// When it lapses unless renewed (the grant's or the latest renewal's time plus its TTL).
    pub expires_at: DateTime<Utc>,
    /// When and why it ended; `None` while it has not (it may still have lapsed: see
    /// [`Lease::is_live`]).
    pub ended: Option<LeaseEnding>,
}

/// When and why a lease ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseEnding {
    /// When: the release, revocation or seal's time, or for an expiry the lease's `expires_at`.
    pub at: DateTime<Utc>,
    /// Why.
    pub reason: LeaseEnd,
}

impl Lease {
    /// Whether the lease holds at `at`: not ended and `at` before its `expires_at` (a lease
    /// counts until its expiry instant, exclusive, whether or not the expiry sweep has run).
    pub fn is_live(&self, at: DateTime<Utc>) -> bool {
        self.ended.is_none() && at < self.expires_at
    }

    /// Whether `token` fences `path` for `agent` at `at`: this lease is `agent`'s, carries
    /// `token`, is live at `at`, and its pattern covers `path` ([`LeasePattern::covers`]).
    pub fn fences(&self, agent: Uuid, token: FencingToken, path: &str, at: DateTime<Utc>) -> bool {
        self.agent == agent
            && self.token == token
            && self.is_live(at)
            && self.claim.pattern.covers(path)
    }
}

/// What an acquire answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Acquired {
    /// The lease granted (with its new fencing token).
    Granted(Lease),
    /// Nothing was granted: these live leases of other agents conflict with the claim
    /// ([`LeaseClaim::conflicts_with`]), by token.
    Conflict(Vec<Lease>),
}

/// What happened to a lease, as its own history keeps it (and, for a lease a run took, as that
/// run's journal records say too).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum LeaseEventKind {
    /// Granted, lapsing at `expires_at`.
    Granted {
        /// The claimed pattern.
        pattern: LeasePattern,
        /// How it is held.
        mode: crate::LeaseMode,
        /// The fencing token granted.
        token: FencingToken,
        /// When it lapses unless renewed.
        expires_at: DateTime<Utc>,
    },
    /// Renewed, now lapsing at `expires_at`.
    Renewed {
        /// The new expiry.
        expires_at: DateTime<Utc>,
    },
    /// Ended.
    Ended {
        /// Why.
        reason: LeaseEnd,
    },
}

/// One entry of a lease's history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseEvent {
    /// Its position in the lease's history, from 1.
    pub seq: u64,
    /// When it was written.
    pub at: DateTime<Utc>,
    /// What it says.
    #[serde(flatten)]
    pub kind: LeaseEventKind,
}

/// Which live leases a listing returns: all of them (both fields `None`), one agent's, those
/// whose pattern overlaps `overlapping`, or both filters at once.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LeaseFilter {
    /// Only this agent's leases.
    pub agent: Option<Uuid>,
    /// Only leases whose pattern overlaps this one ([`LeasePattern::overlaps`]).
    pub overlapping: Option<LeasePattern>,
}

impl LeaseFilter {
    /// Whether `lease` passes the filter (liveness is the caller's to check).
    pub fn admits(&self, lease: &Lease) -> bool {
        self.agent.is_none_or(|a| a == lease.agent)
            && self
                .overlapping
                .as_ref()
                .is_none_or(|p| p.overlaps(&lease.claim.pattern))
    }
}

/// The longest page a lease listing returns: [`MAX_PAGE`].
pub const MAX_LEASE_LIST: usize = MAX_PAGE;

/// Checks a lease TTL as a ledger receives it: at least 1 ms and at most one day (the app's own
/// bound, `leases.max_ttl_ms`, is tighter). Errors: [`BusError::Invalid`].
pub fn validate_lease_ttl(ttl: Duration) -> BusResult<()> {
    if ttl < Duration::from_millis(1) || ttl > Duration::from_secs(86_400) {
        return Err(BusError::invalid(
            "a lease TTL must be between 1 ms and 1 day",
        ));
    }
    Ok(())
}

/// The grant decision every ledger makes inside its serialised acquire, given the team's
/// leases that are live at `at` (`live`, any order; ended or lapsed ones are ignored if given).
///
/// - `Err(conflicts)`: the live leases of **other** agents that conflict with `claim`, by token.
///   The agent's own leases never conflict with its claims (one actor; it may hold overlapping
///   leases of its own, e.g. to narrow a claim before releasing the wide one).
/// - `Ok(())`: grantable.
///
/// Errors (the outer result): the agent already holds [`MAX_LEASES_PER_AGENT`] live leases →
/// [`BusError::Conflict`].
pub fn decide_acquire(
    agent: Uuid,
    claim: &LeaseClaim,
    live: &[Lease],
    at: DateTime<Utc>,
) -> BusResult<Result<(), Vec<Lease>>> {
    let live: Vec<&Lease> = live.iter().filter(|l| l.is_live(at)).collect();
    let mut conflicts: Vec<Lease> = live
        .iter()
        .filter(|l| l.agent != agent && l.claim.conflicts_with(claim))
        .map(|l| (*l).clone())
        .collect();
    if !conflicts.is_empty() {
        conflicts.sort_by_key(|l| l.token);
        return Ok(Err(conflicts));
    }
    let own = live.iter().filter(|l| l.agent == agent).count();
    if own >= MAX_LEASES_PER_AGENT {
        return Err(BusError::conflict(format!(
            "the agent already holds {MAX_LEASES_PER_AGENT} leases: release some first"
        )));
    }
    Ok(Ok(()))
}

/// How a release at `at` ends `lease`: `None` when it already ended (nothing to write); an
/// expiry at its `expires_at` when it lapsed unrecorded; else released at `at`.
pub fn release_ending(lease: &Lease, at: DateTime<Utc>) -> Option<LeaseEnding> {
    if lease.ended.is_some() {
        return None;
    }
    Some(if lease.is_live(at) {
        LeaseEnding {
            at,
            reason: LeaseEnd::Released,
        }
    } else {
        LeaseEnding {
            at: lease.expires_at,
            reason: LeaseEnd::Expired,
        }
    })
}

/// Checks that `lease` (found in `team`) may be renewed or released by `agent` at `at`:
/// `agent` `None` is an operator (any holder). Errors: another agent's lease →
/// [`BusError::NotFound`] (another holder's lease ids are not confirmed to the caller); for a
/// renewal (`renewing`), a lease that ended or lapsed → [`BusError::Conflict`].
pub fn check_lease_change(
    lease: &Lease,
    agent: Option<Uuid>,
    renewing: bool,
    at: DateTime<Utc>,
) -> BusResult<()> {
    if agent.is_some_and(|a| a != lease.agent) {
        return Err(BusError::not_found(format!("lease {}", lease.id)));
    }
    if renewing && !lease.is_live(at) {
        return Err(BusError::conflict(format!(
            "lease {} has ended or lapsed: acquire it again",
            lease.id
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::LeaseMode;
    use chrono::TimeZone;

    fn t(s: i64) -> DateTime<Utc> {
        Utc.timestamp_opt(1_800_000_000 + s, 0).unwrap()
    }

    fn lease(agent: Uuid, pattern: &str, mode: LeaseMode, token: u64, expires: i64) -> Lease {
        Lease {
            id: Uuid::new_v4(),
            team: Uuid::nil(),
            agent,
            agent_name: "a".into(),
            claim: LeaseClaim {
                pattern: pattern.parse().unwrap(),
                mode,
            },
            token: FencingToken(token),
            run: None,
            acquired_at: t(0),
            expires_at: t(expires),
            ended: None,
        }
    }

    fn claim(pattern: &str, mode: LeaseMode) -> LeaseClaim {
        LeaseClaim {
            pattern: pattern.parse().unwrap(),
            mode,
        }
    }

    #[test]
    fn conflicts_are_other_agents_live_overlapping_leases_by_token() {
        let (me, other) = (Uuid::new_v4(), Uuid::new_v4());
        let live = vec![
            lease(other, "src/**", LeaseMode::Exclusive, 7, 60),
            lease(other, "src/a.rs", LeaseMode::Shared, 3, 60),
            lease(other, "docs/**", LeaseMode::Exclusive, 4, 60),
            lease(other, "src/b.rs", LeaseMode::Exclusive, 5, 10), // lapsed at t(20)
            lease(me, "src/a.rs", LeaseMode::Exclusive, 6, 60),
        ];
        let got = decide_acquire(me, &claim("src/a.rs", LeaseMode::Exclusive), &live, t(20))
            .unwrap()
            .unwrap_err();
        let tokens: Vec<u64> = got.iter().map(|l| l.token.0).collect();
        assert_eq!(tokens, vec![3, 7]);
        // Shared beside shared is fine; beside the exclusive `src/**` it is not.
        let got =
            decide_acquire(me, &claim("src/a.rs", LeaseMode::Shared), &live[1..], t(20)).unwrap();
        assert_eq!(got, Ok(()));
    }

    #[test]
    fn an_agent_at_its_limit_is_refused_with_conflict() {
        let me = Uuid::new_v4();
        let live: Vec<Lease> = (0..MAX_LEASES_PER_AGENT as u64)
            .map(|i| lease(me, &format!("f{i}"), LeaseMode::Exclusive, i + 1, 60))
            .collect();
        let got = decide_acquire(me, &claim("g", LeaseMode::Exclusive), &live, t(1));
        assert!(matches!(got, Err(BusError::Conflict { .. })));
        // Once one lapses there is room again.
        let mut live = live;
        live[0].expires_at = t(1);
        let got = decide_acquire(me, &claim("g", LeaseMode::Exclusive), &live, t(1)).unwrap();
        assert_eq!(got, Ok(()));
    }

    #[test]
    fn a_lease_fences_only_its_holder_token_live_and_covered_paths() {
        let me = Uuid::new_v4();
        let l = lease(me, "src/**", LeaseMode::Exclusive, 9, 60);
        assert!(l.fences(me, FencingToken(9), "src/x/y.rs", t(59)));
        assert!(
            !l.fences(me, FencingToken(9), "src/x/y.rs", t(60)),
            "lapsed"
        );
        assert!(
            !l.fences(me, FencingToken(8), "src/x/y.rs", t(1)),
            "stale token"
        );
        assert!(
            !l.fences(Uuid::new_v4(), FencingToken(9), "src/a", t(1)),
            "not the holder"
        );
        assert!(
            !l.fences(me, FencingToken(9), "docs/a", t(1)),
            "not covered"
        );
        let mut ended = l.clone();
        ended.ended = Some(LeaseEnding {
            at: t(5),
            reason: LeaseEnd::Released,
        });
        assert!(!ended.fences(me, FencingToken(9), "src/a", t(6)));
    }

    #[test]
    fn changes_check_holder_and_liveness() {
        let me = Uuid::new_v4();
        let l = lease(me, "a", LeaseMode::Shared, 1, 10);
        assert!(check_lease_change(&l, Some(me), true, t(5)).is_ok());
        assert!(check_lease_change(&l, None, true, t(5)).is_ok());
        assert!(matches!(
            check_lease_change(&l, Some(Uuid::new_v4()), false, t(5)),
            Err(BusError::NotFound { .. })
        ));
        assert!(matches!(
            check_lease_change(&l, Some(me), true, t(10)),
            Err(BusError::Conflict { .. })
        ));
        assert!(check_lease_change(&l, Some(me), false, t(10)).is_ok());
    }

    #[test]
    fn ttl_bounds_and_end_names() {
        assert!(validate_lease_ttl(Duration::from_secs(30)).is_ok());
        assert!(matches!(
            validate_lease_ttl(Duration::ZERO),
            Err(BusError::Invalid { .. })
        ));
        assert!(matches!(
            validate_lease_ttl(Duration::from_secs(86_401)),
            Err(BusError::Invalid { .. })
        ));
        for e in [
            LeaseEnd::Released,
            LeaseEnd::Expired,
            LeaseEnd::Revoked,
            LeaseEnd::RunSealed,
        ] {
            assert_eq!(LeaseEnd::from_name(e.as_str()), Some(e));
        }
        assert_eq!(LeaseEnd::from_name("gone"), None);
    }

    #[test]
    fn filter_admits_by_agent_and_overlap() {
        let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
        let l = lease(a, "src/**", LeaseMode::Shared, 1, 10);
        assert!(LeaseFilter::default().admits(&l));
        assert!(
            LeaseFilter {
                agent: Some(a),
                overlapping: None
            }
            .admits(&l)
        );
        assert!(
            !LeaseFilter {
                agent: Some(b),
                overlapping: None
            }
            .admits(&l)
        );
        let docs: LeasePattern = "docs/*".parse().unwrap();
        let src: LeasePattern = "src/x".parse().unwrap();
        assert!(
            !LeaseFilter {
                agent: None,
                overlapping: Some(docs)
            }
            .admits(&l)
        );
        assert!(
            LeaseFilter {
                agent: Some(a),
                overlapping: Some(src)
            }
            .admits(&l)
        );
    }
}
