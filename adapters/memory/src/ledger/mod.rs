//! The memory ledger: every rule of the `Ledger` port, in process.
//!
//! One file per section of the port, as the trait lists them: `directory` (teams, agents,
//! conversations), `send`, `relay` (outbox slots), `references` (inbox events),
//! `delivery` (messages, hand-outs, confirmations, receipts), `history`, `retention` and
//! `counts`; the tables are in `state`. The same state holds the operators (`operators`:
//! `impl Operators`) and answers the console's reads (`oversight`: `impl Oversight`). The
//! `impl Ledger` is
//! [`crewbus_ports::impl_ledger_by_sections!`]: it applies the port's argument rules and
//! delegates to the sections.

use std::fmt;
use std::sync::MutexGuard;

use crewbus_domain::{BusError, BusResult, TenantId};

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

crewbus_ports::impl_ledger_by_sections! {
    MemoryLedger { tenant: tenant, local_backend: None, sections: sync }
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
