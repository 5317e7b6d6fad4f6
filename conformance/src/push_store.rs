//! `PushStore` behaviours (PUSH.md §3): one function per row of the contract — registrations,
//! cursors, claims, parking, and each registration's attempts log — and their trials.
//!
//! Each behaviour takes a [`PushStoreFixture`]: a store over a fresh namespace (its own tenant, or
//! its own database) and a second store of *another tenant over the same backing state*, for the
//! scoping cases. Time is passed explicitly, as the port takes it from the caller.

use std::sync::Arc;

use async_trait::async_trait;
use chrono::{DateTime, Duration, TimeZone, Utc};
use crewbus_domain::{
    AttemptOutcome, PushAttempt, PushAuthentication, PushConfig, RunId, Secret, Seq, StoreError,
};
use crewbus_ports::PushStore;
use libtest_mimic::Trial;
use tokio::runtime::Runtime;

use crate::FixtureError;
use crate::trial::{Behaviour, Run, Suite, behaviours, factory_source};

/// A fresh namespace for one push store behaviour.
pub trait PushStoreFixture: Send + Sync {
    /// The store under test.
    fn store(&self) -> Arc<dyn PushStore>;
    /// A store serving another tenant over the same backing state (same database).
    fn other_tenant(&self) -> Arc<dyn PushStore>;
}

/// Builds a fresh [`PushStoreFixture`] per test.
#[async_trait]
pub trait PushStoreFactory: Send + Sync + 'static {
    /// A fresh namespace. Errors fail the trial, naming the cause.
    async fn fixture(&self) -> Result<Box<dyn PushStoreFixture>, FixtureError>;
}

/// One push store behaviour, type-erased.
pub type PushStoreBehaviour = Run<dyn PushStoreFixture>;

factory_source!(PushStoreFactory => dyn PushStoreFixture);

/// Every push store behaviour, in a stable order.
pub fn push_store_behaviours() -> Vec<Behaviour<dyn PushStoreFixture>> {
    behaviours!["push_store" =>
        tenant_is_the_one_served,
        put_inserts_a_registration_due_at_once,
        put_keeps_existing_cursor,
        put_replaces_url_and_credentials,
        put_resets_attempts_and_unparks,
        get_of_a_missing_registration_is_none,
        list_holds_only_the_runs_registrations,
        due_returns_longest_due_first_within_the_limit,
        due_claims_until_the_lease,
        due_skips_parked_registrations,
        advance_never_moves_the_cursor_backward,
        advance_resets_attempts_and_is_due_at,
        defer_rests_without_counting_an_attempt,
        retry_counts_an_attempt_and_keeps_the_cursor,
        park_keeps_the_cursor_and_leaves_due,
        parked_lists_oldest_first_within_the_limit,
        unpark_reports_whether_a_parked_row_existed,
        delete_is_idempotent,
        missing_rows_are_silent_no_ops,
        tenants_never_see_each_others_rows,
        cursor_above_i64_max_is_invalid,
        large_cursors_round_trip,
        registrations_show_the_runs_delivery_state,
        record_attempt_keeps_the_newest,
        attempts_are_listed_newest_first_within_the_limit,
        attempts_logs_outlive_their_registration_until_pruned,
        attempts_are_scoped_to_the_tenant,
    ]
}

/// Every push store behaviour as its own trial named `<target>::push_store::<behaviour>`.
pub fn push_store_trials(
    target: &str,
    factory: Arc<dyn PushStoreFactory>,
    runtime: &Arc<Runtime>,
) -> Vec<Trial> {
    Suite::new(factory, runtime).trials(target, push_store_behaviours())
}

fn t0() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap()
}

fn secs(n: i64) -> Duration {
    Duration::seconds(n)
}

fn config(run: RunId, id: &str, credential: &str) -> PushConfig {
    PushConfig {
        id: id.to_owned(),
        run,
        url: format!("https://receiver.example/{id}"),
        authentication: Some(PushAuthentication {
            scheme: "Bearer".into(),
            credentials: Secret::new(credential),
        }),
    }
}

