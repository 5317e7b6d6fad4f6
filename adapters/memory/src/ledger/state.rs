//! The tables behind the memory ledger and journal: one state under one lock, so the ledger
//! writes the bus's journal records in the same critical section (the memory "transaction") as
//! the change they describe.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use chrono::{DateTime, Utc};
use crewbus_domain::{
    Agent, BusError, BusResult, Conversation, DeliveryId, Envelope, HandOut, InboxAck, Message,
    Operator, Receipt, Record, RecordKind, Run, RunId, Seq, Team, TokenHash,
};
use uuid::Uuid;

/// Shared by a [`crate::MemoryLedger`] and every [`crate::MemoryJournal`] made from it.
#[derive(Debug, Default, Clone)]
pub(crate) struct Shared {
    state: Arc<Mutex<State>>,
}

impl Shared {
    /// The state, or `None` while an outage is injected.
    pub(crate) fn lock(&self) -> Option<MutexGuard<'_, State>> {
        // A panic while holding the lock can only come from a bug in this crate; the tables are
        // written after every check, so the state is still consistent: keep serving it.
        let guard = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if guard.unavailable { None } else { Some(guard) }
    }

    /// Injects or clears an outage.
    pub(crate) fn set_unavailable(&self, unavailable: bool) {
        self.state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .unavailable = unavailable;
    }
}

#[derive(Debug, Default)]
pub(crate) struct State {
    pub(crate) unavailable: bool,
    /// Monotonic insertion counter: "oldest first" tie-breaks.
    pub(crate) order: u64,
    pub(crate) teams: HashMap<Uuid, Team>,
    pub(crate) agents: HashMap<Uuid, Agent>,
    pub(crate) tokens: HashMap<TokenHash, Uuid>,
    pub(crate) conversations: HashMap<Uuid, ConversationRow>,
    pub(crate) messages: HashMap<Uuid, Message>,
    /// (message, recipient) → receipt.
    pub(crate) receipts: HashMap<(Uuid, Uuid), Receipt>,
    /// message → recipients, in snapshot order.
    pub(crate) recipients: HashMap<Uuid, Vec<Uuid>>,
    /// recipient → messages with a receipt for it.
    pub(crate) by_recipient: HashMap<Uuid, Vec<Uuid>>,
    pub(crate) slots: HashMap<Uuid, Slot>,
    /// message → its reference marker (references not yet confirmed published).
    pub(crate) marks: HashMap<Uuid, MarkRow>,
    pub(crate) hand_outs: HashMap<DeliveryId, HandOutRow>,
    /// (message, recipient) → its hand-outs, oldest first.
    pub(crate) hand_outs_by_pair: HashMap<(Uuid, Uuid), Vec<DeliveryId>>,
    pub(crate) runs: HashMap<RunId, RunRow>,
    /// agent → its last authenticated call the bus recorded (`Oversight::touch_agents`).
    pub(crate) last_active: HashMap<Uuid, DateTime<Utc>>,
    /// agent → the status line it set (`Oversight::set_status`; absent when none).
    pub(crate) statuses: HashMap<Uuid, crewbus_domain::StatusLine>,
    /// (team, operator) → the human member the operator posts as in that team.
    pub(crate) humans: HashMap<(Uuid, Uuid), Uuid>,
    pub(crate) operators: HashMap<Uuid, Operator>,
    /// operator token hash → operator.
    pub(crate) operator_tokens: HashMap<TokenHash, Uuid>,
    /// sign-in code hash → its row.
    pub(crate) sign_in_codes: HashMap<TokenHash, SignInCodeRow>,
    /// session secret hash → its row.
    pub(crate) sessions: HashMap<TokenHash, SessionRow>,
    /// lease id → the lease and its history.
    pub(crate) leases: HashMap<Uuid, super::leases::LeaseRow>,
    /// team → its fencing counter (the last token granted; 0 before the first grant).
    pub(crate) lease_fences: HashMap<Uuid, u64>,
    /// agent → its shared send bucket as stored: milli-tokens held, when counted (ms).
    pub(crate) allowances: HashMap<Uuid, (u64, i64)>,
    /// message → its search document (indexed messages only).
    pub(crate) search: HashMap<Uuid, super::search::SearchRow>,
}

#[derive(Debug)]
pub(crate) struct SignInCodeRow {
    pub(crate) operator: Uuid,
    pub(crate) expires_at: DateTime<Utc>,
    pub(crate) used_at: Option<DateTime<Utc>>,
}

#[derive(Debug)]
pub(crate) struct SessionRow {
    pub(crate) operator: Uuid,
    pub(crate) opened_at: DateTime<Utc>,
    pub(crate) last_seen_at: DateTime<Utc>,
    pub(crate) ended_at: Option<DateTime<Utc>>,
}

#[derive(Debug)]
pub(crate) struct ConversationRow {
    pub(crate) conversation: Conversation,
    pub(crate) order: u64,
    /// seq → message id.
    pub(crate) messages: BTreeMap<u64, Uuid>,
    /// (sender, request id) → message id: the idempotency key within the conversation.
    pub(crate) requests: HashMap<(Uuid, String), Uuid>,
}

