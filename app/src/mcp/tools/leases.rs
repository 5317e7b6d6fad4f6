//! The lease tools: `acquire_lease`, `renew_lease`, `release_lease`, `list_leases`,
//! `check_lease` — the same use cases as `/v1/leases`, rendered with the HTTP views.

use std::time::Duration;

use crewbus_domain::{BusError, BusResult, FencingToken, LeaseFilter, LeasePattern, RunId, Uuid};
use serde::Deserialize;
use utoipa::ToSchema;

use super::{Call, Declared, Effect, Reply, Tool, declare, reply};
use crate::edge::leases::{AcquireView, CheckView, LeaseModeView, LeaseView, LeasesView, claim_of};
use crate::mcp::views::MAX_WAIT_SECONDS;

pub(super) const TOOLS: &[Declared] = &[
    declare::<AcquireLease>(),
    declare::<RenewLease>(),
    declare::<ReleaseLease>(),
    declare::<ListLeases>(),
    declare::<CheckLease>(),
];

/// `acquire_lease`.
struct AcquireLease;

impl Tool for AcquireLease {
    const NAME: &'static str = "acquire_lease";
    const TITLE: &'static str = "Acquire a lease";
    const DESCRIPTION: &'static str = "Claims paths of the shared work (files, directories, \
        tasks) before you change them, so teammates do not edit them at the same time: a lease on \
        a pattern such as `src/auth/**`, exclusive (default) or shared, for `ttl_seconds`. Answers \
        `granted: true` with the lease, or `granted: false` with the `conflicts` (who holds what, \
        until when); nothing is taken then. With `wait_seconds` it waits that long for the \
        conflicts to be released or expire. Keep the lease's `id` to renew or release it, and its \
        `fencing_token` to prove you still hold it (check_lease). Release it when done; it expires \
        by itself otherwise, and ends when the run you passed as `run` is sealed. There is no \
        request id: if an answer is lost, look at list_leases with `mine: true` before acquiring \
        again (your own leases never conflict with your claims, so a retry would take a second \
        lease).";
    const CORE: Option<&'static str> = Some(
        "Claims a path pattern (e.g. src/auth/**) before you edit it: exclusive (default) or \
        shared, for ttl_seconds. Returns {granted, lease, conflicts}; granted false lists who \
        holds what (wait_seconds waits for them). Keep lease.id to renew or release and \
        lease.fencing_token for check_lease. No request id: after a lost answer, list_leases with \
        mine: true before trying again.",
    );
    const EFFECT: Effect = Effect::Additive;
    type Arguments = AcquireLeaseArguments;
    type Answer = AcquireView;

    /// The wait asked for (0 to [`MAX_WAIT_SECONDS`]).
    fn extra_wait(a: &AcquireLeaseArguments) -> Duration {
        Duration::from_secs(a.wait_seconds.min(MAX_WAIT_SECONDS))
    }

    async fn run(call: Call<'_>, a: AcquireLeaseArguments) -> BusResult<Reply<AcquireView>> {
        if a.wait_seconds > MAX_WAIT_SECONDS {
            return Err(BusError::invalid(format!(
                "wait_seconds must be between 0 and {MAX_WAIT_SECONDS}"
            )));
        }
        let claim = claim_of(&a.pattern, a.mode)?;
        let answer = call
            .bus
            .acquire_lease(
                call.agent,
                &claim,
                seconds(a.ttl_seconds),
                a.run.map(RunId),
                Duration::from_secs(a.wait_seconds),
            )
            .await?;
        reply(AcquireView::from(answer))
    }
}

/// `renew_lease`.
struct RenewLease;

impl Tool for RenewLease {
    const NAME: &'static str = "renew_lease";
    const TITLE: &'static str = "Renew a lease";
    const DESCRIPTION: &'static str = "Extends one of your live leases: it now expires \
        `ttl_seconds` from now (its fencing token stays). Renew well before it expires; an expired \
        or released lease cannot be renewed (conflict): acquire it again, with a new fencing \
        token. Returns the lease.";
    const CORE: Option<&'static str> = Some(
        "Extends your live lease to ttl_seconds from now, same fencing_token. An expired or \
        released lease is a conflict: acquire again. Returns the lease {id, pattern, mode, \
        expires_at, fencing_token}.",
    );
    const EFFECT: Effect = Effect::Idempotent;
    type Arguments = RenewLeaseArguments;
    type Answer = LeaseView;

    async fn run(call: Call<'_>, a: RenewLeaseArguments) -> BusResult<Reply<LeaseView>> {
        let lease = call
            .bus
            .renew_lease(call.agent, a.lease_id, seconds(a.ttl_seconds))
            .await?;
        reply(LeaseView::from(lease))
    }
}

/// `release_lease`.
struct ReleaseLease;

impl Tool for ReleaseLease {
    const NAME: &'static str = "release_lease";
    const TITLE: &'static str = "Release a lease";
    const DESCRIPTION: &'static str = "Gives up one of your leases so others waiting for it get \
        it. Releasing again is harmless (the lease comes back as it ended). Returns the lease.";
    const CORE: Option<&'static str> =
        Some("Releases your lease so others can take it; again is harmless. Returns the lease.");
    const EFFECT: Effect = Effect::Idempotent;
    type Arguments = ReleaseLeaseArguments;
    type Answer = LeaseView;

    async fn run(call: Call<'_>, a: ReleaseLeaseArguments) -> BusResult<Reply<LeaseView>> {
        reply(LeaseView::from(
            call.bus.release_lease(call.agent, a.lease_id).await?,
        ))
    }
}

/// `list_leases`.
struct ListLeases;

