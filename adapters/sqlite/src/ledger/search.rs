//! The SQLite ledger's search index: FTS5 over the domain's words (`message_search_fts`,
//! contentless, `ascii` tokenizer), the hits' facts and indexed bodies in `message_search`
//! (joined by rowid = `ord`), ranked by `bm25` with the title at
//! [`crewbus_domain::TITLE_WEIGHT`] of the body.
//!
//! # Cost
//! `ord` grows with each message first indexed, so the depth rule (the
//! [`MAX_SEARCH_DEPTH`] matches indexed last) is FTS5's own order: `ORDER BY rowid DESC` walks a
//! word's matches newest first and stops after 1,000 — never every match of a common word. On
//! 1,000,000 rows (20 words each, a 5,000-word Zipf-like vocabulary), warm: 4–25 ms for any
//! single word (sorting every match by time instead took 0.8 s for a word in 70 % of them).

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use crewbus_domain::{
    Agent, BusError, BusResult, IndexEntry, IndexPosition, MAX_SEARCH_DEPTH, Message, Phrase,
    SearchDocument, SearchPage, SearchQuery, SearchTerms, TITLE_WEIGHT, indexed_body,
    validate_batch, validate_limit,
};
use crewbus_ports::Search;
use crewbus_sql::search::{HIT_COLUMNS, HitRow, INDEX_TARGET_COLUMNS, IndexTarget};
use uuid::Uuid;

use super::SqliteLedger;
use super::rows::{MESSAGE_COLUMNS, MessageRow};
use crate::codec::Ts;

/// `terms` as an FTS5 query: every phrase quoted (its words are letters and digits only, so
/// nothing in a user's text is FTS5 syntax), `(P1 AND P2 …) NOT (N1 OR N2 …)`.
fn fts_query(terms: &SearchTerms) -> String {
    let quote = |p: &Phrase| format!("\"{}\"", p.0.join(" "));
    let include: Vec<String> = terms.include.iter().map(quote).collect();
    let mut q = format!("({})", include.join(" AND "));
    if !terms.exclude.is_empty() {
        let exclude: Vec<String> = terms.exclude.iter().map(quote).collect();
        q = format!("{q} NOT ({})", exclude.join(" OR "));
    }
    q
}

#[async_trait]
impl Search for SqliteLedger {
    async fn unindexed(
        &self,
        after: Option<IndexPosition>,
        limit: usize,
    ) -> BusResult<Vec<Message>> {
        validate_limit(limit)?;
        let (at, id) = match after {
            Some(p) => (Some(Ts(p.stored_at)), Some(p.message)),
            None => (None, None),
        };
        let rows: Vec<MessageRow> = sqlx::query_as(&format!(
            "SELECT {MESSAGE_COLUMNS} FROM messages m INDEXED BY messages_unindexed
             JOIN teams t ON t.id = m.team_id
             WHERE m.publication = 'stored' AND m.retained_at IS NULL AND m.indexed_at IS NULL
               AND t.tenant = ?1 AND (?2 IS NULL OR (m.stored_at, m.id) > (?2, ?3))
             ORDER BY m.stored_at, m.id LIMIT ?4"
        ))
        .bind(self.tenant.as_str())
        .bind(at)
        .bind(id)
        .bind(limit as i64)
        .fetch_all(self.pools.reader())
        .await
        .map_err(self.db("unindexed messages"))?;
        rows.into_iter().map(Message::try_from).collect()
    }

