//! The Postgres ledger's search index: `message_search`, one stored `tsvector` per indexed
//! message under a GIN index, matched with a `tsquery` built from the domain's terms and ranked
//! by `ts_rank_cd` (body weight D = 1.0, title weight A = [`TITLE_WEIGHT`]).
//!
//! The port is `crewbus_sql::search`'s (`impl Search for SqlLedger<D>`); this module holds the
//! index writes and the match query (`Dialect::write_index`, `Dialect::hits`).
//!
//! # Cost
//! Only the [`MAX_SEARCH_DEPTH`] matches indexed last are ranked (`recent`, by `ord`), so the
//! planner picks by the words' frequency (from the `tsvector` statistics): a rare word through
//! the GIN index (few matches, all read), a common one newest first through
//! `message_search_recent`, stopping after 1,000 matches — never every match of a word in half
//! the store. Measured on 1,000,000
//! seeded messages (20 words each, 5,000-word Zipf-like vocabulary; `message_search` 490 MB)
//! on 2 cores with 128 MB shared buffers: 3–25 ms for very common and for rare words, 30 ms for
//! a word in about 1 % of the messages when its pages are in shared buffers, 45–100 ms when
//! they come from the OS cache (each match's row is read, one page each); shared buffers that
//! hold the table kept every word measured under 50 ms.
//!
//! Both the document and the query are built here from the domain's words
//! ([`SearchDocument::positions`], [`SearchTerms`]) as `tsvector` / `tsquery` literals, not by
//! Postgres' parser (`to_tsvector`, `websearch_to_tsquery`): every ledger then indexes and
//! matches the same words, and nothing of a user's text is query syntax.
//!
//! # Retention and racing index writes
//! `index` locks its messages `FOR NO KEY UPDATE … SKIP LOCKED` (the lock its `indexed_at`
//! update takes anyway, so it never upgrades one, and fetches' foreign-key checks do not wait
//! on it) and skips retained ones: two servers' workers indexing overlapping batches take
//! disjoint rows instead of deadlocking on upgraded share locks (each message is indexed by
//! whichever locked it; the other skips it). `mark_retained` updates the messages, then deletes
//! their index rows in a later statement (a snapshot taken after its row locks were granted):
//! messages are locked before index rows on both sides, and whichever commits first, a
//! retained message keeps no index row.

use std::fmt::Write;

use chrono::{DateTime, Utc};
use crewbus_domain::{
    Agent, BusResult, IndexEntry, MAX_SEARCH_DEPTH, Phrase, SearchDocument, SearchQuery,
    SearchTerms, TITLE_WEIGHT, indexed_body,
};
use crewbus_sql::ledger::SqlLedger;
use crewbus_sql::search::{HIT_COLUMNS, HitRow, INDEX_TARGET_COLUMNS, IndexTarget};
use sqlx::PgConnection;
use uuid::Uuid;

use super::db;
use crate::dialect::Pg;

/// The greatest position a `tsvector` keeps (positions are 1..=16383).
const MAX_POSITION: usize = 16_383;
/// The most positions a `tsvector` keeps per word.
const MAX_POSITIONS_PER_WORD: usize = 256;

/// A word as a `tsvector`/`tsquery` literal: quoted, `'` and `\` escaped (the domain's words
/// hold neither; escaped all the same).
fn quoted(word: &str) -> String {
    format!("'{}'", word.replace('\\', "\\\\").replace('\'', "''"))
}

/// `document` as a `tsvector` literal: `'word':1A,4,5 …`, title positions weighted A, body
/// positions D (the default, unmarked); positions past [`MAX_POSITION`] and past
/// [`MAX_POSITIONS_PER_WORD`] per word are left out (Postgres would drop them too).
fn tsvector(document: &SearchDocument) -> String {
    let mut out = String::new();
    for (word, positions) in document.positions() {
        let kept: Vec<String> = positions
            .iter()
            .filter(|(p, _)| *p <= MAX_POSITION)
            .take(MAX_POSITIONS_PER_WORD)
            .map(|(p, title)| format!("{p}{}", if *title { "A" } else { "" }))
            .collect();
        if kept.is_empty() {
            continue;
        }
        if !out.is_empty() {
            out.push(' ');
        }
        let _ = write!(out, "{}:{}", quoted(word), kept.join(","));
    }
    out
}

