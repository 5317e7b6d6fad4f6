//! References on the team's inbox stream: one subject and one durable pull consumer per
//! recipient, explicit and confirmed (double) acks.

use async_nats::HeaderMap;
use async_nats::jetstream::consumer::{AckPolicy, DeliverPolicy, PullConsumer, pull};
use async_trait::async_trait;
use bytes::Bytes;
use crewbus_domain::{
    BusError, BusResult, InboxRef, InboxStatus, Published, Uuid, validate_recipient_key,
};
use crewbus_ports::Inbox;
use futures_util::StreamExt;

use crate::backend::JetStreamBackend;
use crate::bodies::locator;
use crate::errors::{self, Failure, Op, batch_item_failure, bus_error};

/// Header carrying the inbox event id (also sent as `Nats-Msg-Id`).
pub(crate) const EVENT_ID: &str = "Crewbus-Event-Id";

/// The stream named by a `$JS.ACK.` subject: token 3 of the 9-token form, token 5 of the
/// 11+-token form (with domain and account hash, ADR-15).
fn ack_subject_stream(ack_subject: &str) -> Option<&str> {
    let rest = ack_subject.strip_prefix("$JS.ACK.")?;
    if ack_subject
        .bytes()
        .any(|b| b.is_ascii_whitespace() || b == b'*' || b == b'>')
    {
        return None;
    }
    let tokens: Vec<&str> = rest.split('.').collect();
    if tokens.iter().any(|t| t.is_empty()) {
        return None;
    }
    match tokens.len() {
        7 => Some(tokens[0]),
        n if n >= 9 => Some(tokens[2]),
        _ => None,
    }
}

impl JetStreamBackend {
    /// Stores one reference on `recipient_key`'s subject, deduplicated on `event_id` within the
    /// duplicate window. Errors as [`Inbox::publish_reference`]; a missing inbox stream (no
    /// responders) is `Retryable(Unavailable)`.
    pub async fn publish_reference(
        &self,
        recipient_key: &str,
        event_id: Uuid,
        payload: &str,
    ) -> Published {
        if let Err(e) = validate_recipient_key(recipient_key) {
            return Published::Fatal(e);
        }
        let inner = &self.inner;
        let subject = inner.config.inbox_subject(inner.team, recipient_key);
        let mut headers = HeaderMap::new();
        let id = event_id.to_string();
        headers.insert(async_nats::header::NATS_MESSAGE_ID, id.as_str());
        headers.insert(EVENT_ID, id.as_str());
        let ack = match inner
            .js
            .publish_with_headers(subject, headers, Bytes::from(payload.to_owned()))
            .await
        {
            Ok(ack) => ack,
            Err(e) => return errors::published("publishing a reference", Failure::from(e), false),
        };
        match ack.await {
            Ok(ack) => Published::Confirmed {
                locator: locator(&ack.stream, ack.sequence),
                duplicate: ack.duplicate,
            },
            Err(e) => errors::published("publishing a reference", Failure::from(e), true),
        }
    }

    /// Hands out up to `limit` references of `recipient_key` without acknowledging any; never
    /// waits for new ones. The recipient's durable pull consumer (explicit ack, `ack_wait`,
    /// `max_deliver`, no inactive threshold) is created on first use, and again if it was
    /// deleted. Errors as [`Inbox::fetch_references`].
    pub async fn fetch_references(
        &self,
        recipient_key: &str,
        limit: usize,
    ) -> BusResult<Vec<InboxRef>> {
        validate_recipient_key(recipient_key)?;
        if limit == 0 {
            return Ok(Vec::new());
        }
        let cached = self
            .inner
            .consumers
            .lock()
            .expect("consumer cache")
            .get(recipient_key)
            .cloned();
        if let Some(consumer) = cached {
            match self.pull(&consumer, limit).await {
                Ok(refs) => return Ok(refs),
                Err(_) => {
                    // The consumer may have been deleted: forget it and create it again.
                    self.inner
                        .consumers
                        .lock()
                        .expect("consumer cache")
                        .remove(recipient_key);
                }
            }
        }
        let consumer = self.ensure_consumer(recipient_key).await?;
        self.pull(&consumer, limit).await
    }

    async fn ensure_consumer(&self, recipient_key: &str) -> BusResult<PullConsumer> {
        let inner = &self.inner;
        let config = pull::Config {
            durable_name: Some(recipient_key.to_owned()),
            filter_subject: inner.config.inbox_subject(inner.team, recipient_key),
            ack_policy: AckPolicy::Explicit,
            deliver_policy: DeliverPolicy::All,
            ack_wait: inner.config.ack_wait,
            max_deliver: i64::from(inner.config.max_deliver),
            ..Default::default()
        };
        let consumer = inner
            .js
            .create_consumer_on_stream(config, &inner.inbox_stream)
            .await
            .map_err(|e| {
                let failure = Failure::from(e);
                if failure.code() == Some(errors::code::STREAM_NOT_FOUND) {
                    BusError::NotProvisioned {
                        what: format!("inbox stream {}", inner.inbox_stream),
                        remedy: crate::config::Config::provision_command(inner.team),
                    }
                } else {
                    bus_error(Op::Request, "creating the recipient's consumer", failure)
                }
            })?;
        inner
            .consumers
            .lock()
            .expect("consumer cache")
            .insert(recipient_key.to_owned(), consumer.clone());
        Ok(consumer)
    }

