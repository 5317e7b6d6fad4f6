//! The ledger port: the bus's authority.

use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use crewbus_domain::{
    Agent, BusResult, ConfirmOutcome, Conversation, DeliveryId, HandOutOutcome, HandOutRequest,
    HistoryPage, InboxEvent, InboxNews, LeasedSlot, LedgerCounts, Message, Receipt, Reported,
    RetentionTarget, RunId, SendRequest, Sent, SettleOutcome, Settlement, SweepTarget, Team,
    TenantId, TokenHash, WakeupTarget,
};
use uuid::Uuid;

/// The authority of the bus for one tenant: teams, agents, conversations, messages, receipts,
/// outbox slots, reference markers, hand-outs, history, retention and the counts health reports.
///
/// Implemented by memory and Postgres; both pass the same conformance functions
/// (`crewbus_conformance::ledger`).
///
/// # Common rules
/// - **Time comes from the caller** (`at`); an implementation never reads a clock. Durations are
///   `std::time::Duration`.
/// - **Every method is one transaction**: it either writes everything it describes or nothing.
/// - **Team scoping**: every id a caller passes together with `team` must belong to that team;
///   another team's conversation, message or agent is `NotFound` (never `Forbidden`: ids of
///   other teams are not revealed).
/// - **Runs**: `send`, `confirm` and `acknowledge` take the acting run. `Some(run)` gets the
///   bus's journal record (`MessageSent`, `MessageDelivered`, `MessageAcknowledged`) in the same
///   transaction. An unknown run, or a run of another team (whatever agent it names) →
///   `NotFound`, so another team's run ids are never confirmed to exist; a run of another agent
///   of the same team → `Forbidden`; a sealed run → `Conflict`; none of these writes anything.
/// - **Limits**: every `limit` is 1 to [`crewbus_domain::MAX_PAGE`], and every batch (members,
///   settlements, message ids, hand-out requests, delivery ids) holds at most `MAX_PAGE` items,
///   else `Invalid`. An empty batch is answered with an empty result.
/// - **Errors** common to every method: the store unreachable or restarting → `Unavailable` or
///   `Timeout` (retryable; nothing or everything was written — an idempotent repeat is safe for
///   `send`, `send_batch`, `settle`, `confirm`, `acknowledge`, `mark_references_published`,
///   `mark_retained`).
#[cfg_attr(feature = "mock", mockall::automock)]
#[async_trait]
pub trait Ledger: Send + Sync {
    /// The tenant this ledger serves.
    fn tenant(&self) -> &TenantId;

    /// The body backend whose bodies this ledger stores itself, in the send transaction
    /// (`Some("postgres")` for Postgres; `None` for memory, whose bodies go through the outbox
    /// like every other backend's).
    fn local_backend(&self) -> Option<&'static str>;

    // ---- teams -------------------------------------------------------------------------------

    /// Creates a team with its default body backend and inbox names.
    ///
    /// Errors: a bad name (see `validate_name`) or an empty backend/inbox name → `Invalid`; the
    /// name is taken in this tenant → `Conflict`.
    async fn create_team(
        &self,
        name: &str,
        body_backend: &str,
        inbox: &str,
        at: DateTime<Utc>,
    ) -> BusResult<Team>;

    /// One team. Errors: unknown → `NotFound`.
    async fn team(&self, team: Uuid) -> BusResult<Team>;

    /// Every team of the tenant, by name.
    async fn teams(&self) -> BusResult<Vec<Team>>;

    /// Changes a team's default body backend and inbox (an operator command). Existing
    /// conversations keep their backend; references already due keep their inbox.
    /// Errors: unknown → `NotFound`; an empty name → `Invalid`.
    async fn set_team_backends(
        &self,
        team: Uuid,
        body_backend: &str,
        inbox: &str,
    ) -> BusResult<Team>;

    // ---- agents ------------------------------------------------------------------------------

