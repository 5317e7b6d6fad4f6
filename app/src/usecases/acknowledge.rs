//! Acknowledge (a recipient has read a message) and a message's receipts.

use crewbus_domain::{Agent, BusError, BusResult, FeedEvent, FeedKind, Receipt, RunId, Uuid};

use crate::usecases::bus::Bus;

impl Bus {
    /// `agent` says it has read `message`: sets `acknowledged_at` once; never touches the inbox.
    /// Errors: as `Ledger::acknowledge` (`NotFound`, `Forbidden` for a non-recipient, `Conflict`
    /// before delivery, run rules).
    pub async fn acknowledge(
        &self,
        agent: &Agent,
        message: Uuid,
        run: Option<RunId>,
    ) -> BusResult<Receipt> {
        let receipt = self
            .ports
            .ledger
            .acknowledge(agent.team, agent.id, message, run, self.now())
            .await?;
        self.emit(vec![
            FeedEvent::new(agent.team, FeedKind::Acknowledged)
                .message(message)
                .agent(agent.id),
        ]);
        Ok(receipt)
    }

    /// The receipts of a message, for a member of its conversation. Errors: unknown, another
    /// team's, or `agent` not a member → `NotFound`.
    pub async fn receipts(&self, agent: &Agent, message: Uuid) -> BusResult<Vec<Receipt>> {
        let m = self.ports.ledger.message(agent.team, message).await?;
        let c = self
            .ports
            .ledger
            .conversation(agent.team, m.conversation)
            .await?;
        if !c.has_member(agent.id) {
            return Err(BusError::not_found(format!("message {message}")));
        }
        self.ports.ledger.receipts(agent.team, message).await
    }
}
