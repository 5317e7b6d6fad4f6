//! `MemoryInbox`: one team's inbox, with the semantics of a work-queue stream and one durable
//! pull consumer per recipient.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use crewbus_domain::{BusResult, InboxRef, InboxStatus, Published, validate_recipient_key};
use crewbus_ports::{Clock, Inbox};
use uuid::Uuid;

use crate::ack_subject;
use crate::config::{InboxConfig, delta};
use crate::locator::{self, Store};
use crate::lock::lock;

/// The in-memory inbox of one team.
///
/// It behaves like the JetStream inbox it stands in for (BUS.md §3):
/// - The team's references form one stream, sequences from 1, never reused. Each recipient has
///   its own subject. `publish_reference` deduplicates on `event_id` (for the life of the inbox,
///   or for [`InboxConfig::duplicate_window`] on the injected clock), answering a repeat with
///   `Confirmed { duplicate: true }` and the first locator (`memory:<team hex>:inbox:<seq>`).
///   Beyond [`InboxConfig::max_messages`] the oldest references of the team are discarded
///   (discard-old).
/// - A recipient's consumer is created by its first `fetch_references`; before that,
///   `inbox_status` answers `present: false`. It hands out references in stream order, first
///   those whose ack wait has passed (redeliveries, `deliveries` incremented), then new ones, each
///   handed-out reference waiting [`InboxConfig::ack_wait`] on the injected clock. A reference
///   handed out [`InboxConfig::max_deliver`] times is not handed out again once that last ack
///   wait passes, and no longer counts as awaiting an ack.
/// - `ack_reference` removes the reference from the stream (work-queue retention). Acking twice,
///   or acking a reference no longer held, is `Ok`. An ack subject this team's inbox did not
///   issue is `Forbidden`.
/// - `inbox_status` reports what JetStream consumer info does: `pending` (`num_pending`: stored
///   for the recipient, not yet handed out by its consumer), `awaiting_ack` (`num_ack_pending`)
///   and `redelivered` (`num_redelivered`, of those awaiting an ack). Two deliberate
///   differences from nats-server 2.9.10 (verified against it): a reference whose last delivery's
///   ack wait passed stops counting at once here, where the server drops it from
///   `num_ack_pending` only at the consumer's next pull; and it stops counting as `redelivered`,
///   where the server keeps it in `num_redelivered`.
/// - [`MemoryInbox::delete_consumer`] drops a consumer as an operator (or an accident) would:
///   status is `present: false` until the next fetch recreates it, which hands out again every
///   reference still stored for the recipient, counting deliveries from 1.
///
/// Clones share the inbox.
#[derive(Clone)]
pub struct MemoryInbox {
    shared: Arc<Shared>,
}

struct Shared {
    team: Uuid,
    config: InboxConfig,
    clock: Arc<dyn Clock>,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Last stream sequence issued (0: none yet).
    last_seq: u64,
    /// The stream: every reference still stored, by sequence.
    refs: BTreeMap<u64, Stored>,
    /// Stored sequences of each recipient's subject.
    by_recipient: HashMap<String, BTreeSet<u64>>,
    /// Event ids remembered for deduplication: event id → (first sequence, first seen).
    seen: HashMap<Uuid, (u64, DateTime<Utc>)>,
    /// The same event ids in the order first seen, for expiring a duplicate window.
    seen_order: VecDeque<(DateTime<Utc>, Uuid)>,
    consumers: HashMap<String, Consumer>,
    /// Overflow limit set by a stream administrator, replacing [`InboxConfig::max_messages`].
    max_messages: Option<u64>,
}

struct Stored {
    recipient: String,
    event_id: Uuid,
    payload: String,
}

#[derive(Default)]
struct Consumer {
    /// Highest stream sequence this consumer has handed out (its delivered floor).
    delivered_floor: u64,
    /// Handed out and not acknowledged, still eligible for redelivery.
    outstanding: BTreeMap<u64, Delivery>,
    /// Handed out `max_deliver` times and never acknowledged: no longer handed out.
    exhausted: BTreeSet<u64>,
}

struct Delivery {
    deliveries: u64,
    ack_deadline: DateTime<Utc>,
}