/// The parked row `(run, id)`, read through `parked` (the only read that returns a full row
/// without claiming it).
async fn parked_row(
    store: &dyn PushStore,
    run: RunId,
    id: &str,
) -> Option<crewbus_domain::PushRegistration> {
    store
        .parked(1000)
        .await
        .unwrap()
        .into_iter()
        .find(|r| r.config.run == run && r.config.id == id)
}

/// `tenant()` names the tenant the store was built for.
pub async fn tenant_is_the_one_served(fx: &dyn PushStoreFixture) {
    assert_ne!(fx.store().tenant(), fx.other_tenant().tenant());
}

/// `put` inserts a registration that is due at `at` (not before), with the given cursor.
pub async fn put_inserts_a_registration_due_at_once(fx: &dyn PushStoreFixture) {
    let s = fx.store();
    let run = RunId::new();
    s.put(&config(run, "operator:a", "c1"), Seq(1), t0())
        .await
        .unwrap();
    assert!(s.due(t0() - secs(1), 10, t0()).await.unwrap().is_empty());
    let due = s.due(t0(), 10, t0() + secs(30)).await.unwrap();
    assert_eq!(due.len(), 1);
    assert_eq!(due[0].config, config(run, "operator:a", "c1"));
    assert_eq!(due[0].next_seq, Seq(1));
    assert_eq!(due[0].attempts, 0);
    assert!(!due[0].parked);
}

/// `put` on an existing registration keeps its cursor whatever `next_seq` says.
pub async fn put_keeps_existing_cursor(fx: &dyn PushStoreFixture) {
    let s = fx.store();
    let run = RunId::new();
    s.put(&config(run, "operator:a", "c1"), Seq(1), t0())
        .await
        .unwrap();
    s.advance(run, "operator:a", Seq(7), t0()).await.unwrap();
    s.put(&config(run, "operator:a", "c1"), Seq(1), t0())
        .await
        .unwrap();
    s.put(&config(run, "operator:a", "c1"), Seq(99), t0())
        .await
        .unwrap();
    let due = s.due(t0(), 10, t0() + secs(30)).await.unwrap();
    assert_eq!(due.len(), 1);
    assert_eq!(due[0].next_seq, Seq(7));
}

/// `put` on an existing registration replaces its URL and credentials.
pub async fn put_replaces_url_and_credentials(fx: &dyn PushStoreFixture) {
    let s = fx.store();
    let run = RunId::new();
    s.put(&config(run, "operator:a", "old"), Seq(1), t0())
        .await
        .unwrap();
    let mut new = config(run, "operator:a", "new");
    new.url = "https://elsewhere.example/hook".into();
    s.put(&new, Seq(1), t0()).await.unwrap();
    assert_eq!(s.get(run, "operator:a").await.unwrap(), Some(new.clone()));
    let mut none = new.clone();
    none.authentication = None;
    s.put(&none, Seq(1), t0()).await.unwrap();
    assert_eq!(s.get(run, "operator:a").await.unwrap(), Some(none));
}

/// `put` on an existing registration resets attempts, un-parks it and makes it due at `at`.
pub async fn put_resets_attempts_and_unparks(fx: &dyn PushStoreFixture) {
    let s = fx.store();
    let run = RunId::new();
    let c = config(run, "operator:a", "c");
    s.put(&c, Seq(1), t0()).await.unwrap();
    s.retry(run, "operator:a", t0() + secs(60), "500")
        .await
        .unwrap();
    s.park(run, "operator:a", "410").await.unwrap();
    s.put(&c, Seq(1), t0() + secs(5)).await.unwrap();
    assert!(s.parked(10).await.unwrap().is_empty());
    let due = s.due(t0() + secs(5), 10, t0() + secs(35)).await.unwrap();
    assert_eq!(due.len(), 1);
    assert_eq!(due[0].attempts, 0);
}

/// `get` of a registration never put is `None`.
pub async fn get_of_a_missing_registration_is_none(fx: &dyn PushStoreFixture) {
    assert_eq!(
        fx.store().get(RunId::new(), "operator:x").await.unwrap(),
        None
    );
}

