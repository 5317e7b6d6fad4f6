//! The memory journal: runs and their records, sharing the memory ledger's state.

use std::fmt;
use std::sync::MutexGuard;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use crewbus_domain::{
    LeaseEnd, Record, RecordKind, Run, RunId, RunOutcome, Seq, StoreError, TenantId,
    validate_journal_limit, validate_note_text,
};
use crewbus_ports::Journal;
use uuid::Uuid;

use super::state::{RunRow, Shared, State};

/// The in-process [`Journal`]. Made by [`crate::MemoryLedger::journal`], it shares the ledger's
/// state, so the records the ledger writes (`MessageSent`, …) take their place in the same
/// gap-free numbering. Clones share the state. Never reads a clock.
#[derive(Clone)]
pub struct MemoryJournal {
    tenant: TenantId,
    shared: Shared,
}

impl fmt::Debug for MemoryJournal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryJournal")
            .field("tenant", &self.tenant)
            .finish_non_exhaustive()
    }
}

impl MemoryJournal {
    pub(crate) fn new(tenant: TenantId, shared: Shared) -> Self {
        MemoryJournal { tenant, shared }
    }

    fn state(&self) -> Result<MutexGuard<'_, State>, StoreError> {
        self.shared
            .lock()
            .ok_or_else(|| StoreError::unavailable("memory journal (outage injected)"))
    }
}

fn open_run(st: &mut State, run: RunId) -> Result<&mut RunRow, StoreError> {
    let row = st
        .runs
        .get_mut(&run)
        .ok_or_else(|| StoreError::not_found(format!("run {run}")))?;
    if row.run.is_sealed() {
        return Err(StoreError::conflict(format!("run {run} is sealed")));
    }
    Ok(row)
}

#[async_trait]
impl Journal for MemoryJournal {
    fn tenant(&self) -> &TenantId {
        &self.tenant
    }

    async fn admit(&self, team: Uuid, agent: Uuid, at: DateTime<Utc>) -> Result<RunId, StoreError> {
        let mut st = self.state()?;
        let id = RunId::new();
        let mut row = RunRow {
            run: Run {
                id,
                team,
                agent,
                admitted_at: at,
                last_seq: Seq(0),
                sealed: None,
            },
            records: Vec::new(),
        };
        row.append(at, RecordKind::RunAdmitted { team, agent });
        st.runs.insert(id, row);
        Ok(id)
    }

    async fn resume(&self, run: RunId, at: DateTime<Utc>) -> Result<Seq, StoreError> {
        let mut st = self.state()?;
        Ok(open_run(&mut st, run)?.append(at, RecordKind::RunResumed))
    }

    async fn note(&self, run: RunId, text: &str, at: DateTime<Utc>) -> Result<Seq, StoreError> {
        validate_note_text("note", text)?;
        let mut st = self.state()?;
        Ok(open_run(&mut st, run)?.append(
            at,
            RecordKind::Note {
                text: text.to_owned(),
            },
        ))
    }

    async fn seal(
        &self,
        run: RunId,
        outcome: RunOutcome,
        reason: &str,
        at: DateTime<Utc>,
    ) -> Result<Seq, StoreError> {
        validate_note_text("reason", reason)?;
        let mut st = self.state()?;
        open_run(&mut st, run)?;
        // The run's leases end first, their records before the seal's.
        st.end_leases(|l| l.run == Some(run), LeaseEnd::RunSealed, at);
        Ok(open_run(&mut st, run)?.append(
            at,
            RecordKind::RunSealed {
                outcome,
                reason: reason.to_owned(),
            },
        ))
    }

    async fn read(
        &self,
        run: RunId,
        from_seq: Seq,
        limit: usize,
    ) -> Result<Vec<Record>, StoreError> {
        validate_journal_limit(limit)?;
        let st = self.state()?;
        let row = st
            .runs
            .get(&run)
            .ok_or_else(|| StoreError::not_found(format!("run {run}")))?;
        // Records are stored in seq order from 1: record n sits at index n − 1.
        let start = usize::try_from(from_seq.0.max(1) - 1).unwrap_or(usize::MAX);
        Ok(row
            .records
            .iter()
            .skip(start)
            .take(limit)
            .cloned()
            .collect())
    }

    async fn run(&self, run: RunId) -> Result<Run, StoreError> {
        let st = self.state()?;
        st.runs
            .get(&run)
            .map(|r| r.run.clone())
            .ok_or_else(|| StoreError::not_found(format!("run {run}")))
    }

    async fn runs(
        &self,
        team: Uuid,
        before: Option<DateTime<Utc>>,
        limit: usize,
    ) -> Result<Vec<Run>, StoreError> {
        validate_journal_limit(limit)?;
        let st = self.state()?;
        let mut runs: Vec<&Run> = st
            .runs
            .values()
            .map(|r| &r.run)
            .filter(|r| r.team == team && before.is_none_or(|b| r.admitted_at < b))
            .collect();
        runs.sort_by_key(|r| std::cmp::Reverse((r.admitted_at, r.id)));
        Ok(runs.into_iter().take(limit).cloned().collect())
    }
}
