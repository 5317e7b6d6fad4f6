//! The memory ledger: every rule of the `Ledger` port, in process.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::sync::MutexGuard;
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use crewbus_domain::{
    Agent, BusError, BusResult, ConfirmOutcome, Conversation, DeliveryId, Envelope, HandOut,
    HandOutOutcome, HandOutRequest, HandOutSource, HistoryPage, InboxEvent, LeasedSlot,
    LedgerCounts, Member, Message, Publication, Receipt, RecordKind, ReferencePayload,
    RetentionTarget, RunId, SendRequest, Sent, SettleOutcome, Settlement, SlotOutcome, Team,
    TenantId, TokenHash, WakeupTarget, body_sha256, ledger_span, positive_ledger_span,
    recipient_key_for, validate_backend_name, validate_batch, validate_limit, validate_name,
    validate_request_id,
};
use crewbus_ports::Ledger;
use uuid::Uuid;

use crate::journal::MemoryJournal;
use crate::ledger_state::{ConversationRow, EventRow, HandOutRow, Shared, Slot, State};

/// The in-process [`Ledger`]: one tenant's teams, agents, conversations, messages, receipts,
/// outbox slots, inbox events and hand-outs in memory, with the Postgres ledger's semantics.
///
/// [`Ledger::local_backend`] is `None`: every body, the memory backend's included, goes through
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
/// ledger.mark_published(&[events[0].id], t0).await?;
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

impl State {
    fn team_of(&self, team: Uuid) -> BusResult<&Team> {
        self.teams
            .get(&team)
            .ok_or_else(|| BusError::not_found(format!("team {team}")))
    }

    fn agent_of(&self, team: Uuid, agent: Uuid) -> BusResult<&Agent> {
        self.agents
            .get(&agent)
            .filter(|a| a.team == team)
            .ok_or_else(|| BusError::not_found(format!("agent {agent}")))
    }

    fn conversation_of(&self, team: Uuid, conversation: Uuid) -> BusResult<&ConversationRow> {
        self.conversations
            .get(&conversation)
            .filter(|c| c.conversation.team == team)
            .ok_or_else(|| BusError::not_found(format!("conversation {conversation}")))
    }

    fn message_of(&self, team: Uuid, message: Uuid) -> BusResult<&Message> {
        self.messages
            .get(&message)
            .filter(|m| m.team == team)
            .ok_or_else(|| BusError::not_found(format!("message {message}")))
    }

    /// The hand-out of (message, recipient) that still holds the message at `at`.
    fn live_hand_out(
        &self,
        message: Uuid,
        recipient: Uuid,
        at: DateTime<Utc>,
    ) -> Option<DeliveryId> {
        self.hand_outs_by_pair
            .get(&(message, recipient))?
            .iter()
            .rev()
            .find(|id| {
                let row = &self.hand_outs[*id];
                row.confirmed_at.is_none() && row.hand_out.held_until > at
            })
            .copied()
    }
}