/// `list` returns the run's registrations only, ordered by id.
pub async fn list_holds_only_the_runs_registrations(fx: &dyn PushStoreFixture) {
    let s = fx.store();
    let (run, other) = (RunId::new(), RunId::new());
    for id in ["operator:b", "operator:a"] {
        s.put(&config(run, id, "c"), Seq(1), t0()).await.unwrap();
    }
    s.put(&config(other, "operator:c", "c"), Seq(1), t0())
        .await
        .unwrap();
    let ids: Vec<String> = s
        .list(run)
        .await
        .unwrap()
        .into_iter()
        .map(|c| c.id)
        .collect();
    assert_eq!(ids, vec!["operator:a", "operator:b"]);
}

/// `due` returns rows with `next_attempt_at <= at`, longest-due first, at most `limit`.
pub async fn due_returns_longest_due_first_within_the_limit(fx: &dyn PushStoreFixture) {
    let s = fx.store();
    let run = RunId::new();
    for (id, offset) in [
        ("operator:late", 20),
        ("operator:early", 0),
        ("operator:mid", 10),
    ] {
        s.put(&config(run, id, "c"), Seq(1), t0() + secs(offset))
            .await
            .unwrap();
    }
    s.put(
        &config(run, "operator:future", "c"),
        Seq(1),
        t0() + secs(100),
    )
    .await
    .unwrap();
    let due = s.due(t0() + secs(30), 2, t0() + secs(90)).await.unwrap();
    let ids: Vec<&str> = due.iter().map(|r| r.config.id.as_str()).collect();
    assert_eq!(ids, vec!["operator:early", "operator:mid"]);
    let rest = s.due(t0() + secs(30), 10, t0() + secs(90)).await.unwrap();
    let ids: Vec<&str> = rest.iter().map(|r| r.config.id.as_str()).collect();
    assert_eq!(ids, vec!["operator:late"]);
}

/// `due` claims what it returns until `lease_until`: a second caller gets nothing before then,
/// and the row is due again at the lease's end.
pub async fn due_claims_until_the_lease(fx: &dyn PushStoreFixture) {
    let s = fx.store();
    let run = RunId::new();
    s.put(&config(run, "operator:a", "c"), Seq(1), t0())
        .await
        .unwrap();
    assert_eq!(s.due(t0(), 10, t0() + secs(30)).await.unwrap().len(), 1);
    assert!(s.due(t0(), 10, t0() + secs(30)).await.unwrap().is_empty());
    assert!(
        s.due(t0() + secs(29), 10, t0() + secs(60))
            .await
            .unwrap()
            .is_empty()
    );
    let again = s.due(t0() + secs(30), 10, t0() + secs(60)).await.unwrap();
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].next_attempt_at, t0() + secs(30));
}

/// Parked registrations never come out of `due`.
pub async fn due_skips_parked_registrations(fx: &dyn PushStoreFixture) {
    let s = fx.store();
    let run = RunId::new();
    s.put(&config(run, "operator:a", "c"), Seq(1), t0())
        .await
        .unwrap();
    s.park(run, "operator:a", "gone").await.unwrap();
    assert!(
        s.due(t0() + secs(3600), 10, t0() + secs(7200))
            .await
            .unwrap()
            .is_empty()
    );
}

/// `advance` keeps `max(stored, new)`.
pub async fn advance_never_moves_the_cursor_backward(fx: &dyn PushStoreFixture) {
    let s = fx.store();
    let run = RunId::new();
    s.put(&config(run, "operator:a", "c"), Seq(1), t0())
        .await
        .unwrap();
    s.advance(run, "operator:a", Seq(10), t0()).await.unwrap();
    s.advance(run, "operator:a", Seq(4), t0()).await.unwrap();
    let due = s.due(t0(), 10, t0() + secs(1)).await.unwrap();
    assert_eq!(due[0].next_seq, Seq(10));
}

/// `advance` resets attempts and the last error and makes the row due at `at`.
pub async fn advance_resets_attempts_and_is_due_at(fx: &dyn PushStoreFixture) {
    let s = fx.store();
    let run = RunId::new();
    s.put(&config(run, "operator:a", "c"), Seq(1), t0())
        .await
        .unwrap();
    s.retry(run, "operator:a", t0() + secs(100), "timeout")
        .await
        .unwrap();
    s.advance(run, "operator:a", Seq(2), t0() + secs(3))
        .await
        .unwrap();
    let due = s.due(t0() + secs(3), 10, t0() + secs(9)).await.unwrap();
    assert_eq!(due.len(), 1);
    assert_eq!(due[0].attempts, 0);
    assert_eq!(due[0].last_error, None);
    assert_eq!(due[0].next_seq, Seq(2));
}

