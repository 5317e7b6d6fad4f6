//! What both SQL ledgers make of a status update (`Oversight::set_status`).

use crewbus_domain::{Agent, BusError, BusResult};

/// The answer to a status update from what its one statement returned: `None` (no row of that
/// id in that team and tenant) → `NotFound`; `Some(true)` (the row is revoked, left as it was)
/// → `Forbidden`; `Some(false)` → set.
pub fn status_set(revoked: Option<bool>, agent: &Agent) -> BusResult<()> {
    match revoked {
        None => Err(BusError::not_found(format!("agent {}", agent.id))),
        Some(true) => Err(BusError::forbidden("the agent is revoked")),
        Some(false) => Ok(()),
    }
}
