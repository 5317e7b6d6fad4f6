//! The memory ledger's search index: one document per indexed message, matched and ranked by
//! the domain's rules ([`SearchDocument::matches`], [`SearchDocument::score`]) under the state's
//! lock.

use std::cmp::Ordering;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use crewbus_domain::{
    Agent, BusError, BusResult, IndexEntry, IndexPosition, MAX_SEARCH_DEPTH, Message, Publication,
    SearchDocument, SearchHit, SearchPage, SearchQuery, indexed_body, snippet, validate_batch,
    validate_limit,
};
use crewbus_ports::Search;
use uuid::Uuid;

use super::MemoryLedger;

/// One indexed message.
#[derive(Debug)]
pub(crate) struct SearchRow {
    pub(crate) document: SearchDocument,
    /// The indexed body (for snippets).
    pub(crate) body: String,
    /// When it was first indexed (the state's insertion counter): the depth rule's order.
    pub(crate) order: u64,
}

fn waiting(m: &Message, indexed: bool) -> bool {
    m.publication == Publication::Stored && m.retained_at.is_none() && !indexed
}

#[async_trait]
impl Search for MemoryLedger {
    async fn unindexed(
        &self,
        after: Option<IndexPosition>,
        limit: usize,
    ) -> BusResult<Vec<Message>> {
        validate_limit(limit)?;
        let st = self.state()?;
        let key = |m: &Message| (m.stored_at, m.id);
        let mut out: Vec<&Message> = st
            .messages
            .values()
            .filter(|m| waiting(m, st.search.contains_key(&m.id)))
            .filter(|m| after.is_none_or(|a| key(m) > (Some(a.stored_at), a.message)))
            .collect();
        out.sort_by_key(|m| key(m));
        Ok(out.into_iter().take(limit).cloned().collect())
    }

    async fn index(&self, entries: &[IndexEntry], _at: DateTime<Utc>) -> BusResult<u64> {
        validate_batch(entries.len())?;
        let mut st = self.state()?;
        let mut done = 0;
        for e in entries {
            let Some(m) = st.messages.get(&e.message) else {
                continue;
            };
            if !waiting(m, false) {
                continue;
            }
            let Some(c) = st.conversations.get(&m.conversation) else {
                continue;
            };
            let body = e.body.as_deref().map(indexed_body).unwrap_or_default();
            let document = SearchDocument::new(&c.conversation.title, e.body.as_deref());
            let order = match st.search.get(&e.message) {
                Some(row) => row.order,
                None => st.next_order(),
            };
            st.search.insert(
                e.message,
                SearchRow {
                    document,
                    body,
                    order,
                },
            );
            done += 1;
        }
        Ok(done)
    }

    async fn search(&self, agent: &Agent, query: &SearchQuery) -> BusResult<SearchPage> {
        let terms = query.terms()?;
        let st = self.state()?;
        if let Some(c) = query.conversation {
            let member = st.conversations.get(&c).is_some_and(|r| {
                r.conversation.team == agent.team && r.conversation.has_member(agent.id)
            });
            if !member {
                return Err(BusError::not_found(format!("conversation {c}")));
            }
        }
        let mut found: Vec<(u64, SearchHit)> = Vec::new();
        for (id, row) in &st.search {
            let Some(m) = st.messages.get(id) else {
                continue;
            };
            let Some(c) = st.conversations.get(&m.conversation) else {
                continue;
            };
            if m.team != agent.team
                || !c.conversation.has_member(agent.id)
                || query.conversation.is_some_and(|q| q != m.conversation)
                || !row.document.matches(&terms)
            {
                continue;
            }
            found.push((
                row.order,
                SearchHit {
                    message: m.id,
                    conversation: m.conversation,
                    conversation_title: c.conversation.title.clone(),
                    seq: m.seq,
                    sender: m.sender,
                    sent_at: m.sent_at,
                    rank: row.document.score(&terms),
                    snippet: snippet(&row.body, &terms),
                },
            ));
        }
        // The MAX_SEARCH_DEPTH matches indexed last, then ranked.
        found.sort_by_key(|(order, _)| std::cmp::Reverse(*order));
        found.truncate(MAX_SEARCH_DEPTH as usize);
        let mut found: Vec<SearchHit> = found.into_iter().map(|(_, hit)| hit).collect();
        found.sort_by(|a, b| {
            b.rank
                .partial_cmp(&a.rank)
                .unwrap_or(Ordering::Equal)
                .then(b.sent_at.cmp(&a.sent_at))
                .then(a.message.cmp(&b.message))
        });
        let found = found
            .into_iter()
            .skip(query.offset as usize)
            .take(query.limit as usize + 1)
            .collect();
        Ok(SearchPage::from_found(query, found))
    }
}

impl super::state::State {
    /// Drops the index entries of `messages` (retention removed their bodies).
    pub(crate) fn unindex(&mut self, messages: &[Uuid]) {
        for m in messages {
            self.search.remove(m);
        }
    }
}