/// `defer` rests a row until `until` without counting an attempt or moving the cursor.
pub async fn defer_rests_without_counting_an_attempt(fx: &dyn PushStoreFixture) {
    let s = fx.store();
    let run = RunId::new();
    s.put(&config(run, "operator:a", "c"), Seq(3), t0())
        .await
        .unwrap();
    s.defer(run, "operator:a", t0() + secs(50)).await.unwrap();
    assert!(
        s.due(t0() + secs(49), 10, t0() + secs(60))
            .await
            .unwrap()
            .is_empty()
    );
    let due = s.due(t0() + secs(50), 10, t0() + secs(60)).await.unwrap();
    assert_eq!(due[0].attempts, 0);
    assert_eq!(due[0].next_seq, Seq(3));
}

/// `retry` adds an attempt, sets the next instant and the last error, keeps the cursor.
pub async fn retry_counts_an_attempt_and_keeps_the_cursor(fx: &dyn PushStoreFixture) {
    let s = fx.store();
    let run = RunId::new();
    s.put(&config(run, "operator:a", "c"), Seq(5), t0())
        .await
        .unwrap();
    s.retry(run, "operator:a", t0() + secs(10), "status 500")
        .await
        .unwrap();
    s.retry(run, "operator:a", t0() + secs(20), "status 502")
        .await
        .unwrap();
    assert!(
        s.due(t0() + secs(19), 10, t0() + secs(60))
            .await
            .unwrap()
            .is_empty()
    );
    let due = s.due(t0() + secs(20), 10, t0() + secs(60)).await.unwrap();
    assert_eq!(due[0].attempts, 2);
    assert_eq!(due[0].next_seq, Seq(5));
    assert_eq!(due[0].last_error.as_deref(), Some("status 502"));
}

/// A parked row keeps its cursor, carries its error and leaves `due`.
pub async fn park_keeps_the_cursor_and_leaves_due(fx: &dyn PushStoreFixture) {
    let s = fx.store();
    let run = RunId::new();
    s.put(&config(run, "operator:a", "c"), Seq(1), t0())
        .await
        .unwrap();
    s.advance(run, "operator:a", Seq(4), t0()).await.unwrap();
    s.park(run, "operator:a", "status 410").await.unwrap();
    let parked = parked_row(&*s, run, "operator:a").await.unwrap();
    assert!(parked.parked);
    assert_eq!(parked.next_seq, Seq(4));
    assert_eq!(parked.last_error.as_deref(), Some("status 410"));
    assert!(
        s.due(t0() + secs(1000), 10, t0() + secs(2000))
            .await
            .unwrap()
            .is_empty()
    );
}

/// `parked` lists parked rows oldest-parked first, at most `limit`.
pub async fn parked_lists_oldest_first_within_the_limit(fx: &dyn PushStoreFixture) {
    let s = fx.store();
    let run = RunId::new();
    for id in ["operator:c", "operator:a", "operator:b"] {
        s.put(&config(run, id, "c"), Seq(1), t0()).await.unwrap();
        s.park(run, id, "gone").await.unwrap();
    }
    let ids: Vec<String> = s
        .parked(2)
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.config.id)
        .collect();
    assert_eq!(ids, vec!["operator:c", "operator:a"]);
}