    /// Creates an agent of `team` with the hash of its bearer token (never the token). Its
    /// recipient key is `recipient_key_for(id)`.
    ///
    /// Errors: unknown team → `NotFound`; a bad name → `Invalid`; the name taken in the team, or
    /// the token hash already used by any agent or any operator (`crate::Operators`) →
    /// `Conflict`.
    async fn create_agent(
        &self,
        team: Uuid,
        name: &str,
        token_hash: TokenHash,
        at: DateTime<Utc>,
    ) -> BusResult<Agent>;

    /// One agent of `team`. Errors: unknown or another team's → `NotFound`.
    async fn agent(&self, team: Uuid, agent: Uuid) -> BusResult<Agent>;

    /// The agent holding this token hash: how the app authenticates a request.
    /// Errors: no agent, a revoked one, or a team's human member (whatever the hash) →
    /// `Unauthenticated`.
    async fn agent_by_token(&self, token_hash: &TokenHash) -> BusResult<Agent>;

    /// Every agent of `team` (revoked ones included), by name. Errors: unknown team → `NotFound`.
    async fn agents(&self, team: Uuid) -> BusResult<Vec<Agent>>;

    /// Revokes an agent: it never authenticates again, cannot send (`send` → `Forbidden`) and
    /// is handed out, listed and confirmed nothing (`hand_out`, `undelivered`, `confirm` →
    /// `Unauthenticated`), whatever a caller's token cache says. Idempotent (a second revoke
    /// keeps the first `revoked_at`). Its receipts stay. Errors: unknown → `NotFound`.
    async fn revoke_agent(&self, team: Uuid, agent: Uuid, at: DateTime<Utc>) -> BusResult<Agent>;

    // ---- conversations -----------------------------------------------------------------------

    /// Creates a conversation of `team` with `creator` and `members` (duplicates and the creator
    /// listed again are ignored), all joined at `at`. Its backend is the team's default body
    /// backend now, for life.
    ///
    /// Errors: unknown team → `NotFound`; a bad title → `Invalid`; the creator or a member
    /// unknown, of another team, or revoked → `Invalid` (naming it).
    async fn create_conversation(
        &self,
        team: Uuid,
        creator: Uuid,
        title: &str,
        members: &[Uuid],
        at: DateTime<Utc>,
    ) -> BusResult<Conversation>;

    /// One conversation of `team`, with its members. Errors: unknown or another team's →
    /// `NotFound`.
    async fn conversation(&self, team: Uuid, conversation: Uuid) -> BusResult<Conversation>;

    /// Every conversation of `team`, oldest first (operator tools: e.g. whether a body backend
    /// is still used before its streams are removed). Errors: unknown team → `NotFound`.
    async fn conversations(&self, team: Uuid) -> BusResult<Vec<Conversation>>;

    /// The conversations `agent` is a member of, oldest first. Errors: unknown agent →
    /// `NotFound`.
    async fn conversations_for(&self, team: Uuid, agent: Uuid) -> BusResult<Vec<Conversation>>;

    // ---- send --------------------------------------------------------------------------------

    /// Records a message, in one transaction: membership check, the conversation's next gap-free
    /// `seq`, the message (`body_sha256`, the conversation's backend, the sender's kind as
    /// `sender_kind`), one receipt per member other than the sender whose kind is agent
    /// (recipients snapshotted now; a team's human members get none), the run's `MessageSent`
    /// record, and:
    /// - backend ≠ [`Ledger::local_backend`]: an outbox slot with a fresh `publish_key`, the
    ///   message `PendingPublication`;
    /// - backend = `local_backend()`: the body itself and, when it has recipients, the message's
    ///   reference marker (one row, not one per recipient: see
    ///   [`Ledger::lease_inbox_events`]); the message is `Stored` at once, with its locator and
    ///   `stored_at = at`.
    ///
    /// Idempotent on `(conversation, sender, request_id)` ([`crewbus_domain::RequestKey`]): a
    /// repeat with the same body returns the original message as it stands now
    /// (`created: false`) and writes nothing (no record either, even when the run has since been
    /// sealed); with another body → `Conflict`. A request id is the sender's own: another member
    /// sending the same request id in the conversation creates a message of its own. Concurrent
    /// identical requests create one message.
    ///
    /// Order of checks: bad `request_id` → `Invalid`; unknown conversation (or another team's) →
    /// `NotFound`; sender not a member, or revoked → `Forbidden`; run unknown or another
    /// team's → `NotFound`, another agent's → `Forbidden`; the repeat rule; run sealed → `Conflict`.
    async fn send(&self, request: SendRequest, at: DateTime<Utc>) -> BusResult<Sent>;

