//! Send: one ledger transaction records the message, its receipts and (for an outbox backend)
//! the slot the relay publishes from — shared by the concurrent sends of one group commit
//! (`send_batch`: one batcher per bus, one `Ledger::send_batch` per batch).

use std::sync::Arc;

use crewbus_domain::{
    Agent, BusError, BusResult, FeedEvent, FeedKind, Publication, RunId, SendRequest, Sent,
    TokenBucket, Uuid, retry_after_seconds,
};

use crate::metrics::Metrics;
use crate::usecases::bus::Bus;

/// Bodies up to this size (bytes) are below every backend's effective maximum; larger ones are
/// checked against the conversation's backend before they are recorded.
const CHECK_BACKEND_LIMIT_ABOVE: u64 = 64 * 1024;

impl Bus {
    /// Takes one token of `sender`'s send bucket when a rate limit is on: this process's own
    /// bucket, or — with a shared allowance (`ports.send_allowance`) — one of the tokens this
    /// process holds of the agent's shared bucket, leasing the next chunk (`rate_limit.chunk`
    /// tokens, at most the burst) from the ledger when they run out: one ledger write per
    /// chunk, none per send. Errors: the bucket is empty → `RateLimited` (its wait rounded up
    /// to whole seconds, at least 1); the ledger's, when a chunk cannot be leased.
    async fn take_send_token(&self, sender: &Agent) -> BusResult<()> {
        let Some(limits) = &self.settings.rate_limits else {
            return Ok(());
        };
        let limit = limits.for_team(sender.team);
        let Some(shared) = &self.ports.send_allowance else {
            let now = self.ports.clock.now().timestamp_millis();
            let mut buckets = self
                .buckets
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let bucket = buckets
                .entry(sender.id)
                .or_insert_with(|| TokenBucket::full(limit, now));
            if bucket.limit() != limit {
                bucket.set_limit(limit);
            }
            return bucket
                .try_take(1, now)
                .map_err(|wait_ms| BusError::RateLimited {
                    retry_after_seconds: retry_after_seconds(wait_ms),
                });
        };
        let held = Arc::clone(
            self.chunks
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .entry(sender.id)
                .or_default(),
        );
        let mut held = held.lock().await;
        if *held == 0 {
            let chunk = limits.chunk.min(limit.burst);
            // The clock read under the lock: a send that waited for another's lease takes
            // at its own time.
            let now = self.ports.clock.now();
            *held = shared
                .take_tokens(sender.team, sender.id, limit, chunk, now)
                .await?;
        }
        // `take_tokens` returns at least 1 for a chunk of at least 1, or an error.
        *held = held.saturating_sub(1);
        Ok(())
    }

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
    ///
    /// With `[rate_limit]` on, each send first takes one token of the sender's bucket in this
    /// process (a repeat too: it is a request all the same); none left → `RateLimited` with the
    /// whole seconds until one is, and nothing is recorded.
    pub async fn send(
        &self,
        sender: &Agent,
        conversation: Uuid,
        request_id: String,
        body: String,
        run: Option<RunId>,
    ) -> BusResult<Sent> {
        self.take_send_token(sender).await?;
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
                Publication::Stored => {
                    self.wakers.references.notify_one();
                    self.wakers.index.notify_one();
                }
                Publication::Failed => {}
            }
        }
        Ok(sent)
    }
}
