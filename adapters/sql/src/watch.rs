//! The ledger's inbox watch read for every SQL store (`Ledger::inbox_news`), written once over
//! [`SqlLedger`]: each adapter's `delivery` section re-exports [`inbox_news`].
//!
//! # Cost
//! Both statements are driven by the recipient's undelivered receipts (the partial index
//! `receipts_undelivered (recipient_id, message_id) WHERE delivered_at IS NULL`), joined to
//! their messages by primary key ([`RECEIPT_JOIN`]: SQLite's join order pinned),
//! with each message's latest hold read from `hand_outs_pair (message_id, recipient_id, ord)`:
//! the cost grows with what the recipient has not had delivered, never with the team's
//! history. One statement reads them once and answers the summary with the news' ids (at most
//! `limit`); a second, only when there is news, reads those messages with their titles and
//! senders by primary key.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use crewbus_domain::{BusResult, InboxNews, Message, NewsItem, Reported};
use uuid::Uuid;

use crate::delivery::RECEIPT_JOIN;
use crate::dialect::Dialect;
use crate::driver::stmt;
use crate::ledger::SqlLedger;
use crate::rows::{MESSAGE_COLUMNS, MessageRow};

/// A row of the news: the message (as [`MESSAGE_COLUMNS`]), its conversation's title and its
/// sender's name.
#[derive(sqlx::FromRow)]
pub struct NewsRow<T = DateTime<Utc>> {
    #[sqlx(flatten)]
    message: MessageRow<T>,
    conversation_title: String,
    sender_name: String,
}

/// A row of the summary statement: pending, news, the earliest `held_until` and the oldest
/// `stored_at` of the held, unreported messages (the same in every row), and one news id in
/// order (`None` in the one row of an answer without news).
pub type SummaryRow<T> = (i64, i64, Option<T>, Option<T>, Option<Uuid>);

/// The summary statement: `$1` the recipient, `$2` the team, `$3` the time holds are compared
/// with, `$4` the floor (NULL: none), `$5` the limit, the reported ids from `$6` on; at least
/// one [`SummaryRow`], one per news id (oldest stored first, then conversation, seq).
///
/// The recipient's undelivered, stored messages `w` are read once (a materialised CTE, so each
/// message's latest hold is read once: Postgres would otherwise repeat the subquery at each
/// use), each with its latest hold (`held`, NULL when never handed out) and whether the cursor
/// reports it (`reported`).
pub fn news_summary_sql<D: Dialect>(ids: usize) -> String {
    let join = RECEIPT_JOIN.of::<D>();
    let listed = D::any_id("m.id", 6, ids);
    format!(
        "WITH w AS MATERIALIZED (
             SELECT m.id, m.stored_at, m.conversation_id, m.seq,
                    (SELECT max(h.held_until) FROM hand_outs h
                     WHERE h.message_id = m.id AND h.recipient_id = $1) AS held,
                    (($4 IS NOT NULL AND m.stored_at <= $4) OR {listed}) AS reported
             FROM receipts r {join} messages m ON m.id = r.message_id
             WHERE r.recipient_id = $1 AND r.delivered_at IS NULL
               AND m.team_id = $2 AND m.publication = 'stored'),
         s AS (
             SELECT count(CASE WHEN w.held IS NULL OR w.held <= $3 THEN 1 END) AS pending,
                    count(CASE WHEN (w.held IS NULL OR w.held <= $3) AND NOT w.reported
                               THEN 1 END) AS news,
                    min(CASE WHEN w.held > $3 AND NOT w.reported THEN w.held END) AS next_lapse,
                    min(CASE WHEN w.held > $3 AND NOT w.reported THEN w.stored_at END)
                        AS oldest_held
             FROM w),
         n AS (
             SELECT w.id, w.stored_at, w.conversation_id, w.seq FROM w
             WHERE (w.held IS NULL OR w.held <= $3) AND NOT w.reported
             ORDER BY w.stored_at, w.conversation_id, w.seq
             LIMIT $5)
         SELECT s.pending, s.news, s.next_lapse, s.oldest_held, n.id
         FROM s LEFT JOIN n ON 1 = 1
         ORDER BY n.stored_at, n.conversation_id, n.seq"
    )
}

/// The news statement: `$1` the team, the news' ids from `$2` on; [`NewsRow`]s in no order.
pub fn news_items_sql<D: Dialect>(ids: usize) -> String {
    format!(
        "SELECT {MESSAGE_COLUMNS}, c.title AS conversation_title, a.name AS sender_name
         FROM messages m
         JOIN conversations c ON c.id = m.conversation_id
         JOIN agents a ON a.id = m.sender_id
         WHERE m.team_id = $1 AND {}",
        D::any_id("m.id", 2, ids)
    )
}

/// `Ledger::inbox_news`: the recipient checked (unknown or another team's → `NotFound`;
/// revoked → `Unauthenticated`), then the summary with the news' ids (one statement), then —
/// only when there is news — those messages with their conversations' titles and senders'
/// names (by primary key), on one hold of [`Dialect::READS`]. Writes nothing.
pub async fn inbox_news<D: Dialect>(
    ledger: &SqlLedger<D>,
    team: Uuid,
    recipient: Uuid,
    reported: &Reported,
    at: DateTime<Utc>,
    limit: usize,
) -> BusResult<InboxNews> {
    let what = "inbox news";
    let mut conn = ledger.hold(D::READS, what).await?;
    ledger
        .agent_row(&mut conn, team, recipient)
        .await?
        .ensure_active()?;
    let sql = news_summary_sql::<D>(reported.ids.len());
    let q = stmt::<D>(&sql)
        .arg(recipient)
        .arg(team)
        .arg(D::time(at))
        .arg(reported.floor.map(D::time))
        .arg(limit as i64);
    let rows: Vec<SummaryRow<D::Time>> = D::bind_ids(q, &reported.ids)
        .all(&mut conn)
        .await
        .map_err(ledger.db(what))?;
    let mut answer = InboxNews::default();
    let mut order: Vec<Uuid> = Vec::with_capacity(rows.len());
    for (pending, _, next_lapse, oldest_held, id) in rows {
        answer.pending = crate::from_db(pending);
        answer.next_lapse = next_lapse.map(Into::into);
        answer.oldest_held = oldest_held.map(Into::into);
        order.extend(id);
    }
    if order.is_empty() {
        return Ok(answer);
    }
    let sql = news_items_sql::<D>(order.len());
    let q = stmt::<D>(&sql).arg(team);
    let rows: Vec<NewsRow<D::Time>> = D::bind_ids(q, &order)
        .all(&mut conn)
        .await
        .map_err(ledger.db(what))?;
    let mut found: HashMap<Uuid, NewsItem> = HashMap::with_capacity(rows.len());
    for row in rows {
        let message = Message::try_from(row.message)?;
        found.insert(
            message.id,
            NewsItem {
                message,
                conversation_title: row.conversation_title,
                sender_name: row.sender_name,
            },
        );
    }
    answer.news = order.iter().filter_map(|id| found.remove(id)).collect();
    Ok(answer)
}
