//! Bodies on the team's body stream: one subject per message, idempotent for the life of the
//! body, read back by `jetstream:<stream>:<seq>` locators, retention by sequence.
//!
//! The broker keeps a message id's duplicate entry for its whole window, also after retention
//! purged that message: a duplicate PubAck is therefore never taken on trust. The acknowledged
//! sequence is read from the stream leader, and a copy that is gone (or a sequence holding
//! another message) is published again under `<publish key>.<gone sequence>`, a message id
//! derived deterministically so a retry of the re-publish is itself deduplicated.

use async_nats::HeaderMap;
use async_nats::jetstream::message::StreamMessage;
use bytes::Bytes;
use chrono::{DateTime, Utc};
use crewbus_domain::{BusError, BusResult, Envelope, Locator, Published, StreamKind, Uuid};

use crate::backend::JetStreamBackend;
use crate::errors::{self, Failure, Op, bus_error, code, found};

/// Header carrying the body's publish key (also sent as `Nats-Msg-Id`).
pub(crate) const PUBLISH_KEY: &str = "Crewbus-Publish-Key";
/// Header carrying the message id.
pub(crate) const MESSAGE_ID: &str = "Crewbus-Message-Id";
/// Header carrying the team id.
pub(crate) const TEAM: &str = "Crewbus-Team";

/// How many times one publish goes round when the broker's duplicate answer points at a copy
/// that is gone (each round needs the copy just published to have been removed again).
const REPUBLISH_ROUNDS: usize = 4;

/// The `Nats-Msg-Id` of a re-publish after the copy at `gone` (a sequence) was removed:
/// `<publish key>.<gone>`.
fn republish_id(key: &str, gone: u64) -> String {
    format!("{key}.{gone}")
}

/// The locator scheme of this adapter.
pub(crate) const SCHEME: &str = "jetstream";

/// `jetstream:<stream>:<seq>`.
pub(crate) fn locator(stream: &str, seq: u64) -> Locator {
    Locator::new(SCHEME, &format!("{stream}:{seq}"))
}

fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).map(|v| v.as_str())
}

fn to_utc(m: &StreamMessage) -> DateTime<Utc> {
    let nanos = m.time.unix_timestamp_nanos();
    DateTime::from_timestamp_nanos(i64::try_from(nanos).unwrap_or(i64::MAX))
}

impl JetStreamBackend {
    pub(crate) async fn publish_body(&self, env: &Envelope) -> Published {
        let inner = &self.inner;
        if let Err(e) = env.check_for(inner.team, inner.body_limit) {
            return Published::Fatal(e);
        }
        let subject = inner
            .config
            .body_subject(inner.team, env.conversation_id, env.message_id);
        let key = env.publish_key.to_string();
        // The broker answers "duplicate" to a message id it saw within the duplicate window,
        // even when that copy was purged since (retention). So a duplicate PubAck is checked
        // against the stream, and a copy that is gone is published again under a message id
        // derived from the key and the gone copy's sequence: deterministic, so a retry of that
        // re-publish is deduplicated in turn, while the per-subject limit of one message keeps
        // the body single.
        let mut msg_id = key.clone();
        for _ in 0..REPUBLISH_ROUNDS {
            let mut headers = HeaderMap::new();
            headers.insert(async_nats::header::NATS_MESSAGE_ID, msg_id.as_str());
            headers.insert(PUBLISH_KEY, key.as_str());
            headers.insert(MESSAGE_ID, env.message_id.to_string().as_str());
            headers.insert(TEAM, inner.team.to_string().as_str());
            let sent = inner
                .js
                .publish_with_headers(subject.clone(), headers, Bytes::from(env.body.clone()))
                .await;
            let ack = match sent {
                Ok(ack) => ack,
                Err(e) => return errors::published("publishing a body", Failure::from(e), false),
            };
            let ack = match ack.await {
                Ok(ack) => ack,
                Err(e) => {
                    let failure = Failure::from(e);
                    if failure.code() == Some(code::STREAM_STORE_FAILED) {
                        return self.settle_refused_store(env, &subject).await;
                    }
                    return errors::published("publishing a body", failure, true);
                }
            };
            let confirmed = Published::Confirmed {
                locator: locator(&ack.stream, ack.sequence),
                duplicate: ack.duplicate,
            };
            if !ack.duplicate {
                return confirmed;
            }
            match self.holds(env, &subject, ack.sequence).await {
                Ok(true) => return confirmed,
                Ok(false) => msg_id = republish_id(&key, ack.sequence),
                Err(e) => return Published::from_error(e),
            }
        }
        Published::Retryable(BusError::unavailable(
            "the body stream kept removing the body while it was published",
        ))
    }

    /// Whether the stream holds this envelope's body at `seq` (read from the stream leader: a
    /// follower may not have it yet).
    async fn holds(&self, env: &Envelope, subject: &str, seq: u64) -> BusResult<bool> {
        let stream = self.body_handle().await?;
        let m = match stream.get_raw_message(seq).await {
            Ok(m) => m,
            Err(e) => {
                let failure = Failure::from(e);
                return if failure.is_not_found() {
                    Ok(false)
                } else {
                    Err(bus_error(
                        Op::Request,
                        "reading an acknowledged body",
                        failure,
                    ))
                };
            }
        };
        Ok(m.subject.as_str() == subject
            && header(&m.headers, PUBLISH_KEY) == Some(env.publish_key.to_string().as_str())
            && header(&m.headers, MESSAGE_ID) == Some(env.message_id.to_string().as_str())
            && header(&m.headers, TEAM) == Some(self.inner.team.to_string().as_str()))
    }

