//! [`LedgerSections`]: the ledger as an adapter writes it, and the one `impl Ledger` every
//! ledger shares, which applies the port's argument rules before it delegates.

use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use crewbus_domain::{
    Agent, BusResult, ConfirmOutcome, Conversation, DeliveryId, HandOutOutcome, HandOutRequest,
    HistoryPage, InboxEvent, InboxNews, LeasedSlot, LedgerCounts, Message, Receipt, Reported,
    RetentionTarget, RunId, SendRequest, Sent, SettleOutcome, Settlement, SweepTarget, Team,
    TenantId, TokenHash, WakeupTarget, ledger_span, positive_ledger_span, validate_backend_name,
    validate_batch, validate_limit, validate_name, validate_request_id,
};
use uuid::Uuid;

use crate::Ledger;

/// The [`Ledger`] port as a ledger adapter implements it (the memory ledger, the SQL ledger of
/// each dialect): every method of the port with its arguments already checked. Implement this,
/// not `Ledger`: every `LedgerSections` is a `Ledger` (the blanket `impl Ledger` below), which
/// first refuses with `Invalid`, in this order, what the port refuses for every
/// implementation — bad team, agent and backend names and conversation titles
/// (`validate_name`, `validate_backend_name`), a bad `request_id` (of `send`; `send_batch`
/// refuses each bad one as its own outcome), a `limit` out of range, a batch over `MAX_PAGE`, a
/// zero `lease_for` and durations out of range — answers an empty `send_batch` itself, and
/// hands durations over as deadlines: `lease_slots` and `lease_inbox_events` get
/// `until = at + lease_for`, `hand_out` gets `held_until = at + grace`.
///
/// So the argument rules live here once (as OpenDAL applies one checking layer to every
/// service), and an adapter's method may assume them. Each method's contract is the port's.
#[async_trait]
pub trait LedgerSections: Send + Sync {
    /// [`Ledger::tenant`].
    fn tenant(&self) -> &TenantId;

    /// [`Ledger::local_backend`].
    fn local_backend(&self) -> Option<&'static str>;

    /// [`Ledger::create_team`].
    async fn create_team(
        &self,
        name: &str,
        body_backend: &str,
        inbox: &str,
        at: DateTime<Utc>,
    ) -> BusResult<Team>;

    /// [`Ledger::team`].
    async fn team(&self, team: Uuid) -> BusResult<Team>;

    /// [`Ledger::teams`].
    async fn teams(&self) -> BusResult<Vec<Team>>;

    /// [`Ledger::set_team_backends`].
    async fn set_team_backends(
        &self,
        team: Uuid,
        body_backend: &str,
        inbox: &str,
    ) -> BusResult<Team>;

    /// [`Ledger::create_agent`].
    async fn create_agent(
        &self,
        team: Uuid,
        name: &str,
        token_hash: TokenHash,
        at: DateTime<Utc>,
    ) -> BusResult<Agent>;

    /// [`Ledger::agent`].
    async fn agent(&self, team: Uuid, agent: Uuid) -> BusResult<Agent>;

    /// [`Ledger::agent_by_token`].
    async fn agent_by_token(&self, token_hash: &TokenHash) -> BusResult<Agent>;

    /// [`Ledger::agents`].
    async fn agents(&self, team: Uuid) -> BusResult<Vec<Agent>>;

    /// [`Ledger::revoke_agent`].
    async fn revoke_agent(&self, team: Uuid, agent: Uuid, at: DateTime<Utc>) -> BusResult<Agent>;

    /// [`Ledger::create_conversation`].
    async fn create_conversation(
        &self,
        team: Uuid,
        creator: Uuid,
        title: &str,
        members: &[Uuid],
        at: DateTime<Utc>,
    ) -> BusResult<Conversation>;

    /// [`Ledger::conversation`].
    async fn conversation(&self, team: Uuid, conversation: Uuid) -> BusResult<Conversation>;

    /// [`Ledger::conversations`].
    async fn conversations(&self, team: Uuid) -> BusResult<Vec<Conversation>>;

    /// [`Ledger::conversations_for`].
    async fn conversations_for(&self, team: Uuid, agent: Uuid) -> BusResult<Vec<Conversation>>;

