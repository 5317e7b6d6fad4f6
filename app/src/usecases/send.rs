//! Send: one ledger transaction records the message, its receipts and (for an outbox backend)
//! the slot the relay publishes from — shared by the concurrent sends of one group commit
//! (`send_batch`: one batcher per bus, one `Ledger::send_batch` per batch).

use crewbus_domain::{
    Agent, BusError, BusResult, FeedEvent, FeedKind, Publication, RunId, SendRequest, Sent, Uuid,
};

use crate::metrics::Metrics;
use crate::usecases::bus::Bus;

/// Bodies up to this size (bytes) are below every backend's effective maximum; larger ones are
/// checked against the conversation's backend before they are recorded.
const CHECK_BACKEND_LIMIT_ABOVE: u64 = 64 * 1024;

impl Bus {
    /// Refuses a body above the effective maximum of the conversation's body backend (e.g.
    /// JetStream on a server whose `max_payload` is 1 MB) with `TooLarge`, so it never becomes a
    /// failed message. A conversation or backend that cannot be looked up now is left to the
    /// ledger and the relay.
    async fn check_backend_limit(
        &self,
        sender: &Agent,
        conversation: Uuid,
        size: u64,
    ) -> BusResult<()> {
        let Ok(c) = self
            .ports
            .ledger
            .conversation(sender.team, conversation)
            .await
        else {
            return Ok(());
        };
        let Ok(backend) = self
            .ports
            .backends
            .body_backend(sender.team, &c.backend)
            .await
        else {
            return Ok(());
        };
        let limit = backend.max_body_bytes();
        if size > limit {
            return Err(BusError::TooLarge { size, limit });
        }
        Ok(())
    }

    /// Sends `body` from `sender` into `conversation`, idempotent on `request_id`.
    ///
    /// The request is queued to the bus's send batcher and recorded with whatever other sends
    /// queued meanwhile, in one ledger transaction (group commit); its outcome is its own.
    ///
    /// Returns the message as it stands (`created: false` for a repeat). Errors: a body above
    /// the limit → `TooLarge` (bytes); otherwise as `Ledger::send` (`Invalid` request id,
    /// `NotFound` conversation, `Forbidden` non-member, `Conflict` same request id with another
    /// body, run rules); the batch's transaction failing → its retryable error
    /// (`Unavailable` / `Timeout`: nothing was written).
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
        if size > CHECK_BACKEND_LIMIT_ABOVE {
            self.check_backend_limit(sender, conversation, size).await?;
        }
        let request = SendRequest {
            team: sender.team,
            conversation,
            sender: sender.id,
            request_id,
            body,
            run,
        };
        let sent = self.send_batcher().send(request).await?;
        if sent.created {
            Metrics::inc(&self.metrics.messages_sent);
            let m = &sent.message;
            let event = |kind| {
                FeedEvent::new(m.team, kind)
                    .conversation(m.conversation)
                    .message(m.id)
            };
            let mut events = vec![event(FeedKind::MessageSent)];
            if m.publication == Publication::Stored {
                events.push(event(FeedKind::MessageStored));
            }
            self.emit(events);
            match sent.message.publication {
                Publication::PendingPublication => self.wakers.relay.notify_one(),
                Publication::Stored => self.wakers.references.notify_one(),
                Publication::Failed => {}
            }
        }
        Ok(sent)
    }
}