/// `terms` as a `tsquery` literal: `P1 & P2 & !N1 & !N2`, a phrase as `( 'a' <-> 'b' )`.
fn tsquery(terms: &SearchTerms) -> String {
    let phrase = |p: &Phrase| {
        let words: Vec<String> = p.0.iter().map(|w| quoted(w)).collect();
        if words.len() == 1 {
            words.concat()
        } else {
            format!("( {} )", words.join(" <-> "))
        }
    };
    let mut parts: Vec<String> = terms.include.iter().map(phrase).collect();
    parts.extend(terms.exclude.iter().map(|p| format!("!{}", phrase(p))));
    parts.join(" & ")
}

/// `Dialect::write_index` on Postgres: locks the entries' messages `FOR NO KEY UPDATE … SKIP LOCKED` in id order (see the
/// module's doc), then writes their index rows (the last entry for a message wins; each
/// message counted once) and marks them indexed: one statement each.
pub(crate) async fn write_index(
    ledger: &SqlLedger<Pg>,
    conn: &mut PgConnection,
    entries: &[IndexEntry],
    at: DateTime<Utc>,
) -> BusResult<u64> {
    let what = "index messages";
    let ids: Vec<Uuid> = entries.iter().map(|e| e.message).collect();
    let targets: Vec<IndexTarget> = sqlx::query_as(&format!(
        "SELECT {INDEX_TARGET_COLUMNS} FROM messages m
             JOIN conversations c ON c.id = m.conversation_id
             JOIN teams t ON t.id = m.team_id
             WHERE m.id = ANY($1) AND t.tenant = $2 AND m.publication = 'stored'
               AND m.retained_at IS NULL
             ORDER BY m.id
             FOR NO KEY UPDATE OF m SKIP LOCKED"
    ))
    .bind(&ids)
    .bind(ledger.tenant().as_str())
    .fetch_all(&mut *conn)
    .await
    .map_err(db(what))?;
    let mut rows = IndexRows::default();
    for m in targets {
        // The last entry for a message wins, as if the entries were applied in order.
        let Some(e) = entries.iter().rev().find(|e| e.message == m.id) else {
            continue;
        };
        let document = SearchDocument::new(&m.title, e.body.as_deref());
        rows.id.push(m.id);
        rows.team.push(m.team_id);
        rows.conversation.push(m.conversation_id);
        rows.sender.push(m.sender_id);
        rows.seq.push(m.seq);
        rows.sent_at.push(m.sent_at);
        rows.body
            .push(e.body.as_deref().map(indexed_body).unwrap_or_default());
        rows.document.push(tsvector(&document));
    }
    if rows.id.is_empty() {
        return Ok(0);
    }
    sqlx::query(
        "INSERT INTO message_search
                 (message_id, team_id, conversation_id, sender_id, seq, sent_at, body, document)
             SELECT id, team, conversation, sender, seq, sent_at, body, document::tsvector
             FROM unnest($1::uuid[], $2::uuid[], $3::uuid[], $4::uuid[], $5::bigint[],
                         $6::timestamptz[], $7::text[], $8::text[])
                  AS e(id, team, conversation, sender, seq, sent_at, body, document)
             ON CONFLICT (message_id) DO UPDATE
                 SET body = excluded.body, document = excluded.document",
    )
    .bind(&rows.id)
    .bind(&rows.team)
    .bind(&rows.conversation)
    .bind(&rows.sender)
    .bind(&rows.seq)
    .bind(&rows.sent_at)
    .bind(&rows.body)
    .bind(&rows.document)
    .execute(&mut *conn)
    .await
    .map_err(db(what))?;
    sqlx::query("UPDATE messages SET indexed_at = $2 WHERE id = ANY($1)")
        .bind(&rows.id)
        .bind(at)
        .execute(&mut *conn)
        .await
        .map_err(db(what))?;
    Ok(rows.id.len() as u64)
}

