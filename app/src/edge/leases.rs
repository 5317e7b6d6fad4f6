//! Leases' request and answer types, shared by the HTTP routes (`/v1/leases…`) and the MCP
//! lease tools: an agent's fenced, expiring claims on path patterns, and the parsing of a claim
//! ([`claim_of`]).

use chrono::{DateTime, Utc};
use crewbus_domain::{
    Acquired, Lease, LeaseClaim, LeaseEnd, LeaseEvent, LeaseEventKind, LeaseFilter, LeaseMode,
    LeasePattern, Uuid,
};
use serde::{Deserialize, Serialize};
use std::time::Duration;
use utoipa::{IntoParams, ToSchema};

use super::fields::{by_name, whole};

// The lease views' JSON Schema `pattern`s are the domain's rules (`LeasePattern::parse`,
// `validate_lease_path`) as ECMA-262 regexes: 1 to 32 `/`-separated segments, each `**` or a run
// of allowed characters and single `*`s (a path: no `*`), no `.`/`..` segment, none of
// `?[]{}\` or a control character (`char::is_control`: U+0000–U+001F, U+007F–U+009F). With
// `maxLength` 512 (characters) they admit exactly what the bus accepts (schemathesis, in
// scripts/probes, finds any difference).

/// The largest fencing token a ledger stores (`i64::MAX`); a larger one is `invalid`.
pub(crate) const MAX_FENCING_TOKEN: u64 = i64::MAX as u64;

/// How a lease holds its pattern.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum LeaseModeView {
    /// No other agent may hold an overlapping pattern, in either mode.
    Exclusive,
    /// Other agents may hold overlapping shared leases; none an exclusive one.
    Shared,
}

/// Read from its name ([`by_name`]): `null` or a number is a data error naming the field.
impl<'de> Deserialize<'de> for LeaseModeView {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        by_name(d, &["exclusive", "shared"], |name| match name {
            "exclusive" => Some(LeaseModeView::Exclusive),
            "shared" => Some(LeaseModeView::Shared),
            _ => None,
        })
    }
}

impl From<LeaseModeView> for LeaseMode {
    fn from(m: LeaseModeView) -> Self {
        match m {
            LeaseModeView::Exclusive => LeaseMode::Exclusive,
            LeaseModeView::Shared => LeaseMode::Shared,
        }
    }
}

impl From<LeaseMode> for LeaseModeView {
    fn from(m: LeaseMode) -> Self {
        match m {
            LeaseMode::Exclusive => LeaseModeView::Exclusive,
            LeaseMode::Shared => LeaseModeView::Shared,
        }
    }
}

fn exclusive() -> LeaseModeView {
    LeaseModeView::Exclusive
}

/// Why a lease ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum LeaseEndView {
    /// Released by its holder or an operator.
    Released,
    /// Its TTL passed without a renewal.
    Expired,
    /// Its agent was revoked.
    Revoked,
    /// The run that took it was sealed.
    RunSealed,
}

impl From<LeaseEnd> for LeaseEndView {
    fn from(e: LeaseEnd) -> Self {
        match e {
            LeaseEnd::Released => LeaseEndView::Released,
            LeaseEnd::Expired => LeaseEndView::Expired,
            LeaseEnd::Revoked => LeaseEndView::Revoked,
            LeaseEnd::RunSealed => LeaseEndView::RunSealed,
        }
    }
}

/// One lease.
#[derive(Debug, Serialize, ToSchema)]
pub struct LeaseView {
    /// Lease id (renew and release name it).
    pub id: Uuid,
    /// Team id.
    pub team: Uuid,
    /// The agent holding it.
    pub agent: Uuid,
    /// That agent's name.
    pub agent_name: String,
    /// The pattern claimed (`/`-separated segments; `*` within a segment, `**` any segments).
    pub pattern: String,
    /// How it is held.
    pub mode: LeaseModeView,
    /// The fencing token: greater for every later grant in the team. A resource that remembers
    /// the greatest token it accepted refuses a lower one.
    pub fencing_token: u64,
    /// The run that took it, if one did (its grant, renewals and end are that run's records).
    pub run: Option<Uuid>,
    /// When it was granted.
    pub acquired_at: DateTime<Utc>,
    /// When it lapses unless renewed.
    pub expires_at: DateTime<Utc>,
    /// When it ended; absent while it has not.
    pub ended_at: Option<DateTime<Utc>>,
    /// Why it ended; absent while it has not.
    pub end_reason: Option<LeaseEndView>,
}

