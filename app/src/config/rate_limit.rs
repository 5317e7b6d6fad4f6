//! The `[rate_limit]` section: a send rate limit per agent (a token bucket; see
//! `crewbus_domain::TokenBucket`), with per-team overrides.
//!
//! Off by default: a bus that never configured a limit keeps its behaviour (and its throughput).
//! When on, every message an agent sends (HTTP `POST /v1/conversations/{id}/messages`, MCP
//! `send_message`) takes one token of that agent's bucket; over it the send is refused with
//! `rate_limited` (HTTP `429` + `Retry-After`) before anything is recorded.
//!
//! Across servers: on Postgres each agent's bucket is one row of the ledger
//! (`SendAllowance`), shared by every server; a server leases `chunk` tokens from it at a time
//! and counts its sends against them, so a send writes nothing more. Tolerance: in any window of
//! `t` seconds an agent sends at most `burst + servers × chunk + rate × t`. A store one server
//! holds (SQLite, memory) keeps exact buckets in that server.

use std::collections::BTreeMap;

use crewbus_domain::{BusError, BusResult, RateLimit, Uuid};
use serde::Deserialize;

/// `[rate_limit]`: whether sends are limited, the default bucket, and overrides per team id.
///
/// ```toml
/// [rate_limit]
/// enabled = true
/// rate_per_second = 20   # tokens (messages) refilled per second, per agent
/// burst = 40             # most messages sent at once
/// chunk = 10             # tokens a server leases from the shared bucket at a time (Postgres)
/// [rate_limit.teams."0b6f…team id…"]
/// rate_per_second = 200
/// burst = 400
/// ```
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct RateLimitConfig {
    /// Whether sends are rate limited at all. Default `false`.
    pub enabled: bool,
    /// Tokens (messages) added to each agent's bucket per second. At least 1. Default 50.
    pub rate_per_second: u32,
    /// Most tokens an agent's bucket holds: the largest burst of sends. At least 1. Default 100.
    pub burst: u32,
    /// Tokens a server leases at a time from an agent's bucket in a shared ledger (Postgres;
    /// cut to a team's burst when larger): the slack per server of the limit across servers
    /// (see the module docs). 1 to 10 000. Default 10.
    pub chunk: u32,
    /// Per-team overrides of `rate_per_second` and `burst`, keyed by team id (both keys
    /// required in an override). Only read when `enabled`.
    pub teams: BTreeMap<Uuid, TeamRateLimit>,
}

/// One team's override (`[rate_limit.teams."<team id>"]`).
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct TeamRateLimit {
    /// Tokens per second for each agent of the team. At least 1.
    pub rate_per_second: u32,
    /// Bucket size for each agent of the team. At least 1.
    pub burst: u32,
}

impl Default for RateLimitConfig {
    fn default() -> Self {
        RateLimitConfig {
            enabled: false,
            rate_per_second: 50,
            burst: 100,
            chunk: 10,
            teams: BTreeMap::new(),
        }
    }
}

impl RateLimitConfig {
    /// Checks every limit. Errors: a rate or burst of 0 (default or a team's) → `Invalid`.
    pub fn validate(&self) -> BusResult<()> {
        self.default_limit().validate()?;
        if !(1..=10_000).contains(&self.chunk) {
            return Err(BusError::invalid(
                "rate_limit.chunk must be 1 to 10000 tokens",
            ));
        }
        for (team, t) in &self.teams {
            RateLimit {
                rate_per_second: t.rate_per_second,
                burst: t.burst,
            }
            .validate()
            .map_err(|e| BusError::invalid(format!("rate_limit.teams.\"{team}\": {e}")))?;
        }
        Ok(())
    }

    fn default_limit(&self) -> RateLimit {
        RateLimit {
            rate_per_second: self.rate_per_second,
            burst: self.burst,
        }
    }

    /// The limits the bus applies: `None` when off.
    pub fn settings(&self) -> Option<RateLimits> {
        self.enabled.then(|| RateLimits {
            default: self.default_limit(),
            chunk: self.chunk,
            teams: self
                .teams
                .iter()
                .map(|(team, t)| {
                    (
                        *team,
                        RateLimit {
                            rate_per_second: t.rate_per_second,
                            burst: t.burst,
                        },
                    )
                })
                .collect(),
        })
    }
}

/// The send rate limits in force: the default and the teams' overrides.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RateLimits {
    /// Every agent's bucket unless its team overrides it.
    pub default: RateLimit,
    /// Overrides by team id.
    pub teams: BTreeMap<Uuid, RateLimit>,
    /// Tokens leased at a time from a shared bucket (cut to the agent's burst).
    pub chunk: u32,
}

impl RateLimits {
    /// The limit of an agent of `team`.
    pub fn for_team(&self, team: Uuid) -> RateLimit {
        self.teams.get(&team).copied().unwrap_or(self.default)
    }
}