/// `unpark` returns `true` once for a parked row (which becomes due at `at` with attempts reset),
/// then `false`; `false` for a row that is not parked or does not exist.
pub async fn unpark_reports_whether_a_parked_row_existed(fx: &dyn PushStoreFixture) {
    let s = fx.store();
    let run = RunId::new();
    s.put(&config(run, "operator:a", "c"), Seq(1), t0())
        .await
        .unwrap();
    assert!(!s.unpark(run, "operator:a", t0()).await.unwrap());
    s.retry(run, "operator:a", t0(), "x").await.unwrap();
    s.park(run, "operator:a", "gone").await.unwrap();
    assert!(s.unpark(run, "operator:a", t0() + secs(7)).await.unwrap());
    assert!(!s.unpark(run, "operator:a", t0() + secs(7)).await.unwrap());
    assert!(!s.unpark(run, "operator:none", t0()).await.unwrap());
    let due = s.due(t0() + secs(7), 10, t0() + secs(9)).await.unwrap();
    assert_eq!(due.len(), 1);
    assert_eq!(due[0].attempts, 0);
}

/// `delete` removes the row; deleting again (or a missing row) is fine.
pub async fn delete_is_idempotent(fx: &dyn PushStoreFixture) {
    let s = fx.store();
    let run = RunId::new();
    s.put(&config(run, "operator:a", "c"), Seq(1), t0())
        .await
        .unwrap();
    s.delete(run, "operator:a").await.unwrap();
    s.delete(run, "operator:a").await.unwrap();
    assert_eq!(s.get(run, "operator:a").await.unwrap(), None);
    assert!(s.due(t0(), 10, t0()).await.unwrap().is_empty());
}

/// `advance`, `defer`, `retry` and `park` on a missing row succeed and create nothing.
pub async fn missing_rows_are_silent_no_ops(fx: &dyn PushStoreFixture) {
    let s = fx.store();
    let run = RunId::new();
    s.advance(run, "operator:a", Seq(3), t0()).await.unwrap();
    s.defer(run, "operator:a", t0()).await.unwrap();
    s.retry(run, "operator:a", t0(), "x").await.unwrap();
    s.park(run, "operator:a", "x").await.unwrap();
    assert_eq!(s.get(run, "operator:a").await.unwrap(), None);
    assert!(s.list(run).await.unwrap().is_empty());
    assert!(s.parked(10).await.unwrap().is_empty());
}

/// One tenant never reads, claims, changes or deletes another tenant's rows.
pub async fn tenants_never_see_each_others_rows(fx: &dyn PushStoreFixture) {
    let (mine, theirs) = (fx.store(), fx.other_tenant());
    let run = RunId::new();
    mine.put(&config(run, "operator:a", "c"), Seq(1), t0())
        .await
        .unwrap();
    mine.park(run, "operator:a", "gone").await.unwrap();
    mine.put(&config(run, "operator:b", "c"), Seq(1), t0())
        .await
        .unwrap();
    assert_eq!(theirs.get(run, "operator:a").await.unwrap(), None);
    assert!(theirs.list(run).await.unwrap().is_empty());
    assert!(theirs.parked(10).await.unwrap().is_empty());
    assert!(
        theirs
            .due(t0() + secs(10), 10, t0() + secs(20))
            .await
            .unwrap()
            .is_empty()
    );
    assert!(!theirs.unpark(run, "operator:a", t0()).await.unwrap());
    theirs
        .advance(run, "operator:b", Seq(9), t0())
        .await
        .unwrap();
    theirs.delete(run, "operator:b").await.unwrap();
    let due = mine.due(t0(), 10, t0() + secs(1)).await.unwrap();
    assert_eq!(due.len(), 1);
    assert_eq!(due[0].config.id, "operator:b");
    assert_eq!(due[0].next_seq, Seq(1));
    assert_eq!(mine.parked(10).await.unwrap().len(), 1);
}

/// A cursor above `i64::MAX` cannot be stored portably and is refused with `Invalid`, so nothing
/// can ever read back as a negative (or a wrapped, huge) cursor.
pub async fn cursor_above_i64_max_is_invalid(fx: &dyn PushStoreFixture) {
    let s = fx.store();
    let run = RunId::new();
    let too_big = Seq(i64::MAX as u64 + 1);
    assert!(matches!(
        s.put(&config(run, "operator:a", "c"), too_big, t0()).await,
        Err(StoreError::Invalid { .. })
    ));
    s.put(&config(run, "operator:a", "c"), Seq(1), t0())
        .await
        .unwrap();
    assert!(matches!(
        s.advance(run, "operator:a", too_big, t0()).await,
        Err(StoreError::Invalid { .. })
    ));
    assert_eq!(s.due(t0(), 10, t0()).await.unwrap()[0].next_seq, Seq(1));
}