impl Tool for ListLeases {
    const NAME: &'static str = "list_leases";
    const TITLE: &'static str = "List leases";
    const DESCRIPTION: &'static str = "Lists the team's live leases (holder, pattern, mode, \
        expiry), oldest first: all, only yours (`mine`), or those overlapping a pattern or path \
        you are about to touch (`overlapping`). Returns {\"leases\": [...]}.";
    const CORE: Option<&'static str> = Some(
        "Lists the team's live leases, oldest first: all, yours (mine: true), or those \
        overlapping a pattern or path. Returns {leases: [{id, agent_name, pattern, mode, \
        expires_at, fencing_token}]}.",
    );
    const EFFECT: Effect = Effect::ReadOnly;
    type Arguments = ListLeasesArguments;
    type Answer = LeasesView;

    async fn run(call: Call<'_>, a: ListLeasesArguments) -> BusResult<Reply<LeasesView>> {
        let filter = LeaseFilter {
            agent: a.mine.then_some(call.agent.id),
            overlapping: a
                .overlapping
                .as_deref()
                .map(LeasePattern::parse)
                .transpose()?,
        };
        reply(LeasesView {
            leases: call
                .bus
                .leases_for(call.agent, &filter)
                .await?
                .into_iter()
                .map(Into::into)
                .collect(),
        })
    }
}

/// `check_lease`.
struct CheckLease;

impl Tool for CheckLease {
    const NAME: &'static str = "check_lease";
    const TITLE: &'static str = "Check a lease";
    const DESCRIPTION: &'static str = "Checks, before you write a path, that you still hold it: \
        with `fencing_token`, that this lease of yours is still live and covers `path` (a lease \
        that expired while you were paused, or was taken over, answers `held: false`: stop and \
        acquire again). Returns {\"held\", \"lease\"}.";
    const CORE: Option<&'static str> = Some(
        "Before writing path, checks that your lease with fencing_token is still live and covers \
        it. Returns {held, lease}; held false: stop and acquire again.",
    );
    const EFFECT: Effect = Effect::ReadOnly;
    type Arguments = CheckLeaseArguments;
    type Answer = CheckView;

    async fn run(call: Call<'_>, a: CheckLeaseArguments) -> BusResult<Reply<CheckView>> {
        let held = call
            .bus
            .check_lease(call.agent, a.fencing_token.map(FencingToken), &a.path)
            .await?;
        reply(CheckView {
            held: held.is_some(),
            lease: held.map(Into::into),
        })
    }
}

fn exclusive() -> LeaseModeView {
    LeaseModeView::Exclusive
}

/// `acquire_lease`'s arguments.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AcquireLeaseArguments {
    /// The paths to claim, e.g. `src/auth/**` (everything under src/auth), `docs/*.md`,
    /// `Cargo.toml`: `/`-separated segments; `*` matches within one segment; a `**` segment
    /// matches any number of segments. `?`, `[`, `]`, `{`, `}`, `\`, `.` and `..` segments are
    /// refused. Case-sensitive, at most 512 characters.
    #[schema(min_length = 1, max_length = 512)]
    pub pattern: String,
    /// `exclusive` (nobody else may hold an overlapping pattern; the default) or `shared`
    /// (others may share it, nobody may hold it exclusively).
    #[serde(default = "exclusive")]
    pub mode: LeaseModeView,
    /// How long the lease holds unless renewed, in seconds (at least 1; at most the server's
    /// maximum, 3600 by default). Default the server's (300).
    #[serde(default)]
    #[schema(minimum = 1)]
    pub ttl_seconds: Option<u64>,
    /// Wait up to this many seconds (0 to 50) for conflicting leases to be released or to
    /// expire. Default 0: answer at once.
    #[serde(default)]
    #[schema(minimum = 0, maximum = 50)]
    pub wait_seconds: u64,
    /// Your open run (from start_run) to record the lease in. Default none.
    #[serde(default)]
    pub run: Option<Uuid>,
}

/// `renew_lease`'s arguments.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RenewLeaseArguments {
    /// The lease id (from acquire_lease).
    pub lease_id: Uuid,
    /// The new TTL from now, in seconds (at least 1). Default the server's (300).
    #[serde(default)]
    #[schema(minimum = 1)]
    pub ttl_seconds: Option<u64>,
}

/// `release_lease`'s arguments.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReleaseLeaseArguments {
    /// The lease id (from acquire_lease).
    pub lease_id: Uuid,
}

/// `list_leases`'s arguments.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ListLeasesArguments {
    /// Only your own leases. Default false: the whole team's.
    #[serde(default)]
    pub mine: bool,
    /// Only leases whose pattern overlaps this one (e.g. a path you are about to edit).
    /// Default: all.
    #[serde(default)]
    pub overlapping: Option<String>,
}

/// `check_lease`'s arguments.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CheckLeaseArguments {
    /// A concrete path (no `*`), e.g. `src/auth/token.rs`.
    #[schema(min_length = 1, max_length = 512)]
    pub path: String,
    /// The fencing token of the lease you believe you hold (acquire_lease's `fencing_token`):
    /// held only if that lease is still yours, live and covering `path`. Default: any live
    /// lease of yours covering it.
    #[serde(default)]
    pub fencing_token: Option<u64>,
}

fn seconds(s: Option<u64>) -> Option<Duration> {
    s.map(Duration::from_secs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_acquire_may_take_its_wait_at_most_fifty_seconds() {
        let wait = |wait_seconds| {
            AcquireLease::extra_wait(&AcquireLeaseArguments {
                pattern: "src/**".into(),
                mode: LeaseModeView::Exclusive,
                ttl_seconds: None,
                wait_seconds,
                run: None,
            })
        };
        assert_eq!(wait(0), Duration::ZERO);
        assert_eq!(wait(7), Duration::from_secs(7));
        assert_eq!(wait(500), Duration::from_secs(MAX_WAIT_SECONDS));
    }
}