    /// [`Ledger::send`].
    async fn send(&self, request: SendRequest, at: DateTime<Utc>) -> BusResult<Sent>;

    /// [`Ledger::send_batch`], `requests` not empty.
    async fn send_batch(
        &self,
        requests: &[SendRequest],
        at: DateTime<Utc>,
    ) -> BusResult<Vec<BusResult<Sent>>>;

    /// [`Ledger::message`].
    async fn message(&self, team: Uuid, message: Uuid) -> BusResult<Message>;

    /// [`Ledger::messages`].
    async fn messages(&self, team: Uuid, ids: &[Uuid]) -> BusResult<Vec<Message>>;

    /// [`Ledger::lease_slots`], the lease ending at `until` (`at + lease_for`).
    async fn lease_slots(
        &self,
        at: DateTime<Utc>,
        until: DateTime<Utc>,
        limit: usize,
    ) -> BusResult<Vec<LeasedSlot>>;

    /// [`Ledger::settle`].
    async fn settle(
        &self,
        settlements: &[Settlement],
        at: DateTime<Utc>,
    ) -> BusResult<Vec<SettleOutcome>>;

    /// [`Ledger::lease_inbox_events`], the lease ending at `until` (`at + lease_for`).
    async fn lease_inbox_events(
        &self,
        at: DateTime<Utc>,
        until: DateTime<Utc>,
        limit: usize,
    ) -> BusResult<Vec<InboxEvent>>;

    /// [`Ledger::mark_references_published`].
    async fn mark_references_published(
        &self,
        messages: &[Uuid],
        at: DateTime<Utc>,
    ) -> BusResult<u64>;

    /// [`Ledger::hand_out`], held until `held_until` (`at + grace`).
    async fn hand_out(
        &self,
        team: Uuid,
        recipient: Uuid,
        requests: &[HandOutRequest],
        held_until: DateTime<Utc>,
        at: DateTime<Utc>,
    ) -> BusResult<Vec<HandOutOutcome>>;

    /// [`Ledger::undelivered`].
    async fn undelivered(
        &self,
        team: Uuid,
        recipient: Uuid,
        stored_before: DateTime<Utc>,
        at: DateTime<Utc>,
        limit: usize,
    ) -> BusResult<Vec<Uuid>>;

    /// [`Ledger::wakeable`].
    async fn wakeable(
        &self,
        targets: &[SweepTarget],
        stored_before: DateTime<Utc>,
        at: DateTime<Utc>,
    ) -> BusResult<Vec<WakeupTarget>>;

    /// [`Ledger::inbox_news`].
    async fn inbox_news(
        &self,
        team: Uuid,
        recipient: Uuid,
        reported: &Reported,
        at: DateTime<Utc>,
        limit: usize,
    ) -> BusResult<InboxNews>;

    /// [`Ledger::confirm`].
    async fn confirm(
        &self,
        team: Uuid,
        recipient: Uuid,
        deliveries: &[DeliveryId],
        run: Option<RunId>,
        at: DateTime<Utc>,
    ) -> BusResult<Vec<ConfirmOutcome>>;

    /// [`Ledger::acknowledge`].
    async fn acknowledge(
        &self,
        team: Uuid,
        agent: Uuid,
        message: Uuid,
        run: Option<RunId>,
        at: DateTime<Utc>,
    ) -> BusResult<Receipt>;

    /// [`Ledger::receipts`].
    async fn receipts(&self, team: Uuid, message: Uuid) -> BusResult<Vec<Receipt>>;

    /// [`Ledger::history`].
    async fn history(
        &self,
        team: Uuid,
        conversation: Uuid,
        after_seq: u64,
        limit: usize,
    ) -> BusResult<HistoryPage>;

    /// [`Ledger::retention_due`].
    async fn retention_due(
        &self,
        before: DateTime<Utc>,
        limit: usize,
    ) -> BusResult<Vec<RetentionTarget>>;

    /// [`Ledger::mark_retained`].
    async fn mark_retained(
        &self,
        team: Uuid,
        backend: &str,
        before: DateTime<Utc>,
        at: DateTime<Utc>,
    ) -> BusResult<u64>;

    /// [`Ledger::counts`].
    async fn counts(&self, at: DateTime<Utc>) -> BusResult<LedgerCounts>;
}