#[derive(Debug)]
pub(crate) struct Slot {
    pub(crate) id: Uuid,
    pub(crate) order: u64,
    pub(crate) backend: String,
    pub(crate) envelope: Envelope,
    pub(crate) generation: u64,
    pub(crate) attempts: u32,
    pub(crate) uncertain: bool,
    pub(crate) failed: bool,
    pub(crate) next_attempt_at: DateTime<Utc>,
    pub(crate) leased_until: Option<DateTime<Utc>>,
    pub(crate) last_error: Option<String>,
}

/// A stored message's reference marker: one per message, whatever its number of recipients.
#[derive(Debug)]
pub(crate) struct MarkRow {
    pub(crate) team: Uuid,
    /// The team's inbox when the body was stored.
    pub(crate) inbox: String,
    pub(crate) created_at: DateTime<Utc>,
    pub(crate) order: u64,
    pub(crate) leased_until: Option<DateTime<Utc>>,
}

#[derive(Debug)]
pub(crate) struct HandOutRow {
    pub(crate) team: Uuid,
    pub(crate) hand_out: HandOut,
    pub(crate) ack: Option<InboxAck>,
    pub(crate) confirmed_at: Option<DateTime<Utc>>,
}

#[derive(Debug)]
pub(crate) struct RunRow {
    pub(crate) run: Run,
    pub(crate) records: Vec<Record>,
}

impl RunRow {
    /// Appends a record with the next seq and returns that seq.
    pub(crate) fn append(&mut self, at: DateTime<Utc>, kind: RecordKind) -> Seq {
        let seq = self.run.last_seq.next();
        if let RecordKind::RunSealed { outcome, .. } = &kind {
            self.run.sealed = Some((at, *outcome));
        }
        self.records.push(Record {
            run: self.run.id,
            seq,
            at,
            kind,
        });
        self.run.last_seq = seq;
        seq
    }
}

impl State {
    pub(crate) fn next_order(&mut self) -> u64 {
        self.order += 1;
        self.order
    }

    /// The run rules of the ledger, without the seal, for `agent` of `team`: unknown or of
    /// another team → `NotFound` (another team's run ids are never confirmed to exist);
    /// another agent's of this team → `Forbidden`.
    pub(crate) fn check_run_owner(
        &self,
        run: Option<RunId>,
        team: Uuid,
        agent: Uuid,
    ) -> BusResult<()> {
        let Some(run) = run else { return Ok(()) };
        let row = self
            .runs
            .get(&run)
            .filter(|row| row.run.team == team)
            .ok_or_else(|| BusError::not_found(format!("run {run}")))?;
        if row.run.agent != agent {
            return Err(BusError::forbidden(format!(
                "run {run} belongs to another agent"
            )));
        }
        Ok(())
    }

    /// A sealed run → `Conflict`.
    pub(crate) fn check_run_open(&self, run: Option<RunId>) -> BusResult<()> {
        let Some(run) = run else { return Ok(()) };
        match self.runs.get(&run) {
            Some(row) if row.run.is_sealed() => {
                Err(BusError::conflict(format!("run {run} is sealed")))
            }
            _ => Ok(()),
        }
    }

    /// Every run rule.
    pub(crate) fn check_run(&self, run: Option<RunId>, team: Uuid, agent: Uuid) -> BusResult<()> {
        self.check_run_owner(run, team, agent)?;
        self.check_run_open(run)
    }

    /// Appends to a run already checked with [`State::check_run`].
    pub(crate) fn record(&mut self, run: Option<RunId>, at: DateTime<Utc>, kind: RecordKind) {
        if let Some(row) = run.and_then(|r| self.runs.get_mut(&r)) {
            row.append(at, kind);
        }
    }
}

/// Lookups the ledger's sections share, each scoped to a team (another team's row is
/// `NotFound`).
impl State {
    pub(crate) fn team_of(&self, team: Uuid) -> BusResult<&Team> {
        self.teams
            .get(&team)
            .ok_or_else(|| BusError::not_found(format!("team {team}")))
    }

    pub(crate) fn agent_of(&self, team: Uuid, agent: Uuid) -> BusResult<&Agent> {
        self.agents
            .get(&agent)
            .filter(|a| a.team == team)
            .ok_or_else(|| BusError::not_found(format!("agent {agent}")))
    }

    pub(crate) fn conversation_of(
        &self,
        team: Uuid,
        conversation: Uuid,
    ) -> BusResult<&ConversationRow> {
        self.conversations
            .get(&conversation)
            .filter(|c| c.conversation.team == team)
            .ok_or_else(|| BusError::not_found(format!("conversation {conversation}")))
    }

    /// Whether `hash` is any agent's or any operator's token hash (the two never share one).
    pub(crate) fn token_in_use(&self, hash: &TokenHash) -> bool {
        self.tokens.contains_key(hash) || self.operator_tokens.contains_key(hash)
    }

    pub(crate) fn message_of(&self, team: Uuid, message: Uuid) -> BusResult<&Message> {
        self.messages
            .get(&message)
            .filter(|m| m.team == team)
            .ok_or_else(|| BusError::not_found(format!("message {message}")))
    }

    /// The hand-out of (message, recipient) that still holds the message at `at`.
    pub(crate) fn live_hand_out(
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
