//! The push store port: operator push registrations and their cursors.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use crewbus_domain::{PushAttempt, PushConfig, PushRegistration, RunId, Seq, StoreError, TenantId};

/// Push registrations (one per destination per run) and their delivery cursors, for one tenant.
///
/// Every query is scoped by the tenant the store serves ([`PushStore::tenant`]): one tenant never
/// reads, claims or changes another's rows. A missing row is a silent no-op for `advance`,
/// `defer`, `retry` and `park`. Time always comes from the caller. Errors: backend down →
/// [`StoreError::Unavailable`] (retryable); anything else unexpected → `Backend`.
///
/// Cursors are stored as signed 64-bit integers by real databases, so a `next_seq` above
/// `i64::MAX` is refused with [`StoreError::Invalid`] by `put` and `advance` on every adapter.
///
/// Implemented by memory and Postgres; wrapped by `SealedPush` (in the app), which seals the
/// credential of each `PushConfig` before it reaches the store.
#[cfg_attr(feature = "mock", mockall::automock)]
#[async_trait]
pub trait PushStore: Send + Sync {
    /// The tenant this store serves. Synchronous and infallible.
    fn tenant(&self) -> &TenantId;

    /// Inserts the registration `(config.run, config.id)` with cursor `next_seq`, first due at
    /// `at`; or, when it exists, replaces its URL and authentication **keeping the existing
    /// cursor** (the `next_seq` argument is ignored on replace: changing a credential must never
    /// acknowledge events for the receiver), resets `attempts` to 0, un-parks it and makes it due
    /// at `at`.
    async fn put(
        &self,
        config: &PushConfig,
        next_seq: Seq,
        at: DateTime<Utc>,
    ) -> Result<(), StoreError>;

    /// The registration's config, or `None`.
    async fn get(&self, run: RunId, id: &str) -> Result<Option<PushConfig>, StoreError>;

    /// Every registration of `run` (configs), ordered by id.
    async fn list(&self, run: RunId) -> Result<Vec<PushConfig>, StoreError>;

    /// Up to `limit` registrations that are not parked and have `next_attempt_at <= at`,
    /// longest-due first, each **claimed** until `lease_until` (its `next_attempt_at` moves there)
    /// in the same step, so a second caller does not get them before then.
    async fn due(
        &self,
        at: DateTime<Utc>,
        limit: usize,
        lease_until: DateTime<Utc>,
    ) -> Result<Vec<PushRegistration>, StoreError>;

    /// Moves the cursor to `max(stored, next_seq)` — never backward — resets `attempts` and
    /// `last_error`, and makes the row due again at `at`.
    async fn advance(
        &self,
        run: RunId,
        id: &str,
        next_seq: Seq,
        at: DateTime<Utc>,
    ) -> Result<(), StoreError>;

    /// Rests an idle registration (no new records) until `until`; no attempt is counted and the
    /// cursor is unchanged.
    async fn defer(&self, run: RunId, id: &str, until: DateTime<Utc>) -> Result<(), StoreError>;

    /// Records a failed attempt: `attempts + 1`, due again at `next_attempt_at`, `last_error`
    /// set; the cursor is unchanged. `error` is bus-written text, never a credential.
    async fn retry(
        &self,
        run: RunId,
        id: &str,
        next_attempt_at: DateTime<Utc>,
        error: &str,
    ) -> Result<(), StoreError>;

    /// Parks (dead-letters) the registration with `error`: it keeps its cursor and leaves `due`
    /// until un-parked.
    async fn park(&self, run: RunId, id: &str, error: &str) -> Result<(), StoreError>;

    /// Up to `limit` parked registrations of this tenant, oldest first.
    async fn parked(&self, limit: usize) -> Result<Vec<PushRegistration>, StoreError>;

    /// Un-parks the registration, resets `attempts` and makes it due at `at`. Returns whether a
    /// parked row existed.
    async fn unpark(&self, run: RunId, id: &str, at: DateTime<Utc>) -> Result<bool, StoreError>;

    /// Removes the registration. Idempotent. Its attempts log stays until
    /// [`PushStore::prune_attempts`] removes it.
    async fn delete(&self, run: RunId, id: &str) -> Result<(), StoreError>;

    /// Every registration of `run` with its delivery state (cursor, attempts, parked), ordered
    /// by id: what an operator's console lists.
    async fn registrations(&self, run: RunId) -> Result<Vec<PushRegistration>, StoreError>;

    /// Appends one delivery attempt to the registration's attempts log and keeps only its
    /// newest `keep` entries (at least 1; newest: the most recently recorded, whatever their
    /// `at`). Written for a registration that does not (or no
    /// longer) exist too: the log is its own table, so a finished registration's log outlives
    /// it until pruned. Errors: `keep` 0, or a `seq` above `i64::MAX` → `Invalid`.
    async fn record_attempt(
        &self,
        run: RunId,
        id: &str,
        attempt: &PushAttempt,
        keep: usize,
    ) -> Result<(), StoreError>;

    /// The registration's attempts log, newest (most recently recorded) first, at most `limit`
    /// entries. Errors: `limit`
    /// 0 or above `MAX_PAGE` → `Invalid`.
    async fn attempts(
        &self,
        run: RunId,
        id: &str,
        limit: usize,
    ) -> Result<Vec<PushAttempt>, StoreError>;

    /// Deletes the attempts logs of registrations that no longer exist and whose newest attempt
    /// (the latest `at`) is before `before` (a finished registration's log is kept until then). Returns how many
    /// attempts went.
    async fn prune_attempts(&self, before: DateTime<Utc>) -> Result<u64, StoreError>;
}
