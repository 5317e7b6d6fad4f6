//! What the ledger shows the people who run the agents: each agent's activity and backlog, each
//! conversation's size, each recipient's delivery state, sends and deliveries over time, and the
//! bodies a team keeps.

use std::collections::HashMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::conversation::Conversation;
use crate::presence::StatusLine;
use crate::receipt::Receipt;
use crate::team::Agent;

/// One agent of a team as an operator sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentActivity {
    /// The agent (revoked ones and human members included).
    pub agent: Agent,
    /// Its last authenticated call the bus recorded (written at most once per few seconds per
    /// agent, so up to that much behind); `None` if it never made one since this was kept.
    pub last_active_at: Option<DateTime<Utc>>,
    /// Deliveries pending for it: receipts of stored messages not yet confirmed (count).
    pub pending: u64,
    /// When the oldest of those was stored (`None` when nothing is pending): the age of its
    /// oldest unconfirmed delivery is `now − oldest_pending_at`.
    pub oldest_pending_at: Option<DateTime<Utc>>,
    /// The status line it set last (`None`: never set, or cleared with an empty line).
    pub status: Option<StatusLine>,
    /// Its current run: the latest admitted of its runs not sealed (by admission time, then
    /// id); `None` when every run of it is sealed, or it never ran one.
    pub current_run: Option<Uuid>,
}

/// A conversation with how much it holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConversationSummary {
    /// The conversation and its members.
    pub conversation: Conversation,
    /// Messages recorded in it (every publication state), count.
    pub messages: u64,
    /// When its latest message was sent; `None` while empty.
    pub last_sent_at: Option<DateTime<Utc>>,
}

/// Where one recipient's copy of a message stands, from the ledger's receipt and hand-outs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeliveryState {
    /// The body is not stored yet (the outbox holds it), or failed.
    Pending,
    /// Stored and waiting for the recipient to fetch it.
    Stored,
    /// Handed out to the recipient (fetched), not yet confirmed.
    HandedOut,
    /// Confirmed: the receipt's `delivered_at` is set.
    Confirmed,
    /// Confirmed and acknowledged as read.
    Acknowledged,
}

/// One recipient of one message: its receipt and the hand-outs made of it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecipientState {
    /// The receipt.
    pub receipt: Receipt,
    /// Hand-outs of the message to this recipient so far (count; more than one means
    /// redeliveries before the confirm).
    pub hand_outs: u32,
    /// When the latest hand-out was issued.
    pub last_handed_out_at: Option<DateTime<Utc>>,
}

impl RecipientState {
    /// The state the receipt and hand-outs add up to.
    pub fn state(&self) -> DeliveryState {
        let r = &self.receipt;
        if r.acknowledged_at.is_some() {
            DeliveryState::Acknowledged
        } else if r.delivered_at.is_some() {
            DeliveryState::Confirmed
        } else if self.hand_outs > 0 {
            DeliveryState::HandedOut
        } else if r.stored_at.is_some() {
            DeliveryState::Stored
        } else {
            DeliveryState::Pending
        }
    }
}

/// Puts recipient states in the order `Oversight::recipient_states` answers with: by the first
/// position of their message in `messages`, then by recipient key; states of other messages are
/// left out. For stores that read the states of a batch in one query.
pub fn in_asked_order(messages: &[Uuid], states: Vec<RecipientState>) -> Vec<RecipientState> {
    let mut position: HashMap<Uuid, usize> = HashMap::with_capacity(messages.len());
    for (i, m) in messages.iter().enumerate() {
        position.entry(*m).or_insert(i);
    }
    let mut keyed: Vec<(usize, RecipientState)> = states
        .into_iter()
        .filter_map(|s| position.get(&s.receipt.message).map(|p| (*p, s)))
        .collect();
    keyed.sort_by(|(p, a), (q, b)| {
        (p, &a.receipt.recipient_key).cmp(&(q, &b.receipt.recipient_key))
    });
    keyed.into_iter().map(|(_, s)| s).collect()
}

