//! The memory ledger: every rule of the `Ledger` port, in process.
//!
//! One file per section of the port, as the trait lists them: `directory` (teams, agents,
//! conversations), `send`, `relay` (outbox slots), `references` (inbox events),
//! `delivery` (messages, hand-outs, confirmations, receipts), `history`, `retention` and
//! `counts`; the tables are in `state`. The same state holds the operators (`operators`:
//! `impl Operators`) and answers the console's reads (`oversight`: `impl Oversight`). The
//! ledger implements [`LedgerSections`](crewbus_ports::LedgerSections) by calling the sections;
//! the port's argument rules are its blanket `impl Ledger`, shared with every ledger.

use std::fmt;
use std::sync::MutexGuard;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use crewbus_domain::{
    Agent, BusError, BusResult, ConfirmOutcome, Conversation, DeliveryId, HandOutOutcome,
    HandOutRequest, HistoryPage, InboxEvent, InboxNews, LeasedSlot, LedgerCounts, Message, Receipt,
    Reported, RetentionTarget, RunId, SendRequest, Sent, SettleOutcome, Settlement, SweepTarget,
    Team, TenantId, TokenHash, WakeupTarget,
};

use uuid::Uuid;

pub use journal::MemoryJournal;
use state::{Shared, State};

mod counts;
mod delivery;
mod directory;
mod history;
mod journal;
mod leases;
mod operators;
mod oversight;
mod references;
mod relay;
mod retention;
mod search;
mod send;
mod send_allowance;
pub(crate) mod state;

/// The in-process [`Ledger`](crewbus_ports::Ledger): one tenant's teams, agents, conversations, messages, receipts,
/// outbox slots, inbox events and hand-outs in memory, with the Postgres ledger's semantics.
///
/// [`Ledger::local_backend`](crewbus_ports::Ledger::local_backend) is `None`: every body, the memory backend's included, goes through
/// the outbox and the relay, so fast tests exercise them too. The ledger shares its state with
/// the [`MemoryJournal`]s made by [`MemoryLedger::journal`], and writes the bus's journal records
/// under the same lock as the change they describe. It never reads a clock: time comes from the
/// caller. Clones share the state.
///
/// A message's whole life — send, relay, reference, hand-out, confirm, acknowledge — as the
/// app's use cases drive it:
///
/// ```
/// use std::time::Duration;
/// use chrono::{TimeZone, Utc};
/// use crewbus_domain::*;
/// use crewbus_memory::MemoryLedger;
/// use crewbus_ports::{Journal, Ledger};
///
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// let ledger = MemoryLedger::new(TenantId::default());
/// let journal = ledger.journal();
/// let t0 = Utc.with_ymd_and_hms(2030, 1, 1, 0, 0, 0).unwrap();
/// let team = ledger.create_team("ops", "memory", "memory", t0).await?;
/// let ana = ledger.create_agent(team.id, "ana", TokenHash::of("token-a"), t0).await?;
/// let bo = ledger.create_agent(team.id, "bo", TokenHash::of("token-b"), t0).await?;
/// let conv = ledger.create_conversation(team.id, ana.id, "standup", &[bo.id], t0).await?;
///
/// // Send: recorded, pending publication, with ana's run journaled.
/// let run = journal.admit(team.id, ana.id, t0).await.unwrap();
/// let sent = ledger.send(SendRequest {
///     team: team.id, conversation: conv.id, sender: ana.id,
///     request_id: "req-1".into(), body: "hello".into(), run: Some(run),
/// }, t0).await?;
/// assert_eq!(sent.message.publication, Publication::PendingPublication);
///
/// // Relay: lease, publish (here: pretend the backend confirmed), settle.
/// let slots = ledger.lease_slots(t0, Duration::from_secs(30), 100).await?;
/// let settled = ledger.settle(&[Settlement {
///     slot: slots[0].slot,
///     generation: slots[0].generation,
///     outcome: SlotOutcome::Confirmed { locator: Locator::new("memory", "1") },
/// }], t0).await?;
/// assert_eq!(settled, vec![SettleOutcome::Applied]);
///
/// // Reference worker: one inbox event for bo; publish it, then mark it published.
/// let events = ledger.lease_inbox_events(t0, Duration::from_secs(30), 100).await?;
/// assert_eq!(events[0].recipient_key, bo.recipient_key);
/// ledger.mark_references_published(&[events[0].message], t0).await?;
///
/// // Fetch for bo: a reference came back from the inbox; record the hand-out.
/// let handed = ledger.hand_out(team.id, bo.id, &[HandOutRequest {
///     message: sent.message.id,
///     source: HandOutSource::Inbox {
///         event_id: events[0].id,
///         ack: InboxAck { inbox: "memory".into(), ack_subject: "opaque".into() },
///         deliveries: 1,
///     },
/// }], Duration::from_secs(60), t0).await?;
/// let HandOutOutcome::Issued(hand_out) = &handed[0] else { panic!("issued") };
///
/// // Confirm (commit the receipt), then ack the returned subject on the inbox.
/// let confirmed = ledger.confirm(team.id, bo.id, &[hand_out.delivery], None, t0).await?;
/// assert!(matches!(&confirmed[0], ConfirmOutcome::Confirmed { ack: Some(_), .. }));
/// let receipt = ledger.acknowledge(team.id, bo.id, sent.message.id, None, t0).await?;
/// assert_eq!(receipt.acknowledged_at, Some(t0));
///
/// let page = ledger.history(team.id, conv.id, 0, 50).await?;
/// assert_eq!((page.items.len(), page.next_after_seq), (1, 1));
/// assert_eq!(journal.read(run, Seq(1), 10).await.unwrap().len(), 2); // admitted, sent
/// # Ok::<(), BusError>(())
/// # }).unwrap();
/// ```
#[derive(Clone)]
pub struct MemoryLedger {
    tenant: TenantId,
    shared: Shared,
}