#[async_trait]
impl<L: LedgerSections> Ledger for L {
    fn tenant(&self) -> &TenantId {
        LedgerSections::tenant(self)
    }

    fn local_backend(&self) -> Option<&'static str> {
        LedgerSections::local_backend(self)
    }

    async fn create_team(
        &self,
        name: &str,
        body_backend: &str,
        inbox: &str,
        at: DateTime<Utc>,
    ) -> BusResult<Team> {
        validate_name("team name", name)?;
        validate_backend_name("body backend", body_backend)?;
        validate_backend_name("inbox", inbox)?;
        LedgerSections::create_team(self, name, body_backend, inbox, at).await
    }

    async fn team(&self, team: Uuid) -> BusResult<Team> {
        LedgerSections::team(self, team).await
    }

    async fn teams(&self) -> BusResult<Vec<Team>> {
        LedgerSections::teams(self).await
    }

    async fn set_team_backends(
        &self,
        team: Uuid,
        body_backend: &str,
        inbox: &str,
    ) -> BusResult<Team> {
        validate_backend_name("body backend", body_backend)?;
        validate_backend_name("inbox", inbox)?;
        LedgerSections::set_team_backends(self, team, body_backend, inbox).await
    }

    async fn create_agent(
        &self,
        team: Uuid,
        name: &str,
        token_hash: TokenHash,
        at: DateTime<Utc>,
    ) -> BusResult<Agent> {
        validate_name("agent name", name)?;
        LedgerSections::create_agent(self, team, name, token_hash, at).await
    }

    async fn agent(&self, team: Uuid, agent: Uuid) -> BusResult<Agent> {
        LedgerSections::agent(self, team, agent).await
    }

    async fn agent_by_token(&self, token_hash: &TokenHash) -> BusResult<Agent> {
        LedgerSections::agent_by_token(self, token_hash).await
    }

    async fn agents(&self, team: Uuid) -> BusResult<Vec<Agent>> {
        LedgerSections::agents(self, team).await
    }

    async fn revoke_agent(&self, team: Uuid, agent: Uuid, at: DateTime<Utc>) -> BusResult<Agent> {
        LedgerSections::revoke_agent(self, team, agent, at).await
    }

    async fn create_conversation(
        &self,
        team: Uuid,
        creator: Uuid,
        title: &str,
        members: &[Uuid],
        at: DateTime<Utc>,
    ) -> BusResult<Conversation> {
        validate_name("conversation title", title)?;
        validate_batch(members.len())?;
        LedgerSections::create_conversation(self, team, creator, title, members, at).await
    }

    async fn conversation(&self, team: Uuid, conversation: Uuid) -> BusResult<Conversation> {
        LedgerSections::conversation(self, team, conversation).await
    }

    async fn conversations(&self, team: Uuid) -> BusResult<Vec<Conversation>> {
        LedgerSections::conversations(self, team).await
    }

    async fn conversations_for(&self, team: Uuid, agent: Uuid) -> BusResult<Vec<Conversation>> {
        LedgerSections::conversations_for(self, team, agent).await
    }

    async fn send(&self, request: SendRequest, at: DateTime<Utc>) -> BusResult<Sent> {
        validate_request_id(&request.request_id)?;
        LedgerSections::send(self, request, at).await
    }

    async fn send_batch(
        &self,
        requests: &[SendRequest],
        at: DateTime<Utc>,
    ) -> BusResult<Vec<BusResult<Sent>>> {
        validate_batch(requests.len())?;
        if requests.is_empty() {
            return Ok(Vec::new());
        }
        LedgerSections::send_batch(self, requests, at).await
    }

    async fn message(&self, team: Uuid, message: Uuid) -> BusResult<Message> {
        LedgerSections::message(self, team, message).await
    }

    async fn messages(&self, team: Uuid, ids: &[Uuid]) -> BusResult<Vec<Message>> {
        validate_batch(ids.len())?;
        LedgerSections::messages(self, team, ids).await
    }

    async fn lease_slots(
        &self,
        at: DateTime<Utc>,
        lease_for: Duration,
        limit: usize,
    ) -> BusResult<Vec<LeasedSlot>> {
        validate_limit(limit)?;
        let until = at + positive_ledger_span(lease_for, "lease_for")?;
        LedgerSections::lease_slots(self, at, until, limit).await
    }

    async fn settle(
        &self,
        settlements: &[Settlement],
        at: DateTime<Utc>,
    ) -> BusResult<Vec<SettleOutcome>> {
        validate_batch(settlements.len())?;
        LedgerSections::settle(self, settlements, at).await
    }

    async fn lease_inbox_events(
        &self,
        at: DateTime<Utc>,
        lease_for: Duration,
        limit: usize,
    ) -> BusResult<Vec<InboxEvent>> {
        validate_limit(limit)?;
        let until = at + positive_ledger_span(lease_for, "lease_for")?;
        LedgerSections::lease_inbox_events(self, at, until, limit).await
    }

    async fn mark_references_published(
        &self,
        messages: &[Uuid],
        at: DateTime<Utc>,
    ) -> BusResult<u64> {
        validate_batch(messages.len())?;
        LedgerSections::mark_references_published(self, messages, at).await
    }

    async fn hand_out(
        &self,
        team: Uuid,
        recipient: Uuid,
        requests: &[HandOutRequest],
        grace: Duration,
        at: DateTime<Utc>,
    ) -> BusResult<Vec<HandOutOutcome>> {
        validate_batch(requests.len())?;
        let held_until = at + ledger_span(grace)?;
        LedgerSections::hand_out(self, team, recipient, requests, held_until, at).await
    }

    async fn undelivered(
        &self,
        team: Uuid,
        recipient: Uuid,
        stored_before: DateTime<Utc>,
        at: DateTime<Utc>,
        limit: usize,
    ) -> BusResult<Vec<Uuid>> {
        validate_limit(limit)?;
        LedgerSections::undelivered(self, team, recipient, stored_before, at, limit).await
    }

    async fn wakeable(
        &self,
        targets: &[SweepTarget],
        stored_before: DateTime<Utc>,
        at: DateTime<Utc>,
    ) -> BusResult<Vec<WakeupTarget>> {
        validate_batch(targets.len())?;
        LedgerSections::wakeable(self, targets, stored_before, at).await
    }

    async fn inbox_news(
        &self,
        team: Uuid,
        recipient: Uuid,
        reported: &Reported,
        at: DateTime<Utc>,
        limit: usize,
    ) -> BusResult<InboxNews> {
        validate_limit(limit)?;
        validate_batch(reported.ids.len())?;
        LedgerSections::inbox_news(self, team, recipient, reported, at, limit).await
    }

    async fn confirm(
        &self,
        team: Uuid,
        recipient: Uuid,
        deliveries: &[DeliveryId],
        run: Option<RunId>,
        at: DateTime<Utc>,
    ) -> BusResult<Vec<ConfirmOutcome>> {
        validate_batch(deliveries.len())?;
        LedgerSections::confirm(self, team, recipient, deliveries, run, at).await
    }

    async fn acknowledge(
        &self,
        team: Uuid,
        agent: Uuid,
        message: Uuid,
        run: Option<RunId>,
        at: DateTime<Utc>,
    ) -> BusResult<Receipt> {
        LedgerSections::acknowledge(self, team, agent, message, run, at).await
    }

    async fn receipts(&self, team: Uuid, message: Uuid) -> BusResult<Vec<Receipt>> {
        LedgerSections::receipts(self, team, message).await
    }

    async fn history(
        &self,
        team: Uuid,
        conversation: Uuid,
        after_seq: u64,
        limit: usize,
    ) -> BusResult<HistoryPage> {
        validate_limit(limit)?;
        LedgerSections::history(self, team, conversation, after_seq, limit).await
    }

    async fn retention_due(
        &self,
        before: DateTime<Utc>,
        limit: usize,
    ) -> BusResult<Vec<RetentionTarget>> {
        validate_limit(limit)?;
        LedgerSections::retention_due(self, before, limit).await
    }

    async fn mark_retained(
        &self,
        team: Uuid,
        backend: &str,
        before: DateTime<Utc>,
        at: DateTime<Utc>,
    ) -> BusResult<u64> {
        LedgerSections::mark_retained(self, team, backend, before, at).await
    }

    async fn counts(&self, at: DateTime<Utc>) -> BusResult<LedgerCounts> {
        LedgerSections::counts(self, at).await
    }
}
