//! The push outbox end to end on Postgres (journal and push store), sealed with the local key
//! ring, delivering to a real local receiver. Needs `DATABASE_URL` (fails loudly without it).

use crate::push_support;

use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use crewbus::push::{DeliveryWorker, LocalKeyRing, MasterKey, Outbox};
use crewbus_domain::{RunOutcome, TenantId, Uuid};
use crewbus_memory::ManualClock;
use crewbus_ports::{Journal, PushStore};
use crewbus_postgres::{PostgresJournal, PostgresPushStore};
use push_support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sealed_outbox_on_postgres_delivers_a_run_and_keeps_credentials_sealed_at_rest() {
    let db = crewbus_benches::kit::postgres::database("push_postgres::sealed_outbox").await;
    let rx = Receiver::start().await;
    let t = TenantId::new("acme").unwrap();
    let journal = PostgresJournal::new(db.pool().clone(), t.clone());
    let store: Arc<dyn PushStore> = Arc::new(PostgresPushStore::new(db.pool().clone(), t.clone()));
    let dir = tempfile::tempdir().unwrap();
    let keys = Arc::new(LocalKeyRing::new(MasterKey::generate(), dir.path()).unwrap());
    let at = Utc::now();
    let outbox = Outbox::new(
        store,
        vec![with_token(destination("ops", &rx.url("/auth/ops")))],
    )
    .with_clock(Arc::new(ManualClock::new(at)))
    .sealed(keys, t.clone());
    let worker = DeliveryWorker::new(
        &outbox,
        Arc::new(journal.clone()),
        transport(Duration::from_secs(5)),
    );

    let run = journal
        .admit(Uuid::new_v4(), Uuid::new_v4(), at)
        .await
        .unwrap();
    outbox.open(run).await.unwrap();
    journal.note(run, "working", at).await.unwrap();
    journal
        .seal(run, RunOutcome::Succeeded, "done", at)
        .await
        .unwrap();

    // At rest: URL and scheme clear, the credential an envelope.
    let (url, scheme, credentials): (String, String, String) = sqlx::query_as(
        "SELECT url, auth_scheme, auth_credentials FROM push_registrations WHERE run_id = $1",
    )
    .bind(run.0)
    .fetch_one(db.pool())
    .await
    .unwrap();
    assert_eq!(url, rx.url("/auth/ops"));
    assert_eq!(scheme, "Bearer");
    assert!(!credentials.contains(TOKEN) && !credentials.contains("very-secret"));

    let sweep = worker.run_once(at, 10).await.unwrap();
    assert_eq!((sweep.delivered, sweep.deleted), (3, 1));
    let hits = rx.hits("/auth/ops");
    assert_eq!(hits.len(), 3);
    for hit in &hits {
        standardwebhooks::Webhook::new(KEY_OLD)
            .unwrap()
            .verify(&hit.body, &hit.headers)
            .unwrap();
        assert_eq!(
            hit.header("authorization").unwrap(),
            format!("Bearer {TOKEN}")
        );
    }
    assert_eq!(hits[2].json()["type"], "dev.crewbus.run.run_sealed");
    let left: i64 = sqlx::query_scalar("SELECT count(*) FROM push_registrations")
        .fetch_one(db.pool())
        .await
        .unwrap();
    assert_eq!(left, 0, "deleted after the terminal record");
    db.passed().await;
}
