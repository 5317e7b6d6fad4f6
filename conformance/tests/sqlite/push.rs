//! The `PushStore` conformance behaviours on `SqlitePushStore`, every behaviour its own test.
//!
//! Each test gets a fresh migrated store file in a temp directory of its own (kept and named
//! when the behaviour panics) with two tenants over it, as tenants share one store in
//! production.

use std::collections::HashSet;
use std::sync::Arc;

use async_trait::async_trait;
use crewbus_conformance::trial::{Behaviour, NoFixture, Suite};
use crewbus_conformance::{
    FixtureError, PushStoreFactory, PushStoreFixture, PushStores, push_store_trials,
};
use crewbus_domain::{PushConfig, RunId, Seq, TenantId};
use crewbus_ports::PushStore;
use crewbus_sqlite::SqlitePushStore;

use crate::support::{store, t};

struct Factory;

#[async_trait]
impl PushStoreFactory for Factory {
    async fn fixture(&self) -> Result<Box<dyn PushStoreFixture>, FixtureError> {
        let store = store("sqlite_push").await;
        let mine = SqlitePushStore::new(store.pools.clone(), TenantId::new("acme")?);
        let theirs = SqlitePushStore::new(store.pools.clone(), TenantId::new("globex")?);
        Ok(Box::new(PushStores {
            store: Arc::new(mine),
            other_tenant: Arc::new(theirs),
            keep: Box::new(store),
        }))
    }
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
    let s = store("sqlite_push::racing_workers_never_claim_the_same_row").await;
    let store = SqlitePushStore::new(s.pools.clone(), TenantId::new("acme").unwrap());
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
}

/// Negative counters (and a parked row without a park order) are refused by the schema's
/// CHECKs — SQLITE_CONSTRAINT_CHECK (275) — so they are never read back as huge cursors.
async fn negative_counters_are_refused_by_the_schema() {
    let s = store("sqlite_push::negative_counters_are_refused_by_the_schema").await;
    let store = SqlitePushStore::new(s.pools.clone(), TenantId::new("acme").unwrap());
    store
        .put(&config(RunId::new(), "operator:a"), Seq(5), t(0))
        .await
        .unwrap();
    let mut conn = s.pools.side_connection().await.unwrap();
    for statement in [
        "UPDATE push_registrations SET next_seq = -1",
        "UPDATE push_registrations SET attempts = -1",
        "UPDATE push_registrations SET attempts = 4294967296",
        "UPDATE push_registrations SET parked = 1",
        "UPDATE push_registrations SET next_seq = 'many'",
    ] {
        let err = sqlx::query(statement).execute(&mut conn).await.unwrap_err();
        let code = err.as_database_error().and_then(|e| e.code()).unwrap();
        assert!(
            code == "275" || code == "3091",
            "{statement}: a CHECK or STRICT datatype violation, got {code}"
        );
    }
    drop(conn);
    let due = store.due(t(0), 10, t(1)).await.unwrap();
    assert_eq!(due[0].next_seq, Seq(5));
}

/// `due` reads through the partial index of rows not parked.
async fn due_uses_the_partial_index() {
    let s = store("sqlite_push::due_uses_the_partial_index").await;
    let mut conn = s.pools.side_connection().await.unwrap();
    let plan: Vec<(i64, i64, i64, String)> = sqlx::query_as(
        "EXPLAIN QUERY PLAN
         SELECT run_id, id, next_attempt_at FROM push_registrations
         WHERE tenant = 'acme' AND parked = 0 AND next_attempt_at <= 0
         ORDER BY next_attempt_at, run_id, id LIMIT 10",
    )
    .fetch_all(&mut conn)
    .await
    .unwrap();
    assert!(
        plan.iter().any(|p| p.3.contains("push_registrations_due")),
        "{plan:?}"
    );
}

/// `behaviours![f, …]`: this target's own tests (no fixture), under the port `push_store_sqlite`.
macro_rules! behaviours {
    ($($f:ident),* $(,)?) => {
        vec![$(Behaviour {
            port: "push_store_sqlite",
            name: stringify!($f),
            needs: &[],
            run: |()| Box::pin($f()),
        }),*]
    };
}

/// The push store's trials (`sqlite::push_store::…` and this module's own), on `runtime`.
pub fn trials(runtime: &Arc<tokio::runtime::Runtime>) -> Vec<libtest_mimic::Trial> {
    let mut trials = push_store_trials("sqlite", Arc::new(Factory), runtime);
    let own = Suite::new(Arc::new(NoFixture), runtime);
    trials.extend(own.trials(
        "sqlite",
        behaviours![
            racing_workers_never_claim_the_same_row,
            negative_counters_are_refused_by_the_schema,
            due_uses_the_partial_index,
        ],
    ));
    trials
}
