//! Wake-ups: a hint to a waiting fetch that something changed for an agent.

use std::fmt;

use chrono::{DateTime, Utc};
use uuid::Uuid;

/// One agent of one team: whom a wake-up is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct WakeupTarget {
    /// The agent's team.
    pub team: Uuid,
    /// The agent.
    pub agent: Uuid,
}

impl WakeupTarget {
    /// The target `(team, agent)`.
    pub fn new(team: Uuid, agent: Uuid) -> Self {
        WakeupTarget { team, agent }
    }

    /// The wire form `team:agent` (two hyphenated UUIDs, 73 ASCII bytes): what one wake-up
    /// carries between servers.
    pub fn to_payload(&self) -> String {
        self.to_string()
    }

    /// Parses the wire form of [`WakeupTarget::to_payload`]; `None` for anything else.
    pub fn from_payload(payload: &str) -> Option<Self> {
        let (team, agent) = payload.split_once(':')?;
        Some(WakeupTarget {
            team: Uuid::parse_str(team).ok()?,
            agent: Uuid::parse_str(agent).ok()?,
        })
    }
}

impl fmt::Display for WakeupTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.team.hyphenated(), self.agent.hyphenated())
    }
}

/// One target of the waiting fetches' and watches' safety sweep (`Ledger::wakeable`): an agent
/// waited for in this process, and which of its messages are worth a wake-up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SweepTarget {
    /// The agent.
    pub target: WakeupTarget,
    /// Only a message stored after this instant wakes it (`None`: any message). A watch
    /// waiting with a cursor gives the newest `stored_at` it reported, so an old message it
    /// reported already does not wake it at every sweep; a waiting fetch gives `None`; several
    /// waiters of one agent give the least restrictive (the earliest, `None` before all).
    pub stored_after: Option<DateTime<Utc>>,
}

/// What a wake-up listener hands on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Wakeup {
    /// Something became fetchable for these agents, or they were revoked.
    Agents(Vec<WakeupTarget>),
    /// A lease of these teams ended (released, its agent revoked, its run sealed): an acquire
    /// waiting in the team should try again.
    Leases(Vec<Uuid>),
    /// Wake-ups may have been missed (the listener fell behind): every waiter should look
    /// again.
    Everyone,
}

/// The prefix of a lease wake-up's wire form: `lease:<team>` (a hyphenated UUID after it,
/// 42 ASCII bytes in all).
const LEASE_PAYLOAD_PREFIX: &str = "lease:";

/// The wire form of a lease wake-up for `team` (see [`lease_wakeup_from_payload`]).
pub fn lease_wakeup_payload(team: Uuid) -> String {
    format!("{LEASE_PAYLOAD_PREFIX}{}", team.hyphenated())
}

/// The team of a lease wake-up's wire form ([`lease_wakeup_payload`]); `None` for anything else
/// (an agent's wake-up among them).
pub fn lease_wakeup_from_payload(payload: &str) -> Option<Uuid> {
    Uuid::parse_str(payload.strip_prefix(LEASE_PAYLOAD_PREFIX)?).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payload_round_trips_and_refuses_other_text() {
        let t = WakeupTarget::new(Uuid::new_v4(), Uuid::new_v4());
        assert_eq!(t.to_payload().len(), 73);
        assert_eq!(WakeupTarget::from_payload(&t.to_payload()), Some(t));
        for bad in ["", "x", "x:y", &t.team.to_string(), &format!("{}:", t.team)] {
            assert_eq!(WakeupTarget::from_payload(bad), None, "{bad}");
        }
        let lease = lease_wakeup_payload(t.team);
        assert_eq!(lease.len(), 42);
        assert_eq!(lease_wakeup_from_payload(&lease), Some(t.team));
        assert_eq!(WakeupTarget::from_payload(&lease), None);
        assert_eq!(lease_wakeup_from_payload(&t.to_payload()), None);
    }
}