/// Sends and confirmed deliveries of one team within one time bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActivityBucket {
    /// Start of the bucket (inclusive); the bucket ends one bucket length later (exclusive).
    pub start: DateTime<Utc>,
    /// Messages sent (`Message::sent_at` in the bucket), count.
    pub sent: u64,
    /// Deliveries confirmed (`Receipt::delivered_at` in the bucket), count.
    pub delivered: u64,
}

/// Every bucket of `bucket` length from `since` (aligned down to a multiple of the bucket
/// length since the Unix epoch) up to `until`, zero-filled, with the counts of `found` (what a
/// ledger returned: non-empty buckets, at the same alignment) added in. Used by the overview's
/// chart so a quiet minute is a zero, not a gap.
pub fn fill_buckets(
    since: DateTime<Utc>,
    until: DateTime<Utc>,
    bucket: Duration,
    found: &[ActivityBucket],
) -> Vec<ActivityBucket> {
    let step = bucket.as_micros().max(1) as i64;
    let first = bucket_start(since, bucket);
    let mut out = Vec::new();
    let mut start = first;
    while start < until.timestamp_micros() {
        let at = DateTime::from_timestamp_micros(start).unwrap_or(since);
        let mut b = ActivityBucket {
            start: at,
            sent: 0,
            delivered: 0,
        };
        for f in found
            .iter()
            .filter(|f| bucket_start(f.start, bucket) == start)
        {
            b.sent += f.sent;
            b.delivered += f.delivered;
        }
        out.push(b);
        start += step;
    }
    out
}

/// The start of `at`'s bucket, in microseconds since the epoch (bucket boundaries are multiples
/// of the bucket length since the epoch, so every store aligns them alike).
pub fn bucket_start(at: DateTime<Utc>, bucket: Duration) -> i64 {
    let step = bucket.as_micros().max(1) as i64;
    at.timestamp_micros().div_euclid(step) * step
}

/// Most buckets one `Oversight::activity` read may span.
pub const MAX_ACTIVITY_BUCKETS: u64 = 10_000;

/// The argument rule of `Oversight::activity`: a bucket of at least one second, and at most
/// [`MAX_ACTIVITY_BUCKETS`] buckets from `since`'s bucket up to `until`. Returns the bucket
/// length in microseconds. Errors: either broken → [`crate::BusError::Invalid`].
pub fn validate_activity(
    since: DateTime<Utc>,
    until: DateTime<Utc>,
    bucket: Duration,
) -> crate::BusResult<i64> {
    if bucket < Duration::from_secs(1) {
        return Err(crate::BusError::invalid(
            "an activity bucket is at least one second",
        ));
    }
    let step = i64::try_from(bucket.as_micros())
        .map_err(|_| crate::BusError::invalid("an activity bucket is too long"))?;
    let first = bucket_start(since, bucket);
    let span = i128::from(until.timestamp_micros()) - i128::from(first);
    let buckets = if span <= 0 {
        0
    } else {
        (span + i128::from(step) - 1) / i128::from(step)
    };
    if buckets > i128::from(MAX_ACTIVITY_BUCKETS) {
        return Err(crate::BusError::invalid(format!(
            "an activity read spans at most {MAX_ACTIVITY_BUCKETS} buckets"
        )));
    }
    Ok(step)
}