    /// Group commit: records many sends in **one transaction** (one commit, one WAL flush),
    /// each exactly as [`Ledger::send`] would, and answers **one outcome per request, in order**.
    ///
    /// Within the batch:
    /// - the batch's conversations are locked in id order (Postgres: one `SELECT … FOR NO KEY
    ///   UPDATE` ordered by id), then its runs in id order, so two servers' batches never
    ///   deadlock; every fact below is read under those locks;
    /// - each request is decided by `send`'s order of checks, in queue order
    ///   ([`crewbus_domain::plan_sends`]); a refused request (bad `request_id` → `Invalid`,
    ///   unknown conversation or run → `NotFound`, not an active member or another agent's run →
    ///   `Forbidden`, another body under a used request id or a sealed run → `Conflict`) is its
    ///   own `Err` and never fails the others;
    /// - the repeat rule spans the batch: the first request of a `(conversation, sender,
    ///   request_id)` in queue order wins; a later one with the same body answers the first's
    ///   message (`created: false`), with another body → `Conflict`;
    /// - each conversation's `seq` goes on gap-free in queue order: the accepted requests of a
    ///   conversation get `next_seq`, `next_seq + 1`, …;
    /// - every request's fate is decided before anything is written (no savepoints); then the
    ///   messages, receipts, journal records and outbox slots (or, for the local backend, bodies
    ///   and reference markers) are written as `send` writes them.
    ///
    /// A batch whose every request is refused writes nothing. An empty batch → an empty answer.
    ///
    /// Errors (the outer `Err`, for the whole batch: nothing was written, and the same retryable
    /// error stands for every request): the store unavailable or the commit failing →
    /// `Unavailable` / `Timeout`; more than [`crewbus_domain::MAX_PAGE`] requests → `Invalid`.
    async fn send_batch(
        &self,
        requests: &[SendRequest],
        at: DateTime<Utc>,
    ) -> BusResult<Vec<BusResult<Sent>>>;

    /// One message of `team` as it stands. Errors: unknown or another team's → `NotFound`.
    async fn message(&self, team: Uuid, message: Uuid) -> BusResult<Message>;

    /// Several messages of `team` as they stand, in one read: the batch form of
    /// [`Ledger::message`] (the fetch path reads every candidate at once).
    ///
    /// Returns the known messages in the order of their first appearance in `ids`, each once
    /// (a repeated id is answered once). Unknown ids and other teams' messages are left out (no
    /// error: the caller tells them apart by id). An empty `ids` → an empty answer.
    /// Errors: more than [`crewbus_domain::MAX_PAGE`] ids → `Invalid`; an unknown `team` is not
    /// an error (nothing is found).
    async fn messages(&self, team: Uuid, ids: &[Uuid]) -> BusResult<Vec<Message>>;

    // ---- relay: outbox slots -----------------------------------------------------------------

    /// Leases up to `limit` due slots, oldest due first: slots not failed, with
    /// `next_attempt_at <= at`, and no lease or an expired one (`leased_until <= at`). Each
    /// leased slot's `generation` is bumped and `leased_until` set to `at + lease_for`; two
    /// concurrent callers never lease the same slot (Postgres: `FOR UPDATE SKIP LOCKED`), and a
    /// slot committed after a later one is never skipped for good.
    ///
    /// Errors: `limit` out of range or `lease_for` zero → `Invalid`.
    async fn lease_slots(
        &self,
        at: DateTime<Utc>,
        lease_for: Duration,
        limit: usize,
    ) -> BusResult<Vec<LeasedSlot>>;

