//! The leases' rows for both SQL adapters: how a lease and its history entries are stored and
//! read back, and what ending one writes.
//!
//! Stored shape (`leases`): the claim as its pattern text and mode name (`exclusive`, `shared`),
//! the token as a `BIGINT`, the end as `ended_at` and `end_reason` (both `NULL` while it has not
//! ended); each history entry (`lease_events`) is `(lease_id, seq, at, kind)` with `kind` as
//! serde's JSON of [`LeaseEventKind`].

use chrono::{DateTime, Utc};
use crewbus_domain::{
    BusError, FencingToken, Lease, LeaseClaim, LeaseEnd, LeaseEnding, LeaseEvent, LeaseEventKind,
    LeaseMode, LeasePattern, RecordKind, RunId, StoreError,
};
use uuid::Uuid;

use crate::counter::from_db;

/// The columns of a [`LeaseRow`], read from `leases l JOIN agents a ON a.id = l.agent_id`.
pub const LEASE_COLUMNS: &str = "l.id, l.team_id, l.agent_id, a.name AS agent_name, l.pattern, \
     l.mode, l.token, l.run_id, l.acquired_at, l.expires_at, l.ended_at, l.end_reason";

/// A row of `leases` with its holder's name ([`LEASE_COLUMNS`]); `T` is how the adapter stores
/// a time.
#[derive(sqlx::FromRow)]
pub struct LeaseRow<T = DateTime<Utc>> {
    id: Uuid,
    team_id: Uuid,
    agent_id: Uuid,
    agent_name: String,
    pattern: String,
    mode: String,
    token: i64,
    run_id: Option<Uuid>,
    acquired_at: T,
    expires_at: T,
    ended_at: Option<T>,
    end_reason: Option<String>,
}

/// The stored name of a mode.
pub fn mode_name(mode: LeaseMode) -> &'static str {
    match mode {
        LeaseMode::Exclusive => "exclusive",
        LeaseMode::Shared => "shared",
    }
}

fn unreadable(id: Uuid, what: &str) -> BusError {
    StoreError::Backend {
        what: format!("lease {id} is unreadable: {what}"),
        source: None,
    }
    .into()
}

impl<T: Into<DateTime<Utc>>> LeaseRow<T> {
    /// The lease as stored. Errors: a pattern, mode or end that does not parse (never, for
    /// rows this crate's adapters wrote) → the store's `Backend` error.
    pub fn into_lease(self) -> Result<Lease, BusError> {
        let id = self.id;
        let pattern = LeasePattern::parse(&self.pattern).map_err(|_| unreadable(id, "pattern"))?;
        let mode = match self.mode.as_str() {
            "exclusive" => LeaseMode::Exclusive,
            "shared" => LeaseMode::Shared,
            _ => return Err(unreadable(id, "mode")),
        };
        let ended = match (self.ended_at, self.end_reason.as_deref()) {
            (None, None) => None,
            (Some(at), Some(reason)) => Some(LeaseEnding {
                at: at.into(),
                reason: LeaseEnd::from_name(reason).ok_or_else(|| unreadable(id, "end"))?,
            }),
            _ => return Err(unreadable(id, "end")),
        };
        Ok(Lease {
            id,
            team: self.team_id,
            agent: self.agent_id,
            agent_name: self.agent_name,
            claim: LeaseClaim { pattern, mode },
            token: FencingToken(from_db(self.token)),
            run: self.run_id.map(RunId),
            acquired_at: self.acquired_at.into(),
            expires_at: self.expires_at.into(),
            ended,
        })
    }
}

/// Every row as a lease ([`LeaseRow::into_lease`]).
pub fn leases<T: Into<DateTime<Utc>>>(rows: Vec<LeaseRow<T>>) -> Result<Vec<Lease>, BusError> {
    rows.into_iter().map(LeaseRow::into_lease).collect()
}

/// The stored text of a history entry's kind: serde's JSON.
pub fn event_text(kind: &LeaseEventKind) -> Result<String, sqlx::Error> {
    serde_json::to_string(kind).map_err(|e| sqlx::Error::Encode(Box::new(e)))
}

/// The history of `lease` from its rows `(seq, at, kind)`. Errors: a kind that does not parse →
/// the store's `Backend` error.
pub fn events<T: Into<DateTime<Utc>>>(
    lease: Uuid,
    rows: Vec<(i64, T, String)>,
) -> Result<Vec<LeaseEvent>, BusError> {
    rows.into_iter()
        .map(|(seq, at, kind)| {
            Ok(LeaseEvent {
                seq: from_db(seq),
                at: at.into(),
                kind: serde_json::from_str(&kind).map_err(|_| unreadable(lease, "history"))?,
            })
        })
        .collect()
}

/// The grant's history entry and, for a lease a run took, its run record.
pub fn grant_entries(lease: &Lease) -> (LeaseEventKind, RecordKind) {
    (
        LeaseEventKind::Granted {
            pattern: lease.claim.pattern.clone(),
            mode: lease.claim.mode,
            token: lease.token,
            expires_at: lease.expires_at,
        },
        RecordKind::LeaseGranted {
            lease: lease.id,
            pattern: lease.claim.pattern.clone(),
            mode: lease.claim.mode,
            token: lease.token,
            expires_at: lease.expires_at,
        },
    )
}

/// How ending a not-yet-ended `lease` at `at` for `reason` is stored: a lapsed lease ends as
/// expired at its expiry, a live one with `reason` at `at`.
pub fn ending(lease: &Lease, reason: LeaseEnd, at: DateTime<Utc>) -> LeaseEnding {
    if lease.is_live(at) {
        LeaseEnding { at, reason }
    } else {
        LeaseEnding {
            at: lease.expires_at,
            reason: LeaseEnd::Expired,
        }
    }
}