/// The bodies one team keeps on one body backend, as the ledger counts them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StorageUse {
    /// The body backend (as recorded on the messages).
    pub backend: String,
    /// Messages whose body is stored and not yet removed by retention, count.
    pub messages: u64,
    /// Their bodies' total length, bytes.
    pub bytes: u64,
    /// Messages still waiting for the outbox to store their body, count.
    pub pending: u64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn receipt() -> Receipt {
        Receipt {
            message: Uuid::nil(),
            recipient: Uuid::nil(),
            recipient_key: "a".into(),
            stored_at: None,
            delivered_at: None,
            acknowledged_at: None,
        }
    }

    #[test]
    fn a_recipient_state_follows_the_receipt_and_its_hand_outs() {
        let t = Utc.with_ymd_and_hms(2030, 1, 1, 0, 0, 0).unwrap();
        let mut s = RecipientState {
            receipt: receipt(),
            hand_outs: 0,
            last_handed_out_at: None,
        };
        assert_eq!(s.state(), DeliveryState::Pending);
        s.receipt.stored_at = Some(t);
        assert_eq!(s.state(), DeliveryState::Stored);
        s.hand_outs = 1;
        s.last_handed_out_at = Some(t);
        assert_eq!(s.state(), DeliveryState::HandedOut);
        s.receipt.delivered_at = Some(t);
        assert_eq!(s.state(), DeliveryState::Confirmed);
        s.receipt.acknowledged_at = Some(t);
        assert_eq!(s.state(), DeliveryState::Acknowledged);
    }

    #[test]
    fn states_come_in_the_order_asked_for_then_by_recipient_key() {
        let (m1, m2) = (Uuid::new_v4(), Uuid::new_v4());
        let state = |message: Uuid, key: &str| RecipientState {
            receipt: Receipt {
                message,
                recipient_key: key.into(),
                ..receipt()
            },
            hand_outs: 0,
            last_handed_out_at: None,
        };
        let states = vec![
            state(m1, "b"),
            state(m2, "z"),
            state(Uuid::new_v4(), "a"),
            state(m1, "a"),
        ];
        let ordered = in_asked_order(&[m2, m1, m2], states);
        let got: Vec<(Uuid, &str)> = ordered
            .iter()
            .map(|s| (s.receipt.message, s.receipt.recipient_key.as_str()))
            .collect();
        assert_eq!(got, [(m2, "z"), (m1, "a"), (m1, "b")]);
    }

    #[test]
    fn an_activity_read_needs_a_second_and_at_most_ten_thousand_buckets() {
        let t0 = Utc.with_ymd_and_hms(2030, 1, 1, 10, 0, 30).unwrap();
        let minute = Duration::from_secs(60);
        assert_eq!(validate_activity(t0, t0, minute).unwrap(), 60_000_000);
        assert!(validate_activity(t0, t0, Duration::from_millis(999)).is_err());
        // 10:00 .. 10:00 + 10 000 minutes: exactly the limit (the first bucket starts at 10:00).
        let last =
            Utc.with_ymd_and_hms(2030, 1, 1, 10, 0, 0).unwrap() + chrono::Duration::minutes(10_000);
        assert!(validate_activity(t0, last, minute).is_ok());
        let over = last + chrono::Duration::seconds(1);
        assert!(validate_activity(t0, over, minute).is_err());
        assert_eq!(fill_buckets(t0, last, minute, &[]).len(), 10_000);
    }

    #[test]
    fn buckets_are_aligned_zero_filled_and_summed() {
        let minute = Duration::from_secs(60);
        let t0 = Utc.with_ymd_and_hms(2030, 1, 1, 10, 0, 30).unwrap();
        let until = t0 + chrono::Duration::minutes(3);
        let found = [ActivityBucket {
            start: Utc.with_ymd_and_hms(2030, 1, 1, 10, 1, 0).unwrap(),
            sent: 4,
            delivered: 2,
        }];
        let filled = fill_buckets(t0, until, minute, &found);
        // 10:00, 10:01, 10:02, 10:03 (until is 10:03:30).
        assert_eq!(filled.len(), 4);
        assert_eq!(
            filled[0].start,
            Utc.with_ymd_and_hms(2030, 1, 1, 10, 0, 0).unwrap()
        );
        assert_eq!((filled[1].sent, filled[1].delivered), (4, 2));
        assert_eq!(filled.iter().map(|b| b.sent).sum::<u64>(), 4);
    }
}
