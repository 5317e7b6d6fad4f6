//! Runs (PUSH.md §1, §4): an agent admits, resumes and seals its own runs and reads their
//! journals. Admission and every resume open the run's push registrations (`Outbox::open`);
//! an admission whose registration fails is sealed as failed with the reason, so it is never left
//! open.

use crewbus_domain::{
    Agent, BusError, BusResult, MAX_NOTE_LEN, MAX_PAGE, Record, Run, RunId, RunOutcome, Seq,
    StoreError,
};

use crate::usecases::bus::Bus;

/// A journal or push store error as the bus reports it: the domain's
/// `impl From<StoreError> for BusError` (kept here for the path `crewbus::runs::bus_error`).
pub fn bus_error(e: StoreError) -> BusError {
    BusError::from(e)
}

impl Bus {
    /// Admits a run for `agent`: the journal writes `RunAdmitted` (seq 1), then the push outbox
    /// registers every destination against the run. Returns the run.
    ///
    /// Errors: the journal's (`Unavailable`, …). When registering fails, the run is sealed
    /// `failed` with the reason and the registration's error is returned (`Unavailable` for a
    /// store or key ring that is down).
    pub async fn admit_run(&self, agent: &Agent) -> BusResult<Run> {
        let journal = &self.ports.journal;
        let run = journal
            .admit(agent.team, agent.id, self.now())
            .await
            .map_err(bus_error)?;
        if let Err(error) = self.open_push(run).await {
            let reason = format!("push registration failed at admission: {error}");
            tracing::warn!(%run, code = error.code(), error = ?error, "admission failed: sealing the run");
            if let Err(seal) = journal
                .seal(run, RunOutcome::Failed, &reason, self.now())
                .await
            {
                tracing::error!(%run, code = seal.code(), error = ?seal, "sealing a failed admission failed");
            }
            return Err(bus_error(error));
        }
        let admitted = journal.run(run).await.map_err(bus_error)?;
        self.run_changed(&admitted);
        Ok(admitted)
    }

    /// Resumes `agent`'s open run: the journal writes `RunResumed`, then the push outbox
    /// registers every destination again (idempotent: a receiver's cursor never moves back).
    ///
    /// Errors: unknown run or another team's → `NotFound`; another agent's → `Forbidden`; sealed →
    /// `Conflict`; registration failed → its error (the resume fails; the run stays open).
    pub async fn resume_run(&self, agent: &Agent, run: RunId) -> BusResult<Run> {
        self.own_run(agent, run).await?;
        self.ports
            .journal
            .resume(run, self.now())
            .await
            .map_err(bus_error)?;
        self.open_push(run).await.map_err(bus_error)?;
        let resumed = self.ports.journal.run(run).await.map_err(bus_error)?;
        self.run_changed(&resumed);
        Ok(resumed)
    }

    /// Seals `agent`'s run with `outcome` and `reason` (the terminal record).
    ///
    /// Errors: unknown run or another team's → `NotFound`; another agent's → `Forbidden`;
    /// already sealed → `Conflict`; reason over `MAX_NOTE_LEN` bytes → `Invalid`.
    pub async fn seal_run(
        &self,
        agent: &Agent,
        run: RunId,
        outcome: RunOutcome,
        reason: &str,
    ) -> BusResult<Run> {
        if reason.len() > MAX_NOTE_LEN {
            return Err(BusError::invalid(format!(
                "reason is longer than {MAX_NOTE_LEN} bytes"
            )));
        }
        self.own_run(agent, run).await?;
        self.ports
            .journal
            .seal(run, outcome, reason, self.now())
            .await
            .map_err(bus_error)?;
        // The run's leases ended with the seal: acquires waiting on them try again.
        self.leases_ended(agent.team).await;
        let sealed = self.ports.journal.run(run).await.map_err(bus_error)?;
        self.run_changed(&sealed);
        Ok(sealed)
    }

    /// Tells the console feed that `run` was admitted, resumed or sealed.
    fn run_changed(&self, run: &Run) {
        self.emit(vec![
            crewbus_domain::FeedEvent::new(run.team, crewbus_domain::FeedKind::RunChanged)
                .agent(run.agent)
                .run(run.id.0),
        ]);
    }

    /// `agent`'s run. Errors: unknown or another team's → `NotFound`; another agent's →
    /// `Forbidden`.
    pub async fn run_of(&self, agent: &Agent, run: RunId) -> BusResult<Run> {
        self.own_run(agent, run).await
    }

    /// Up to `limit` records of `agent`'s run from `from_seq` (ascending; empty past the end).
    ///
    /// Errors: `limit` 0 or above `MAX_PAGE`, `from_seq` 0 or above `MAX_POSITION` → `Invalid`;
    /// unknown run or another team's → `NotFound`; another agent's → `Forbidden`.
    pub async fn run_records(
        &self,
        agent: &Agent,
        run: RunId,
        from_seq: Seq,
        limit: usize,
    ) -> BusResult<Vec<Record>> {
        if limit == 0 || limit > MAX_PAGE {
            return Err(BusError::invalid(format!(
                "limit must be between 1 and {MAX_PAGE}"
            )));
        }
        if from_seq.0 == 0 {
            return Err(BusError::invalid("from_seq starts at 1"));
        }
        crewbus_domain::validate_position("from_seq", from_seq.0)?;
        self.own_run(agent, run).await?;
        self.ports
            .journal
            .read(run, from_seq, limit)
            .await
            .map_err(bus_error)
    }

    /// The run, when it is `agent`'s. Another team's run is `NotFound` (its ids are never
    /// confirmed to exist); a run of another agent of the same team is `Forbidden`, as in the
    /// ledger's run rules for send, confirm and acknowledge.
    async fn own_run(&self, agent: &Agent, run: RunId) -> BusResult<Run> {
        let found = match self.ports.journal.run(run).await {
            Ok(r) => r,
            Err(StoreError::NotFound { .. }) => {
                return Err(BusError::not_found(format!("run {run}")));
            }
            Err(e) => return Err(bus_error(e)),
        };
        if found.team != agent.team {
            return Err(BusError::not_found(format!("run {run}")));
        }
        if found.agent != agent.id {
            return Err(BusError::forbidden(format!(
                "run {run} belongs to another agent"
            )));
        }
        Ok(found)
    }

    async fn open_push(&self, run: RunId) -> Result<(), StoreError> {
        match &self.push {
            Some(push) => push.outbox.open(run).await,
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn store_errors_keep_their_meaning_and_never_their_source_text() {
        assert!(matches!(
            bus_error(StoreError::not_found("run")),
            BusError::NotFound { .. }
        ));
        assert!(matches!(
            bus_error(StoreError::conflict("sealed")),
            BusError::Conflict { .. }
        ));
        assert!(matches!(
            bus_error(StoreError::invalid("limit")),
            BusError::Invalid { .. }
        ));
        let down = bus_error(StoreError::unavailable("db"));
        assert!(matches!(down, BusError::Unavailable { .. }) && down.is_retryable());
        let sealing = bus_error(StoreError::Sealing {
            what: "scope key".into(),
            source: Some(std::sync::Arc::new(std::io::Error::other("disk text"))),
        });
        assert!(matches!(sealing, BusError::Unavailable { .. }));
        assert!(!sealing.to_string().contains("disk text"));
        let backend = bus_error(StoreError::Backend {
            what: "x".into(),
            source: None,
        });
        assert!(matches!(backend, BusError::Unavailable { .. }));
    }
}