impl From<Lease> for LeaseView {
    fn from(l: Lease) -> Self {
        LeaseView {
            id: l.id,
            team: l.team,
            agent: l.agent,
            agent_name: l.agent_name,
            pattern: l.claim.pattern.to_string(),
            mode: l.claim.mode.into(),
            fencing_token: l.token.0,
            run: l.run.map(|r| r.0),
            acquired_at: l.acquired_at,
            expires_at: l.expires_at,
            ended_at: l.ended.map(|e| e.at),
            end_reason: l.ended.map(|e| e.reason.into()),
        }
    }
}

/// Acquire a lease.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AcquireLease {
    /// The pattern to claim, e.g. `src/auth/**`, `docs/*.md`, `Cargo.toml`: `/`-separated
    /// segments, `*` matches within one segment, a `**` segment any number of segments;
    /// `?`, `[`, `]`, `{`, `}`, `\`, `.`/`..` segments and empty segments are refused. At most
    /// 512 characters and 32 segments. Case-sensitive.
    #[schema(
        min_length = 1,
        max_length = 512,
        pattern = "^(?:\\*\\*|(?!\\.{1,2}(?:/|$))(?:[^/?\\[\\]{}\\\\*\\u0000-\\u001f\\u007f-\\u009f]|\\*(?!\\*))+)(?:/(?:\\*\\*|(?!\\.{1,2}(?:/|$))(?:[^/?\\[\\]{}\\\\*\\u0000-\\u001f\\u007f-\\u009f]|\\*(?!\\*))+)){0,31}$"
    )]
    pub pattern: String,
    /// `exclusive` (default) or `shared`.
    #[serde(default = "exclusive")]
    pub mode: LeaseModeView,
    /// How long the lease holds unless renewed, ms (1 000 to `bus.lease_max_ttl_ms`, 1 h by
    /// default). Default `bus.lease_default_ttl_ms` (5 min).
    #[serde(default, deserialize_with = "whole::some_u64")]
    #[schema(value_type = u64, minimum = 1000)]
    pub ttl_ms: Option<u64>,
    /// Wait up to this long for conflicting leases to end, ms (0 to `bus.max_wait_ms`).
    /// Default 0: answer at once.
    #[serde(default, deserialize_with = "whole::u64")]
    #[schema(minimum = 0)]
    pub wait_ms: u64,
    /// The caller's open run to record the lease in (grant, renewals, end). Default none.
    #[serde(default)]
    pub run: Option<Uuid>,
}

/// What an acquire answers: the lease granted, or the leases of other agents in the way.
#[derive(Debug, Serialize, ToSchema)]
pub struct AcquireView {
    /// Whether the lease was granted.
    pub granted: bool,
    /// The lease, when granted.
    pub lease: Option<LeaseView>,
    /// The conflicting leases of other agents (holder, pattern, expiry), by token; empty when
    /// granted.
    pub conflicts: Vec<LeaseView>,
}

impl From<Acquired> for AcquireView {
    fn from(a: Acquired) -> Self {
        match a {
            Acquired::Granted(l) => AcquireView {
                granted: true,
                lease: Some(l.into()),
                conflicts: Vec::new(),
            },
            Acquired::Conflict(c) => AcquireView {
                granted: false,
                lease: None,
                conflicts: c.into_iter().map(Into::into).collect(),
            },
        }
    }
}

/// Renew a lease.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RenewLease {
    /// The new TTL from now, ms (1 000 to `bus.lease_max_ttl_ms`). Default
    /// `bus.lease_default_ttl_ms`.
    #[serde(default, deserialize_with = "whole::some_u64")]
    #[schema(value_type = u64, minimum = 1000)]
    pub ttl_ms: Option<u64>,
}

