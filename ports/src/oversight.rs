//! The oversight port: what the ledger keeps and shows for the people who run the agents.

use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use crewbus_domain::{
    ActivityBucket, Agent, AgentActivity, BusResult, ConversationSummary, Operator, RecipientState,
    StorageUse, WakeupTarget,
};
use uuid::Uuid;

/// The operator's view of one tenant's ledger: agents' last activity, backlog and status lines, conversations
/// with their size, each recipient's delivery state, sends and deliveries over time, storage use,
/// and the human members operators post as.
///
/// Implemented by every ledger (memory, SQLite, Postgres) over the ledger's own tables; all pass
/// the same conformance functions (`crewbus_conformance::oversight`). The rules of
/// [`crate::Ledger`] hold: time from the caller, one transaction per method, another team's ids
/// are `NotFound`, batches of at most `MAX_PAGE`, store outages `Unavailable`/`Timeout`.
#[cfg_attr(feature = "mock", mockall::automock)]
#[async_trait]
pub trait Oversight: Send + Sync {
    /// Records that these agents made an authenticated call at `at`: each one's last activity
    /// becomes `max(stored, at)` (never moves back). Unknown agents, or agents of another team
    /// than the target names, are ignored. Returns how many rows changed. The bus calls it at
    /// most once per few seconds per agent, from a background flush (never on a request's path).
    /// Errors: more than `MAX_PAGE` targets → `Invalid`.
    async fn touch_agents(&self, seen: &[WakeupTarget], at: DateTime<Utc>) -> BusResult<u64>;

    /// Every agent of `team` (revoked ones and human members included), by name (byte order),
    /// with its last activity, its pending deliveries (receipts of stored messages not yet
    /// confirmed), when the oldest of those was stored, its status line and its current run
    /// (the latest admitted unsealed run). Errors: unknown team → `NotFound`.
    async fn agent_activity(&self, team: Uuid) -> BusResult<Vec<AgentActivity>>;

    /// Sets `agent`'s status line to `status` at `at` (the empty line clears it: the agent then
    /// has none). The line replaces the previous one whatever its time. The caller validates
    /// the line ([`crewbus_domain::validate_status`]); the ledger stores it as given.
    /// Errors: the agent unknown in its team → `NotFound`; revoked (as stored) → `Forbidden`.
    async fn set_status(&self, agent: &Agent, status: &str, at: DateTime<Utc>) -> BusResult<()>;

    /// Every conversation of `team`, oldest first, with its members, message count and latest
    /// send time. Errors: unknown team → `NotFound`.
    async fn conversation_summaries(&self, team: Uuid) -> BusResult<Vec<ConversationSummary>>;

    /// The recipients of each of `messages` (of `team`): receipt, hand-out count and latest
    /// hand-out, in the order of `messages` (each once), then by recipient key. Unknown ids and
    /// other teams' messages are left out. Errors: more than `MAX_PAGE` ids → `Invalid`.
    async fn recipient_states(
        &self,
        team: Uuid,
        messages: &[Uuid],
    ) -> BusResult<Vec<RecipientState>>;

    /// Messages sent and deliveries confirmed in `team` from `since` (inclusive) to `until`
    /// (exclusive), counted per bucket of `bucket` length; bucket boundaries are multiples of
    /// the bucket length since the Unix epoch ([`crewbus_domain::bucket_start`]). Only buckets
    /// with something in them are returned, ascending (the caller fills the gaps with
    /// [`crewbus_domain::fill_buckets`]). Errors: unknown team → `NotFound`; a bucket under one
    /// second, or more than 10 000 buckets in the range → `Invalid`.
    async fn activity(
        &self,
        team: Uuid,
        since: DateTime<Utc>,
        until: DateTime<Utc>,
        bucket: Duration,
    ) -> BusResult<Vec<ActivityBucket>>;

    /// The bodies `team` keeps, per body backend (by name, byte order): stored and not retained
    /// messages and their bytes, and messages still pending publication; a backend with neither
    /// (only failed or retained messages) is left out. Errors: unknown team → `NotFound`.
    async fn storage_use(&self, team: Uuid) -> BusResult<Vec<StorageUse>>;

    /// The human member `operator` posts as in `team`, made a member of `conversation`: created
    /// the first time (kind `human`, named `<operator name> (human)`, a token hash nobody holds,
    /// joined at `at`), found again afterwards (one per operator and team; a revoked one is
    /// refused). It gets no receipts: nothing is ever delivered to it.
    ///
    /// Errors: unknown team, a conversation unknown or of another team, or a team outside the
    /// operator's scope (as stored) → `NotFound`; the operator revoked (as given or as stored)
    /// or unknown, or its human member revoked → `Forbidden`; another agent of the team already
    /// named `<operator name> (human)` → `Conflict`.
    async fn human_member(
        &self,
        team: Uuid,
        conversation: Uuid,
        operator: &Operator,
        at: DateTime<Utc>,
    ) -> BusResult<Agent>;
}
