//! The search index for both SQL ledgers: its rows (what an index write needs of a message, a
//! hit as a search reads it) and the port's operations
//! ([`impl_search!`](crate::impl_search)), written once over [`SqlSearch`] — the backlog read,
//! the index write's transaction, the conversation check and the page of hits; each store's
//! index writes and match query stay in its adapter.

use std::future::Future;
use std::ops::DerefMut;

use chrono::{DateTime, Utc};
use crewbus_domain::{
    Agent, BusError, BusResult, IndexEntry, IndexPosition, Message, SearchHit, SearchPage,
    SearchQuery, SearchTerms, snippet, validate_batch, validate_limit,
};
use uuid::Uuid;

use crate::dialect::{Conn, Dialect};
use crate::driver::stmt;
use crate::from_db;
use crate::ledger::LedgerHooks;
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

/// What the shared search functions need of an SQL ledger beyond [`LedgerHooks`]: the index's
/// writes and its match query, which differ by store (Postgres: a `tsvector` per message under a
/// GIN index, ranked by `ts_rank_cd`; SQLite: FTS5, ranked by `bm25`), the backlog's table, and
/// the connection a search reads on.
///
/// Implemented by `PostgresLedger` and `SqliteLedger`; [`impl_search!`](crate::impl_search)
/// implements the port on it.
pub trait SqlSearch: LedgerHooks {
    /// What a search reads on (the conversation check, then the hits): a pool connection on
    /// Postgres, a read transaction (one WAL snapshot) on SQLite.
    type SearchRead: DerefMut<Target = Conn<Self::D>> + Send;

    /// What the backlog (`unindexed`) is read from, as `m`: `messages m` on Postgres (its
    /// planner picks the partial index `messages_unindexed`); on SQLite `messages m INDEXED BY
    /// messages_unindexed`, which holds exactly the backlog.
    const BACKLOG: &'static str;

    /// Begins what [`SqlSearch::SearchRead`] reads on.
    fn search_read(
        &self,
        what: &'static str,
    ) -> impl Future<Output = BusResult<Self::SearchRead>> + Send;

    /// `index`'s writes, in the caller's write transaction: each entry's message, if it is a
    /// stored, unretained message of this tenant (and, where writers lock rows, not held by
    /// another index write), indexed (title and body) and marked indexed at `at`. `entries` is
    /// not empty. Returns how many were (re)indexed: Postgres counts each message once (the last
    /// entry for it wins), SQLite each entry in order (a message repeated in the batch counts
    /// again).
    fn write_index(
        &self,
        conn: &mut Conn<Self::D>,
        entries: &[IndexEntry],
        at: DateTime<Utc>,
    ) -> impl Future<Output = BusResult<u64>> + Send;

    /// The hits of `terms` for `agent` (its team's conversations it is a member of;
    /// `query.conversation` only, when given, already checked), of the [`MAX_SEARCH_DEPTH`]
    /// matches indexed last, best first — rank descending, then `sent_at` newest first, then
    /// message id — `query.offset` skipped, at most `query.limit + 1` (the page's one more).
    ///
    /// [`MAX_SEARCH_DEPTH`]: crewbus_domain::MAX_SEARCH_DEPTH
    fn hits(
        &self,
        conn: &mut Conn<Self::D>,
        agent: &Agent,
        query: &SearchQuery,
        terms: &SearchTerms,
    ) -> impl Future<Output = BusResult<Vec<HitRow<<Self::D as Dialect>::Time>>>> + Send;
}

/// `Search::unindexed`: up to `limit` of the tenant's messages waiting to be indexed (stored,
/// not retained, not indexed), by `(stored_at, id)`, after `after` when given. Errors: `limit` 0
/// or above `MAX_PAGE` → `Invalid`.
pub async fn unindexed<L: SqlSearch>(
    ledger: &L,
    after: Option<IndexPosition>,
    limit: usize,
) -> BusResult<Vec<Message>> {
    validate_limit(limit)?;
    let what = "unindexed messages";
    let backlog = format!(
        "SELECT {MESSAGE_COLUMNS} FROM {} JOIN teams t ON t.id = m.team_id
         WHERE m.publication = 'stored' AND m.retained_at IS NULL AND m.indexed_at IS NULL
           AND t.tenant = $1",
        L::BACKLOG
    );
    let tenant = ledger.tenant().as_str().to_owned();
    let mut conn = ledger.reader(what).await?;
    let rows: Vec<MessageRow<<L::D as Dialect>::Time>> = match after {
        None => {
            let sql = format!("{backlog} ORDER BY m.stored_at, m.id LIMIT $2");
            stmt::<L::D>(&sql)
                .arg(tenant)
                .arg(limit as i64)
                .all(&mut conn)
                .await
        }
        Some(p) => {
            let sql = format!(
                "{backlog} AND (m.stored_at, m.id) > ($2, $3) ORDER BY m.stored_at, m.id LIMIT $4"
            );
            stmt::<L::D>(&sql)
                .arg(tenant)
                .arg(L::D::time(p.stored_at))
                .arg(p.message)
                .arg(limit as i64)
                .all(&mut conn)
                .await
        }
    }
    .map_err(ledger.db(what))?;
    rows.into_iter().map(Message::try_from).collect()
}

