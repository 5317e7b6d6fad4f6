//! The memory ledger's leases: grants under the state's one lock (so acquires are serialised),
//! one fencing counter per team, histories kept beside each lease, and the ends that other
//! sections trigger (revocation, seal).

use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use crewbus_domain::{
    Acquired, BusError, BusResult, FencingToken, Lease, LeaseClaim, LeaseEnd, LeaseEnding,
    LeaseEvent, LeaseEventKind, LeaseFilter, MAX_LEASE_LIST, RecordKind, RunId, check_lease_change,
    decide_acquire, release_ending, validate_lease_path, validate_lease_ttl, validate_limit,
};
use crewbus_ports::Leases;
use uuid::Uuid;

use super::MemoryLedger;
use super::state::State;

/// One lease as the memory ledger keeps it, with its history.
#[derive(Debug)]
pub(crate) struct LeaseRow {
    pub(crate) lease: Lease,
    pub(crate) events: Vec<LeaseEvent>,
}

impl LeaseRow {
    fn push(&mut self, at: DateTime<Utc>, kind: LeaseEventKind) {
        let seq = self.events.len() as u64 + 1;
        self.events.push(LeaseEvent { seq, at, kind });
    }
}

impl State {
    /// The lease with its holder's name as stored now.
    fn lease_view(&self, row: &LeaseRow) -> Lease {
        let mut lease = row.lease.clone();
        if let Some(a) = self.agents.get(&lease.agent) {
            lease.agent_name = a.name.clone();
        }
        lease
    }

    /// Appends `kind` to `run` when it is given and still open (an end after the seal stays in
    /// the lease's history only).
    fn lease_record(&mut self, run: Option<RunId>, at: DateTime<Utc>, kind: RecordKind) {
        if let Some(row) = run.and_then(|r| self.runs.get_mut(&r))
            && !row.run.is_sealed()
        {
            row.append(at, kind);
        }
    }

    /// Ends every lease passing `which` that has not ended: live ones with `reason` at `at`,
    /// lapsed ones as expired at their expiry. Writes each one's history entry and run record.
    /// Returns the teams whose leases ended, each once.
    pub(crate) fn end_leases(
        &mut self,
        which: impl Fn(&Lease) -> bool,
        reason: LeaseEnd,
        at: DateTime<Utc>,
    ) -> Vec<Uuid> {
        let ids: Vec<Uuid> = self
            .leases
            .values()
            .filter(|r| r.lease.ended.is_none() && which(&r.lease))
            .map(|r| r.lease.id)
            .collect();
        let mut teams = Vec::new();
        for id in ids {
            let row = self.leases.get_mut(&id).expect("listed above");
            let ending = if row.lease.is_live(at) {
                LeaseEnding { at, reason }
            } else {
                LeaseEnding {
                    at: row.lease.expires_at,
                    reason: LeaseEnd::Expired,
                }
            };
            let team = row.lease.team;
            self.finish_lease(id, ending, at);
            if !teams.contains(&team) {
                teams.push(team);
            }
        }
        teams
    }

    /// Ends lease `id` with `ending`, written at `at` (history and run record).
    fn finish_lease(&mut self, id: Uuid, ending: LeaseEnding, at: DateTime<Utc>) {
        let row = self.leases.get_mut(&id).expect("the caller found it");
        row.lease.ended = Some(ending);
        row.push(
            at,
            LeaseEventKind::Ended {
                reason: ending.reason,
            },
        );
        let run = row.lease.run;
        self.lease_record(
            run,
            at,
            RecordKind::LeaseEnded {
                lease: id,
                reason: ending.reason,
            },
        );
    }

    fn lease_of(&self, team: Uuid, lease: Uuid) -> BusResult<&LeaseRow> {
        self.leases
            .get(&lease)
            .filter(|r| r.lease.team == team)
            .ok_or_else(|| BusError::not_found(format!("lease {lease}")))
    }
}

