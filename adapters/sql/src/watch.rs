//! The ledger's inbox watch read for both SQL adapters (`Ledger::inbox_news`), written once over
//! [`SqlDelivery`]: each adapter's `delivery` section re-exports [`inbox_news`].
//!
//! # Cost
//! Both statements are driven by the recipient's undelivered receipts (the partial index
//! `receipts_undelivered (recipient_id, message_id) WHERE delivered_at IS NULL`), joined to
//! their messages by primary key ([`SqlDelivery::RECEIPT_JOIN`]: SQLite's join order pinned),
//! with each message's latest hold read from `hand_outs_pair (message_id, recipient_id, ord)`:
//! the cost grows with what the recipient has not had delivered, never with the team's
//! history. The summary is one aggregate row; the news, asked only when the summary counts
//! some, are at most `limit` rows, the messages' conversations and senders joined after the
//! limit.

use chrono::{DateTime, Utc};
use crewbus_domain::{BusResult, InboxNews, Message, NewsItem, Reported};
use uuid::Uuid;

use crate::delivery::SqlDelivery;
use crate::driver::{Dialect, stmt};
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

/// The summary's row: pending, news, the earliest `held_until` and the oldest `stored_at` of
/// the held, unreported messages.
pub type SummaryRow<T> = (i64, i64, Option<T>, Option<T>);

/// The recipient's undelivered, stored messages `w`, each with its latest hold (`held`, NULL
/// when never handed out) and whether the cursor reports it (`reported`): `$1` the recipient,
/// `$2` the team, `$4` the floor (NULL: none), the reported ids from `$first` on.
fn undelivered_with_holds<L: SqlDelivery>(first: usize, ids: usize) -> String {
    let join = L::RECEIPT_JOIN;
    let listed = L::D::any_id("m.id", first, ids);
    format!(
        "SELECT m.id, m.stored_at, m.conversation_id, m.seq,
                (SELECT max(h.held_until) FROM hand_outs h
                 WHERE h.message_id = m.id AND h.recipient_id = $1) AS held,
                (($4 IS NOT NULL AND m.stored_at <= $4) OR {listed}) AS reported
         FROM receipts r {join} messages m ON m.id = r.message_id
         WHERE r.recipient_id = $1 AND r.delivered_at IS NULL
           AND m.team_id = $2 AND m.publication = 'stored'"
    )
}

/// The summary statement: `$1` the recipient, `$2` the team, `$3` the time holds are compared
/// with, `$4` the floor, the reported ids from `$5` on; one [`SummaryRow`].
pub fn news_summary_sql<L: SqlDelivery>(ids: usize) -> String {
    let w = undelivered_with_holds::<L>(5, ids);
    format!(
        "SELECT count(CASE WHEN w.held IS NULL OR w.held <= $3 THEN 1 END),
                count(CASE WHEN (w.held IS NULL OR w.held <= $3) AND NOT w.reported THEN 1 END),
                min(CASE WHEN w.held > $3 AND NOT w.reported THEN w.held END),
                min(CASE WHEN w.held > $3 AND NOT w.reported THEN w.stored_at END)
         FROM ({w}) w"
    )
}

/// The news statement: as [`news_summary_sql`], `$5` the limit, the reported ids from `$6` on;
/// [`NewsRow`]s, oldest stored first (then conversation, seq).
pub fn news_items_sql<L: SqlDelivery>(ids: usize) -> String {
    let w = undelivered_with_holds::<L>(6, ids);
    format!(
        "SELECT {MESSAGE_COLUMNS}, c.title AS conversation_title, a.name AS sender_name
         FROM (SELECT w.id FROM ({w}) w
               WHERE (w.held IS NULL OR w.held <= $3) AND NOT w.reported
               ORDER BY w.stored_at, w.conversation_id, w.seq
               LIMIT $5) n
         JOIN messages m ON m.id = n.id
         JOIN conversations c ON c.id = m.conversation_id
         JOIN agents a ON a.id = m.sender_id
         ORDER BY m.stored_at, m.conversation_id, m.seq"
    )
}

/// `Ledger::inbox_news`: the recipient checked (unknown or another team's → `NotFound`;
/// revoked → `Unauthenticated`), then the summary, then — only when it counts news — up to
/// `limit` news, on one [`SqlDelivery::DeliveryRead`] (SQLite: one snapshot; Postgres: one
/// connection, each statement its own snapshot, so the news may differ from the count by what
/// committed between the two). Writes nothing.
pub async fn inbox_news<L: SqlDelivery>(
    ledger: &L,
    team: Uuid,
    recipient: Uuid,
    reported: &Reported,
    at: DateTime<Utc>,
    limit: usize,
) -> BusResult<InboxNews> {
    let what = "inbox news";
    let mut conn = ledger.delivery_read(what).await?;
    ledger
        .agent_row(&mut conn, team, recipient)
        .await?
        .ensure_active()?;
    let floor = || reported.floor.map(L::D::time);
    let ids = &reported.ids;
    let sql = news_summary_sql::<L>(ids.len());
    let q = stmt::<L::D>(&sql)
        .arg(recipient)
        .arg(team)
        .arg(L::D::time(at))
        .arg(floor());
    let (pending, news, next_lapse, oldest_held): SummaryRow<<L::D as Dialect>::Time> =
        L::D::bind_ids(q, ids)
            .one(&mut conn)
            .await
            .map_err(ledger.db(what))?;
    let mut answer = InboxNews {
        pending: crate::from_db(pending),
        news: Vec::new(),
        next_lapse: next_lapse.map(Into::into),
        oldest_held: oldest_held.map(Into::into),
    };
    if news == 0 {
        return Ok(answer);
    }
    let sql = news_items_sql::<L>(ids.len());
    let q = stmt::<L::D>(&sql)
        .arg(recipient)
        .arg(team)
        .arg(L::D::time(at))
        .arg(floor())
        .arg(limit as i64);
    let rows: Vec<NewsRow<<L::D as Dialect>::Time>> = L::D::bind_ids(q, ids)
        .all(&mut conn)
        .await
        .map_err(ledger.db(what))?;
    for row in rows {
        answer.news.push(NewsItem {
            message: Message::try_from(row.message)?,
            conversation_title: row.conversation_title,
            sender_name: row.sender_name,
        });
    }
    Ok(answer)
}
