//! The relay's settle fence, for both SQL adapters: which settlements of a call apply to the
//! live slots read for it.

use std::collections::HashMap;

use crewbus_domain::{SettleOutcome, Settlement, SlotOutcome};
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
