//! The search port: a full-text index over the history agents may read, kept by the ledger.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use crewbus_domain::{
    Agent, BusResult, IndexEntry, IndexPosition, Message, SearchPage, SearchQuery,
};

/// Full-text search over one tenant's messages, in the ledger's store.
///
/// Implemented by every ledger (memory, SQLite, Postgres) over its own store; all pass the same
/// conformance functions (`crewbus_conformance::search`). The rules of [`crate::Ledger`] hold:
/// time from the caller, one transaction per method, store outages `Unavailable`/`Timeout`.
///
/// # The index
/// A message is indexed once its body is stored, not in the send transaction: the index worker
/// lists the backlog ([`Search::unindexed`]), reads the bodies from their backends (any backend:
/// the ledger's own, JetStream, memory) and hands them to [`Search::index`]. A message is
/// searchable from the commit of that call; until then a search does not find it. What is
/// indexed is its conversation's title and [`crewbus_domain::indexed_body`] of its body, as
/// [`crewbus_domain::SearchDocument`] makes words of them — the same words on every ledger.
///
/// # What an agent finds
/// Messages of the conversations the agent is a member of now, whoever sent them and whenever
/// (what history lets it read). Messages whose bodies retention removed
/// (`Ledger::mark_retained`, same transaction) leave the index and are never indexed again.
#[cfg_attr(feature = "mock", mockall::automock)]
#[async_trait]
pub trait Search: Send + Sync {
    /// Up to `limit` messages of the tenant waiting to be indexed — stored (a locator), not
    /// retained, not indexed — ordered by `(stored_at, id)`, after `after` when given (the
    /// position of the last message of the previous call, so a worker can step past messages it
    /// could not read this time). Cheap on a large store: an index holds exactly the backlog.
    ///
    /// Errors: `limit` 0 or above [`crewbus_domain::MAX_PAGE`] → `Invalid`.
    async fn unindexed(
        &self,
        after: Option<IndexPosition>,
        limit: usize,
    ) -> BusResult<Vec<Message>>;

    /// Indexes each entry's message (title and body; `body: None` → title only) and marks it
    /// indexed at `at`, in one transaction. Idempotent: a message indexed again is replaced,
    /// never found twice. Entries naming no stored, unretained message of the tenant are
    /// skipped, and so are messages another index write holds at the moment (that write
    /// indexes them; two servers' workers never wait on each other). Returns how many messages
    /// were (re)indexed.
    ///
    /// Errors: more than [`crewbus_domain::MAX_PAGE`] entries → `Invalid`. An empty batch is
    /// answered with 0.
    async fn index(&self, entries: &[IndexEntry], at: DateTime<Utc>) -> BusResult<u64>;

    /// A page of the indexed messages `agent` may read that match `query` (see
    /// [`crewbus_domain::SearchTerms`]): of the [`crewbus_domain::MAX_SEARCH_DEPTH`] matches
    /// indexed last (a message indexed again keeps its place), best first — by rank
    /// descending, then `sent_at` newest first, then message id ascending; `query.offset` hits
    /// skipped. Each hit carries
    /// its conversation's title and a snippet of its body with the matched words marked.
    ///
    /// Errors: a bad query ([`SearchQuery::terms`]) → `Invalid`; `query.conversation` unknown,
    /// of another team, or one the agent is not a member of → `NotFound`. An agent without
    /// conversations, or of another tenant, finds nothing.
    async fn search(&self, agent: &Agent, query: &SearchQuery) -> BusResult<SearchPage>;
}
