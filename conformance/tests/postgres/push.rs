//! The `PushStore` conformance behaviours on `PostgresPushStore` against a real server, every
//! behaviour its own test.
//!
//! Each test gets a fresh migrated database (`DATABASE_URL`; kept and named when the behaviour
//! panics) with two tenants over it, as tenants share one database in production.

use std::collections::HashSet;
use std::sync::Arc;

use async_trait::async_trait;
use chrono::{DateTime, TimeZone, Utc};
use crewbus_conformance::trial::{Behaviour, NoFixture, Suite};
use crewbus_conformance::{
    FixtureError, PushStoreFactory, PushStoreFixture, PushStores, push_store_trials,
};
use crewbus_domain::{PushConfig, RunId, Seq, StoreError, TenantId};
use crewbus_ports::PushStore;
use crewbus_postgres::PostgresPushStore;

use crate::support::database;

struct Factory;

#[async_trait]
impl PushStoreFactory for Factory {
    async fn fixture(&self) -> Result<Box<dyn PushStoreFixture>, FixtureError> {
        let db = database("postgres_push").await.drop_unless_panicking();
        let mine = PostgresPushStore::new(db.pool().clone(), TenantId::new("acme")?);
        let theirs = PostgresPushStore::new(db.pool().clone(), TenantId::new("globex")?);
        Ok(Box::new(PushStores {
            store: Arc::new(mine),
            other_tenant: Arc::new(theirs),
            keep: Box::new(db),
        }))
    }
}

fn t(secs: i64) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2030, 1, 1, 0, 0, 0).unwrap() + chrono::Duration::seconds(secs)
}

fn config(run: RunId, id: &str) -> PushConfig {
    PushConfig {
        id: id.to_owned(),
        run,
        url: format!("https://receiver.example/{id}"),
        authentication: None,
    }
}

/// Eight workers racing `due` on 200 due rows: every row is claimed exactly once.
async fn racing_workers_never_claim_the_same_row() {
    let db = database("postgres_push::racing_workers_never_claim_the_same_row").await;
    let store = PostgresPushStore::new(db.pool().clone(), TenantId::new("acme").unwrap());
    for i in 0..200 {
        store
            .put(
                &config(RunId::new(), &format!("operator:{i}")),
                Seq(1),
                t(i % 7),
            )
            .await
            .unwrap();
    }
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            let mut mine = Vec::new();
            loop {
                let got = store.due(t(10), 7, t(1000)).await.unwrap();
                if got.is_empty() {
                    return mine;
                }
                mine.extend(got.into_iter().map(|r| (r.config.run, r.config.id)));
            }
        }));
    }
    let mut all = Vec::new();
    for task in tasks {
        all.extend(task.await.unwrap());
    }
    let distinct: HashSet<_> = all.iter().cloned().collect();
    assert_eq!(all.len(), 200, "every row claimed once");
    assert_eq!(distinct.len(), 200);
    db.passed().await;
}

/// Negative counters are refused by the schema, so they are never read back as huge cursors.
async fn negative_counters_are_refused_by_the_schema() {
    let db = database("postgres_push::negative_counters_are_refused_by_the_schema").await;
    let store = PostgresPushStore::new(db.pool().clone(), TenantId::new("acme").unwrap());
    let run = RunId::new();
    store
        .put(&config(run, "operator:a"), Seq(5), t(0))
        .await
        .unwrap();
    for statement in [
        "UPDATE push_registrations SET next_seq = -1",
        "UPDATE push_registrations SET attempts = -1",
        "UPDATE push_registrations SET attempts = 4294967296",
        "UPDATE push_registrations SET parked = true",
    ] {
        let err = sqlx::query(statement).execute(db.pool()).await.unwrap_err();
        let code = err.as_database_error().and_then(|e| e.code()).unwrap();
        assert_eq!(code, "23514", "{statement}: check_violation");
    }
    let due = store.due(t(0), 10, t(1)).await.unwrap();
    assert_eq!(due[0].next_seq, Seq(5));
    db.passed().await;
}

/// `due` reads through the partial index of rows not parked, and every index leads by tenant.
async fn due_uses_the_partial_index() {
    let db = database("postgres_push::due_uses_the_partial_index").await;
    let defs: Vec<String> = sqlx::query_scalar(
        "SELECT indexdef FROM pg_indexes WHERE tablename = 'push_registrations' ORDER BY indexname",
    )
    .fetch_all(db.pool())
    .await
    .unwrap();
    assert!(defs.iter().all(|d| d.contains("(tenant")), "{defs:?}");
    assert!(
        defs.iter()
            .any(|d| d.contains("push_registrations_due") && d.contains("WHERE (NOT parked)")),
        "{defs:?}"
    );
    let mut conn = db.pool().acquire().await.unwrap();
    sqlx::query("SET enable_seqscan = off")
        .execute(&mut *conn)
        .await
        .unwrap();
    let plan: Vec<String> = sqlx::query_scalar(
        "EXPLAIN SELECT run_id, id FROM push_registrations
         WHERE tenant = 'acme' AND NOT parked AND next_attempt_at <= now()
         ORDER BY next_attempt_at, run_id, id COLLATE \"C\" LIMIT 10",
    )
    .fetch_all(&mut *conn)
    .await
    .unwrap();
    assert!(
        plan.iter().any(|l| l.contains("push_registrations_due")),
        "{plan:?}"
    );
    drop(conn);
    db.passed().await;
}

/// A text the database refuses (U+0000) is `Invalid`, not a backend failure; a dead server is
/// `Unavailable`.
async fn refused_text_is_invalid_and_a_dead_server_is_unavailable() {
    let db = database("postgres_push::refused_text_is_invalid").await;
    let store = PostgresPushStore::new(db.pool().clone(), TenantId::new("acme").unwrap());
    let err = store
        .put(&config(RunId::new(), "operator:\u{0}"), Seq(1), t(0))
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Invalid { .. }), "{err:?}");
    let closed = db.pool().clone();
    closed.close().await;
    let dead = PostgresPushStore::new(closed, TenantId::new("acme").unwrap());
    let err = dead.due(t(0), 1, t(1)).await.unwrap_err();
    assert!(err.is_retryable(), "{err:?}");
    db.passed().await;
}

/// `behaviours![f, …]`: this target's own tests (no fixture), under the port `push_store_pg`.
macro_rules! behaviours {
    ($($f:ident),* $(,)?) => {
        vec![$(Behaviour {
            port: "push_store_pg",
            name: stringify!($f),
            needs: &[],
            run: |()| Box::pin($f()),
        }),*]
    };
}

/// The push store's trials (`postgres::push_store::…` and this module's own), on `runtime`.
pub fn trials(runtime: &Arc<tokio::runtime::Runtime>) -> Vec<libtest_mimic::Trial> {
    let mut trials = push_store_trials("postgres", Arc::new(Factory), runtime);
    let own = Suite::new(Arc::new(NoFixture), runtime);
    trials.extend(own.trials(
        "postgres",
        behaviours![
            racing_workers_never_claim_the_same_row,
            negative_counters_are_refused_by_the_schema,
            due_uses_the_partial_index,
            refused_text_is_invalid_and_a_dead_server_is_unavailable,
        ],
    ));
    trials
}
