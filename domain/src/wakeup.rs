//! Wake-ups: a hint to a waiting fetch that something changed for an agent.

use std::fmt;

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

/// What a wake-up listener hands on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Wakeup {
    /// Something became fetchable for these agents, or they were revoked.
    Agents(Vec<WakeupTarget>),
    /// Wake-ups may have been missed (the listener fell behind): every waiter should look
    /// again.
    Everyone,
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
    }
}