/// `Search::index`: the entries' messages indexed and marked indexed at `at`, in one write
/// transaction ([`SqlSearch::write_index`]). Errors: more than `MAX_PAGE` entries → `Invalid`;
/// an empty batch is answered with 0.
pub async fn index<L: SqlSearch>(
    ledger: &L,
    entries: &[IndexEntry],
    at: DateTime<Utc>,
) -> BusResult<u64> {
    validate_batch(entries.len())?;
    if entries.is_empty() {
        return Ok(0);
    }
    let what = "index messages";
    let mut tx = ledger.begin(what).await?;
    let done = ledger.write_index(&mut tx, entries, at).await?;
    ledger.commit(tx, what).await?;
    Ok(done)
}

/// `NotFound` unless `conversation` is one of `agent`'s team (of this tenant) with `agent` a
/// member.
async fn member_of<L: SqlSearch>(
    ledger: &L,
    conn: &mut Conn<L::D>,
    agent: &Agent,
    conversation: Uuid,
) -> BusResult<()> {
    let found: Option<(i32,)> = stmt::<L::D>(
        "SELECT 1 FROM members mb
         JOIN conversations c ON c.id = mb.conversation_id
         JOIN teams t ON t.id = c.team_id
         WHERE mb.conversation_id = $1 AND mb.agent_id = $2 AND c.team_id = $3
           AND t.tenant = $4",
    )
    .arg(conversation)
    .arg(agent.id)
    .arg(agent.team)
    .arg(ledger.tenant().as_str().to_owned())
    .optional(conn)
    .await
    .map_err(ledger.db("search"))?;
    found
        .map(|_| ())
        .ok_or_else(|| BusError::not_found(format!("conversation {conversation}")))
}

/// `Search::search`: a page of the hits of `query` for `agent` ([`SqlSearch::hits`]), each with
/// its snippet. Errors: a bad query → `Invalid`; `query.conversation` unknown, of another team,
/// or one the agent is not a member of → `NotFound`.
pub async fn search<L: SqlSearch>(
    ledger: &L,
    agent: &Agent,
    query: &SearchQuery,
) -> BusResult<SearchPage> {
    let terms = query.terms()?;
    let what = "search";
    let mut conn = ledger.search_read(what).await?;
    if let Some(c) = query.conversation {
        member_of(ledger, &mut conn, agent, c).await?;
    }
    let rows = ledger.hits(&mut conn, agent, query, &terms).await?;
    let found = rows.into_iter().map(|r| r.into_hit(&terms)).collect();
    Ok(SearchPage::from_found(query, found))
}

/// Implements `crewbus_ports::Search` for an [`SqlSearch`] type by delegating every method to
/// this module's function of the same operation, so that neither adapter restates the trait.
///
/// ```ignore
/// crewbus_sql::impl_search!(MyLedger);
/// ```
#[macro_export]
macro_rules! impl_search {
    ($ty:ty) => {
        const _: () = {
            use $crate::__private::{
                Agent, BusResult, DateTime, IndexEntry, IndexPosition, Message, Search, SearchPage,
                SearchQuery, Utc, async_trait,
            };
            use $crate::search as sql;

            #[async_trait]
            impl Search for $ty {
                async fn unindexed(
                    &self,
                    after: Option<IndexPosition>,
                    limit: usize,
                ) -> BusResult<Vec<Message>> {
                    sql::unindexed(self, after, limit).await
                }

                async fn index(&self, entries: &[IndexEntry], at: DateTime<Utc>) -> BusResult<u64> {
                    sql::index(self, entries, at).await
                }

                async fn search(
                    &self,
                    agent: &Agent,
                    query: &SearchQuery,
                ) -> BusResult<SearchPage> {
                    sql::search(self, agent, query).await
                }
            }
        };
    };
}
