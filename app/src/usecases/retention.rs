//! Retention: bodies older than the policy are removed from their backends and the ledger marks
//! the messages retained (history shows them as explained absences).

use crewbus_domain::BusResult;

use crate::usecases::bus::{Bus, before};

/// What one retention run did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct RetentionRun {
    /// Bodies the backends removed.
    pub removed: u64,
    /// Messages the ledger marked retained.
    pub marked: u64,
    /// (team, backend) pairs that failed and are retried next run.
    pub failed: u64,
}

impl Bus {
    /// Applies the retention policy once (no-op when bodies are kept forever). Each (team,
    /// backend) pair is independent: one failing does not stop the others. Errors: the ledger
    /// failing to list what is due.
    pub async fn retention_run(&self) -> BusResult<RetentionRun> {
        let Some(keep) = self.settings.retention else {
            return Ok(RetentionRun::default());
        };
        let now = self.now();
        let cutoff = before(now, keep);
        let mut run = RetentionRun::default();
        let targets = self
            .ports
            .ledger
            .retention_due(cutoff, crewbus_domain::MAX_PAGE)
            .await?;
        for t in targets {
            let result = async {
                let backend = self.ports.backends.body_backend(t.team, &t.backend).await?;
                let removed = backend.retain(cutoff).await?;
                let marked = self
                    .ports
                    .ledger
                    .mark_retained(t.team, &t.backend, cutoff, now)
                    .await?;
                BusResult::Ok((removed, marked))
            }
            .await;
            match result {
                Ok((removed, marked)) => {
                    run.removed += removed;
                    run.marked += marked;
                }
                Err(error) => {
                    run.failed += 1;
                    tracing::warn!(team = %t.team, backend = %t.backend, code = error.code(), error = ?error, "retention failed; retried next run");
                }
            }
        }
        Ok(run)
    }
}