    async fn pull(&self, consumer: &PullConsumer, limit: usize) -> BusResult<Vec<InboxRef>> {
        let timeout = self.request_timeout();
        let work = async {
            let mut batch = consumer
                .fetch()
                .max_messages(limit)
                .messages()
                .await
                .map_err(|e| bus_error(Op::Request, "fetching references", Failure::from(e)))?;
            let mut refs = Vec::new();
            while let Some(item) = batch.next().await {
                let message = item.map_err(|e| {
                    bus_error(Op::Request, "fetching references", batch_item_failure(e))
                })?;
                let info = message.info().map_err(|e| {
                    bus_error(Op::Request, "reading a reference", batch_item_failure(e))
                })?;
                let (stream_seq, deliveries) = (info.stream_sequence, info.delivered.max(1) as u64);
                let event_id = message
                    .headers
                    .as_ref()
                    .and_then(|h| h.get(EVENT_ID))
                    .and_then(|v| Uuid::parse_str(v.as_str()).ok());
                let Some(reply) = message.reply.as_ref() else {
                    continue;
                };
                let Some(event_id) = event_id else {
                    // Not a reference this adapter wrote: leave it for ack wait / max deliver.
                    tracing::warn!(stream_seq, "inbox message without an event id skipped");
                    continue;
                };
                refs.push(InboxRef {
                    event_id,
                    payload: String::from_utf8_lossy(&message.payload).into_owned(),
                    ack_subject: reply.to_string(),
                    stream_seq,
                    deliveries,
                });
            }
            Ok::<_, BusError>(refs)
        };
        tokio::time::timeout(timeout, work)
            .await
            .map_err(|_| BusError::timeout("fetching references"))?
    }

    /// Acknowledges one handed-out reference and waits for the broker to confirm (double ack).
    /// Anything but an ack subject of this team's inbox stream is `Forbidden`. Acknowledging
    /// twice is harmless.
    pub async fn ack_reference(&self, ack_subject: &str) -> BusResult<()> {
        if ack_subject_stream(ack_subject) != Some(self.inner.inbox_stream.as_str()) {
            return Err(BusError::forbidden(
                "not an ack subject of this team's inbox stream",
            ));
        }
        let request = self
            .inner
            .client
            .request(ack_subject.to_owned(), Bytes::from_static(b"+ACK"));
        match tokio::time::timeout(self.request_timeout(), request).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(bus_error(
                Op::Request,
                "acknowledging a reference",
                e.into(),
            )),
            Err(e) => Err(bus_error(
                Op::Request,
                "acknowledging a reference",
                e.into(),
            )),
        }
    }

    /// The recipient's consumer state; a missing consumer or stream is `present: false`, any
    /// other failure an error.
    pub async fn inbox_status(&self, recipient_key: &str) -> BusResult<InboxStatus> {
        validate_recipient_key(recipient_key)?;
        let stream = self
            .inner
            .js
            .get_stream_no_info(&self.inner.inbox_stream)
            .await
            .map_err(|e| bus_error(Op::Request, "inbox stream", Failure::from(e)))?;
        match stream.consumer_info(recipient_key).await {
            Ok(info) => Ok(InboxStatus {
                present: true,
                pending: info.num_pending,
                awaiting_ack: info.num_ack_pending as u64,
                redelivered: info.num_redelivered as u64,
            }),
            Err(e) => {
                let failure = Failure::from(e);
                if failure.is_not_found() {
                    Ok(InboxStatus::default())
                } else {
                    Err(bus_error(Op::Request, "inbox status", failure))
                }
            }
        }
    }
}

#[async_trait]
impl Inbox for JetStreamBackend {
    async fn publish_reference(
        &self,
        recipient_key: &str,
        event_id: Uuid,
        payload: &str,
    ) -> Published {
        JetStreamBackend::publish_reference(self, recipient_key, event_id, payload).await
    }

    async fn fetch_references(
        &self,
        recipient_key: &str,
        limit: usize,
    ) -> BusResult<Vec<InboxRef>> {
        JetStreamBackend::fetch_references(self, recipient_key, limit).await
    }

    async fn ack_reference(&self, ack_subject: &str) -> BusResult<()> {
        JetStreamBackend::ack_reference(self, ack_subject).await
    }

    async fn inbox_status(&self, recipient_key: &str) -> BusResult<InboxStatus> {
        JetStreamBackend::inbox_status(self, recipient_key).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ack_subject_stream_parses_both_forms_and_refuses_the_rest() {
        assert_eq!(
            ack_subject_stream("$JS.ACK.S_I_ab.rcpt.1.2.3.1700000000.0"),
            Some("S_I_ab")
        );
        assert_eq!(
            ack_subject_stream("$JS.ACK.dom.hash.S_I_ab.rcpt.1.2.3.1700000000.0.tok"),
            Some("S_I_ab")
        );
        for bad in [
            "",
            "$JS.ACK.S_I_ab",
            "$JS.API.STREAM.DELETE.S_I_ab",
            "$JS.ACK.S_I_ab.>",
            "$JS.ACK.S_I_ab.rcpt.1.2.3.17 0.0",
            "$JS.ACK..rcpt.1.2.3.1700000000.0",
        ] {
            assert_eq!(ack_subject_stream(bad), None, "{bad}");
        }
    }
}
