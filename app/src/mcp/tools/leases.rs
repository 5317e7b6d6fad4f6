//! The lease tools' arguments and their calls: `acquire_lease`, `renew_lease`,
//! `release_lease`, `list_leases`, `check_lease` — the same use cases as `/v1/leases`, rendered
//! with the HTTP views.

use std::time::Duration;

use crewbus_domain::{
    Agent, BusError, BusResult, FencingToken, LeaseFilter, LeasePattern, RunId, Uuid,
};
use serde::Deserialize;
use utoipa::ToSchema;

use crate::edge::leases::{AcquireView, CheckView, LeaseModeView, LeaseView, LeasesView, claim_of};
use crate::mcp::views::MAX_WAIT_SECONDS;
use crate::usecases::bus::Bus;

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

impl AcquireLeaseArguments {
    /// The wait the call may take beyond the request deadline (0 to [`MAX_WAIT_SECONDS`]).
    pub(super) fn wait_of(arguments: &rmcp::model::JsonObject) -> Duration {
        let wait = arguments
            .get("wait_seconds")
            .and_then(serde_json::Value::as_u64)
            .unwrap_or(0)
            .min(MAX_WAIT_SECONDS);
        Duration::from_secs(wait)
    }
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

/// `acquire_lease`.
pub(super) async fn acquire(
    bus: &Bus,
    agent: &Agent,
    a: AcquireLeaseArguments,
) -> BusResult<AcquireView> {
    if a.wait_seconds > MAX_WAIT_SECONDS {
        return Err(BusError::invalid(format!(
            "wait_seconds must be between 0 and {MAX_WAIT_SECONDS}"
        )));
    }
    let claim = claim_of(&a.pattern, a.mode)?;
    let answer = bus
        .acquire_lease(
            agent,
            &claim,
            seconds(a.ttl_seconds),
            a.run.map(RunId),
            Duration::from_secs(a.wait_seconds),
        )
        .await?;
    Ok(answer.into())
}

/// `renew_lease`.
pub(super) async fn renew(
    bus: &Bus,
    agent: &Agent,
    a: RenewLeaseArguments,
) -> BusResult<LeaseView> {
    Ok(bus
        .renew_lease(agent, a.lease_id, seconds(a.ttl_seconds))
        .await?
        .into())
}

/// `release_lease`.
pub(super) async fn release(
    bus: &Bus,
    agent: &Agent,
    a: ReleaseLeaseArguments,
) -> BusResult<LeaseView> {
    Ok(bus.release_lease(agent, a.lease_id).await?.into())
}

/// `list_leases`.
pub(super) async fn list(
    bus: &Bus,
    agent: &Agent,
    a: ListLeasesArguments,
) -> BusResult<LeasesView> {
    let filter = LeaseFilter {
        agent: a.mine.then_some(agent.id),
        overlapping: a
            .overlapping
            .as_deref()
            .map(LeasePattern::parse)
            .transpose()?,
    };
    Ok(LeasesView {
        leases: bus
            .leases_for(agent, &filter)
            .await?
            .into_iter()
            .map(Into::into)
            .collect(),
    })
}

/// `check_lease`.
pub(super) async fn check(
    bus: &Bus,
    agent: &Agent,
    a: CheckLeaseArguments,
) -> BusResult<CheckView> {
    let held = bus
        .check_lease(agent, a.fencing_token.map(FencingToken), &a.path)
        .await?;
    Ok(CheckView {
        held: held.is_some(),
        lease: held.map(Into::into),
    })
}