impl fmt::Debug for MemoryLedger {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryLedger")
            .field("tenant", &self.tenant)
            .finish_non_exhaustive()
    }
}

impl MemoryLedger {
    /// An empty ledger for `tenant`.
    pub fn new(tenant: TenantId) -> Self {
        MemoryLedger {
            tenant,
            shared: Shared::default(),
        }
    }

    /// The journal over this ledger's state (same tenant): runs it admits are the runs the
    /// ledger checks and writes bus records to.
    pub fn journal(&self) -> MemoryJournal {
        MemoryJournal::new(self.tenant.clone(), self.shared.clone())
    }

    /// Fault injection: while `true`, every ledger and journal call fails with a retryable
    /// `Unavailable` and writes nothing (a database that is down).
    pub fn set_unavailable(&self, unavailable: bool) {
        self.shared.set_unavailable(unavailable);
    }

    fn state(&self) -> BusResult<MutexGuard<'_, State>> {
        self.shared
            .lock()
            .ok_or_else(|| BusError::unavailable("memory ledger (outage injected)"))
    }
}

/// The port's argument rules are [`LedgerSections`](crewbus_ports::LedgerSections)' blanket
/// `impl Ledger`; each method here is its section's function.
#[async_trait]
impl crewbus_ports::LedgerSections for MemoryLedger {
    fn tenant(&self) -> &TenantId {
        &self.tenant
    }