    async fn index(&self, entries: &[IndexEntry], at: DateTime<Utc>) -> BusResult<u64> {
        validate_batch(entries.len())?;
        if entries.is_empty() {
            return Ok(0);
        }
        let what = "index messages";
        let mut tx = self.begin(what).await?;
        let mut done = 0;
        for e in entries {
            let target: Option<IndexTarget<Ts>> = sqlx::query_as(&format!(
                "SELECT {INDEX_TARGET_COLUMNS} FROM messages m
                 JOIN conversations c ON c.id = m.conversation_id
                 JOIN teams t ON t.id = m.team_id
                 WHERE m.id = ? AND t.tenant = ? AND m.publication = 'stored'
                   AND m.retained_at IS NULL"
            ))
            .bind(e.message)
            .bind(self.tenant.as_str())
            .fetch_optional(&mut *tx)
            .await
            .map_err(self.db(what))?;
            let Some(m) = target else {
                continue;
            };
            let document = SearchDocument::new(&m.title, e.body.as_deref());
            let body = e.body.as_deref().map(indexed_body).unwrap_or_default();
            // Indexed again: the row keeps its ord (its place in the depth rule), its FTS5 row
            // is replaced.
            let ord: i64 = sqlx::query_scalar(
                "INSERT INTO message_search
                     (message_id, team_id, conversation_id, sender_id, seq, sent_at, body)
                 VALUES (?, ?, ?, ?, ?, ?, ?)
                 ON CONFLICT (message_id) DO UPDATE SET body = excluded.body
                 RETURNING ord",
            )
            .bind(m.id)
            .bind(m.team_id)
            .bind(m.conversation_id)
            .bind(m.sender_id)
            .bind(m.seq)
            .bind(m.sent_at)
            .bind(body)
            .fetch_one(&mut *tx)
            .await
            .map_err(self.db(what))?;
            sqlx::query("DELETE FROM message_search_fts WHERE rowid = ?")
                .bind(ord)
                .execute(&mut *tx)
                .await
                .map_err(self.db(what))?;
            sqlx::query("INSERT INTO message_search_fts (rowid, title, body) VALUES (?, ?, ?)")
                .bind(ord)
                .bind(document.title.join(" "))
                .bind(document.body.join(" "))
                .execute(&mut *tx)
                .await
                .map_err(self.db(what))?;
            sqlx::query("UPDATE messages SET indexed_at = ? WHERE id = ?")
                .bind(Ts(at))
                .bind(m.id)
                .execute(&mut *tx)
                .await
                .map_err(self.db(what))?;
            done += 1;
        }
        self.commit(tx, what).await?;
        Ok(done)
    }

    async fn search(&self, agent: &Agent, query: &SearchQuery) -> BusResult<SearchPage> {
        let terms = query.terms()?;
        let what = "search";
        let mut tx = self.read(what).await?;
        if let Some(c) = query.conversation {
            member_of(self, &mut tx, agent, c).await?;
        }
        let rows: Vec<HitRow<Ts>> = sqlx::query_as(&format!(
            "WITH recent AS (
                 SELECT s.ord, -bm25(message_search_fts, ?1, 1.0) AS rank
                 FROM message_search_fts f
                 JOIN message_search s ON s.ord = f.rowid
                 WHERE message_search_fts MATCH ?2 AND s.team_id = ?3
                   AND s.conversation_id IN
                       (SELECT conversation_id FROM members WHERE agent_id = ?4)
                   AND (?5 IS NULL OR s.conversation_id = ?5)
                 ORDER BY f.rowid DESC
                 LIMIT ?8
             )
             SELECT {HIT_COLUMNS}, r.rank AS rank
             FROM recent r
             JOIN message_search s ON s.ord = r.ord
             JOIN conversations c ON c.id = s.conversation_id
             ORDER BY r.rank DESC, s.sent_at DESC, s.message_id
             LIMIT ?6 OFFSET ?7"
        ))
        .bind(TITLE_WEIGHT)
        .bind(fts_query(&terms))
        .bind(agent.team)
        .bind(agent.id)
        .bind(query.conversation)
        .bind(i64::from(query.limit) + 1)
        .bind(i64::from(query.offset))
        .bind(i64::from(MAX_SEARCH_DEPTH))
        .fetch_all(&mut *tx)
        .await
        .map_err(self.db(what))?;
        let found = rows.into_iter().map(|r| r.into_hit(&terms)).collect();
        Ok(SearchPage::from_found(query, found))
    }
}

/// `NotFound` unless `conversation` is one of `agent`'s team of this tenant with `agent` a
/// member.
async fn member_of(
    ledger: &SqliteLedger,
    conn: &mut sqlx::SqliteConnection,
    agent: &Agent,
    conversation: Uuid,
) -> BusResult<()> {
    let found: Option<i64> = sqlx::query_scalar(
        "SELECT 1 FROM members mb
         JOIN conversations c ON c.id = mb.conversation_id
         JOIN teams t ON t.id = c.team_id
         WHERE mb.conversation_id = ? AND mb.agent_id = ? AND c.team_id = ? AND t.tenant = ?",
    )
    .bind(conversation)
    .bind(agent.id)
    .bind(agent.team)
    .bind(ledger.tenant.as_str())
    .fetch_optional(&mut *conn)
    .await
    .map_err(ledger.db("search"))?;
    found
        .map(|_| ())
        .ok_or_else(|| BusError::not_found(format!("conversation {conversation}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_text_becomes_quoted_phrases() {
        let t = SearchTerms::parse(r#"kiwi "rolled back" -x -"a b" NOT OR*"#).unwrap();
        assert_eq!(
            fts_query(&t),
            r#"("kiwi" AND "rolled back" AND "not" AND "or") NOT ("x" OR "a b")"#
        );
    }
}
