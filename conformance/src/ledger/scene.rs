//! A small world for the ledger behaviours: one team, three agents, one conversation.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use crewbus_domain::{
    Agent, Conversation, HistoryPage, LeasedSlot, Locator, Message, RunId, SendRequest, Sent,
    SettleOutcome, Settlement, SlotOutcome, Team, TokenHash,
};
use crewbus_ports::{Journal, Ledger, Operators, Oversight};
use uuid::Uuid;

use super::time::t;
use crate::LedgerFixture;

/// A body backend name no ledger stores itself: its messages go through the outbox.
pub(crate) const REMOTE: &str = "conformance-remote";
/// The scene team's inbox name.
pub(crate) const INBOX: &str = "conformance-inbox";
/// The lease the behaviours take on slots and events.
pub(crate) const LEASE: Duration = Duration::from_secs(30);

/// A fresh token hash.
pub(crate) fn token() -> TokenHash {
    TokenHash::of(&Uuid::new_v4().to_string())
}

/// A unique team name (tenant-wide uniqueness).
pub(crate) fn team_name() -> String {
    format!("team-{}", Uuid::new_v4().simple())
}

/// The locator the behaviours settle a message's body with.
pub(crate) fn locator_for(message: Uuid) -> Locator {
    Locator::new("test", &message.to_string())
}

/// Team `team` with agents `a` (creator), `b`, `c` and the conversation `conv` of all three,
/// created at `t(0)` on the body backend given to [`scene`].
pub(crate) struct Scene {
    pub(crate) ledger: Arc<dyn Ledger>,
    pub(crate) journal: Arc<dyn Journal>,
    pub(crate) operators: Arc<dyn Operators>,
    pub(crate) oversight: Arc<dyn Oversight>,
    pub(crate) team: Team,
    pub(crate) a: Agent,
    pub(crate) b: Agent,
    pub(crate) c: Agent,
    pub(crate) conv: Conversation,
}

/// Builds a [`Scene`] whose team's default body backend is `backend`.
pub(crate) async fn scene<F: LedgerFixture + ?Sized>(fx: &F, backend: &str) -> Scene {
    let ledger = fx.ledger();
    let journal = fx.journal();
    let team = ledger
        .create_team(&team_name(), backend, INBOX, t(0))
        .await
        .expect("create team");
    let mut agents = Vec::new();
    for name in ["a", "b", "c"] {
        agents.push(
            ledger
                .create_agent(team.id, name, token(), t(0))
                .await
                .expect("create agent"),
        );
    }
    let c = agents.pop().expect("three agents");
    let b = agents.pop().expect("three agents");
    let a = agents.pop().expect("three agents");
    let conv = ledger
        .create_conversation(team.id, a.id, "general", &[b.id, c.id], t(0))
        .await
        .expect("create conversation");
    Scene {
        ledger,
        journal,
        operators: fx.operators(),
        oversight: fx.oversight(),
        team,
        a,
        b,
        c,
        conv,
    }
}

impl Scene {
    /// A send request in the scene's conversation.
    pub(crate) fn request(
        &self,
        from: &Agent,
        request_id: &str,
        body: &str,
        run: Option<RunId>,
    ) -> SendRequest {
        SendRequest {
            team: self.team.id,
            conversation: self.conv.id,
            sender: from.id,
            request_id: request_id.to_owned(),
            body: body.to_owned(),
            run,
        }
    }

    /// Sends and expects a new message.
    pub(crate) async fn send(
        &self,
        from: &Agent,
        request_id: &str,
        body: &str,
        at: DateTime<Utc>,
    ) -> Message {
        let sent = self
            .ledger
            .send(self.request(from, request_id, body, None), at)
            .await
            .expect("send");
        assert!(sent.created, "a new request id creates a message");
        sent.message
    }

    /// Sends `request_id` again (no run): what the ledger answers, created or not.
    pub(crate) async fn send_again(
        &self,
        from: &Agent,
        request_id: &str,
        body: &str,
        at: DateTime<Utc>,
    ) -> Sent {
        self.ledger
            .send(self.request(from, request_id, body, None), at)
            .await
            .unwrap()
    }

    /// The first page (up to 100 messages) of the scene's conversation.
    pub(crate) async fn first_page(&self) -> HistoryPage {
        self.ledger
            .history(self.team.id, self.conv.id, 0, 100)
            .await
            .unwrap()
    }

    /// Leases every due slot at `at`, by message id.
    pub(crate) async fn lease_all(&self, at: DateTime<Utc>) -> HashMap<Uuid, LeasedSlot> {
        self.ledger
            .lease_slots(at, LEASE, 1000)
            .await
            .expect("lease slots")
            .into_iter()
            .map(|s| (s.envelope.message_id, s))
            .collect()
    }

    /// Settles one leased slot and returns the outcome.
    pub(crate) async fn settle(
        &self,
        slot: &LeasedSlot,
        outcome: SlotOutcome,
        at: DateTime<Utc>,
    ) -> SettleOutcome {
        let settlement = Settlement {
            slot: slot.slot,
            generation: slot.generation,
            outcome,
        };
        let outcomes = self.ledger.settle(&[settlement], at).await.expect("settle");
        assert_eq!(outcomes.len(), 1, "one outcome per settlement");
        outcomes[0]
    }

    /// Settles a leased slot as confirmed and expects it applied.
    pub(crate) async fn confirm_slot(&self, slot: &LeasedSlot, at: DateTime<Utc>) {
        let outcome = SlotOutcome::Confirmed {
            locator: locator_for(slot.envelope.message_id),
        };
        assert_eq!(self.settle(slot, outcome, at).await, SettleOutcome::Applied);
    }

    /// Leases every due slot at `at` and confirms them all; returns how many.
    pub(crate) async fn store_all(&self, at: DateTime<Utc>) -> usize {
        let slots = self.lease_all(at).await;
        for slot in slots.values() {
            self.confirm_slot(slot, at).await;
        }
        slots.len()
    }

    /// Sends, then stores every due message (this one included) at `at`.
    pub(crate) async fn send_stored(
        &self,
        from: &Agent,
        request_id: &str,
        body: &str,
        at: DateTime<Utc>,
    ) -> Message {
        let message = self.send(from, request_id, body, at).await;
        if self.ledger.local_backend() != Some(message.backend.as_str()) {
            self.store_all(at).await;
        }
        self.message(message.id).await
    }

    /// Another team (no agents, no conversations), created at `t(0)` on the remote backend.
    pub(crate) async fn other_team(&self) -> Team {
        self.ledger
            .create_team(&team_name(), REMOTE, INBOX, t(0))
            .await
            .expect("create another team")
    }

    /// A new agent `name` of `team`, created at `t(0)`.
    pub(crate) async fn agent_of(&self, team: &Team, name: &str) -> Agent {
        self.ledger
            .create_agent(team.id, name, token(), t(0))
            .await
            .expect("create agent")
    }

    /// A message as it stands.
    pub(crate) async fn message(&self, id: Uuid) -> Message {
        self.ledger
            .message(self.team.id, id)
            .await
            .expect("message")
    }
}