#[async_trait]
impl Ledger for MemoryLedger {
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
        validate_name("team name", name)?;
        validate_backend_name("body backend", body_backend)?;
        validate_backend_name("inbox", inbox)?;
        let mut st = self.state()?;
        if st.teams.values().any(|t| t.name == name) {
            return Err(BusError::conflict(format!("team name {name:?} is taken")));
        }
        let team = Team {
            id: Uuid::new_v4(),
            name: name.to_owned(),
            body_backend: body_backend.to_owned(),
            inbox: inbox.to_owned(),
            created_at: at,
        };
        st.teams.insert(team.id, team.clone());
        Ok(team)
    }

    async fn team(&self, team: Uuid) -> BusResult<Team> {
        self.state()?.team_of(team).cloned()
    }

    async fn teams(&self) -> BusResult<Vec<Team>> {
        let st = self.state()?;
        let mut teams: Vec<Team> = st.teams.values().cloned().collect();
        teams.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(teams)
    }

    async fn set_team_backends(
        &self,
        team: Uuid,
        body_backend: &str,
        inbox: &str,
    ) -> BusResult<Team> {
        validate_backend_name("body backend", body_backend)?;
        validate_backend_name("inbox", inbox)?;
        let mut st = self.state()?;
        st.team_of(team)?;
        let t = st.teams.get_mut(&team).expect("checked above");
        t.body_backend = body_backend.to_owned();
        t.inbox = inbox.to_owned();
        Ok(t.clone())
    }

    async fn create_agent(
        &self,
        team: Uuid,
        name: &str,
        token_hash: TokenHash,
        at: DateTime<Utc>,
    ) -> BusResult<Agent> {
        validate_name("agent name", name)?;
        let mut st = self.state()?;
        st.team_of(team)?;
        if st.agents.values().any(|a| a.team == team && a.name == name) {
            return Err(BusError::conflict(format!("agent name {name:?} is taken")));
        }
        if st.tokens.contains_key(&token_hash) {
            return Err(BusError::conflict("token hash is already in use"));
        }
        let id = Uuid::new_v4();
        let agent = Agent {
            id,
            team,
            name: name.to_owned(),
            recipient_key: recipient_key_for(id),
            token_hash,
            created_at: at,
            revoked_at: None,
        };
        st.tokens.insert(token_hash, id);
        st.agents.insert(id, agent.clone());
        Ok(agent)
    }

    async fn agent(&self, team: Uuid, agent: Uuid) -> BusResult<Agent> {
        self.state()?.agent_of(team, agent).cloned()
    }

    async fn agent_by_token(&self, token_hash: &TokenHash) -> BusResult<Agent> {
        let st = self.state()?;
        st.tokens
            .get(token_hash)
            .and_then(|id| st.agents.get(id))
            .filter(|a| !a.revoked())
            .cloned()
            .ok_or(BusError::Unauthenticated)
    }

    async fn agents(&self, team: Uuid) -> BusResult<Vec<Agent>> {
        let st = self.state()?;
        st.team_of(team)?;
        let mut agents: Vec<Agent> = st
            .agents
            .values()
            .filter(|a| a.team == team)
            .cloned()
            .collect();
        agents.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(agents)
    }

    async fn revoke_agent(&self, team: Uuid, agent: Uuid, at: DateTime<Utc>) -> BusResult<Agent> {
        let mut st = self.state()?;
        st.agent_of(team, agent)?;
        let a = st.agents.get_mut(&agent).expect("checked above");
        a.revoked_at.get_or_insert(at);
        Ok(a.clone())
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
        let mut st = self.state()?;
        let backend = st.team_of(team)?.body_backend.clone();
        let mut seen = HashSet::new();
        let mut list = Vec::new();
        for id in std::iter::once(&creator).chain(members) {
            if !seen.insert(*id) {
                continue;
            }
            let agent = st
                .agents
                .get(id)
                .filter(|a| a.team == team && !a.revoked())
                .ok_or_else(|| {
                    BusError::invalid(format!("agent {id} is not an active agent of the team"))
                })?;
            list.push(Member {
                agent: agent.id,
                recipient_key: agent.recipient_key.clone(),
                joined_at: at,
            });
        }
        list.sort_by_key(|a| (a.joined_at, a.agent));
        let conversation = Conversation {
            id: Uuid::new_v4(),
            team,
            title: title.to_owned(),
            backend,
            created_at: at,
            members: list,
        };
        let order = st.next_order();
        st.conversations.insert(
            conversation.id,
            ConversationRow {
                conversation: conversation.clone(),
                order,
                messages: BTreeMap::new(),
                requests: HashMap::new(),
            },
        );
        Ok(conversation)
    }

    async fn conversation(&self, team: Uuid, conversation: Uuid) -> BusResult<Conversation> {
        Ok(self
            .state()?
            .conversation_of(team, conversation)?
            .conversation
            .clone())
    }

    async fn conversations(&self, team: Uuid) -> BusResult<Vec<Conversation>> {
        let st = self.state()?;
        st.team_of(team)?;
        let mut rows: Vec<&ConversationRow> = st
            .conversations
            .values()
            .filter(|c| c.conversation.team == team)
            .collect();
        rows.sort_by_key(|c| c.order);
        Ok(rows.into_iter().map(|c| c.conversation.clone()).collect())
    }

    async fn conversations_for(&self, team: Uuid, agent: Uuid) -> BusResult<Vec<Conversation>> {
        let st = self.state()?;
        st.agent_of(team, agent)?;
        let mut rows: Vec<&ConversationRow> = st
            .conversations
            .values()
            .filter(|c| c.conversation.team == team && c.conversation.has_member(agent))
            .collect();
        rows.sort_by_key(|c| c.order);
        Ok(rows.into_iter().map(|c| c.conversation.clone()).collect())
    }

    async fn send(&self, request: SendRequest, at: DateTime<Utc>) -> BusResult<Sent> {
        validate_request_id(&request.request_id)?;
        let mut st = self.state()?;
        let row = st.conversation_of(request.team, request.conversation)?;
        let conversation = row.conversation.clone();
        let sender_ok = st
            .agents
            .get(&request.sender)
            .is_some_and(|a| a.team == request.team && !a.revoked())
            && conversation.has_member(request.sender);
        if !sender_ok {
            return Err(BusError::forbidden(
                "the sender is not an active member of the conversation",
            ));
        }
        st.check_run_owner(request.run, request.team, request.sender)?;
        let sha = body_sha256(&request.body);
        if let Some(existing) = row.requests.get(&request.request_id) {
            let message = st.messages[existing].clone();
            if message.body_sha256 != sha {
                return Err(BusError::conflict(
                    "request id was already used with another body",
                ));
            }
            return Ok(Sent {
                message,
                created: false,
            });
        }
        st.check_run_open(request.run)?;

        let seq = row.messages.keys().next_back().copied().unwrap_or(0) + 1;
        let id = Uuid::new_v4();
        let message = Message {
            id,
            team: request.team,
            conversation: conversation.id,
            seq,
            sender: request.sender,
            request_id: request.request_id.clone(),
            body_sha256: sha,
            body_len: request.body.len() as u64,
            backend: conversation.backend.clone(),
            locator: None,
            publication: Publication::PendingPublication,
            sent_at: at,
            stored_at: None,
            retained_at: None,
            failure: None,
        };
        let recipients: Vec<&Member> = conversation
            .members
            .iter()
            .filter(|m| m.agent != request.sender)
            .collect();
        for m in &recipients {
            st.receipts.insert(
                (id, m.agent),
                Receipt {
                    message: id,
                    recipient: m.agent,
                    recipient_key: m.recipient_key.clone(),
                    stored_at: None,
                    delivered_at: None,
                    acknowledged_at: None,
                },
            );
            st.by_recipient.entry(m.agent).or_default().push(id);
        }
        st.recipients
            .insert(id, recipients.iter().map(|m| m.agent).collect());
        let order = st.next_order();
        let slot = Slot {
            id: Uuid::new_v4(),
            order,
            backend: conversation.backend.clone(),
            envelope: Envelope {
                message_id: id,
                conversation_id: conversation.id,
                team_id: request.team,
                body: request.body,
                publish_key: Uuid::new_v4(),
            },
            generation: 0,
            attempts: 0,
            uncertain: false,
            failed: false,
            next_attempt_at: at,
            leased_until: None,
            last_error: None,
        };
        st.slots.insert(slot.id, slot);
        st.messages.insert(id, message.clone());
        let row = st
            .conversations
            .get_mut(&conversation.id)
            .expect("checked above");
        row.messages.insert(seq, id);
        row.requests.insert(request.request_id, id);
        st.record(
            request.run,
            at,
            RecordKind::MessageSent {
                conversation: conversation.id,
                message: id,
                seq,
            },
        );
        Ok(Sent {
            message,
            created: true,
        })
    }

    async fn message(&self, team: Uuid, message: Uuid) -> BusResult<Message> {
        self.state()?.message_of(team, message).cloned()
    }

    async fn messages(&self, team: Uuid, ids: &[Uuid]) -> BusResult<Vec<Message>> {
        validate_batch(ids.len())?;
        let st = self.state()?;
        let mut seen = HashSet::with_capacity(ids.len());
        Ok(ids
            .iter()
            .filter(|id| seen.insert(**id))
            .filter_map(|id| st.message_of(team, *id).ok().cloned())
            .collect())
    }

    async fn lease_slots(
        &self,
        at: DateTime<Utc>,
        lease_for: Duration,
        limit: usize,
    ) -> BusResult<Vec<LeasedSlot>> {
        validate_limit(limit)?;
        let until = at + positive_ledger_span(lease_for, "lease_for")?;
        let mut st = self.state()?;
        let mut due: Vec<(DateTime<Utc>, u64, Uuid)> = st
            .slots
            .values()
            .filter(|s| {
                !s.failed && s.next_attempt_at <= at && s.leased_until.is_none_or(|u| u <= at)
            })
            .map(|s| (s.next_attempt_at, s.order, s.id))
            .collect();
        due.sort();
        due.truncate(limit);
        Ok(due
            .into_iter()
            .map(|(_, _, id)| {
                let s = st.slots.get_mut(&id).expect("collected above");
                s.generation += 1;
                s.leased_until = Some(until);
                LeasedSlot {
                    slot: s.id,
                    generation: s.generation,
                    backend: s.backend.clone(),
                    envelope: s.envelope.clone(),
                    attempts: s.attempts,
                    uncertain: s.uncertain,
                    leased_until: until,
                }
            })
            .collect())
    }

    async fn settle(
        &self,
        settlements: &[Settlement],
        at: DateTime<Utc>,
    ) -> BusResult<Vec<SettleOutcome>> {
        validate_batch(settlements.len())?;
        let mut st = self.state()?;
        let mut outcomes = Vec::with_capacity(settlements.len());
        for s in settlements {
            let live = st.slots.get(&s.slot).is_some_and(|slot| {
                !slot.failed
                    && slot.generation == s.generation
                    && slot.leased_until.is_some_and(|u| at < u)
            });
            if !live {
                outcomes.push(SettleOutcome::Stale);
                continue;
            }
            match &s.outcome {
                SlotOutcome::Confirmed { locator } => {
                    let slot = st.slots.remove(&s.slot).expect("checked above");
                    let message_id = slot.envelope.message_id;
                    let team = slot.envelope.team_id;
                    let inbox = st.teams[&team].inbox.clone();
                    let message = st
                        .messages
                        .get_mut(&message_id)
                        .expect("slot has a message");
                    message.publication = Publication::Stored;
                    message.locator = Some(locator.clone());
                    message.stored_at = Some(at);
                    let payload = ReferencePayload {
                        message: message_id,
                        conversation: message.conversation,
                        seq: message.seq,
                    }
                    .to_json();
                    let recipients = st.recipients.get(&message_id).cloned().unwrap_or_default();
                    for recipient in recipients {
                        let receipt = st
                            .receipts
                            .get_mut(&(message_id, recipient))
                            .expect("receipt per recipient");
                        receipt.stored_at = Some(at);
                        let event = InboxEvent {
                            id: Uuid::new_v4(),
                            team,
                            inbox: inbox.clone(),
                            message: message_id,
                            recipient,
                            recipient_key: receipt.recipient_key.clone(),
                            payload: payload.clone(),
                            created_at: at,
                        };
                        let order = st.next_order();
                        st.events.insert(
                            event.id,
                            EventRow {
                                event,
                                order,
                                leased_until: None,
                                published_at: None,
                            },
                        );
                    }
                }
                SlotOutcome::Retryable {
                    error,
                    next_attempt_at,
                } => {
                    let slot = st.slots.get_mut(&s.slot).expect("checked above");
                    slot.attempts = slot.attempts.saturating_add(1);
                    slot.uncertain = false;
                    slot.next_attempt_at = *next_attempt_at;
                    slot.leased_until = None;
                    slot.last_error = Some(error.code().to_owned());
                }
                SlotOutcome::Fatal { error } => {
                    let slot = st.slots.get_mut(&s.slot).expect("checked above");
                    slot.failed = true;
                    slot.leased_until = None;
                    slot.last_error = Some(error.code().to_owned());
                    let message_id = slot.envelope.message_id;
                    let message = st
                        .messages
                        .get_mut(&message_id)
                        .expect("slot has a message");
                    message.publication = Publication::Failed;
                    message.failure = Some(error.code().to_owned());
                }
                SlotOutcome::Uncertain {
                    error,
                    next_attempt_at,
                } => {
                    let slot = st.slots.get_mut(&s.slot).expect("checked above");
                    slot.attempts = slot.attempts.saturating_add(1);
                    slot.uncertain = true;
                    slot.next_attempt_at = *next_attempt_at;
                    slot.leased_until = None;
                    slot.last_error = Some(error.code().to_owned());
                }
            }
            outcomes.push(SettleOutcome::Applied);
        }
        Ok(outcomes)
    }

    async fn lease_inbox_events(
        &self,
        at: DateTime<Utc>,
        lease_for: Duration,
        limit: usize,
    ) -> BusResult<Vec<InboxEvent>> {
        validate_limit(limit)?;
        let until = at + positive_ledger_span(lease_for, "lease_for")?;
        let mut st = self.state()?;
        let mut due: Vec<(u64, Uuid)> = st
            .events
            .values()
            .filter(|e| e.published_at.is_none() && e.leased_until.is_none_or(|u| u <= at))
            .map(|e| (e.order, e.event.id))
            .collect();
        due.sort();
        due.truncate(limit);
        Ok(due
            .into_iter()
            .map(|(_, id)| {
                let row = st.events.get_mut(&id).expect("collected above");
                row.leased_until = Some(until);
                row.event.clone()
            })
            .collect())
    }

    async fn mark_published(&self, events: &[Uuid], at: DateTime<Utc>) -> BusResult<u64> {
        validate_batch(events.len())?;
        let mut st = self.state()?;
        let mut changed = 0;
        for id in events {
            if let Some(row) = st.events.get_mut(id)
                && row.published_at.is_none()
            {
                row.published_at = Some(at);
                changed += 1;
            }
        }
        Ok(changed)
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
        let mut st = self.state()?;
        st.agent_of(team, recipient)?;
        let mut in_batch: HashMap<Uuid, DeliveryId> = HashMap::new();
        let mut outcomes = Vec::with_capacity(requests.len());
        for request in requests {
            let message_id = request.message;
            let message = st
                .messages
                .get(&message_id)
                .filter(|m| m.team == team && m.publication == Publication::Stored);
            let receipt = st.receipts.get(&(message_id, recipient));
            let (Some(message), Some(receipt)) = (message, receipt) else {
                outcomes.push(HandOutOutcome::Unknown {
                    message: message_id,
                });
                continue;
            };
            if receipt.delivered_at.is_some() {
                outcomes.push(HandOutOutcome::AlreadyDelivered {
                    message: message_id,
                });
                continue;
            }
            let (conversation, seq) = (message.conversation, message.seq);
            let holding = in_batch
                .get(&message_id)
                .copied()
                .or_else(|| st.live_hand_out(message_id, recipient, at));
            if let Some(delivery) = holding {
                let row = st.hand_outs.get_mut(&delivery).expect("indexed hand-out");
                if let HandOutSource::Inbox { ack, .. } = &request.source {
                    row.ack = Some(ack.clone());
                }
                outcomes.push(HandOutOutcome::Held {
                    message: message_id,
                    until: row.hand_out.held_until,
                });
                continue;
            }
            let earlier = st
                .hand_outs_by_pair
                .get(&(message_id, recipient))
                .is_some_and(|v| !v.is_empty());
            let (ack, deliveries) = match &request.source {
                HandOutSource::Inbox {
                    ack, deliveries, ..
                } => (Some(ack.clone()), *deliveries),
                HandOutSource::Ledger => (None, 1),
            };
            let hand_out = HandOut {
                delivery: DeliveryId(Uuid::new_v4()),
                message: message_id,
                conversation,
                seq,
                recipient,
                redelivered: earlier || deliveries > 1,
                issued_at: at,
                held_until,
            };
            st.hand_outs.insert(
                hand_out.delivery,
                HandOutRow {
                    team,
                    hand_out: hand_out.clone(),
                    ack,
                    confirmed_at: None,
                },
            );
            st.hand_outs_by_pair
                .entry((message_id, recipient))
                .or_default()
                .push(hand_out.delivery);
            in_batch.insert(message_id, hand_out.delivery);
            outcomes.push(HandOutOutcome::Issued(hand_out));
        }
        Ok(outcomes)
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
        let st = self.state()?;
        st.agent_of(team, recipient)?;
        let mut found: Vec<(DateTime<Utc>, Uuid, u64, Uuid)> = st
            .by_recipient
            .get(&recipient)
            .into_iter()
            .flatten()
            .filter_map(|id| {
                let m = &st.messages[id];
                let stored_at = m.stored_at?;
                let waiting = m.publication == Publication::Stored
                    && stored_at < stored_before
                    && st.receipts[&(*id, recipient)].delivered_at.is_none()
                    && st.live_hand_out(*id, recipient, at).is_none();
                waiting.then_some((stored_at, m.conversation, m.seq, m.id))
            })
            .collect();
        found.sort();
        found.truncate(limit);
        Ok(found.into_iter().map(|(_, _, _, id)| id).collect())
    }

    async fn wakeable(
        &self,
        targets: &[WakeupTarget],
        stored_before: DateTime<Utc>,
        at: DateTime<Utc>,
    ) -> BusResult<Vec<WakeupTarget>> {
        validate_batch(targets.len())?;
        let st = self.state()?;
        let mut found: Vec<WakeupTarget> = targets
            .iter()
            .filter(|t| {
                let Ok(agent) = st.agent_of(t.team, t.agent) else {
                    return true;
                };
                agent.revoked()
                    || st
                        .by_recipient
                        .get(&t.agent)
                        .into_iter()
                        .flatten()
                        .any(|id| {
                            let m = &st.messages[id];
                            m.publication == Publication::Stored
                                && m.stored_at.is_some_and(|s| s < stored_before)
                                && st.receipts[&(*id, t.agent)].delivered_at.is_none()
                                && st.live_hand_out(*id, t.agent, at).is_none()
                        })
            })
            .copied()
            .collect();
        found.sort_unstable();
        found.dedup();
        Ok(found)
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
        let mut st = self.state()?;
        st.agent_of(team, recipient)?;
        st.check_run(run, team, recipient)?;
        let mut outcomes = Vec::with_capacity(deliveries.len());
        for delivery in deliveries {
            let Some(row) = st
                .hand_outs
                .get(delivery)
                .filter(|r| r.team == team && r.hand_out.recipient == recipient)
            else {
                outcomes.push(ConfirmOutcome::Unknown);
                continue;
            };
            let message = row.hand_out.message;
            let ack = row.ack.clone();
            let receipt = st
                .receipts
                .get_mut(&(message, recipient))
                .expect("hand-outs exist only for receipts");
            if receipt.delivered_at.is_some() {
                outcomes.push(ConfirmOutcome::AlreadyConfirmed { message, ack });
                continue;
            }
            receipt.delivered_at = Some(at);
            st.hand_outs
                .get_mut(delivery)
                .expect("found above")
                .confirmed_at = Some(at);
            let conversation = st.messages[&message].conversation;
            st.record(
                run,
                at,
                RecordKind::MessageDelivered {
                    conversation,
                    message,
                },
            );
            outcomes.push(ConfirmOutcome::Confirmed { message, ack });
        }
        Ok(outcomes)
    }

    async fn acknowledge(
        &self,
        team: Uuid,
        agent: Uuid,
        message: Uuid,
        run: Option<RunId>,
        at: DateTime<Utc>,
    ) -> BusResult<Receipt> {
        let mut st = self.state()?;
        let conversation = st.message_of(team, message)?.conversation;
        let receipt = st
            .receipts
            .get(&(message, agent))
            .ok_or_else(|| BusError::forbidden("only a recipient acknowledges a message"))?;
        st.check_run_owner(run, team, agent)?;
        if receipt.acknowledged_at.is_some() {
            return Ok(receipt.clone());
        }
        if receipt.delivered_at.is_none() {
            return Err(BusError::conflict(
                "the message has not been delivered to this recipient yet",
            ));
        }
        st.check_run_open(run)?;
        let receipt = st.receipts.get_mut(&(message, agent)).expect("found above");
        receipt.acknowledged_at = Some(at);
        let receipt = receipt.clone();
        st.record(
            run,
            at,
            RecordKind::MessageAcknowledged {
                conversation,
                message,
            },
        );
        Ok(receipt)
    }

    async fn receipts(&self, team: Uuid, message: Uuid) -> BusResult<Vec<Receipt>> {
        let st = self.state()?;
        st.message_of(team, message)?;
        let mut receipts: Vec<Receipt> = st
            .recipients
            .get(&message)
            .into_iter()
            .flatten()
            .map(|r| st.receipts[&(message, *r)].clone())
            .collect();
        receipts.sort_by(|a, b| a.recipient_key.cmp(&b.recipient_key));
        Ok(receipts)
    }

    async fn history(
        &self,
        team: Uuid,
        conversation: Uuid,
        after_seq: u64,
        limit: usize,
    ) -> BusResult<HistoryPage> {
        validate_limit(limit)?;
        let st = self.state()?;
        let row = st.conversation_of(team, conversation)?;
        let messages = row
            .messages
            .range(after_seq.saturating_add(1)..)
            .take(limit)
            .map(|(_, id)| st.messages[id].clone());
        Ok(HistoryPage::build(after_seq, messages))
    }

    async fn retention_due(
        &self,
        before: DateTime<Utc>,
        limit: usize,
    ) -> BusResult<Vec<RetentionTarget>> {
        validate_limit(limit)?;
        let st = self.state()?;
        let mut groups: BTreeMap<(Uuid, String), u64> = BTreeMap::new();
        for m in st.messages.values() {
            if m.publication == Publication::Stored
                && m.retained_at.is_none()
                && m.stored_at.is_some_and(|s| s < before)
            {
                *groups.entry((m.team, m.backend.clone())).or_default() += 1;
            }
        }
        Ok(groups
            .into_iter()
            .take(limit)
            .map(|((team, backend), messages)| RetentionTarget {
                team,
                backend,
                messages,
            })
            .collect())
    }

    async fn mark_retained(
        &self,
        team: Uuid,
        backend: &str,
        before: DateTime<Utc>,
        at: DateTime<Utc>,
    ) -> BusResult<u64> {
        let mut st = self.state()?;
        st.team_of(team)?;
        let mut changed = 0;
        for m in st.messages.values_mut() {
            if m.team == team
                && m.backend == backend
                && m.publication == Publication::Stored
                && m.retained_at.is_none()
                && m.stored_at.is_some_and(|s| s < before)
            {
                m.retained_at = Some(at);
                changed += 1;
            }
        }
        Ok(changed)
    }

    async fn counts(&self, at: DateTime<Utc>) -> BusResult<LedgerCounts> {
        let st = self.state()?;
        let mut counts = LedgerCounts::default();
        let mut oldest: Option<DateTime<Utc>> = None;
        for m in st.messages.values() {
            match m.publication {
                Publication::PendingPublication => {
                    counts.pending_publications += 1;
                    oldest = Some(oldest.map_or(m.sent_at, |o| o.min(m.sent_at)));
                }
                Publication::Failed => counts.failed_publications += 1,
                Publication::Stored => {}
            }
        }
        counts.uncertain_publications = st
            .slots
            .values()
            .filter(|s| !s.failed && s.uncertain)
            .count() as u64;
        counts.oldest_pending_age = oldest.map(|o| (at - o).to_std().unwrap_or(Duration::ZERO));
        counts.pending_inbox_events = st
            .events
            .values()
            .filter(|e| e.published_at.is_none())
            .count() as u64;
        for (key, r) in &st.receipts {
            if r.delivered_at.is_some() {
                counts.deliveries += 1;
            } else if st.messages[&key.0].publication == Publication::Stored {
                counts.undelivered += 1;
            }
        }
        Ok(counts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crewbus_ports::Journal;

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
