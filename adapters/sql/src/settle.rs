//! The relay's settle fence, for both SQL adapters: which settlements of a call apply to the
//! live slots read for it.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use crewbus_domain::{Locator, SettleOutcome, Settlement, SlotOutcome};
use uuid::Uuid;

/// A slot live at the settle time (not failed, lease unexpired), with its message's place:
/// `SELECT s.id, s.generation, s.message_id, s.team_id FROM outbox_slots s …`.
#[derive(sqlx::FromRow)]
pub struct LiveSlot {
    /// The slot.
    pub id: Uuid,
    /// Its current generation (bumped by each lease).
    pub generation: i64,
    /// The message it publishes.
    pub message_id: Uuid,
    /// The message's team.
    pub team_id: Uuid,
}

/// Decides the fence, settlement by settlement in call order: a settlement applies only when its
/// slot is among `live` with the same generation and no earlier settlement of this call applied
/// to it (an applied one releases the lease); everything else is `Stale`.
///
/// Returns one outcome per settlement, in order, and the applied ones as (slot, outcome), in
/// call order: the writes the adapter then makes.
pub fn fence(
    settlements: &[Settlement],
    live: Vec<LiveSlot>,
) -> (Vec<SettleOutcome>, Vec<(LiveSlot, &SlotOutcome)>) {
    let mut live: HashMap<Uuid, LiveSlot> = live.into_iter().map(|r| (r.id, r)).collect();
    let mut applied = Vec::new();
    let outcomes = settlements
        .iter()
        .map(|s| {
            let current = live
                .get(&s.slot)
                .is_some_and(|r| i64::try_from(s.generation) == Ok(r.generation));
            // An applied settlement releases the lease: the same slot again is stale.
            match current.then(|| live.remove(&s.slot)).flatten() {
                Some(slot) => {
                    applied.push((slot, &s.outcome));
                    SettleOutcome::Applied
                }
                None => SettleOutcome::Stale,
            }
        })
        .collect();
    (outcomes, applied)
}

/// What an applied settlement writes, on either store: the relay's four outcomes as the three
/// writes they make (`Retryable` and `Uncertain` differ only in the slot's uncertain flag).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlotWrite<'a> {
    /// `Confirmed`: the message becomes stored at `locator`, the slot is deleted and the
    /// message's reference marker is written.
    Stored {
        /// Where the body backend keeps the body.
        locator: &'a Locator,
    },
    /// `Retryable` or `Uncertain`: the slot's attempts grow by one (saturating at `i32::MAX`),
    /// its lease is released and it is due again at `next_attempt_at`.
    Retry {
        /// Whether the attempt may have landed (`Uncertain`): the relay then reconciles it.
        uncertain: bool,
        /// When the slot is due again.
        next_attempt_at: DateTime<Utc>,
        /// The error's `BusError::code`, recorded as the slot's last error (never backend text).
        code: &'static str,
    },
    /// `Fatal`: the slot and its message are failed with `code`.
    Failed {
        /// The error's `BusError::code`, recorded on the slot and the message.
        code: &'static str,
    },
}

impl<'a> From<&'a SlotOutcome> for SlotWrite<'a> {
    fn from(outcome: &'a SlotOutcome) -> Self {
        match outcome {
            SlotOutcome::Confirmed { locator } => SlotWrite::Stored { locator },
            SlotOutcome::Retryable {
                error,
                next_attempt_at,
            } => SlotWrite::Retry {
                uncertain: false,
                next_attempt_at: *next_attempt_at,
                code: error.code(),
            },
            SlotOutcome::Uncertain {
                error,
                next_attempt_at,
            } => SlotWrite::Retry {
                uncertain: true,
                next_attempt_at: *next_attempt_at,
                code: error.code(),
            },
            SlotOutcome::Fatal { error } => SlotWrite::Failed { code: error.code() },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crewbus_domain::BusError;

    #[test]
    fn retryable_and_uncertain_write_alike_but_for_the_flag() {
        let at = DateTime::from_timestamp(1_000, 0).unwrap();
        let error = BusError::unavailable("down");
        let retry = SlotOutcome::Retryable {
            error: error.clone(),
            next_attempt_at: at,
        };
        let uncertain = SlotOutcome::Uncertain {
            error: error.clone(),
            next_attempt_at: at,
        };
        let write = |uncertain| SlotWrite::Retry {
            uncertain,
            next_attempt_at: at,
            code: error.code(),
        };
        assert_eq!(SlotWrite::from(&retry), write(false));
        assert_eq!(SlotWrite::from(&uncertain), write(true));
        let fatal = SlotOutcome::Fatal {
            error: BusError::conflict("held"),
        };
        assert_eq!(
            SlotWrite::from(&fatal),
            SlotWrite::Failed {
                code: BusError::conflict("held").code()
            }
        );
    }
}
