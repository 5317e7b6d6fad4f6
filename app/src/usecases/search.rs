//! Search: an agent's full-text search over the history it may read, and the index worker that
//! keeps the ledger's index ([`crewbus_ports::Search`]) up with the stored messages.
//!
//! # The index worker and its lag bound
//! Indexing never happens in the send transaction. The worker ([`Bus::index_pass`], run by
//! `workers.rs`: woken by each message this server stores, at once again after a pass that left
//! a full batch, otherwise every [`INDEX_EVERY`] while it found work within the last 30 s, then
//! every 10 s) lists the ledger's backlog of stored, unindexed messages oldest first, reads
//! their bodies from their backends (whichever keeps them: the ledger's own table, JetStream,
//! memory) and hands them to the ledger in batches of [`INDEX_BATCH`]. So, while bodies arrive
//! more slowly than a pass indexes them and the backends answer, **a stored message is
//! searchable one pass (a backlog read, the body reads, one index write) after it is stored**;
//! one its server left unindexed (it stopped first), within 10 s plus a pass of another's. A
//! backlog (after an upgrade, an outage) is worked off at once, batch after batch.
//!
//! A body whose backend is down (a retryable error) is skipped and stays in the backlog: the
//! pass steps past it (the backlog is read by position) and the next pass tries again, so one
//! backend's outage holds up only its own messages. A body gone (`Ok(None)`: retention, a missing
//! entry) or refused for good is indexed by its conversation's title alone.
//!
//! Several servers sharing a ledger each run the worker; their index writes of overlapping
//! batches take disjoint messages (Postgres locks them `SKIP LOCKED`; SQLite has one writer),
//! and a message indexed twice is replaced, never found twice (an index write is idempotent).

use std::time::Duration;

use crewbus_domain::{
    Agent, BusError, BusResult, IndexEntry, IndexPosition, Message, SearchPage, SearchQuery,
};

use crate::usecases::bus::Bus;
use crate::usecases::deliver::BodyBackends;

/// Messages per index batch: one backlog read, its body reads and one index write.
pub const INDEX_BATCH: usize = 500;

/// How often the index worker looks for newly stored messages when the backlog is empty.
pub const INDEX_EVERY: Duration = Duration::from_secs(1);

/// The most batches one pass works through (a pass stepping past bodies it cannot read ends
/// there; the next one starts from the oldest again).
pub const INDEX_PASS_BATCHES: usize = 20;

/// What one index pass did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct IndexPass {
    /// Messages the backlog listed.
    pub listed: u64,
    /// Messages the ledger indexed.
    pub indexed: u64,
    /// Messages left in the backlog because their body backend did not answer.
    pub skipped: u64,
    /// Whether the last batch was full and something was indexed: run again at once.
    pub more: bool,
}

impl Bus {
    /// A page of `agent`'s search (see [`SearchQuery`] and [`crewbus_domain::SearchTerms`] for
    /// the syntax): the indexed messages of the conversations it is a member of, best first,
    /// each with its conversation's title and a snippet, matched words marked. A message is
    /// found from about 2 s after its body was stored (the index worker's lag bound, module
    /// docs). Errors: a bad query (an empty or too long text, a bad limit or offset) → `Invalid`; `query.conversation` unknown, of another team or
    /// not the agent's → `NotFound`; the ledger failing → `Unavailable`/`Timeout`.
    ///
    /// A text with no word that could be found (only punctuation or exclusions, a word too
    /// long to be indexed) answers an empty page at once, and a page reaching past the depth
    /// is cut to it ([`SearchQuery::prepared`]): what the schemas of `GET /v1/search` and
    /// `search_messages` accept is answered.
    pub async fn search(&self, agent: &Agent, query: &SearchQuery) -> BusResult<SearchPage> {
        let Some(query) = query.prepared()? else {
            return Ok(SearchPage {
                hits: Vec::new(),
                next_offset: None,
            });
        };
        self.ports.search.search(agent, &query).await
    }

    /// One pass of the index worker (module docs): up to [`INDEX_PASS_BATCHES`] batches of
    /// [`INDEX_BATCH`] messages from the backlog, their bodies read and indexed. Errors: the
    /// ledger failing to list or index (the pass stops; what it indexed stays indexed).
    ///
    /// A pass that stops at its bound before the backlog's end leaves its position for the
    /// next one, which goes on from there (and back to the oldest once a pass reaches the
    /// end): messages skipped for a backend that is down — more than a pass holds — never
    /// keep the other teams' messages from being reached.
    pub async fn index_pass(&self) -> BusResult<IndexPass> {
        let mut pass = IndexPass::default();
        let resume = || {
            self.index_resume
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
        };
        let mut after: Option<IndexPosition> = resume().take();
        let mut backends = BodyBackends::new();
        let mut reached_end = false;
        for _ in 0..INDEX_PASS_BATCHES {
            let batch = self.ports.search.unindexed(after, INDEX_BATCH).await?;
            pass.listed += batch.len() as u64;
            let Some(last) = batch.last() else {
                pass.more = after.is_some() && pass.listed == 0;
                reached_end = true;
                break;
            };
            after = IndexPosition::after(last);
            let (entries, skipped) = self.index_entries(&batch, &mut backends).await;
            pass.skipped += skipped;
            if !entries.is_empty() {
                pass.indexed += self.ports.search.index(&entries, self.now()).await?;
            }
            pass.more = batch.len() >= INDEX_BATCH && pass.indexed > 0;
            if batch.len() < INDEX_BATCH || after.is_none() {
                reached_end = true;
                break;
            }
        }
        if !reached_end {
            *resume() = after;
        }
        Ok(pass)
    }

    /// The index entries of `batch`, its bodies read (one backend lookup per name, a backend
    /// found down once not asked again in this pass), and how many were skipped for a backend
    /// that did not answer.
    async fn index_entries(
        &self,
        batch: &[Message],
        backends: &mut BodyBackends,
    ) -> (Vec<IndexEntry>, u64) {
        let refs: Vec<&Message> = batch.iter().collect();
        let reads = self.read_bodies(&refs, backends).await;
        let mut entries = Vec::with_capacity(batch.len());
        let mut skipped = 0;
        for (m, read) in batch.iter().zip(reads) {
            let body = match read {
                Ok(body) => body,
                Err(e) if e.is_retryable() || matches!(e, BusError::NotProvisioned { .. }) => {
                    skipped += 1;
                    continue;
                }
                Err(error) => {
                    tracing::warn!(message_id = %m.id, code = error.code(), error = ?error, "index: body refused; indexed by its title");
                    None
                }
            };
            entries.push(IndexEntry {
                message: m.id,
                body,
            });
        }
        (entries, skipped)
    }
}