/// `Dialect::hits` on Postgres: the newest [`MAX_SEARCH_DEPTH`] matches of the `tsquery`,
/// ranked by `ts_rank_cd`.
pub(crate) async fn hits(
    ledger: &SqlLedger<Pg>,
    conn: &mut PgConnection,
    agent: &Agent,
    query: &SearchQuery,
    terms: &SearchTerms,
) -> BusResult<Vec<HitRow>> {
    sqlx::query_as(&format!(
        "WITH recent AS (
                 SELECT s.message_id, s.sent_at, s.document FROM message_search s
                 WHERE s.document @@ $1::tsquery AND s.team_id = $2
                   AND s.conversation_id IN
                       (SELECT conversation_id FROM members WHERE agent_id = $3)
                   AND ($4::uuid IS NULL OR s.conversation_id = $4)
                   AND EXISTS (SELECT 1 FROM teams t WHERE t.id = $2 AND t.tenant = $7)
                 ORDER BY s.ord DESC
                 LIMIT $8
             ), ranked AS (
                 SELECT message_id, sent_at,
                        ts_rank_cd(ARRAY[1.0, 0.2, 0.4, {TITLE_WEIGHT}]::float4[], document,
                                   $1::tsquery)::float8 AS rank
                 FROM recent
                 ORDER BY rank DESC, sent_at DESC, message_id
                 LIMIT $5 OFFSET $6
             )
             SELECT {HIT_COLUMNS}, r.rank AS rank
             FROM ranked r
             JOIN message_search s ON s.message_id = r.message_id
             JOIN conversations c ON c.id = s.conversation_id
             ORDER BY r.rank DESC, r.sent_at DESC, r.message_id"
    ))
    // Planned for these values every time (an unnamed statement): a cached prepared
    // statement goes generic after five runs, and the generic plan joins each of the
    // agent's conversations instead of walking the newest matches (2.3 s instead of 2.7 ms
    // for a common word over 1,000,000 messages; BENCHMARKS.md, the search section).
    .persistent(false)
    .bind(tsquery(terms))
    .bind(agent.team)
    .bind(agent.id)
    .bind(query.conversation)
    .bind(i64::from(query.limit) + 1)
    .bind(i64::from(query.offset))
    .bind(ledger.tenant().as_str())
    .bind(i64::from(MAX_SEARCH_DEPTH))
    .fetch_all(&mut *conn)
    .await
    .map_err(db("search"))
}

/// The columns of one index write, as arrays for `unnest`.
#[derive(Default)]
struct IndexRows {
    id: Vec<Uuid>,
    team: Vec<Uuid>,
    conversation: Vec<Uuid>,
    sender: Vec<Uuid>,
    seq: Vec<i64>,
    sent_at: Vec<DateTime<Utc>>,
    body: Vec<String>,
    document: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn documents_and_queries_are_literals_of_the_domains_words() {
        let d = SearchDocument::new("Kiwi notes", Some("kiwi, plum's"));
        assert_eq!(tsvector(&d), "'kiwi':1A,4 'notes':2A 'plum':5 's':6");
        let t = SearchTerms::parse(r#"kiwi "rolled back" -x -"a b" it's"#).unwrap();
        assert_eq!(
            tsquery(&t),
            "'kiwi' & ( 'rolled' <-> 'back' ) & ( 'it' <-> 's' ) & !'x' & !( 'a' <-> 'b' )"
        );
        assert_eq!(quoted("o'k\\"), "'o''k\\\\'");
        let many = SearchDocument::new("t", Some(&"w ".repeat(300)));
        assert_eq!(
            tsvector(&many).matches(',').count(),
            MAX_POSITIONS_PER_WORD - 1
        );
    }
}
