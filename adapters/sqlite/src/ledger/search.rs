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
//!
//! The port is `crewbus_sql::search`'s (`impl Search for SqlLedger<D>`); this module holds the
//! index writes and the match query (`Dialect::write_index`, `Dialect::hits`).

use chrono::{DateTime, Utc};
use crewbus_domain::{
    Agent, BusResult, IndexEntry, MAX_SEARCH_DEPTH, Phrase, SearchDocument, SearchQuery,
    SearchTerms, TITLE_WEIGHT, indexed_body,
};
use crewbus_sql::ledger::SqlLedger;
use crewbus_sql::search::{HIT_COLUMNS, HitRow, INDEX_TARGET_COLUMNS, IndexTarget};
use sqlx::SqliteConnection;

use crate::codec::Ts;
use crate::dialect::Lite;

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

/// `Dialect::write_index` on SQLite: each entry in order, its message read and, if it is one to index, written: its row of
/// `message_search` (keeping its `ord`), its FTS5 row replaced, its `indexed_at` (an entry
/// repeated in the batch is written, and counted, again).
pub(crate) async fn write_index(
    ledger: &SqlLedger<Lite>,
    conn: &mut SqliteConnection,
    entries: &[IndexEntry],
    at: DateTime<Utc>,
) -> BusResult<u64> {
    let what = "index messages";
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
        .bind(ledger.tenant().as_str())
        .fetch_optional(&mut *conn)
        .await
        .map_err(ledger.db(what))?;
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
        .fetch_one(&mut *conn)
        .await
        .map_err(ledger.db(what))?;
        sqlx::query("DELETE FROM message_search_fts WHERE rowid = ?")
            .bind(ord)
            .execute(&mut *conn)
            .await
            .map_err(ledger.db(what))?;
        sqlx::query("INSERT INTO message_search_fts (rowid, title, body) VALUES (?, ?, ?)")
            .bind(ord)
            .bind(document.title.join(" "))
            .bind(document.body.join(" "))
            .execute(&mut *conn)
            .await
            .map_err(ledger.db(what))?;
        sqlx::query("UPDATE messages SET indexed_at = ? WHERE id = ?")
            .bind(Ts(at))
            .bind(m.id)
            .execute(&mut *conn)
            .await
            .map_err(ledger.db(what))?;
        done += 1;
    }
    Ok(done)
}

/// `Dialect::hits` on SQLite: the newest [`MAX_SEARCH_DEPTH`] matches of the FTS5 query, ranked
/// by `bm25`.
pub(crate) async fn hits(
    ledger: &SqlLedger<Lite>,
    conn: &mut SqliteConnection,
    agent: &Agent,
    query: &SearchQuery,
    terms: &SearchTerms,
) -> BusResult<Vec<HitRow<Ts>>> {
    sqlx::query_as(&format!(
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
    .bind(fts_query(terms))
    .bind(agent.team)
    .bind(agent.id)
    .bind(query.conversation)
    .bind(i64::from(query.limit) + 1)
    .bind(i64::from(query.offset))
    .bind(i64::from(MAX_SEARCH_DEPTH))
    .fetch_all(&mut *conn)
    .await
    .map_err(ledger.db("search"))
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
