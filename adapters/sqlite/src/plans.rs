//! The query plans SQLite picks for the shared delivery and watch reads, on a freshly migrated
//! store: the recipient's undelivered receipts drive them, never a walk of the team's messages.

use crate::dialect::Lite;
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