impl Consumer {
    /// Retires every outstanding reference whose last permitted delivery's ack wait passed.
    fn expire(&mut self, now: DateTime<Utc>, max_deliver: u64) {
        let retired: Vec<u64> = self
            .outstanding
            .iter()
            .filter(|(_, d)| d.ack_deadline <= now && d.deliveries >= max_deliver)
            .map(|(seq, _)| *seq)
            .collect();
        for seq in retired {
            self.outstanding.remove(&seq);
            self.exhausted.insert(seq);
        }
    }

    fn forget(&mut self, seq: u64) {
        self.outstanding.remove(&seq);
        self.exhausted.remove(&seq);
    }
}

impl State {
    fn remove(&mut self, seq: u64) {
        if let Some(stored) = self.refs.remove(&seq) {
            if let Some(seqs) = self.by_recipient.get_mut(&stored.recipient) {
                seqs.remove(&seq);
                if seqs.is_empty() {
                    self.by_recipient.remove(&stored.recipient);
                }
            }
            if let Some(consumer) = self.consumers.get_mut(&stored.recipient) {
                consumer.forget(seq);
            }
        }
    }

    fn forget_expired_event_ids(&mut self, now: DateTime<Utc>, window: chrono::TimeDelta) {
        while let Some((seen_at, event_id)) = self.seen_order.front().copied() {
            if seen_at + window > now {
                break;
            }
            self.seen_order.pop_front();
            if self
                .seen
                .get(&event_id)
                .is_some_and(|(_, at)| *at == seen_at)
            {
                self.seen.remove(&event_id);
            }
        }
    }
}

impl MemoryInbox {
    /// An empty inbox for `team`, reading time from `clock`. `config` is used as given (check it
    /// with [`InboxConfig::validate`]).
    pub fn new(team: Uuid, config: InboxConfig, clock: Arc<dyn Clock>) -> Self {
        MemoryInbox {
            shared: Arc::new(Shared {
                team,
                config,
                clock,
                state: Mutex::new(State::default()),
            }),
        }
    }

    /// The team this inbox serves.
    pub fn team(&self) -> Uuid {
        self.shared.team
    }

    /// The limits in force.
    pub fn config(&self) -> &InboxConfig {
        &self.shared.config
    }

    /// Test hook: deletes `recipient`'s consumer (its stored references stay). Returns whether a
    /// consumer existed. The next `fetch_references` recreates it and hands out again everything
    /// still stored for the recipient.
    pub fn delete_consumer(&self, recipient: &str) -> bool {
        self.state().consumers.remove(recipient).is_some()
    }

    /// References stored in the team's inbox now, across recipients (count).
    pub fn stored_references(&self) -> u64 {
        self.state().refs.len() as u64
    }

    /// Payload bytes stored in the team's inbox now (Σ payload lengths, bytes).
    pub fn stored_bytes(&self) -> u64 {
        self.state()
            .refs
            .values()
            .map(|r| r.payload.len() as u64)
            .sum()
    }

    /// The overflow limit in force (the configured one unless an administrator changed it).
    pub fn max_messages(&self) -> u64 {
        self.state()
            .max_messages
            .unwrap_or(self.shared.config.max_messages)
    }

    /// Sets the overflow limit if the stored references fit it, atomically with respect to
    /// publishes. Errors: the contents `(messages, bytes)` that exceed it.
    pub(crate) fn relimit(&self, quota: crewbus_domain::Quotas) -> Result<(), (u64, u64)> {
        let mut state = self.state();
        let messages = state.refs.len() as u64;
        let bytes = state.refs.values().map(|r| r.payload.len() as u64).sum();
        if quota.exceeded_by(messages, bytes) {
            return Err((messages, bytes));
        }
        state.max_messages = Some(quota.max_messages);
        Ok(())
    }

    /// Drops every reference, consumer and remembered event id (the stream was deleted).
    pub(crate) fn clear(&self) {
        *self.state() = State::default();
    }

    fn state(&self) -> MutexGuard<'_, State> {
        lock(&self.shared.state)
    }
}

impl fmt::Debug for MemoryInbox {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryInbox")
            .field("team", &self.shared.team)
            .field("config", &self.shared.config)
            .field("stored_references", &self.stored_references())
            .finish_non_exhaustive()
    }
}

