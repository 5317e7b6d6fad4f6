//! Operator actions on a team's streams.

use async_trait::async_trait;
use crewbus_domain::{BusResult, Provisioned, QuotaChange, StorageAccount, StreamKind};
use uuid::Uuid;

/// Provisioning, quota changes and storage accounting for teams' body and inbox streams.
///
/// Run with the provisioning credential. The quotas asked for come from the implementation's
/// configuration (validated with [`Quotas::validate`](crewbus_domain::Quotas::validate): an
/// invalid one is `Invalid` before the broker is asked). Stream names derive from the team id,
/// never from a display name. Implemented by memory and JetStream with the same semantics.
/// Every method that talks to the broker answers `Unavailable`/`Timeout` when it cannot.
#[cfg_attr(feature = "mock", mockall::automock)]
#[async_trait]
pub trait StreamAdmin: Send + Sync {
    /// Creates or finds the team's body stream (idempotent). The result carries the limits and
    /// contents read back from the broker.
    ///
    /// An existing stream keeps its limits whatever the configuration asks (`created: false`;
    /// [`Provisioned::differs_from`] tells the caller). A create whose reservation the account
    /// cannot hold is refused before anything is touched: `InsufficientStorage` with the
    /// arithmetic. Invalid configured quotas → `Invalid`.
    async fn provision(&self, team: Uuid) -> BusResult<Provisioned>;

    /// The same for the team's inbox stream (work-queue retention, discard old).
    async fn provision_inbox(&self, team: Uuid) -> BusResult<Provisioned>;

    /// The team's `kind` stream as it stands: its limits and contents read back from the broker
    /// (`created: false`), judging and changing nothing — what an operator's storage view shows.
    /// Needs only the right to read a stream's information (the runtime credential has it).
    /// Errors: no such stream → `NotProvisioned`; the broker down → `Unavailable`/`Timeout`.
    async fn stream_status(&self, team: Uuid, kind: StreamKind) -> BusResult<Provisioned>;

    /// What changing the `kind` stream's quotas to the configured ones would do, without doing
    /// it (a change to the same limits is a [`QuotaChange::is_noop`] result, not an error).
    /// Errors: `NotProvisioned` (no such stream); `Conflict` when the stream holds more than
    /// the new ceiling (naming both); `InsufficientStorage` when the account cannot reserve
    /// [`QuotaChange::additional_bytes`].
    async fn check_update(&self, team: Uuid, kind: StreamKind) -> BusResult<QuotaChange>;

    /// [`StreamAdmin::check_update`], then [`StreamAdmin::apply_update`]. The result carries
    /// contents read back afterwards; [`Provisioned::over_ceiling`] tells the caller a publisher
    /// raced the change. A decrease never loses an acknowledged body: where the broker would
    /// evict, intake is paused during the change (publishers get a retryable error) or the change
    /// is refused.
    async fn update_quotas(&self, team: Uuid, kind: StreamKind) -> BusResult<Provisioned>;

    /// Applies a vetted change (`change.wanted`); `change.current` is what a rollback restores.
    /// Re-checks the contents and the reservation; errors as `check_update`.
    async fn apply_update(
        &self,
        team: Uuid,
        kind: StreamKind,
        change: &QuotaChange,
    ) -> BusResult<Provisioned>;

    /// The account's storage, in bytes: used (stored now), reserved (Σ max_bytes × replicas
    /// over every stream of the account, computed where the broker does not report it), budget
    /// (`None` when unlimited).
    async fn storage_account(&self) -> BusResult<StorageAccount>;

    /// Deletes the team's streams (bodies and inbox) with everything they hold. Destructive;
    /// idempotent: a stream already gone is success.
    async fn deprovision(&self, team: Uuid) -> BusResult<()>;

    /// Whether the broker answers (opens and drops its own connection): a question about the
    /// deployment, not a stream. Never an error: any failure is `false`.
    async fn reachable(&self) -> bool;
}
