//! The SQLite ledger's delivery: the section is `crewbus_sql::delivery`'s (re-exported here);
//! this module holds the statements only SQLite runs — `hand_out`'s reads as `IN` lists and its
//! writes a statement per row, in its write transaction (one part of the group commit: the
//! transaction is exclusive, so the facts it read hold until the commit) — the top-up reads'
//! `CROSS JOIN` pin, and the wake-up sweep's waiters as `VALUES`.

use std::collections::{BTreeMap, HashMap};

use chrono::{DateTime, Utc};
use crewbus_domain::{BusResult, DeliveryId, InboxAck, IssuedHandOut, LiveHandOut, SweepTarget};
use crewbus_sql::delivery::{Candidate, Prior};
use crewbus_sql::dialect::Dialect;
use crewbus_sql::driver::{Stmt, stmt};
use crewbus_sql::ledger::SqlLedger;
use sqlx::{Sqlite, SqliteConnection};
use uuid::Uuid;

use crate::codec::{Ts, db_i64};
use crate::dialect::Lite;

/// `Dialect::sweep_targets` on SQLite: the waiters as `VALUES`.
pub(crate) fn sweep_targets(first: usize, n: usize) -> String {
    let values: Vec<String> = (0..n)
        .map(|i| {
            let p = first + 3 * i;
            format!("(${p}, ${}, ${})", p + 1, p + 2)
        })
        .collect();
    format!(
        "WITH w(team, agent, stored_after) AS (VALUES {})
         SELECT DISTINCT w.team, w.agent FROM w",
        values.join(", ")
    )
}

/// `Dialect::bind_sweep_targets` on SQLite.
pub(crate) fn bind_sweep_targets<'q>(
    q: Stmt<'q, Sqlite>,
    targets: &[SweepTarget],
) -> Stmt<'q, Sqlite> {
    targets.iter().fold(q, |q, t| {
        q.arg(t.target.team)
            .arg(t.target.agent)
            .arg(t.stored_after.map(Ts))
    })
}

/// `Dialect::hand_out_candidates` on SQLite: the recipient looked up (`agent_row`), then
/// the candidates: `Stored` messages of `team` (of this tenant) with a receipt for
/// `recipient`.
pub(crate) async fn hand_out_candidates(
    ledger: &SqlLedger<Lite>,
    conn: &mut SqliteConnection,
    team: Uuid,
    recipient: Uuid,
    ids: &[Uuid],
) -> BusResult<HashMap<Uuid, Candidate>> {
    ledger
        .agent_row(conn, team, recipient)
        .await?
        .ensure_active()?;
    if ids.is_empty() {
        return Ok(HashMap::new());
    }
    let sql = format!(
        "SELECT m.id, m.conversation_id, m.seq, r.delivered_at IS NOT NULL
         FROM messages m
         JOIN teams t ON t.id = m.team_id AND t.tenant = $1
         JOIN receipts r ON r.message_id = m.id AND r.recipient_id = $2
         WHERE m.team_id = $3 AND m.publication = 'stored' AND {}",
        Lite::any_id("m.id", 4, ids.len())
    );
    let q = stmt::<Lite>(&sql)
        .arg(ledger.tenant().as_str().to_owned())
        .arg(recipient)
        .arg(team);
    let rows: Vec<(Uuid, Uuid, i64, bool)> = Lite::bind_ids(q, ids)
        .all(conn)
        .await
        .map_err(ledger.db("hand-out"))?;
    Ok(rows
        .into_iter()
        .map(|(id, conversation, seq, delivered)| {
            let candidate = Candidate {
                conversation,
                seq,
                delivered,
            };
            (id, candidate)
        })
        .collect())
}

/// `Dialect::prior_hand_outs` on SQLite: every earlier hand-out read; the live one with the
/// greatest `ord` kept.
pub(crate) async fn prior_hand_outs(
    ledger: &SqlLedger<Lite>,
    conn: &mut SqliteConnection,
    recipient: Uuid,
    ids: &[Uuid],
    at: DateTime<Utc>,
) -> BusResult<HashMap<Uuid, Prior>> {
    let sql = format!(
        "SELECT message_id, held_until > $1, delivery_id, held_until, ord
         FROM hand_outs WHERE recipient_id = $2 AND {}",
        Lite::any_id("message_id", 3, ids.len())
    );
    let q = stmt::<Lite>(&sql).arg(Ts(at)).arg(recipient);
    let rows: Vec<(Uuid, bool, Uuid, Ts, i64)> = Lite::bind_ids(q, ids)
        .all(conn)
        .await
        .map_err(ledger.db("hand-out"))?;
    let mut prior: HashMap<Uuid, Option<(i64, LiveHandOut<DeliveryId>)>> = HashMap::new();
    for (message, live, delivery, until, ord) in rows {
        let entry = prior.entry(message).or_default();
        if live && entry.as_ref().is_none_or(|(o, _)| *o < ord) {
            let hand_out = LiveHandOut {
                holder: DeliveryId(delivery),
                held_until: until.0,
            };
            *entry = Some((ord, hand_out));
        }
    }
    Ok(prior
        .into_iter()
        .map(|(message, live)| (message, live.map(|(_, l)| l)))
        .collect())
}

