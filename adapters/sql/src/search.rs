//! The search index for every SQL store: its rows (what an index write needs of a message, a
//! hit as a search reads it) and `impl Search for SqlLedger<D>` — the backlog read, the index
//! write's transaction, the conversation check and the page of hits; each store's index writes
//! and match query are its dialect's.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use crewbus_domain::{
    Agent, BusError, BusResult, IndexEntry, IndexPosition, Message, SearchHit, SearchPage,
    SearchQuery, SearchTerms, snippet, validate_batch, validate_limit,
};
use crewbus_ports::Search;
use uuid::Uuid;

use crate::dialect::{Conn, Dialect, PerDialect};
use crate::driver::stmt;
use crate::from_db;
use crate::ledger::SqlLedger;
use crate::rows::{MESSAGE_COLUMNS, MessageRow};

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

/// What the backlog (`unindexed`) is read from, as `m`: Postgres's planner picks the partial
/// index `messages_unindexed` itself; SQLite is told to, as it holds exactly the backlog.
const BACKLOG: PerDialect<&str> = PerDialect {
    postgres: "messages m",
    sqlite: "messages m INDEXED BY messages_unindexed",
};

impl<D: Dialect> SqlLedger<D> {
    /// `NotFound` unless `conversation` is one of `agent`'s team (of this tenant) with `agent`
    /// a member.
    async fn member_of(
        &self,
        conn: &mut Conn<D>,
        agent: &Agent,
        conversation: Uuid,
    ) -> BusResult<()> {
        let found: Option<(i32,)> = stmt::<D>(
            "SELECT 1 FROM members mb
             JOIN conversations c ON c.id = mb.conversation_id
             JOIN teams t ON t.id = c.team_id
             WHERE mb.conversation_id = $1 AND mb.agent_id = $2 AND c.team_id = $3
               AND t.tenant = $4",
        )
        .arg(conversation)
        .arg(agent.id)
        .arg(agent.team)
        .arg(self.tenant().as_str().to_owned())
        .optional(conn)
        .await
        .map_err(self.db("search"))?;
        found
            .map(|_| ())
            .ok_or_else(|| BusError::not_found(format!("conversation {conversation}")))
    }
}

/// `Search` on every SQL store: the backlog read, the index write's transaction, the
/// conversation check and the page of hits; each store's index writes and match query are its
/// dialect's ([`Dialect::write_index`], [`Dialect::hits`]).
#[async_trait]
impl<D: Dialect> Search for SqlLedger<D> {
    /// Up to `limit` of the tenant's messages waiting to be indexed (stored, not retained, not
    /// indexed), by `(stored_at, id)`, after `after` when given.
    async fn unindexed(
        &self,
        after: Option<IndexPosition>,
        limit: usize,
    ) -> BusResult<Vec<Message>> {
        validate_limit(limit)?;
        let what = "unindexed messages";
        let backlog = format!(
            "SELECT {MESSAGE_COLUMNS} FROM {} JOIN teams t ON t.id = m.team_id
             WHERE m.publication = 'stored' AND m.retained_at IS NULL AND m.indexed_at IS NULL
               AND t.tenant = $1",
            BACKLOG.of::<D>()
        );
        let tenant = self.tenant().as_str().to_owned();
        let mut conn = self.reader(what).await?;
        let rows: Vec<MessageRow<D::Time>> = match after {
            None => {
                let sql = format!("{backlog} ORDER BY m.stored_at, m.id LIMIT $2");
                stmt::<D>(&sql)
                    .arg(tenant)
                    .arg(limit as i64)
                    .all(&mut conn)
                    .await
            }
            Some(p) => {
                let sql = format!(
                    "{backlog} AND (m.stored_at, m.id) > ($2, $3) ORDER BY m.stored_at, m.id LIMIT $4"
                );
                stmt::<D>(&sql)
                    .arg(tenant)
                    .arg(D::time(p.stored_at))
                    .arg(p.message)
                    .arg(limit as i64)
                    .all(&mut conn)
                    .await
            }
        }
        .map_err(self.db(what))?;
        rows.into_iter().map(Message::try_from).collect()
    }

    /// The entries' messages indexed and marked indexed at `at`, in one write transaction; an
    /// empty batch is answered with 0.
    async fn index(&self, entries: &[IndexEntry], at: DateTime<Utc>) -> BusResult<u64> {
        validate_batch(entries.len())?;
        if entries.is_empty() {
            return Ok(0);
        }
        let what = "index messages";
        let mut tx = self.begin(what).await?;
        let done = D::write_index(self, &mut tx, entries, at).await?;
        self.commit(tx, what).await?;
        Ok(done)
    }

    /// A page of the hits of `query` for `agent`, each with its snippet, the conversation check
    /// and the hits read on one hold ([`Dialect::READS`]).
    async fn search(&self, agent: &Agent, query: &SearchQuery) -> BusResult<SearchPage> {
        let terms = query.terms()?;
        let what = "search";
        let mut held = self.hold(D::READS, what).await?;
        if let Some(c) = query.conversation {
            self.member_of(&mut held, agent, c).await?;
        }
        let rows = D::hits(self, &mut held, agent, query, &terms).await?;
        self.release(held, what).await?;
        let found = rows.into_iter().map(|r| r.into_hit(&terms)).collect();
        Ok(SearchPage::from_found(query, found))
    }
}