/// Which leases a listing returns (the query string).
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct LeasesQuery {
    /// Only this agent's leases (an agent id). Default: every agent's.
    #[serde(default)]
    pub agent: Option<Uuid>,
    /// Only leases whose pattern overlaps this one. Default: all.
    #[serde(default)]
    #[param(
        min_length = 1,
        max_length = 512,
        pattern = "^(?:\\*\\*|(?!\\.{1,2}(?:/|$))(?:[^/?\\[\\]{}\\\\*\\u0000-\\u001f\\u007f-\\u009f]|\\*(?!\\*))+)(?:/(?:\\*\\*|(?!\\.{1,2}(?:/|$))(?:[^/?\\[\\]{}\\\\*\\u0000-\\u001f\\u007f-\\u009f]|\\*(?!\\*))+)){0,31}$"
    )]
    pub overlapping: Option<String>,
}

impl LeasesQuery {
    /// The filter. Errors: a bad pattern → `Invalid`.
    pub fn filter(&self) -> crewbus_domain::BusResult<LeaseFilter> {
        Ok(LeaseFilter {
            agent: self.agent,
            overlapping: self
                .overlapping
                .as_deref()
                .map(LeasePattern::parse)
                .transpose()?,
        })
    }
}

/// The live leases of a team, by token.
#[derive(Debug, Serialize, ToSchema)]
pub struct LeasesView {
    /// At most 1000 leases.
    pub leases: Vec<LeaseView>,
}

/// One entry of a lease's history.
#[derive(Debug, Serialize, ToSchema)]
pub struct LeaseEventView {
    /// Position in the lease's history, from 1.
    pub seq: u64,
    /// When.
    pub at: DateTime<Utc>,
    /// `granted`, `renewed` or `ended`.
    pub kind: String,
    /// The expiry it set (`granted`, `renewed`).
    pub expires_at: Option<DateTime<Utc>>,
    /// Why it ended (`ended`).
    pub reason: Option<LeaseEndView>,
}

impl From<LeaseEvent> for LeaseEventView {
    fn from(e: LeaseEvent) -> Self {
        let (kind, expires_at, reason) = match e.kind {
            LeaseEventKind::Granted { expires_at, .. } => ("granted", Some(expires_at), None),
            LeaseEventKind::Renewed { expires_at } => ("renewed", Some(expires_at), None),
            LeaseEventKind::Ended { reason } => ("ended", None, Some(reason.into())),
        };
        LeaseEventView {
            seq: e.seq,
            at: e.at,
            kind: kind.to_owned(),
            expires_at,
            reason,
        }
    }
}

/// A lease with its whole history.
#[derive(Debug, Serialize, ToSchema)]
pub struct LeaseHistoryView {
    /// The lease as it stands.
    pub lease: LeaseView,
    /// Its grant, renewals and end, in order.
    pub events: Vec<LeaseEventView>,
}

/// Check that the caller holds a path.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CheckLease {
    /// A concrete path (no `*`), as a pattern would cover it, e.g. `src/auth/token.rs`.
    #[schema(
        min_length = 1,
        max_length = 512,
        pattern = "^(?!\\.{1,2}(?:/|$))[^/?\\[\\]{}\\\\*\\u0000-\\u001f\\u007f-\\u009f]+(?:/(?!\\.{1,2}(?:/|$))[^/?\\[\\]{}\\\\*\\u0000-\\u001f\\u007f-\\u009f]+){0,31}$"
    )]
    pub path: String,
    /// The fencing token to check: true only if it is the caller's live lease covering `path`.
    /// Default: any live lease of the caller's covering `path`.
    #[serde(default, deserialize_with = "whole::some_u64")]
    #[schema(value_type = u64, minimum = 1, maximum = 9223372036854775807_u64)]
    pub fencing_token: Option<u64>,
}

/// What a check answers.
#[derive(Debug, Serialize, ToSchema)]
pub struct CheckView {
    /// Whether the caller holds `path` now (with the token given, when one was).
    pub held: bool,
    /// The lease that holds it.
    pub lease: Option<LeaseView>,
}

/// The claim of an acquire. Errors: a bad pattern → `Invalid`.
pub(crate) fn claim_of(
    pattern: &str,
    mode: LeaseModeView,
) -> crewbus_domain::BusResult<LeaseClaim> {
    Ok(LeaseClaim {
        pattern: LeasePattern::parse(pattern)?,
        mode: mode.into(),
    })
}

/// A TTL in ms as a duration.
pub(crate) fn ms(ms: Option<u64>) -> Option<Duration> {
    ms.map(Duration::from_millis)
}