    /// Settles leased attempts, one outcome per settlement in order, in one transaction.
    ///
    /// A settlement is applied only when its `generation` is the slot's current one and the
    /// lease is unexpired (`at < leased_until`); otherwise — or for an unknown, deleted or failed
    /// slot — it is `Stale` and writes nothing. Applied:
    /// - `Confirmed` → message `Stored` with the locator and `stored_at = at` (a receipt's
    ///   `stored_at` is read from its message, never copied), slot deleted, and the message's
    ///   reference marker when it has recipients;
    /// - `Retryable` → attempts + 1, due at `next_attempt_at`, uncertain cleared, lease released;
    /// - `Fatal` → message `Failed` with the error's code, slot kept (never leased again);
    /// - `Uncertain` → attempts + 1, slot marked uncertain, due at `next_attempt_at`, lease
    ///   released; the message stays pending.
    ///
    /// The same slot twice in one call: the first applies and releases the lease, so the second
    /// is `Stale`.
    async fn settle(
        &self,
        settlements: &[Settlement],
        at: DateTime<Utc>,
    ) -> BusResult<Vec<SettleOutcome>>;

    // ---- reference worker: reference markers -------------------------------------------------

    /// Leases up to `limit` **messages** whose references are due — stored messages with a
    /// reference marker (written with the body's commit: `send` on the local backend, `settle`'s
    /// `Confirmed`) not yet marked published, whose lease (if any) expired, oldest marker first
    /// — and answers their references: one [`InboxEvent`] per recipient whose receipt is not yet
    /// delivered (a delivered one needs no reference), ordered by marker then recipient key, with
    /// the id [`InboxEvent::id_for`]`(message, recipient)` and the team's inbox as it was when
    /// the body was stored. Each leased marker is hidden from other callers until
    /// `at + lease_for` (one write per message, whatever its number of recipients). Publishing
    /// is idempotent on the event id, so a lease that lapses (a crash between the commit and the
    /// publication, a slow worker, a second server) only causes a repeat the inbox drops: the
    /// references are re-created from the ledger, never lost.
    ///
    /// A due marker whose receipts are all delivered (the top-up handed the message out first)
    /// has nothing left to publish: the lease removes it instead (it counts toward `limit` and
    /// answers no event). Errors: `limit` out of range or `lease_for` zero → `Invalid`.
    async fn lease_inbox_events(
        &self,
        at: DateTime<Utc>,
        lease_for: Duration,
        limit: usize,
    ) -> BusResult<Vec<InboxEvent>>;

    /// Marks the references of `messages` published (after `Inbox::publish_reference`
    /// confirmed every one of them, or refused it for good): their markers are removed and never
    /// leased again. Returns how many markers were removed; unknown messages, messages without a
    /// marker and repeats are ignored (so a repeat after an uncertain answer is safe).
    async fn mark_references_published(
        &self,
        messages: &[Uuid],
        at: DateTime<Utc>,
    ) -> BusResult<u64>;

    // ---- delivery: hand-outs, receipts -------------------------------------------------------

