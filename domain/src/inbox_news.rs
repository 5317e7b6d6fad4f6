//! The inbox watch's facts: what a watcher was already told of ([`Reported`]) and what the
//! ledger answers it ([`InboxNews`]: the pending count, the news, the next hand-out to lapse).
//!
//! The watch hands nothing out: it reads the ledger only (`Ledger::inbox_news`). Its cursor,
//! which a client keeps between calls, is [`crate::WatchCursor`].

use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::Message;

/// The most news one watch answer holds.
pub const MAX_WATCH_NEWS: usize = 20;

/// What a watcher counts as already reported to it: every message stored at or before `floor`,
/// and the messages `ids` (stored after it). `floor: None` and no ids: nothing reported.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Reported {
    /// Every message stored at or before this instant counts as reported.
    pub floor: Option<DateTime<Utc>>,
    /// Messages reported that were stored after `floor` (at most
    /// [`crate::MAX_CURSOR_IDS`] from a cursor).
    pub ids: Vec<Uuid>,
}

impl Reported {
    /// Whether the message `id`, stored at `stored_at`, counts as reported.
    pub fn covers(&self, id: Uuid, stored_at: DateTime<Utc>) -> bool {
        self.floor.is_some_and(|f| stored_at <= f) || self.ids.contains(&id)
    }
}

/// One piece of news: a pending message not yet reported, with what a watcher shows of it.
/// The names are as stored (agent-written text: clean them before they reach a model).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewsItem {
    /// The message as it stands (`Stored`; its `stored_at` is set).
    pub message: Message,
    /// Its conversation's title, as stored.
    pub conversation_title: String,
    /// Its sender's name, as stored.
    pub sender_name: String,
}

/// What `Ledger::inbox_news` answers for one recipient at one instant `at`.
///
/// A message is **pending** for the recipient when it is `Stored`, the recipient's receipt is
/// not delivered, and it has no live hand-out to the recipient (unconfirmed with
/// `held_until > at`): what the top-up (`Ledger::undelivered`) would find, whenever stored.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct InboxNews {
    /// How many messages are pending, reported or not.
    pub pending: u64,
    /// The pending messages not [`Reported`], oldest stored first (then conversation, seq), at
    /// most the limit asked.
    pub news: Vec<NewsItem>,
    /// The earliest `held_until` among the live hand-outs to the recipient of undelivered
    /// messages not reported: when one of them may become news (its hand-out lapses).
    pub next_lapse: Option<DateTime<Utc>>,
    /// The oldest `stored_at` among those same held, unreported messages: a cursor's floor
    /// stays below it, so such a message is news once its hand-out lapses.
    pub oldest_held: Option<DateTime<Utc>>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    #[test]
    fn reported_covers_the_floor_and_the_ids() {
        let t = |s| Utc.timestamp_opt(s, 0).single().expect("an instant");
        let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
        let none = Reported::default();
        assert!(!none.covers(a, t(0)));
        let r = Reported {
            floor: Some(t(10)),
            ids: vec![a],
        };
        assert!(r.covers(b, t(10)), "at the floor");
        assert!(!r.covers(b, t(11)), "after the floor, not listed");
        assert!(r.covers(a, t(50)), "listed");
    }
}