/// The largest storable cursor round-trips exactly.
pub async fn large_cursors_round_trip(fx: &dyn PushStoreFixture) {
    let s = fx.store();
    let run = RunId::new();
    let max = Seq(i64::MAX as u64);
    s.put(&config(run, "operator:a", "c"), max, t0())
        .await
        .unwrap();
    assert_eq!(s.due(t0(), 10, t0()).await.unwrap()[0].next_seq, max);
}

fn attempt(at: i64, seq: u64, outcome: AttemptOutcome) -> PushAttempt {
    PushAttempt {
        at: t0() + secs(at),
        seq: Seq(seq),
        outcome,
        duration_ms: 10 + seq,
    }
}

fn status(code: u16) -> AttemptOutcome {
    AttemptOutcome::Status { status: code }
}

/// `registrations` returns every registration of the run with its delivery state (cursor,
/// attempts, last error, parked), ordered by id; another run's and another tenant's are left out.
pub async fn registrations_show_the_runs_delivery_state(fx: &dyn PushStoreFixture) {
    let s = fx.store();
    let (run, other) = (RunId::new(), RunId::new());
    for id in ["operator:c", "operator:a", "operator:b"] {
        s.put(&config(run, id, "c"), Seq(1), t0()).await.unwrap();
    }
    s.put(&config(other, "operator:z", "c"), Seq(1), t0())
        .await
        .unwrap();
    s.advance(run, "operator:a", Seq(4), t0() + secs(1))
        .await
        .unwrap();
    s.retry(run, "operator:b", t0() + secs(30), "status 503")
        .await
        .unwrap();
    s.park(run, "operator:c", "status 410").await.unwrap();
    let got = s.registrations(run).await.unwrap();
    let ids: Vec<&str> = got.iter().map(|r| r.config.id.as_str()).collect();
    assert_eq!(ids, vec!["operator:a", "operator:b", "operator:c"]);
    assert_eq!(got[0].config, config(run, "operator:a", "c"));
    assert_eq!((got[0].next_seq, got[0].attempts), (Seq(4), 0));
    assert_eq!(got[0].next_attempt_at, t0() + secs(1));
    assert_eq!(
        (got[1].attempts, got[1].next_attempt_at),
        (1, t0() + secs(30))
    );
    assert_eq!(got[1].last_error.as_deref(), Some("status 503"));
    assert!(got[2].parked && !got[0].parked && !got[1].parked);
    assert_eq!(got[2].last_error.as_deref(), Some("status 410"));
    assert!(s.registrations(RunId::new()).await.unwrap().is_empty());
    assert!(
        fx.other_tenant()
            .registrations(run)
            .await
            .unwrap()
            .is_empty()
    );
}

/// `record_attempt` appends to the registration's log and keeps only its newest `keep`
/// attempts; outcomes (status or error), seqs and durations round-trip; `keep` 0 is `Invalid`.
pub async fn record_attempt_keeps_the_newest(fx: &dyn PushStoreFixture) {
    let s = fx.store();
    let run = RunId::new();
    s.put(&config(run, "operator:a", "c"), Seq(1), t0())
        .await
        .unwrap();
    let log: Vec<PushAttempt> = (1..=5)
        .map(|i| {
            let outcome = if i % 2 == 0 {
                AttemptOutcome::Error {
                    error: format!("timeout {i}"),
                }
            } else {
                status(500 + i as u16)
            };
            attempt(i, i as u64, outcome)
        })
        .collect();
    for a in &log {
        s.record_attempt(run, "operator:a", a, 3).await.unwrap();
    }
    let kept = s.attempts(run, "operator:a", 10).await.unwrap();
    assert_eq!(kept, vec![log[4].clone(), log[3].clone(), log[2].clone()]);
    assert!(matches!(
        s.record_attempt(run, "operator:a", &log[0], 0).await,
        Err(StoreError::Invalid { .. })
    ));
    s.record_attempt(run, "operator:a", &attempt(9, 9, status(204)), 1)
        .await
        .unwrap();
    let kept = s.attempts(run, "operator:a", 10).await.unwrap();
    assert_eq!(kept, vec![attempt(9, 9, status(204))]);
    assert!(kept[0].outcome.acknowledged());
    // Another registration's log is its own.
    assert!(s.attempts(run, "operator:b", 10).await.unwrap().is_empty());
}

