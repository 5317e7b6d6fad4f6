//! Send: one ledger transaction records the message, its receipts and (for an outbox backend)
//! the slot the relay publishes from.

use crewbus_domain::{Agent, BusError, BusResult, Publication, RunId, SendRequest, Sent, Uuid};

use crate::bus::Bus;
use crate::metrics::Metrics;

impl Bus {
    /// Sends `body` from `sender` into `conversation`, idempotent on `request_id`.
    ///
    /// Returns the message as it stands (`created: false` for a repeat). Errors: a body above
    /// the limit → `TooLarge` (bytes); otherwise as `Ledger::send` (`Invalid` request id,
    /// `NotFound` conversation, `Forbidden` non-member, `Conflict` same request id with another
    /// body, run rules).
    pub async fn send(
        &self,
        sender: &Agent,
        conversation: Uuid,
        request_id: String,
        body: String,
        run: Option<RunId>,
    ) -> BusResult<Sent> {
        let size = body.len() as u64;
        if size > self.settings.max_body_bytes {
            return Err(BusError::TooLarge {
                size,
                limit: self.settings.max_body_bytes,
            });
        }
        let request = SendRequest {
            team: sender.team,
            conversation,
            sender: sender.id,
            request_id,
            body,
            run,
        };
        let sent = self.ports.ledger.send(request, self.now()).await?;
        if sent.created {
            Metrics::inc(&self.metrics.messages_sent);
            match sent.message.publication {
                Publication::PendingPublication => self.wakers.relay.notify_one(),
                Publication::Stored => self.wakers.references.notify_one(),
                Publication::Failed => {}
            }
        }
        Ok(sent)
    }
}
