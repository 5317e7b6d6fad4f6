//! The operators port: the people who run the agents, their tokens and their console sign-ins.

use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use crewbus_domain::{BusResult, Operator, OperatorScope, OperatorSession, TenantId, TokenHash};
use uuid::Uuid;

/// Operators of one tenant, with their one-time sign-in codes and console sessions.
///
/// Implemented by every ledger (memory, SQLite, Postgres) on the ledger's own store, so an
/// operator added beside one server signs in on every server of the deployment; all pass the
/// same conformance functions (`crewbus_conformance::operators`).
///
/// # Common rules
/// - **Time comes from the caller** (`at`); an implementation never reads a clock.
/// - **Every method is one transaction.**
/// - **Secrets are stored hashed**: a token, a sign-in code and a session secret are given as
///   their SHA-256 ([`TokenHash`]); none is ever stored or returned in clear.
/// - **Revocation ends everything at once**: a revoked operator's token, codes and sessions all
///   answer `Unauthenticated` from the commit on.
/// - **Errors** common to every method: the store unreachable → `Unavailable` or `Timeout`
///   (retryable).
#[cfg_attr(feature = "mock", mockall::automock)]
#[async_trait]
pub trait Operators: Send + Sync {
    /// The tenant these operators belong to.
    fn tenant(&self) -> &TenantId;

    /// Creates an operator holding the token whose hash is `token_hash`, scoped to `scope`.
    ///
    /// Errors: a bad name (letters, digits, `_`, `-`; 1–128), or a scope of no team →
    /// `Invalid`; a team of the scope unknown → `NotFound` naming it; the name taken, or the token hash already used by an
    /// operator or an agent → `Conflict`.
    async fn create_operator(
        &self,
        name: &str,
        scope: &OperatorScope,
        token_hash: TokenHash,
        at: DateTime<Utc>,
    ) -> BusResult<Operator>;

    /// Every operator of the tenant (revoked ones included), by name.
    async fn operators(&self) -> BusResult<Vec<Operator>>;

    /// One operator. Errors: unknown → `NotFound`.
    async fn operator(&self, id: Uuid) -> BusResult<Operator>;

    /// The operator holding this token hash: how an admin request is authenticated.
    /// Errors: no operator (an agent's token included), or a revoked one → `Unauthenticated`.
    async fn operator_by_token(&self, token_hash: &TokenHash) -> BusResult<Operator>;

    /// Revokes an operator: its token, sign-in codes and sessions stop working. Idempotent (a
    /// second revoke keeps the first `revoked_at`). Its human members stay, with their messages.
    /// Errors: unknown → `NotFound`.
    async fn revoke_operator(&self, id: Uuid, at: DateTime<Utc>) -> BusResult<Operator>;

    /// Records a one-time sign-in code (its hash) for `operator`, valid until `expires_at`.
    /// Errors: unknown operator → `NotFound`; a revoked one → `Unauthenticated`; the hash
    /// already recorded → `Conflict`; `expires_at <= at` → `Invalid`.
    async fn issue_sign_in_code(
        &self,
        operator: Uuid,
        code_hash: TokenHash,
        expires_at: DateTime<Utc>,
        at: DateTime<Utc>,
    ) -> BusResult<()>;

    /// Withdraws every sign-in code of `operator` not used yet: none of them signs in any more,
    /// on any server (they are deleted). Returns how many went. What a start of `crewbus serve`
    /// does before it issues the operator a new code, so only the newest printed code works.
    /// Errors: an operator unknown to this tenant → `NotFound`.
    async fn withdraw_sign_in_codes(&self, operator: Uuid) -> BusResult<u64>;

    /// Redeems a sign-in code and opens a session with the secret whose hash is
    /// `session_hash`, in one transaction: a code works **once** — of two concurrent redeems of
    /// one code at most one succeeds, on any server.
    ///
    /// Errors: the code unknown, already used, expired (`expires_at <= at`) or its operator
    /// revoked → `Unauthenticated` (nothing written); the session hash already used →
    /// `Conflict`.
    async fn redeem_sign_in_code(
        &self,
        code_hash: &TokenHash,
        session_hash: TokenHash,
        at: DateTime<Utc>,
    ) -> BusResult<Operator>;

    /// Opens a session for an operator that proved itself another way (its token). Errors:
    /// unknown → `NotFound`; revoked → `Unauthenticated`; the session hash already used →
    /// `Conflict`.
    async fn open_session(
        &self,
        operator: Uuid,
        session_hash: TokenHash,
        at: DateTime<Utc>,
    ) -> BusResult<()>;

    /// The live session holding this secret, used now: its `last_seen_at` moves to `at` (never
    /// back; the returned session carries the value before). A session is live while it was not ended,
    /// its operator is not revoked, and it was last used less than `idle` before `at`.
    /// Errors: anything else → `Unauthenticated` (an idle one is ended).
    async fn session(
        &self,
        session_hash: &TokenHash,
        idle: Duration,
        at: DateTime<Utc>,
    ) -> BusResult<OperatorSession>;

    /// Whether the session holding this secret is live at `at` (as [`Operators::session`]
    /// decides: not ended, its operator not revoked, last used less than `idle` before `at`),
    /// **without** counting this as a use: nothing is written (an open live page asks before
    /// every update, and must neither keep an unused session alive nor miss a revocation made
    /// on another server). Errors: only the store's.
    async fn session_is_live(
        &self,
        session_hash: &TokenHash,
        idle: Duration,
        at: DateTime<Utc>,
    ) -> BusResult<bool>;

    /// Ends a session (sign-out). Idempotent: an unknown or ended one is no error.
    async fn end_session(&self, session_hash: &TokenHash, at: DateTime<Utc>) -> BusResult<()>;

    /// Deletes sign-in codes that expired (`expires_at <= at`) or were used (`used_at <= at`),
    /// and sessions ended or idle for at least `idle` at `at` (the rule `session` ends them by).
    /// Returns how many rows went.
    async fn prune_sign_ins(&self, idle: Duration, at: DateTime<Utc>) -> BusResult<u64>;
}