#[async_trait]
impl Leases for MemoryLedger {
    async fn acquire(
        &self,
        team: Uuid,
        agent: Uuid,
        claim: &LeaseClaim,
        ttl: Duration,
        run: Option<RunId>,
        at: DateTime<Utc>,
    ) -> BusResult<Acquired> {
        validate_lease_ttl(ttl)?;
        let mut st = self.state()?;
        st.team_of(team)?;
        let holder = st.agent_of(team, agent)?;
        if holder.revoked() {
            return Err(BusError::forbidden(format!("agent {agent} is revoked")));
        }
        let agent_name = holder.name.clone();
        st.check_run(run, team, agent)?;
        let live: Vec<Lease> = st
            .leases
            .values()
            .filter(|r| r.lease.team == team && r.lease.is_live(at))
            .map(|r| st.lease_view(r))
            .collect();
        if let Err(conflicts) = decide_acquire(agent, claim, &live, at)? {
            return Ok(Acquired::Conflict(conflicts));
        }
        let fence = st.lease_fences.entry(team).or_insert(0);
        let token = FencingToken(*fence)
            .next()
            .ok_or_else(|| BusError::conflict("the team's fencing counter is exhausted"))?;
        *fence = token.0;
        let expires_at = at + ttl;
        let lease = Lease {
            id: Uuid::new_v4(),
            team,
            agent,
            agent_name,
            claim: claim.clone(),
            token,
            run,
            acquired_at: at,
            expires_at,
            ended: None,
        };
        let mut row = LeaseRow {
            lease: lease.clone(),
            events: Vec::new(),
        };
        row.push(
            at,
            LeaseEventKind::Granted {
                pattern: claim.pattern.clone(),
                mode: claim.mode,
                token,
                expires_at,
            },
        );
        st.leases.insert(lease.id, row);
        st.lease_record(
            run,
            at,
            RecordKind::LeaseGranted {
                lease: lease.id,
                pattern: claim.pattern.clone(),
                mode: claim.mode,
                token,
                expires_at,
            },
        );
        Ok(Acquired::Granted(lease))
    }

    async fn renew(
        &self,
        team: Uuid,
        agent: Uuid,
        lease: Uuid,
        ttl: Duration,
        at: DateTime<Utc>,
    ) -> BusResult<Lease> {
        validate_lease_ttl(ttl)?;
        let mut st = self.state()?;
        check_lease_change(&st.lease_of(team, lease)?.lease, Some(agent), true, at)?;
        let expires_at = at + ttl;
        let row = st.leases.get_mut(&lease).expect("found above");
        row.lease.expires_at = expires_at;
        row.push(at, LeaseEventKind::Renewed { expires_at });
        let run = row.lease.run;
        st.lease_record(run, at, RecordKind::LeaseRenewed { lease, expires_at });
        Ok(st.lease_view(&st.leases[&lease]))
    }

    async fn release(
        &self,
        team: Uuid,
        agent: Option<Uuid>,
        lease: Uuid,
        at: DateTime<Utc>,
    ) -> BusResult<Lease> {
        let mut st = self.state()?;
        let found = &st.lease_of(team, lease)?.lease;
        check_lease_change(found, agent, false, at)?;
        if let Some(ending) = release_ending(found, at) {
            st.finish_lease(lease, ending, at);
        }
        Ok(st.lease_view(&st.leases[&lease]))
    }

    async fn leases(
        &self,
        team: Uuid,
        filter: &LeaseFilter,
        at: DateTime<Utc>,
    ) -> BusResult<Vec<Lease>> {
        let st = self.state()?;
        st.team_of(team)?;
        let mut out: Vec<Lease> = st
            .leases
            .values()
            .filter(|r| r.lease.team == team && r.lease.is_live(at) && filter.admits(&r.lease))
            .map(|r| st.lease_view(r))
            .collect();
        out.sort_by_key(|l| l.token);
        out.truncate(MAX_LEASE_LIST);
        Ok(out)
    }

    async fn lease(&self, team: Uuid, lease: Uuid) -> BusResult<(Lease, Vec<LeaseEvent>)> {
        let st = self.state()?;
        let row = st.lease_of(team, lease)?;
        Ok((st.lease_view(row), row.events.clone()))
    }

    async fn check(
        &self,
        team: Uuid,
        agent: Uuid,
        token: FencingToken,
        path: &str,
        at: DateTime<Utc>,
    ) -> BusResult<bool> {
        validate_lease_path(path)?;
        let st = self.state()?;
        Ok(st
            .leases
            .values()
            .any(|r| r.lease.team == team && r.lease.fences(agent, token, path, at)))
    }

    async fn expire(&self, at: DateTime<Utc>, limit: usize) -> BusResult<Vec<Lease>> {
        validate_limit(limit)?;
        let mut st = self.state()?;
        let mut due: Vec<(DateTime<Utc>, Uuid)> = st
            .leases
            .values()
            .filter(|r| r.lease.ended.is_none() && r.lease.expires_at <= at)
            .map(|r| (r.lease.expires_at, r.lease.id))
            .collect();
        due.sort();
        due.truncate(limit);
        let mut out = Vec::with_capacity(due.len());
        for (expires_at, id) in due {
            st.finish_lease(
                id,
                LeaseEnding {
                    at: expires_at,
                    reason: LeaseEnd::Expired,
                },
                at,
            );
            out.push(st.lease_view(&st.leases[&id]));
        }
        Ok(out)
    }
}
