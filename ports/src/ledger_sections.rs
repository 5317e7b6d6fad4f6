//! [`impl_ledger_by_sections!`](crate::impl_ledger_by_sections): the one `impl Ledger` every
//! ledger adapter shares, delegating each method to a section function of the adapter.

/// What the expansion of [`impl_ledger_by_sections!`](crate::impl_ledger_by_sections) names,
/// so the adapter need not import it.
#[doc(hidden)]
pub mod __private {
    pub use async_trait::async_trait;
    pub use chrono::{DateTime, Utc};
    pub use crewbus_domain::{
        Agent, BusResult, ConfirmOutcome, Conversation, DeliveryId, HandOutOutcome, HandOutRequest,
        HistoryPage, InboxEvent, InboxNews, LeasedSlot, LedgerCounts, Message, Receipt, Reported,
        RetentionTarget, RunId, SendRequest, Sent, SettleOutcome, Settlement, SweepTarget, Team,
        TenantId, TokenHash, WakeupTarget, ledger_span, positive_ledger_span,
        validate_backend_name, validate_batch, validate_limit, validate_name, validate_request_id,
    };
    pub use std::time::Duration;
    pub use uuid::Uuid;

    pub use crate::Ledger;
}

/// Implements [`Ledger`](crate::Ledger) for a ledger type by delegating every method to the
/// function of the same name in the section module the port lists it under, after applying the
/// argument rules the port states for every implementation, so that no adapter restates the
/// trait's signatures or those rules.
///
/// The invoking module must have these section modules, each function taking the ledger first
/// (`&Type`) and then the method's arguments:
///
/// - `directory`: `create_team`, `team`, `teams`, `set_team_backends`, `create_agent`, `agent`,
///   `agent_by_token`, `agents`, `revoke_agent`, `create_conversation`, `conversation`,
///   `conversations`, `conversations_for`;
/// - `send`: `send`, `send_batch`;
/// - `relay`: `lease_slots`, `settle`;
/// - `references`: `lease_inbox_events`, `mark_published` (behind `mark_references_published`);
/// - `delivery`: `message`, `messages`, `hand_out`, `undelivered`, `wakeable`, `inbox_news`,
///   `confirm`, `acknowledge`, `receipts`;
/// - `history`: `history`;
/// - `retention`: `retention_due`, `mark_retained`;
/// - `counts`: `counts`.
///
/// Before a section is called, the macro refuses with `Invalid`, in this order, what the port
/// refuses for every implementation: bad team, agent and backend names and conversation titles
/// (`validate_name`, `validate_backend_name`), a bad `request_id` (of `send`; `send_batch`
/// refuses each bad one as its own outcome), a `limit` out of range, a batch over `MAX_PAGE`,
/// a zero `lease_for` and durations out of range (an empty `send_batch` is answered here).
/// Durations arrive at the section as deadlines: `lease_slots` and `lease_inbox_events` get
/// `until = at + lease_for`, `hand_out` gets `held_until = at + grace` (in place of `lease_for` and `grace`).
///
/// `sections: sync` calls the section functions as they are (an in-process ledger);
/// `sections: async` awaits them.
///
/// ```ignore
/// crewbus_ports::impl_ledger_by_sections! {
///     MyLedger { tenant: tenant, local_backend: None, sections: async }
/// }
/// ```
///
/// `tenant` names the field holding the ledger's `TenantId`; `local_backend` is the expression
/// [`Ledger::local_backend`](crate::Ledger::local_backend) returns.
#[macro_export]
macro_rules! impl_ledger_by_sections {
    ($ty:ty { tenant: $tenant:ident, local_backend: $local:expr, sections: sync $(,)? }) => {
        $crate::impl_ledger_by_sections!(@impl $ty, $tenant, $local, []);
    };
    ($ty:ty { tenant: $tenant:ident, local_backend: $local:expr, sections: async $(,)? }) => {
        $crate::impl_ledger_by_sections!(@impl $ty, $tenant, $local, [.await]);
    };
    (@impl $ty:ty, $tenant:ident, $local:expr, [$($aw:tt)*]) => {
        const _: () = {
            use $crate::__ledger_sections::{
                Agent, BusResult, ConfirmOutcome, Conversation, DateTime, DeliveryId, Duration,
                HandOutOutcome, HandOutRequest, HistoryPage, InboxEvent, InboxNews, LeasedSlot,
                Ledger, LedgerCounts, Message, Receipt, Reported, RetentionTarget, RunId,
                SendRequest, Sent, SettleOutcome, Settlement, SweepTarget, Team, TenantId,
                TokenHash, Utc, Uuid, WakeupTarget,
                async_trait, ledger_span, positive_ledger_span, validate_backend_name,
                validate_batch, validate_limit, validate_name, validate_request_id,
            };

            #[async_trait]
            impl Ledger for $ty {
                fn tenant(&self) -> &TenantId {
                    &self.$tenant
                }

                fn local_backend(&self) -> Option<&'static str> {
                    $local
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
                    directory::create_team(self, name, body_backend, inbox, at)$($aw)*
                }

                async fn team(&self, team: Uuid) -> BusResult<Team> {
                    directory::team(self, team)$($aw)*
                }

                async fn teams(&self) -> BusResult<Vec<Team>> {
                    directory::teams(self)$($aw)*
                }

                async fn set_team_backends(
                    &self,
                    team: Uuid,
                    body_backend: &str,
                    inbox: &str,
                ) -> BusResult<Team> {
                    validate_backend_name("body backend", body_backend)?;
                    validate_backend_name("inbox", inbox)?;
                    directory::set_team_backends(self, team, body_backend, inbox)$($aw)*
                }

                async fn create_agent(
                    &self,
                    team: Uuid,
                    name: &str,
                    token_hash: TokenHash,
                    at: DateTime<Utc>,
                ) -> BusResult<Agent> {
                    validate_name("agent name", name)?;
                    directory::create_agent(self, team, name, token_hash, at)$($aw)*
                }

                async fn agent(&self, team: Uuid, agent: Uuid) -> BusResult<Agent> {
                    directory::agent(self, team, agent)$($aw)*
                }

                async fn agent_by_token(&self, token_hash: &TokenHash) -> BusResult<Agent> {
                    directory::agent_by_token(self, token_hash)$($aw)*
                }

                async fn agents(&self, team: Uuid) -> BusResult<Vec<Agent>> {
                    directory::agents(self, team)$($aw)*
                }

                async fn revoke_agent(
                    &self,
                    team: Uuid,
                    agent: Uuid,
                    at: DateTime<Utc>,
                ) -> BusResult<Agent> {
                    directory::revoke_agent(self, team, agent, at)$($aw)*
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
                    directory::create_conversation(self, team, creator, title, members, at)$($aw)*
                }

                async fn conversation(
                    &self,
                    team: Uuid,
                    conversation: Uuid,
                ) -> BusResult<Conversation> {
                    directory::conversation(self, team, conversation)$($aw)*
                }

                async fn conversations(&self, team: Uuid) -> BusResult<Vec<Conversation>> {
                    directory::conversations(self, team)$($aw)*
                }

                async fn conversations_for(
                    &self,
                    team: Uuid,
                    agent: Uuid,
                ) -> BusResult<Vec<Conversation>> {
                    directory::conversations_for(self, team, agent)$($aw)*
                }

                async fn send(&self, request: SendRequest, at: DateTime<Utc>) -> BusResult<Sent> {
                    validate_request_id(&request.request_id)?;
                    send::send(self, request, at)$($aw)*
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
                    send::send_batch(self, requests, at)$($aw)*
                }

                async fn message(&self, team: Uuid, message: Uuid) -> BusResult<Message> {
                    delivery::message(self, team, message)$($aw)*
                }

                async fn messages(&self, team: Uuid, ids: &[Uuid]) -> BusResult<Vec<Message>> {
                    validate_batch(ids.len())?;
                    delivery::messages(self, team, ids)$($aw)*
                }

                async fn lease_slots(
                    &self,
                    at: DateTime<Utc>,
                    lease_for: Duration,
                    limit: usize,
                ) -> BusResult<Vec<LeasedSlot>> {
                    validate_limit(limit)?;
                    let until = at + positive_ledger_span(lease_for, "lease_for")?;
                    relay::lease_slots(self, at, until, limit)$($aw)*
                }

                async fn settle(
                    &self,
                    settlements: &[Settlement],
                    at: DateTime<Utc>,
                ) -> BusResult<Vec<SettleOutcome>> {
                    validate_batch(settlements.len())?;
                    relay::settle(self, settlements, at)$($aw)*
                }

                async fn lease_inbox_events(
                    &self,
                    at: DateTime<Utc>,
                    lease_for: Duration,
                    limit: usize,
                ) -> BusResult<Vec<InboxEvent>> {
                    validate_limit(limit)?;
                    let until = at + positive_ledger_span(lease_for, "lease_for")?;
                    references::lease_inbox_events(self, at, until, limit)$($aw)*
                }

                async fn mark_references_published(
                    &self,
                    messages: &[Uuid],
                    at: DateTime<Utc>,
                ) -> BusResult<u64> {
                    validate_batch(messages.len())?;
                    references::mark_published(self, messages, at)$($aw)*
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
                    delivery::hand_out(self, team, recipient, requests, held_until, at)$($aw)*
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
                    delivery::undelivered(self, team, recipient, stored_before, at, limit)$($aw)*
                }

                async fn wakeable(
                    &self,
                    targets: &[SweepTarget],
                    stored_before: DateTime<Utc>,
                    at: DateTime<Utc>,
                ) -> BusResult<Vec<WakeupTarget>> {
                    validate_batch(targets.len())?;
                    delivery::wakeable(self, targets, stored_before, at)$($aw)*
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
                    delivery::inbox_news(self, team, recipient, reported, at, limit)$($aw)*
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
                    delivery::confirm(self, team, recipient, deliveries, run, at)$($aw)*
                }

                async fn acknowledge(
                    &self,
                    team: Uuid,
                    agent: Uuid,
                    message: Uuid,
                    run: Option<RunId>,
                    at: DateTime<Utc>,
                ) -> BusResult<Receipt> {
                    delivery::acknowledge(self, team, agent, message, run, at)$($aw)*
                }

                async fn receipts(&self, team: Uuid, message: Uuid) -> BusResult<Vec<Receipt>> {
                    delivery::receipts(self, team, message)$($aw)*
                }

                async fn history(
                    &self,
                    team: Uuid,
                    conversation: Uuid,
                    after_seq: u64,
                    limit: usize,
                ) -> BusResult<HistoryPage> {
                    validate_limit(limit)?;
                    history::history(self, team, conversation, after_seq, limit)$($aw)*
                }

                async fn retention_due(
                    &self,
                    before: DateTime<Utc>,
                    limit: usize,
                ) -> BusResult<Vec<RetentionTarget>> {
                    validate_limit(limit)?;
                    retention::retention_due(self, before, limit)$($aw)*
                }

                async fn mark_retained(
                    &self,
                    team: Uuid,
                    backend: &str,
                    before: DateTime<Utc>,
                    at: DateTime<Utc>,
                ) -> BusResult<u64> {
                    retention::mark_retained(self, team, backend, before, at)$($aw)*
                }

                async fn counts(&self, at: DateTime<Utc>) -> BusResult<LedgerCounts> {
                    counts::counts(self, at)$($aw)*
                }
            }
        };
    };
}