#[async_trait]
impl Inbox for MemoryInbox {
    async fn publish_reference(
        &self,
        recipient_key: &str,
        event_id: Uuid,
        payload: &str,
    ) -> Published {
        if let Err(error) = validate_recipient_key(recipient_key) {
            return Published::from_error(error);
        }
        let team = self.shared.team;
        let config = &self.shared.config;
        let now = self.shared.clock.now();
        let mut state = self.state();
        if let Some(window) = config.duplicate_window {
            state.forget_expired_event_ids(now, delta(window));
        }
        if let Some((seq, _)) = state.seen.get(&event_id) {
            return Published::Confirmed {
                locator: locator::issue(team, Store::Inbox, *seq),
                duplicate: true,
            };
        }
        state.last_seq += 1;
        let seq = state.last_seq;
        state.refs.insert(
            seq,
            Stored {
                recipient: recipient_key.to_owned(),
                event_id,
                payload: payload.to_owned(),
            },
        );
        state
            .by_recipient
            .entry(recipient_key.to_owned())
            .or_default()
            .insert(seq);
        state.seen.insert(event_id, (seq, now));
        state.seen_order.push_back((now, event_id));
        let max_messages = state.max_messages.unwrap_or(config.max_messages);
        while state.refs.len() as u64 > max_messages {
            let Some(oldest) = state.refs.keys().next().copied() else {
                break;
            };
            state.remove(oldest);
        }
        Published::Confirmed {
            locator: locator::issue(team, Store::Inbox, seq),
            duplicate: false,
        }
    }

    async fn fetch_references(
        &self,
        recipient_key: &str,
        limit: usize,
    ) -> BusResult<Vec<InboxRef>> {
        validate_recipient_key(recipient_key)?;
        let team = self.shared.team;
        let config = &self.shared.config;
        let now = self.shared.clock.now();
        let deadline = now + delta(config.ack_wait);
        let mut guard = self.state();
        let state = &mut *guard;
        let consumer = state.consumers.entry(recipient_key.to_owned()).or_default();
        consumer.expire(now, config.max_deliver);
        let mut handed = Vec::new();
        for (seq, delivery) in consumer.outstanding.iter_mut() {
            if handed.len() >= limit {
                break;
            }
            if delivery.ack_deadline <= now {
                delivery.deliveries += 1;
                delivery.ack_deadline = deadline;
                handed.push((*seq, delivery.deliveries));
            }
        }
        if let Some(seqs) = state.by_recipient.get(recipient_key) {
            let fresh: Vec<u64> = seqs
                .range(consumer.delivered_floor + 1..)
                .take(limit.saturating_sub(handed.len()))
                .copied()
                .collect();
            for seq in fresh {
                consumer.delivered_floor = seq;
                consumer.outstanding.insert(
                    seq,
                    Delivery {
                        deliveries: 1,
                        ack_deadline: deadline,
                    },
                );
                handed.push((seq, 1));
            }
        }
        handed.sort_unstable_by_key(|(seq, _)| *seq);
        Ok(handed
            .into_iter()
            .filter_map(|(seq, deliveries)| {
                let stored = state.refs.get(&seq)?;
                Some(InboxRef {
                    event_id: stored.event_id,
                    payload: stored.payload.clone(),
                    ack_subject: ack_subject::issue(team, recipient_key, seq),
                    stream_seq: seq,
                    deliveries,
                })
            })
            .collect())
    }

    async fn ack_reference(&self, ack_subject: &str) -> BusResult<()> {
        let (recipient, seq) = ack_subject::parse(ack_subject, self.shared.team)?;
        let mut state = self.state();
        let handed_out = state
            .consumers
            .get(recipient)
            .is_some_and(|c| c.outstanding.contains_key(&seq) || c.exhausted.contains(&seq));
        if handed_out {
            state.remove(seq);
        }
        Ok(())
    }