    /// Records hand-outs of candidate messages to `recipient`, one outcome per request in order
    /// (see [`HandOutOutcome`]):
    /// - message unknown, of another team, not `Stored`, or `recipient` not among its receipts →
    ///   `Unknown`;
    /// - receipt already delivered → `AlreadyDelivered`;
    /// - a hand-out of it to `recipient` unconfirmed with `held_until > at`, or the same message
    ///   earlier in this batch → `Held` (an inbox candidate's ack replaces the live hand-out's);
    /// - otherwise → `Issued` with a fresh [`DeliveryId`], `held_until = at + grace`,
    ///   `redelivered` when an earlier hand-out of the message to `recipient` exists or the
    ///   inbox's delivery count is above 1. An inbox candidate's ack is kept with the hand-out.
    ///
    /// This ladder is [`crewbus_domain::plan_hand_outs`]: an implementation reads the facts,
    /// calls it and writes its plan.
    ///
    /// Errors: more than `MAX_PAGE` requests → `Invalid`; unknown recipient (or another
    /// team's) → `NotFound`; a revoked recipient → `Unauthenticated` (the answer its token gets
    /// at the door, so a token a caller still caches is handed nothing; read in the same
    /// transaction; an empty batch too), and nothing is written.
    async fn hand_out(
        &self,
        team: Uuid,
        recipient: Uuid,
        requests: &[HandOutRequest],
        grace: Duration,
        at: DateTime<Utc>,
    ) -> BusResult<Vec<HandOutOutcome>>;

    /// The top-up query: up to `limit` messages `Stored` before `stored_before` whose receipt
    /// for `recipient` is not delivered and that have no live hand-out to `recipient`
    /// (unconfirmed with `held_until > at`), oldest stored first (then conversation, seq).
    /// Hand them out with `HandOutSource::Ledger`. Errors: `limit` out of range → `Invalid`;
    /// unknown recipient (or another team's) → `NotFound`; a revoked recipient →
    /// `Unauthenticated` (as [`Ledger::hand_out`]).
    async fn undelivered(
        &self,
        team: Uuid,
        recipient: Uuid,
        stored_before: DateTime<Utc>,
        at: DateTime<Utc>,
        limit: usize,
    ) -> BusResult<Vec<Uuid>>;

    /// The waiting fetches' and watches' safety sweep, one read for many waiters: of
    /// `targets`, those a waiter should look again for — an agent unknown, of another team, or
    /// revoked (its wait ends with `Unauthenticated`), or with a message `Stored` before
    /// `stored_before` (and after the target's `stored_after`, when it has one) whose receipt is
    /// not delivered and that has no live hand-out to it (what [`Ledger::undelivered`] would
    /// find). Each agent at most once (the same agent listed twice: either entry may wake it),
    /// in no particular order. Errors: more than [`crewbus_domain::MAX_PAGE`] targets →
    /// `Invalid`.
    async fn wakeable(
        &self,
        targets: &[SweepTarget],
        stored_before: DateTime<Utc>,
        at: DateTime<Utc>,
    ) -> BusResult<Vec<WakeupTarget>>;

    /// The inbox watch's read: what is waiting for `recipient` at `at`, and which of it is
    /// news to a watcher that was told of `reported` (see [`InboxNews`]). A message is pending
    /// when it is `Stored`, its receipt for `recipient` is not delivered and it has no live
    /// hand-out to `recipient` (unconfirmed with `held_until > at`) — [`Ledger::undelivered`]'s
    /// condition, whenever stored. The answer: how many are pending; up to `limit` of them that
    /// `reported` does not cover ([`Reported::covers`]), oldest stored first (then
    /// conversation, seq), each with its conversation's title and its sender's name as stored;
    /// and, over the messages held by a live hand-out to `recipient`, undelivered and not
    /// covered, the earliest `held_until` (`next_lapse`) and the oldest `stored_at`
    /// (`oldest_held`).
    ///
    /// Reads only: writes no hand-out, receipt or anything else. Its cost grows with what
    /// `recipient` has undelivered, not with the team's history.
    ///
    /// Errors: `limit` out of range, or more than [`crewbus_domain::MAX_PAGE`] reported ids →
    /// `Invalid`; unknown recipient (or another team's) → `NotFound`; a revoked recipient →
    /// `Unauthenticated` (as [`Ledger::undelivered`]).
    async fn inbox_news(
        &self,
        team: Uuid,
        recipient: Uuid,
        reported: &Reported,
        at: DateTime<Utc>,
        limit: usize,
    ) -> BusResult<InboxNews>;