    /// The broker refused to store (10077: the subject already holds a body, or the stream is
    /// full). Tell the cases apart by reading the subject's stored message.
    async fn settle_refused_store(&self, env: &Envelope, subject: &str) -> Published {
        match self.last_on_subject(subject).await {
            Ok(Some(stored)) => {
                if header(&stored.headers, PUBLISH_KEY)
                    == Some(env.publish_key.to_string().as_str())
                {
                    Published::Confirmed {
                        locator: locator(&self.inner.body_stream, stored.sequence),
                        duplicate: true,
                    }
                } else {
                    Published::Fatal(BusError::conflict(format!(
                        "message {} is already stored under another publish key",
                        env.message_id
                    )))
                }
            }
            Ok(None) => Published::Retryable(BusError::quota_exceeded(format!(
                "body stream {}",
                self.inner.body_stream
            ))),
            Err(e) => Published::from_error(e),
        }
    }

    /// The last message stored on `subject`, read from the stream leader.
    async fn last_on_subject(&self, subject: &str) -> BusResult<Option<StreamMessage>> {
        let stream = self.body_handle().await?;
        found(
            stream.get_last_raw_message_by_subject(subject).await,
            "reading a body subject",
        )
    }

    async fn body_handle(&self) -> BusResult<async_nats::jetstream::stream::Stream<()>> {
        self.inner
            .js
            .get_stream_no_info(&self.inner.body_stream)
            .await
            .map_err(|e| bus_error(Op::Request, "body stream", Failure::from(e)))
    }

    pub(crate) async fn fetch_body(
        &self,
        locator: &Locator,
        message_id: Uuid,
    ) -> BusResult<Option<String>> {
        let rest = locator.rest_for(SCHEME)?;
        let (stream, seq) = rest
            .rsplit_once(':')
            .ok_or_else(|| BusError::invalid("jetstream locator is not `<stream>:<seq>`"))?;
        let seq: u64 = seq
            .parse()
            .ok()
            .filter(|s| *s > 0)
            .ok_or_else(|| BusError::invalid("jetstream locator sequence is malformed"))?;
        if stream != self.inner.body_stream {
            return Err(BusError::forbidden(
                "the locator names another stream than this team's body stream",
            ));
        }
        let Some(m) = self.get_by_sequence(seq).await? else {
            return Ok(None);
        };
        if header(&m.headers, TEAM) != Some(self.inner.team.to_string().as_str()) {
            return Err(BusError::forbidden(
                "the stored body belongs to another team",
            ));
        }
        if header(&m.headers, MESSAGE_ID) != Some(message_id.to_string().as_str()) {
            return Err(BusError::forbidden(
                "the stored body belongs to another message",
            ));
        }
        String::from_utf8(m.payload.to_vec())
            .map(Some)
            .map_err(|_| BusError::invalid("the stored body is not UTF-8"))
    }

    /// A message by sequence: a direct get (any replica), and on a miss or a failure the
    /// leader (a follower may lag right after a PubAck).
    async fn get_by_sequence(&self, seq: u64) -> BusResult<Option<StreamMessage>> {
        let stream = self.body_handle().await?;
        if let Ok(m) = stream.direct_get(seq).await {
            return Ok(Some(m));
        }
        found(stream.get_raw_message(seq).await, "reading a body")
    }

    /// The first body stored at or after `seq` (leader read), if any.
    async fn next_from(&self, seq: u64) -> BusResult<Option<StreamMessage>> {
        let stream = self.body_handle().await?;
        let filter = self
            .inner
            .config
            .stream_subject(self.inner.team, StreamKind::Bodies);
        found(
            stream
                .raw_message_builder()
                .sequence(seq)
                .next_by_subject(filter)
                .send()
                .await,
            "reading a body",
        )
    }

    pub(crate) async fn retain_bodies(&self, before: DateTime<Utc>) -> BusResult<u64> {
        let mut stream = self
            .inner
            .js
            .get_stream(&self.inner.body_stream)
            .await
            .map_err(|e| bus_error(Op::Request, "body stream", Failure::from(e)))?;
        let state = stream
            .info()
            .await
            .map_err(|e| bus_error(Op::Request, "body stream info", Failure::from(e)))?
            .state
            .clone();
        if state.messages == 0 {
            return Ok(0);
        }
        // Smallest sequence whose next stored body was stored at or after `before`
        // (timestamps are monotonic within a stream).
        let (mut lo, mut hi) = (state.first_sequence, state.last_sequence.saturating_add(1));
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            match self.next_from(mid).await? {
                Some(m) if to_utc(&m) < before => lo = m.sequence + 1,
                _ => hi = mid,
            }
        }
        if lo <= state.first_sequence {
            return Ok(0);
        }
        let purged = stream
            .purge()
            .sequence(lo)
            .await
            .map_err(|e| bus_error(Op::Request, "purging bodies", Failure::from(e)))?;
        Ok(purged.purged)
    }

    pub(crate) async fn reconcile_body(&self, env: &Envelope) -> BusResult<Option<Locator>> {
        if env.team_id != self.inner.team {
            return Err(BusError::forbidden("the envelope belongs to another team"));
        }
        let subject =
            self.inner
                .config
                .body_subject(self.inner.team, env.conversation_id, env.message_id);
        if let Some(stored) = self.last_on_subject(&subject).await? {
            return if header(&stored.headers, PUBLISH_KEY)
                == Some(env.publish_key.to_string().as_str())
            {
                Ok(Some(locator(&self.inner.body_stream, stored.sequence)))
            } else {
                Err(BusError::conflict(format!(
                    "message {} is already stored under another publish key",
                    env.message_id
                )))
            };
        }
        match self.publish_body(env).await {
            Published::Confirmed { locator, .. } => Ok(Some(locator)),
            Published::Retryable(_) => Ok(None),
            Published::Fatal(e) | Published::Uncertain(e) => Err(e),
        }
    }
}