/// `attempts` lists newest first, at most `limit`; a `limit` of 0 or above `MAX_PAGE` is
/// `Invalid`.
pub async fn attempts_are_listed_newest_first_within_the_limit(fx: &dyn PushStoreFixture) {
    let s = fx.store();
    let run = RunId::new();
    let log: Vec<PushAttempt> = (1..=4).map(|i| attempt(i, 1, status(503))).collect();
    for a in &log {
        s.record_attempt(run, "operator:a", a, 20).await.unwrap();
    }
    let newest = s.attempts(run, "operator:a", 2).await.unwrap();
    assert_eq!(newest, vec![log[3].clone(), log[2].clone()]);
    for limit in [0, crewbus_domain::MAX_PAGE + 1] {
        assert!(matches!(
            s.attempts(run, "operator:a", limit).await,
            Err(StoreError::Invalid { .. })
        ));
    }
}

/// A log is written without a registration and outlives its registration's `delete`;
/// `prune_attempts(before)` deletes the logs of registrations that no longer exist and whose
/// newest attempt is before `before`, counts the attempts deleted, and keeps the logs of live
/// registrations and recent ones.
pub async fn attempts_logs_outlive_their_registration_until_pruned(fx: &dyn PushStoreFixture) {
    let s = fx.store();
    let run = RunId::new();
    s.put(&config(run, "operator:done", "c"), Seq(1), t0())
        .await
        .unwrap();
    s.put(&config(run, "operator:live", "c"), Seq(1), t0())
        .await
        .unwrap();
    for i in 0..3 {
        s.record_attempt(run, "operator:done", &attempt(i, 1, status(500)), 20)
            .await
            .unwrap();
    }
    s.record_attempt(run, "operator:live", &attempt(1, 1, status(500)), 20)
        .await
        .unwrap();
    s.record_attempt(run, "operator:never", &attempt(2, 1, status(500)), 20)
        .await
        .unwrap();
    s.record_attempt(run, "operator:recent", &attempt(1, 1, status(500)), 20)
        .await
        .unwrap();
    s.record_attempt(run, "operator:recent", &attempt(100, 2, status(200)), 20)
        .await
        .unwrap();
    s.delete(run, "operator:done").await.unwrap();
    assert_eq!(s.attempts(run, "operator:done", 10).await.unwrap().len(), 3);
    assert_eq!(s.prune_attempts(t0() + secs(50)).await.unwrap(), 4);
    assert!(
        s.attempts(run, "operator:done", 10)
            .await
            .unwrap()
            .is_empty()
    );
    assert!(
        s.attempts(run, "operator:never", 10)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(s.attempts(run, "operator:live", 10).await.unwrap().len(), 1);
    assert_eq!(
        s.attempts(run, "operator:recent", 10).await.unwrap().len(),
        2
    );
    assert_eq!(s.prune_attempts(t0() + secs(50)).await.unwrap(), 0);
    assert_eq!(s.prune_attempts(t0() + secs(101)).await.unwrap(), 2);
}

/// One tenant never reads or prunes another tenant's attempts logs.
pub async fn attempts_are_scoped_to_the_tenant(fx: &dyn PushStoreFixture) {
    let (mine, theirs) = (fx.store(), fx.other_tenant());
    let run = RunId::new();
    mine.record_attempt(run, "operator:a", &attempt(1, 1, status(500)), 20)
        .await
        .unwrap();
    assert!(
        theirs
            .attempts(run, "operator:a", 10)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(theirs.prune_attempts(t0() + secs(1000)).await.unwrap(), 0);
    theirs
        .record_attempt(run, "operator:a", &attempt(2, 1, status(502)), 1)
        .await
        .unwrap();
    assert_eq!(
        mine.attempts(run, "operator:a", 10).await.unwrap(),
        vec![attempt(1, 1, status(500))]
    );
}