    /// Confirms hand-outs of `recipient` by delivery id, one outcome per id in order, in one
    /// transaction: the first confirmation of a (message, recipient) sets `delivered_at = at`
    /// and writes `MessageDelivered` to the run → `Confirmed`; any later one, by the same or
    /// another delivery id → `AlreadyConfirmed` (nothing written); an id not issued to
    /// `recipient` → `Unknown`. Both confirmed outcomes carry the inbox ack to send after the
    /// commit; the decision is [`crewbus_domain::decide_confirms`].
    ///
    /// Errors: more than `MAX_PAGE` ids → `Invalid`; unknown recipient (or another team's) →
    /// `NotFound`; a revoked recipient → `Unauthenticated` (as [`Ledger::hand_out`]: its
    /// hand-outs lapse, its receipts stay undelivered, nothing is written); then the run rules
    /// (see the trait docs).
    async fn confirm(
        &self,
        team: Uuid,
        recipient: Uuid,
        deliveries: &[DeliveryId],
        run: Option<RunId>,
        at: DateTime<Utc>,
    ) -> BusResult<Vec<ConfirmOutcome>>;

    /// A recipient says it has read a message: sets `acknowledged_at = at` once and writes
    /// `MessageAcknowledged` to the run; never touches the inbox. A repeat returns the receipt
    /// unchanged (the first time kept) and writes nothing (no record either, even when the run
    /// has since been sealed).
    ///
    /// Order of checks: message unknown or another team's → `NotFound`; `agent` not a
    /// recipient → `Forbidden`; run unknown or another team's → `NotFound`, another agent's →
    /// `Forbidden`; the repeat rule; not yet delivered → `Conflict`; run sealed → `Conflict`.
    async fn acknowledge(
        &self,
        team: Uuid,
        agent: Uuid,
        message: Uuid,
        run: Option<RunId>,
        at: DateTime<Utc>,
    ) -> BusResult<Receipt>;

    /// The receipts of a message, by recipient key. Errors: unknown or another team's message →
    /// `NotFound`.
    async fn receipts(&self, team: Uuid, message: Uuid) -> BusResult<Vec<Receipt>>;

    // ---- history -----------------------------------------------------------------------------

    /// A page of the conversation's messages with `seq > after_seq`, by `HistoryPage::build`:
    /// at most `limit` items, up to and including the first pending message (next cursor
    /// `seq − 1`); failed and retained messages are explained absences that do not stop it.
    /// Errors: unknown or another team's conversation → `NotFound`; bad `limit` → `Invalid`.
    async fn history(
        &self,
        team: Uuid,
        conversation: Uuid,
        after_seq: u64,
        limit: usize,
    ) -> BusResult<HistoryPage>;

    // ---- retention ---------------------------------------------------------------------------

    /// Which (team, body backend) pairs hold `Stored`, not yet retained messages stored before
    /// `before`, with their counts; up to `limit` pairs, by team then backend. The caller runs
    /// `MessagingBackend::retain(before)` on each, then [`Ledger::mark_retained`].
    async fn retention_due(
        &self,
        before: DateTime<Utc>,
        limit: usize,
    ) -> BusResult<Vec<RetentionTarget>>;

    /// Marks the team's `Stored` messages on `backend` stored before `before` as retained
    /// (`retained_at = at`; history shows them as `Retained`). Returns how many changed;
    /// idempotent. Errors: unknown team → `NotFound`.
    async fn mark_retained(
        &self,
        team: Uuid,
        backend: &str,
        before: DateTime<Utc>,
        at: DateTime<Utc>,
    ) -> BusResult<u64>;

    // ---- health and metrics ------------------------------------------------------------------

    /// Counts for health and metrics, taken at `at` (ages are measured from it).
    async fn counts(&self, at: DateTime<Utc>) -> BusResult<LedgerCounts>;
}
