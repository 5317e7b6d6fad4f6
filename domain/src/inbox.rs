//! Inbox references and inbox status, and the rule for recipient keys.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::{BusError, BusResult};

/// One reference handed out by an inbox, not yet acknowledged.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InboxRef {
    /// The ledger's inbox event this reference carries (the dedup key).
    pub event_id: Uuid,
    /// JSON naming the message (ids only; never a body), exactly as published.
    pub payload: String,
    /// Opaque token, meaningful only to the inbox that issued it, that acknowledges this
    /// reference (`Inbox::ack_reference`); it names the team's inbox, so another team's inbox
    /// refuses it with [`BusError::Forbidden`]. Use the one of the latest hand-out: whether an
    /// earlier hand-out's token still acknowledges is adapter-specific. Kept server-side: never
    /// shown to an agent.
    pub ack_subject: String,
    /// The reference's position in the team's inbox stream (or queue table): ≥ 1, growing in
    /// publish order across every recipient of the team, never reused.
    pub stream_seq: u64,
    /// How many times the recipient's current consumer has handed this reference out, this
    /// time included (≥ 1; a recreated consumer counts from 1 again); `deliveries > 1` is a
    /// redelivery. Never above the inbox's max deliver.
    pub deliveries: u64,
}

impl InboxRef {
    /// Whether this hand-out is a redelivery.
    pub fn redelivered(&self) -> bool {
        self.deliveries > 1
    }
}

/// What an inbox says about one recipient's consumer (counts, as JetStream consumer info
/// reports them: `num_pending`, `num_ack_pending`, `num_redelivered`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct InboxStatus {
    /// `false` when the recipient's consumer (or the inbox stream) does not exist — a fact, not
    /// an empty inbox; every count is then 0, whatever is stored for the recipient.
    pub present: bool,
    /// References stored for the recipient and not yet handed out by its current consumer
    /// (count).
    pub pending: u64,
    /// References handed out and not yet acknowledged, whether or not their ack wait has
    /// elapsed, excluding those retired by max deliver (count). A broker may drop a retired one
    /// from this count only at the consumer's next fetch.
    pub awaiting_ack: u64,
    /// Of `awaiting_ack`, how many have been handed out more than once (count). nats-server
    /// 2.9.10 keeps counting a reference retired by max deliver here.
    pub redelivered: u64,
}

impl InboxStatus {
    /// The status of a recipient from an inbox's counts: all zero (the default) when the consumer
    /// is not `present`, whatever the counts say.
    pub fn from_counts(present: bool, pending: u64, awaiting_ack: u64, redelivered: u64) -> Self {
        if !present {
            return InboxStatus::default();
        }
        InboxStatus {
            present,
            pending,
            awaiting_ack,
            redelivered,
        }
    }
}

/// The ack token `<prefix>:<team, simple hex>:<seq>` that an inbox kept as a queue of positions
/// issues for the reference at queue position `seq` of `team`.
pub fn queue_ack_token(prefix: &str, team: Uuid, seq: i64) -> String {
    format!("{prefix}:{}:{seq}", team.simple())
}

/// The queue position (≥ 1) that a [`queue_ack_token`] of `prefix` and `team` names.
/// Errors: anything else — another prefix, another team's token, garbage → [`BusError::Forbidden`].
pub fn parse_queue_ack_token(prefix: &str, team: Uuid, token: &str) -> BusResult<i64> {
    let forbidden = || BusError::forbidden("not an ack token of this team's inbox");
    let mut parts = token.split(':');
    let (Some(found), Some(owner), Some(seq), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(forbidden());
    };
    if found != prefix || Uuid::try_parse(owner).ok() != Some(team) {
        return Err(forbidden());
    }
    seq.parse::<i64>()
        .ok()
        .filter(|s| *s >= 1)
        .ok_or_else(forbidden)
}

/// Longest accepted recipient key, in bytes.
pub const MAX_RECIPIENT_KEY_LEN: usize = 128;

/// Validates a recipient key: a subject-safe token of 1–128 ASCII letters, digits, `_` or `-`
/// (no `.`, `*`, `>`, whitespace). Errors: [`BusError::Invalid`].
pub fn validate_recipient_key(key: &str) -> BusResult<()> {
    if key.is_empty() {
        return Err(BusError::invalid("recipient key is empty"));
    }
    if key.len() > MAX_RECIPIENT_KEY_LEN {
        return Err(BusError::invalid(format!(
            "recipient key is longer than {MAX_RECIPIENT_KEY_LEN} bytes"
        )));
    }
    if !key
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    {
        return Err(BusError::invalid(
            "recipient key may hold only ASCII letters, digits, `_` and `-`",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn queue_ack_tokens_round_trip_for_their_team_only() {
        let team = Uuid::new_v4();
        let token = queue_ack_token("q-inbox", team, 42);
        assert_eq!(parse_queue_ack_token("q-inbox", team, &token).unwrap(), 42);
        let t = team.simple();
        for bad in [
            queue_ack_token("q-inbox", Uuid::new_v4(), 42),
            queue_ack_token("other", team, 42),
            format!("q-inbox:{t}:0"),
            format!("q-inbox:{t}:-1"),
            format!("q-inbox:{t}:x"),
            format!("q-inbox:{t}:1:2"),
            format!("q-inbox:{t}"),
            String::new(),
        ] {
            assert!(
                matches!(
                    parse_queue_ack_token("q-inbox", team, &bad),
                    Err(BusError::Forbidden { .. })
                ),
                "{bad}"
            );
        }
    }

    #[test]
    fn an_absent_consumer_counts_nothing() {
        assert_eq!(
            InboxStatus::from_counts(false, 3, 2, 1),
            InboxStatus::default()
        );
        let s = InboxStatus::from_counts(true, 3, 2, 1);
        assert!(s.present && s.pending == 3 && s.awaiting_ack == 2 && s.redelivered == 1);
    }

    #[test]
    fn recipient_keys() {
        for ok in ["a", "agent-1", "A_b-9", &"x".repeat(128)] {
            assert!(validate_recipient_key(ok).is_ok(), "{ok}");
        }
        for bad in ["", "a.b", "a*", ">", "a b", "a\tb", "é", &"x".repeat(129)] {
            assert!(
                matches!(validate_recipient_key(bad), Err(BusError::Invalid { .. })),
                "{bad:?}"
            );
        }
    }

    proptest! {
        #[test]
        fn accepted_keys_are_subject_tokens(s in "\\PC{0,140}") {
            if validate_recipient_key(&s).is_ok() {
                prop_assert!(!s.is_empty());
                prop_assert!(!s.contains(['.', '*', '>', ' ']));
            }
        }
    }

    #[test]
    fn redelivered_means_more_than_one_delivery() {
        let mut r = InboxRef {
            event_id: Uuid::nil(),
            payload: "{}".into(),
            ack_subject: "x".into(),
            stream_seq: 1,
            deliveries: 1,
        };
        assert!(!r.redelivered());
        r.deliveries = 2;
        assert!(r.redelivered());
    }
}
