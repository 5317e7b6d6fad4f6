//! The journal port: runs and their records.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use crewbus_domain::{Record, Run, RunId, RunOutcome, Seq, StoreError, TenantId};
use uuid::Uuid;

/// Runs and their append-only records (PUSH.md §1). Implemented by memory and Postgres.
///
/// Each run's records are numbered gap-free from 1 (`RunAdmitted`) and end with the terminal
/// `RunSealed`: nothing is appended after it. The bus's own records (`MessageSent`,
/// `MessageDelivered`, `MessageAcknowledged`) are written by the `Ledger` in the transaction of
/// the change they describe, into the same numbering. Time comes from the caller (`at`).
///
/// Errors common to every method: the store unreachable → `StoreError::Unavailable`
/// (retryable); anything unexpected from the store → `StoreError::Backend`.
#[cfg_attr(feature = "mock", mockall::automock)]
#[async_trait]
pub trait Journal: Send + Sync {
    /// The tenant this journal serves.
    fn tenant(&self) -> &TenantId;

    /// Mints a run for `agent` of `team` and writes `RunAdmitted` as seq 1. The journal does not
    /// check the agent: the caller has authenticated it.
    async fn admit(&self, team: Uuid, agent: Uuid, at: DateTime<Utc>) -> Result<RunId, StoreError>;

    /// Writes `RunResumed` on an open run and returns its seq. Errors: unknown → `NotFound`;
    /// sealed → `Conflict`.
    async fn resume(&self, run: RunId, at: DateTime<Utc>) -> Result<Seq, StoreError>;

    /// Appends a `Note` and returns its seq. Errors: unknown → `NotFound`; sealed →
    /// `Conflict`; text over `MAX_NOTE_LEN` bytes → `Invalid`.
    async fn note(&self, run: RunId, text: &str, at: DateTime<Utc>) -> Result<Seq, StoreError>;

    /// Appends the terminal `RunSealed { outcome, reason }` and returns its seq. Errors: unknown →
    /// `NotFound`; already sealed → `Conflict`; reason over `MAX_NOTE_LEN` bytes → `Invalid`.
    async fn seal(
        &self,
        run: RunId,
        outcome: RunOutcome,
        reason: &str,
        at: DateTime<Utc>,
    ) -> Result<Seq, StoreError>;

    /// Up to `limit` records with `seq >= from_seq`, ascending. The only way records are read.
    /// Past the end → empty. Errors: unknown run → `NotFound`; `limit` 0 or above `MAX_PAGE` →
    /// `Invalid`.
    async fn read(
        &self,
        run: RunId,
        from_seq: Seq,
        limit: usize,
    ) -> Result<Vec<Record>, StoreError>;

    /// The run: team, agent, last seq, seal. Errors: unknown → `NotFound`.
    async fn run(&self, run: RunId) -> Result<Run, StoreError>;

    /// Up to `limit` runs of `team`, newest admitted first (ties by id), admitted before
    /// `before` when given (the next page starts before the last one's `admitted_at`).
    /// Errors: `limit` 0 or above `MAX_PAGE` → `Invalid`.
    async fn runs(
        &self,
        team: Uuid,
        before: Option<DateTime<Utc>>,
        limit: usize,
    ) -> Result<Vec<Run>, StoreError>;
}