    fn local_backend(&self) -> Option<&'static str> {
        None
    }

    async fn create_team(
        &self,
        name: &str,
        body_backend: &str,
        inbox: &str,
        at: DateTime<Utc>,
    ) -> BusResult<Team> {
        directory::create_team(self, name, body_backend, inbox, at)
    }

    async fn team(&self, team: Uuid) -> BusResult<Team> {
        directory::team(self, team)
    }

    async fn teams(&self) -> BusResult<Vec<Team>> {
        directory::teams(self)
    }

    async fn set_team_backends(
        &self,
        team: Uuid,
        body_backend: &str,
        inbox: &str,
    ) -> BusResult<Team> {
        directory::set_team_backends(self, team, body_backend, inbox)
    }

    async fn create_agent(
        &self,
        team: Uuid,
        name: &str,
        token_hash: TokenHash,
        at: DateTime<Utc>,
    ) -> BusResult<Agent> {
        directory::create_agent(self, team, name, token_hash, at)
    }

    async fn agent(&self, team: Uuid, agent: Uuid) -> BusResult<Agent> {
        directory::agent(self, team, agent)
    }

    async fn agent_by_token(&self, token_hash: &TokenHash) -> BusResult<Agent> {
        directory::agent_by_token(self, token_hash)
    }

    async fn agents(&self, team: Uuid) -> BusResult<Vec<Agent>> {
        directory::agents(self, team)
    }

    async fn revoke_agent(&self, team: Uuid, agent: Uuid, at: DateTime<Utc>) -> BusResult<Agent> {
        directory::revoke_agent(self, team, agent, at)
    }

    async fn create_conversation(
        &self,
        team: Uuid,
        creator: Uuid,
        title: &str,
        members: &[Uuid],
        at: DateTime<Utc>,
    ) -> BusResult<Conversation> {
        directory::create_conversation(self, team, creator, title, members, at)
    }

    async fn conversation(&self, team: Uuid, conversation: Uuid) -> BusResult<Conversation> {
        directory::conversation(self, team, conversation)
    }

    async fn conversations(&self, team: Uuid) -> BusResult<Vec<Conversation>> {
        directory::conversations(self, team)
    }

    async fn conversations_for(&self, team: Uuid, agent: Uuid) -> BusResult<Vec<Conversation>> {
        directory::conversations_for(self, team, agent)
    }

    async fn send(&self, request: SendRequest, at: DateTime<Utc>) -> BusResult<Sent> {
        send::send(self, request, at)
    }

    async fn send_batch(
        &self,
        requests: &[SendRequest],
        at: DateTime<Utc>,
    ) -> BusResult<Vec<BusResult<Sent>>> {
        send::send_batch(self, requests, at)
    }

    async fn message(&self, team: Uuid, message: Uuid) -> BusResult<Message> {
        delivery::message(self, team, message)
    }

    async fn messages(&self, team: Uuid, ids: &[Uuid]) -> BusResult<Vec<Message>> {
        delivery::messages(self, team, ids)
    }

    async fn lease_slots(
        &self,
        at: DateTime<Utc>,
        until: DateTime<Utc>,
        limit: usize,
    ) -> BusResult<Vec<LeasedSlot>> {
        relay::lease_slots(self, at, until, limit)
    }

    async fn settle(
        &self,
        settlements: &[Settlement],
        at: DateTime<Utc>,
    ) -> BusResult<Vec<SettleOutcome>> {
        relay::settle(self, settlements, at)
    }

    async fn lease_inbox_events(
        &self,
        at: DateTime<Utc>,
        until: DateTime<Utc>,
        limit: usize,
    ) -> BusResult<Vec<InboxEvent>> {
        references::lease_inbox_events(self, at, until, limit)
    }

    async fn mark_references_published(
        &self,
        messages: &[Uuid],
        at: DateTime<Utc>,
    ) -> BusResult<u64> {
        references::mark_published(self, messages, at)
    }

    async fn hand_out(
        &self,
        team: Uuid,
        recipient: Uuid,
        requests: &[HandOutRequest],
        held_until: DateTime<Utc>,
        at: DateTime<Utc>,
    ) -> BusResult<Vec<HandOutOutcome>> {
        delivery::hand_out(self, team, recipient, requests, held_until, at)
    }

    async fn undelivered(
        &self,
        team: Uuid,
        recipient: Uuid,
        stored_before: DateTime<Utc>,
        at: DateTime<Utc>,
        limit: usize,
    ) -> BusResult<Vec<Uuid>> {
        delivery::undelivered(self, team, recipient, stored_before, at, limit)
    }

    async fn wakeable(
        &self,
        targets: &[SweepTarget],
        stored_before: DateTime<Utc>,
        at: DateTime<Utc>,
    ) -> BusResult<Vec<WakeupTarget>> {
        delivery::wakeable(self, targets, stored_before, at)
    }

    async fn inbox_news(
        &self,
        team: Uuid,
        recipient: Uuid,
        reported: &Reported,
        at: DateTime<Utc>,
        limit: usize,
    ) -> BusResult<InboxNews> {
        delivery::inbox_news(self, team, recipient, reported, at, limit)
    }

    async fn confirm(
        &self,
        team: Uuid,
        recipient: Uuid,
        deliveries: &[DeliveryId],
        run: Option<RunId>,
        at: DateTime<Utc>,
    ) -> BusResult<Vec<ConfirmOutcome>> {
        delivery::confirm(self, team, recipient, deliveries, run, at)
    }

    async fn acknowledge(
        &self,
        team: Uuid,
        agent: Uuid,
        message: Uuid,
        run: Option<RunId>,
        at: DateTime<Utc>,
    ) -> BusResult<Receipt> {
        delivery::acknowledge(self, team, agent, message, run, at)
    }

    async fn receipts(&self, team: Uuid, message: Uuid) -> BusResult<Vec<Receipt>> {
        delivery::receipts(self, team, message)
    }

    async fn history(
        &self,
        team: Uuid,
        conversation: Uuid,
        after_seq: u64,
        limit: usize,
    ) -> BusResult<HistoryPage> {
        history::history(self, team, conversation, after_seq, limit)
    }

    async fn retention_due(
        &self,
        before: DateTime<Utc>,
        limit: usize,
    ) -> BusResult<Vec<RetentionTarget>> {
        retention::retention_due(self, before, limit)
    }

    async fn mark_retained(
        &self,
        team: Uuid,
        backend: &str,
        before: DateTime<Utc>,
        at: DateTime<Utc>,
    ) -> BusResult<u64> {
        retention::mark_retained(self, team, backend, before, at)
    }

    async fn counts(&self, at: DateTime<Utc>) -> BusResult<LedgerCounts> {
        counts::counts(self, at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::Utc;
    use crewbus_ports::{Journal, Ledger};
    use uuid::Uuid;

    fn block_on<F: std::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime")
            .block_on(f)
    }

    #[test]
    fn an_injected_outage_is_retryable_and_writes_nothing() {
        block_on(async {
            let ledger = MemoryLedger::new(TenantId::default());
            let journal = ledger.journal();
            let now = Utc::now();
            ledger.set_unavailable(true);
            let err = ledger
                .create_team("t", "memory", "memory", now)
                .await
                .unwrap_err();
            assert!(matches!(err, BusError::Unavailable { .. }) && err.is_retryable());
            let err = journal
                .admit(Uuid::new_v4(), Uuid::new_v4(), now)
                .await
                .unwrap_err();
            assert!(matches!(
                err,
                crewbus_domain::StoreError::Unavailable { .. }
            ));
            ledger.set_unavailable(false);
            assert!(ledger.teams().await.unwrap().is_empty());
            ledger
                .create_team("t", "memory", "memory", now)
                .await
                .unwrap();
        });
    }

    #[test]
    fn clones_and_journals_share_one_state() {
        block_on(async {
            let ledger = MemoryLedger::new(TenantId::default());
            let clone = ledger.clone();
            let now = Utc::now();
            let team = ledger
                .create_team("t", "memory", "memory", now)
                .await
                .unwrap();
            assert_eq!(clone.team(team.id).await.unwrap(), team);
            let run = ledger
                .journal()
                .admit(team.id, Uuid::new_v4(), now)
                .await
                .unwrap();
            assert!(clone.journal().run(run).await.is_ok());
            assert_eq!(ledger.journal().tenant(), ledger.tenant());
        });
    }
}
