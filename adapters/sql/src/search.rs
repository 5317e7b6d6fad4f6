//! The search index's rows, shared by the SQL ledgers: what an index write needs of a message,
//! and a hit as a search reads it.

use chrono::{DateTime, Utc};
use crewbus_domain::{SearchHit, SearchTerms, snippet};
use uuid::Uuid;

use crate::from_db;

/// The columns of an [`IndexTarget`], read from `messages m JOIN conversations c`.
pub const INDEX_TARGET_COLUMNS: &str =
    "m.id, m.team_id, m.conversation_id, m.sender_id, m.seq, m.sent_at, c.title";

/// A stored, unretained message an index write is about, with its conversation's title.
#[derive(sqlx::FromRow)]
pub struct IndexTarget<T = DateTime<Utc>> {
    /// The message.
    pub id: Uuid,
    /// Its team.
    pub team_id: Uuid,
    /// Its conversation.
    pub conversation_id: Uuid,
    /// Its sender.
    pub sender_id: Uuid,
    /// Its seq.
    pub seq: i64,
    /// When it was sent.
    pub sent_at: T,
    /// Its conversation's title.
    pub title: String,
}

/// The columns of a [`HitRow`], read from `message_search s JOIN conversations c`, with the
/// store's rank as `rank` (higher is better) added by the query.
pub const HIT_COLUMNS: &str =
    "s.message_id, s.conversation_id, c.title, s.sender_id, s.seq, s.sent_at, s.body";

/// One hit as a search query reads it.
#[derive(sqlx::FromRow)]
pub struct HitRow<T = DateTime<Utc>> {
    message_id: Uuid,
    conversation_id: Uuid,
    title: String,
    sender_id: Uuid,
    seq: i64,
    sent_at: T,
    body: String,
    rank: f64,
}

impl<T: Into<DateTime<Utc>>> HitRow<T> {
    /// The hit, with its snippet for `terms`.
    pub fn into_hit(self, terms: &SearchTerms) -> SearchHit {
        SearchHit {
            message: self.message_id,
            conversation: self.conversation_id,
            conversation_title: self.title,
            seq: from_db(self.seq),
            sender: self.sender_id,
            sent_at: self.sent_at.into(),
            rank: self.rank,
            snippet: snippet(&self.body, terms),
        }
    }
}