    async fn inbox_status(&self, recipient_key: &str) -> BusResult<InboxStatus> {
        validate_recipient_key(recipient_key)?;
        let now = self.shared.clock.now();
        let max_deliver = self.shared.config.max_deliver;
        let mut guard = self.state();
        let state = &mut *guard;
        let Some(consumer) = state.consumers.get_mut(recipient_key) else {
            return Ok(InboxStatus {
                present: false,
                ..InboxStatus::default()
            });
        };
        consumer.expire(now, max_deliver);
        let pending = state.by_recipient.get(recipient_key).map_or(0, |seqs| {
            seqs.range(consumer.delivered_floor + 1..).count() as u64
        });
        Ok(InboxStatus {
            present: true,
            pending,
            awaiting_ack: consumer.outstanding.len() as u64,
            redelivered: consumer
                .outstanding
                .values()
                .filter(|d| d.deliveries > 1)
                .count() as u64,
        })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::ManualClock;

    fn inbox(config: InboxConfig) -> (MemoryInbox, ManualClock) {
        let clock = ManualClock::default();
        let inbox = MemoryInbox::new(Uuid::new_v4(), config, Arc::new(clock.clone()));
        (inbox, clock)
    }

    #[tokio::test]
    async fn a_duplicate_window_forgets_event_ids_after_it_passes() {
        let (inbox, clock) = inbox(InboxConfig {
            duplicate_window: Some(Duration::from_secs(2)),
            ..InboxConfig::default()
        });
        let event = Uuid::new_v4();
        assert!(matches!(
            inbox.publish_reference("a", event, "{}").await,
            Published::Confirmed {
                duplicate: false,
                ..
            }
        ));
        clock.advance(Duration::from_millis(1999));
        assert!(matches!(
            inbox.publish_reference("a", event, "{}").await,
            Published::Confirmed {
                duplicate: true,
                ..
            }
        ));
        clock.advance(Duration::from_millis(1));
        assert!(matches!(
            inbox.publish_reference("a", event, "{}").await,
            Published::Confirmed {
                duplicate: false,
                ..
            }
        ));
        assert_eq!(inbox.stored_references(), 2);
    }

    #[tokio::test]
    async fn an_exhausted_reference_stays_stored_until_acked_or_recreated() {
        let (inbox, clock) = inbox(InboxConfig {
            max_deliver: 1,
            ..InboxConfig::default()
        });
        let ack_wait = inbox.config().ack_wait;
        inbox.publish_reference("a", Uuid::new_v4(), "{}").await;
        let first = inbox.fetch_references("a", 10).await.unwrap();
        clock.advance(ack_wait);
        assert!(inbox.fetch_references("a", 10).await.unwrap().is_empty());
        assert_eq!(inbox.stored_references(), 1);
        // A recreated consumer hands it out again, counting from 1.
        assert!(inbox.delete_consumer("a"));
        let again = inbox.fetch_references("a", 10).await.unwrap();
        assert_eq!(again.len(), 1);
        assert_eq!(again[0].deliveries, 1);
        // A late ack of the first delivery still acknowledges it (same subject).
        inbox.ack_reference(&first[0].ack_subject).await.unwrap();
        assert_eq!(inbox.stored_references(), 0);
    }

    #[tokio::test]
    async fn discarding_an_outstanding_reference_stops_counting_it() {
        let (inbox, _clock) = inbox(InboxConfig {
            max_messages: 2,
            ..InboxConfig::default()
        });
        inbox.publish_reference("a", Uuid::new_v4(), "{}").await;
        let handed = inbox.fetch_references("a", 10).await.unwrap();
        assert_eq!(inbox.inbox_status("a").await.unwrap().awaiting_ack, 1);
        inbox.publish_reference("b", Uuid::new_v4(), "{}").await;
        inbox.publish_reference("b", Uuid::new_v4(), "{}").await;
        assert_eq!(inbox.stored_references(), 2);
        assert_eq!(inbox.inbox_status("a").await.unwrap().awaiting_ack, 0);
        // Its ack is now harmless.
        inbox.ack_reference(&handed[0].ack_subject).await.unwrap();
        assert_eq!(inbox.stored_references(), 2);
    }

    #[tokio::test]
    async fn deleting_a_missing_consumer_says_so() {
        let (inbox, _clock) = inbox(InboxConfig::default());
        assert!(!inbox.delete_consumer("nobody"));
        inbox.fetch_references("nobody", 1).await.unwrap();
        assert!(inbox.delete_consumer("nobody"));
    }

    #[tokio::test]
    async fn a_limit_of_zero_hands_out_nothing_but_creates_the_consumer() {
        let (inbox, _clock) = inbox(InboxConfig::default());
        inbox.publish_reference("a", Uuid::new_v4(), "{}").await;
        assert!(inbox.fetch_references("a", 0).await.unwrap().is_empty());
        let status = inbox.inbox_status("a").await.unwrap();
        assert!(status.present);
        assert_eq!(status.pending, 1);
    }
}
