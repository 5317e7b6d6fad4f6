//! The console event feed: what changed on the bus, said after the commit that changed it, so
//! pages watching a team update live without polling the ledger.
//!
//! A feed event is a hint, like a wake-up: it names what changed (a kind and the ids it is
//! about), never the data itself; a page that hears one reads the ledger. Events are coalesced
//! before they travel (one event per team, kind and conversation, with a count), and a feed
//! that fell behind says so ([`FeedUpdate::Lagged`]): every page should look again.
//!
//! New kinds are added to [`FeedKind`] without changing the port: a server that does not know
//! a kind another server published reads it as [`FeedKind::Other`] and ignores it.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// What changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum FeedKind {
    /// A message was sent (recorded by the ledger; its body may still be on its way).
    MessageSent,
    /// A message's body was stored: it can be delivered.
    MessageStored,
    /// A message was handed out to a recipient (fetched, not yet confirmed).
    HandedOut,
    /// A recipient confirmed a delivery (its receipt is committed).
    Confirmed,
    /// A recipient acknowledged having read a message.
    Acknowledged,
    /// An agent was added to the team.
    AgentAdded,
    /// An agent was revoked.
    AgentRevoked,
    /// A push registration was parked (dead-lettered), or un-parked.
    RegistrationParked,
    /// A run was admitted, resumed or sealed.
    RunChanged,
    /// An agent set or cleared its status line.
    StatusChanged,
    /// A lease was granted, renewed, released, revoked or recorded as expired.
    LeaseChanged,
    /// A kind this build does not know (published by a newer server): ignored by pages.
    #[serde(other)]
    Other,
}

impl FeedKind {
    /// The kind's wire name (`message_stored`, …): what the SSE `event:` field carries.
    pub fn as_str(self) -> &'static str {
        match self {
            FeedKind::MessageSent => "message_sent",
            FeedKind::MessageStored => "message_stored",
            FeedKind::HandedOut => "handed_out",
            FeedKind::Confirmed => "confirmed",
            FeedKind::Acknowledged => "acknowledged",
            FeedKind::AgentAdded => "agent_added",
            FeedKind::AgentRevoked => "agent_revoked",
            FeedKind::RegistrationParked => "registration_parked",
            FeedKind::RunChanged => "run_changed",
            FeedKind::StatusChanged => "status_changed",
            FeedKind::LeaseChanged => "lease_changed",
            FeedKind::Other => "other",
        }
    }
}

/// One change of one team.
///
/// `conversation`, `message`, `agent` and `run` say what it is about where that is known; a
/// coalesced event keeps only the ids its parts agree on (`None` means "one or more"), and
/// `count` how many changes it stands for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FeedEvent {
    /// The team that changed.
    #[serde(rename = "t")]
    pub team: Uuid,
    /// What changed.
    #[serde(rename = "k")]
    pub kind: FeedKind,
    /// The conversation it is about, if one.
    #[serde(rename = "c", default, skip_serializing_if = "Option::is_none")]
    pub conversation: Option<Uuid>,
    /// The message it is about, if one.
    #[serde(rename = "m", default, skip_serializing_if = "Option::is_none")]
    pub message: Option<Uuid>,
    /// The agent it is about (a recipient, the revoked agent), if one.
    #[serde(rename = "a", default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<Uuid>,
    /// The run it is about, if one.
    #[serde(rename = "r", default, skip_serializing_if = "Option::is_none")]
    pub run: Option<Uuid>,
    /// How many changes this event stands for (at least 1).
    #[serde(rename = "n", default = "one")]
    pub count: u32,
}

fn one() -> u32 {
    1
}

impl FeedEvent {
    /// One change of `kind` in `team`, about nothing more specific yet (set the ids with the
    /// builder methods).
    pub fn new(team: Uuid, kind: FeedKind) -> Self {
        FeedEvent {
            team,
            kind,
            conversation: None,
            message: None,
            agent: None,
            run: None,
            count: 1,
        }
    }

    /// The same event about `conversation`.
    pub fn conversation(mut self, conversation: Uuid) -> Self {
        self.conversation = Some(conversation);
        self
    }

    /// The same event about `message`.
    pub fn message(mut self, message: Uuid) -> Self {
        self.message = Some(message);
        self
    }

    /// The same event about `agent`.
    pub fn agent(mut self, agent: Uuid) -> Self {
        self.agent = Some(agent);
        self
    }

    /// The same event about `run`.
    pub fn run(mut self, run: Uuid) -> Self {
        self.run = Some(run);
        self
    }
}