/// `Dialect::write_hand_outs` on SQLite: a statement per hand-out whose ack moves, then one
/// per new hand-out.
pub(crate) async fn write_hand_outs(
    ledger: &SqlLedger<Lite>,
    conn: &mut SqliteConnection,
    team: Uuid,
    acks: &BTreeMap<DeliveryId, InboxAck>,
    rows: &[IssuedHandOut],
) -> BusResult<()> {
    for (delivery, ack) in acks {
        sqlx::query("UPDATE hand_outs SET ack_inbox = ?, ack_subject = ? WHERE delivery_id = ?")
            .bind(&ack.inbox)
            .bind(&ack.ack_subject)
            .bind(delivery.0)
            .execute(&mut *conn)
            .await
            .map_err(ledger.db("hand-out"))?;
    }
    for issued in rows {
        let h = &issued.hand_out;
        sqlx::query(
            "INSERT INTO hand_outs
                 (delivery_id, team_id, message_id, recipient_id, conversation_id, seq,
                  redelivered, issued_at, held_until, ack_inbox, ack_subject)
             VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        )
        .bind(h.delivery.0)
        .bind(team)
        .bind(h.message)
        .bind(h.recipient)
        .bind(h.conversation)
        .bind(db_i64(h.seq))
        .bind(h.redelivered)
        .bind(Ts(h.issued_at))
        .bind(Ts(h.held_until))
        .bind(issued.ack.as_ref().map(|a| a.inbox.as_str()))
        .bind(issued.ack.as_ref().map(|a| a.ack_subject.as_str()))
        .execute(&mut *conn)
        .await
        .map_err(ledger.db("hand-out"))?;
    }
    Ok(())
}

#[cfg(test)]
mod plans {
    use super::*;
    use crewbus_sql::delivery::{undelivered_sql, wakeable_sql};
    use crewbus_sql::watch::{news_items_sql, news_summary_sql};

    /// The query plan of `sql` on a freshly migrated store: one line per step, in order.
    async fn plan(sql: &str, binds: usize) -> Vec<String> {
        let dir = tempfile::tempdir().unwrap();
        let config = crate::SqliteConfig {
            create_if_missing: true,
            ..crate::SqliteConfig::default()
        };
        let pools = crate::open(dir.path().join("bus.db"), &config)
            .await
            .unwrap();
        crate::migrate(&pools).await.unwrap();
        let explain = format!("EXPLAIN QUERY PLAN {sql}");
        let mut query = sqlx::query_as::<_, (i64, i64, i64, String)>(&explain);
        for _ in 0..binds {
            query = query.bind(Option::<i64>::None);
        }
        let rows = query.fetch_all(pools.reader()).await.unwrap();
        pools.close().await;
        rows.into_iter().map(|r| r.3).collect()
    }

    /// Asserts the plan reads the recipient's undelivered receipts first, through one of their
    /// partial indexes (`receipts_undelivered`, or `receipts_topup_order`: both hold exactly
    /// those rows, led by the recipient), and never scans the team's messages by
    /// `messages_sent`.
    fn assert_driven_by_receipts(plan: &[String]) {
        let first_table = plan
            .iter()
            .find(|line| line.contains(" r ") || line.contains(" m "))
            .unwrap_or_else(|| panic!("no table in {plan:?}"));
        assert!(
            first_table.contains(" r ")
                && (first_table.contains("receipts_undelivered")
                    || first_table.contains("receipts_topup_order")),
            "the receipts drive the join: {plan:?}"
        );
        assert!(
            !plan.iter().any(|line| line.contains("messages_sent")),
            "no walk of the team's messages: {plan:?}"
        );
    }

    /// The top-up walks the recipient's undelivered receipts in its order (the partial index
    /// `receipts_topup_order`) and stops at its limit: no sort of the whole backlog, no walk of
    /// the team's messages.
    #[tokio::test]
    async fn the_top_up_walks_the_recipients_undelivered_receipts_in_order() {
        let plan = plan(&undelivered_sql::<Lite>(), 5).await;
        let first_table = plan
            .iter()
            .find(|line| line.contains(" r ") || line.contains(" m "))
            .unwrap_or_else(|| panic!("no table in {plan:?}"));
        assert!(
            first_table.contains(" r ") && first_table.contains("receipts_topup_order"),
            "the receipts drive the join, in the top-up's order: {plan:?}"
        );
        assert!(
            !plan.iter().any(|line| line.contains("TEMP B-TREE")),
            "no sort: {plan:?}"
        );
        assert!(
            !plan.iter().any(|line| line.contains("messages_sent")),
            "no walk of the team's messages: {plan:?}"
        );
    }

    #[tokio::test]
    async fn the_wakeup_sweep_starts_from_each_waiters_undelivered_receipts() {
        assert_driven_by_receipts(&plan(&wakeable_sql::<Lite>(3), 3 + 3 * 3).await);
    }

    #[tokio::test]
    async fn the_inbox_watch_starts_from_the_recipients_undelivered_receipts() {
        assert_driven_by_receipts(&plan(&news_summary_sql::<Lite>(2), 5 + 2).await);
        let items = plan(&news_items_sql::<Lite>(2), 1 + 2).await;
        assert!(
            items
                .iter()
                .any(|l| l.starts_with("SEARCH m ") && l.contains("(id=?)")),
            "the news are read by id: {items:?}"
        );
    }
}