/// What a feed listener hands on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FeedUpdate {
    /// These changes were committed.
    Events(Vec<FeedEvent>),
    /// Changes may have been missed (the listener reconnected, or fell behind): every page
    /// should look again.
    Lagged,
}

/// Merges events of the same team, kind and conversation into one, summing their counts; an id
/// the merged events disagree on becomes `None`. Order: by first appearance.
pub fn coalesce(events: &[FeedEvent]) -> Vec<FeedEvent> {
    let mut out: Vec<FeedEvent> = Vec::new();
    for e in events {
        match out
            .iter_mut()
            .find(|o| o.team == e.team && o.kind == e.kind && o.conversation == e.conversation)
        {
            Some(o) => {
                o.count = o.count.saturating_add(e.count.max(1));
                if o.message != e.message {
                    o.message = None;
                }
                if o.agent != e.agent {
                    o.agent = None;
                }
                if o.run != e.run {
                    o.run = None;
                }
            }
            None => {
                let mut e = e.clone();
                e.count = e.count.max(1);
                out.push(e);
            }
        }
    }
    out
}

/// The wire form of a batch of events: coalesced JSON of at most `limit` bytes (Postgres'
/// `NOTIFY` payload must stay below 8000). When the coalesced batch is too long, its events are
/// coarsened to one per team and kind; when that is still too long, `None`: send
/// [`FeedUpdate::Lagged`] instead (every page looks again).
pub fn encode_feed(events: &[FeedEvent], limit: usize) -> Option<String> {
    let fine = coalesce(events);
    let text = serde_json::to_string(&fine).ok()?;
    if text.len() <= limit {
        return Some(text);
    }
    let coarse: Vec<FeedEvent> = fine
        .iter()
        .map(|e| FeedEvent {
            conversation: None,
            ..e.clone()
        })
        .collect();
    let text = serde_json::to_string(&coalesce(&coarse)).ok()?;
    (text.len() <= limit).then_some(text)
}

/// Reads the wire form of [`encode_feed`]; `None` for anything else (a listener then reports
/// [`FeedUpdate::Lagged`]).
pub fn decode_feed(text: &str) -> Option<Vec<FeedEvent>> {
    serde_json::from_str(text).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn coalescing_sums_counts_and_forgets_what_differs() {
        let (team, conv) = (Uuid::new_v4(), Uuid::new_v4());
        let a = FeedEvent::new(team, FeedKind::MessageStored)
            .conversation(conv)
            .message(Uuid::new_v4());
        let b = FeedEvent::new(team, FeedKind::MessageStored)
            .conversation(conv)
            .message(Uuid::new_v4());
        let c = FeedEvent::new(team, FeedKind::Confirmed).conversation(conv);
        let merged = coalesce(&[a.clone(), b, c.clone(), a.clone()]);
        assert_eq!(merged.len(), 2);
        assert_eq!(merged[0].count, 3);
        assert_eq!(merged[0].message, None);
        assert_eq!(merged[0].conversation, Some(conv));
        assert_eq!(merged[1], c);
        assert_eq!(coalesce(&[a.clone(), a.clone()])[0].message, a.message);
    }

    #[test]
    fn the_wire_form_round_trips_and_stays_under_its_limit() {
        let team = Uuid::new_v4();
        let events: Vec<FeedEvent> = (0..300)
            .map(|_| FeedEvent::new(team, FeedKind::MessageStored).conversation(Uuid::new_v4()))
            .collect();
        let small = &events[..2];
        let text = encode_feed(small, 7900).unwrap();
        assert_eq!(decode_feed(&text).unwrap(), coalesce(small));
        // 300 conversations do not fit: coarsened to one event for the team.
        let text = encode_feed(&events, 7900).unwrap();
        let back = decode_feed(&text).unwrap();
        assert_eq!(back.len(), 1);
        assert_eq!((back[0].count, back[0].conversation), (300, None));
        // Nothing fits in 10 bytes.
        assert_eq!(encode_feed(&events, 10), None);
    }

    #[test]
    fn an_unknown_kind_reads_as_other() {
        let team = Uuid::new_v4();
        let text = format!(r#"[{{"t":"{team}","k":"lease_released"}}]"#);
        let back = decode_feed(&text).unwrap();
        assert_eq!(back[0].kind, FeedKind::Other);
        assert_eq!(back[0].count, 1);
        assert_eq!(decode_feed("nonsense"), None);
    }
}
