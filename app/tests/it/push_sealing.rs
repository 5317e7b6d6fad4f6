//! Credentials sealed at rest (PUSH.md §5) with the real local key ring, and erasure by tenant.

use crate::push_support;

use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use crewbus::push::{
    DeliverySettings, DeliveryWorker, LocalKeyRing, MasterKey, Outbox, SealedPush,
};
use crewbus_domain::{Backoff, PushConfig, RunId, Seq, StoreError};
use crewbus_memory::{ManualClock, MemoryPushStore, TestKeyRing};
use crewbus_ports::{Journal, KeyRing, PushStore};
use push_support::*;

fn key_ring(dir: &tempfile::TempDir) -> Arc<LocalKeyRing> {
    Arc::new(LocalKeyRing::new(MasterKey::generate(), dir.path()).unwrap())
}

#[tokio::test]
async fn at_rest_the_credential_is_ciphertext_while_url_and_scheme_are_clear() {
    let dir = tempfile::tempdir().unwrap();
    let raw = MemoryPushStore::new(tenant("acme"));
    let outbox = Outbox::new(
        Arc::new(raw.clone()),
        vec![with_token(destination(
            "ops",
            "https://hooks.example.com/in",
        ))],
    )
    .sealed(key_ring(&dir), tenant("acme"));
    let run = RunId::new();
    outbox.open(run).await.unwrap();

    let at_rest = raw.get(run, "operator:ops").await.unwrap().unwrap();
    assert_eq!(at_rest.url, "https://hooks.example.com/in");
    assert_eq!(at_rest.id, "operator:ops");
    let auth = at_rest.authentication.unwrap();
    assert_eq!(auth.scheme, "Bearer");
    let stored = auth.credentials.expose();
    assert!(!stored.contains(TOKEN) && !stored.contains("very-secret"));
    assert!(
        stored.len() > TOKEN.len() + 40,
        "an envelope, not the token"
    );

    // Read back through the sealed store: opened.
    let opened = outbox
        .store()
        .get(run, "operator:ops")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(opened.authentication.unwrap().credentials.expose(), TOKEN);
    let listed = outbox.store().list(run).await.unwrap();
    assert_eq!(
        listed[0]
            .authentication
            .as_ref()
            .unwrap()
            .credentials
            .expose(),
        TOKEN
    );

    // Each put seals afresh (fresh data key and nonce): same token, different ciphertext.
    outbox.open(run).await.unwrap();
    let again = raw.get(run, "operator:ops").await.unwrap().unwrap();
    assert_ne!(again.authentication.unwrap().credentials.expose(), stored);
}

fn config(id: &str, run: RunId, token: bool) -> PushConfig {
    let d = destination(id, "https://hooks.example.com/in");
    PushConfig {
        id: id.into(),
        run,
        url: d.url.clone(),
        authentication: if token {
            with_token(d).authentication
        } else {
            None
        },
    }
}

#[tokio::test]
async fn a_credential_copied_to_another_row_or_tampered_does_not_open() {
    let dir = tempfile::tempdir().unwrap();
    let keys = key_ring(&dir);
    let raw = MemoryPushStore::new(tenant("acme"));
    let sealed = SealedPush::new(Arc::new(raw.clone()), keys.clone());
    let at = Utc::now();
    let (run, other_run) = (RunId::new(), RunId::new());
    sealed
        .put(&config("operator:a", run, true), Seq(1), at)
        .await
        .unwrap();
    sealed
        .put(&config("operator:b", run, false), Seq(1), at)
        .await
        .unwrap();
    sealed
        .put(&config("operator:a", other_run, false), Seq(1), at)
        .await
        .unwrap();

    let stolen = raw
        .get(run, "operator:a")
        .await
        .unwrap()
        .unwrap()
        .authentication;
    assert!(stolen.is_some());
    // Copied at rest into another registration of the run, and into the same id of another run.
    for (r, id) in [(run, "operator:b"), (other_run, "operator:a")] {
        let mut c = config(id, r, false);
        c.authentication = stolen.clone();
        raw.put(&c, Seq(1), at).await.unwrap();
        let read = sealed.get(r, id).await.unwrap().unwrap();
        assert!(
            read.authentication.is_none(),
            "{r}/{id} opened a copied credential"
        );
    }
    // Into the same run and id of another tenant over the same database and key ring.
    let globex_raw = raw.for_tenant(tenant("globex"));
    let globex = SealedPush::new(Arc::new(globex_raw.clone()), keys.clone());
    let mut c = config("operator:a", run, false);
    c.authentication = stolen.clone();
    globex_raw.put(&c, Seq(1), at).await.unwrap();
    assert!(
        globex
            .get(run, "operator:a")
            .await
            .unwrap()
            .unwrap()
            .authentication
            .is_none()
    );

    // The original row still opens.
    let original = sealed.get(run, "operator:a").await.unwrap().unwrap();
    assert_eq!(original.authentication.unwrap().credentials.expose(), TOKEN);

    // Tampered at rest: one character of the envelope changed.
    let mut tampered = stolen.clone().unwrap();
    let mut text = tampered.credentials.expose().to_owned();
    let last = text.pop().unwrap();
    text.push(if last == 'A' { 'B' } else { 'A' });
    tampered.credentials = text.into();
    let mut c = config("operator:a", run, false);
    c.authentication = Some(tampered);
    raw.put(&c, Seq(1), at).await.unwrap();
    assert!(
        sealed
            .get(run, "operator:a")
            .await
            .unwrap()
            .unwrap()
            .authentication
            .is_none()
    );

    // An envelope of an unknown version reads as absent too (and never as the raw text).
    let mut c = config("operator:a", run, false);
    c.authentication = with_token(destination("x", "https://x.example")).authentication;
    c.authentication.as_mut().unwrap().credentials = "AgAAAA".to_owned().into(); // version 2
    raw.put(&c, Seq(1), at).await.unwrap();
    assert!(
        sealed
            .get(run, "operator:a")
            .await
            .unwrap()
            .unwrap()
            .authentication
            .is_none()
    );
}

#[tokio::test]
async fn a_destroyed_scope_reads_as_absent_and_parks_while_other_tenants_keep_flowing() {
    let rx = Receiver::start().await;
    let dir = tempfile::tempdir().unwrap();
    let keys = key_ring(&dir);
    let acme_raw = MemoryPushStore::new(tenant("acme"));
    let globex_raw = acme_raw.for_tenant(tenant("globex"));
    let start = Utc::now();
    let settings = DeliverySettings {
        backoff: Backoff {
            base: Duration::from_secs(1),
            cap: Duration::from_secs(10),
            max_attempts: 3,
        },
        ..DeliverySettings::default()
    };
    let mut sides = Vec::new();
    for (raw, name) in [(acme_raw.clone(), "acme"), (globex_raw.clone(), "globex")] {
        let journal = journal(&tenant(name));
        let outbox = Outbox::new(
            Arc::new(raw),
            vec![with_token(destination(
                "ops",
                &rx.url(&format!("/auth/{name}")),
            ))],
        )
        .with_clock(Arc::new(ManualClock::new(start)))
        .sealed(keys.clone(), tenant(name));
        let worker = DeliveryWorker::new(
            &outbox,
            Arc::new(journal.clone()),
            transport(Duration::from_secs(5)),
        )
        .with_settings(settings);
        let run = run_with_notes(&journal, 1, start).await;
        outbox.open(run).await.unwrap();
        sides.push((outbox, worker, journal, run));
    }
    keys.destroy(&SealedPush::scope_of(&tenant("acme")))
        .await
        .unwrap();

    let (acme, globex) = (&sides[0], &sides[1]);
    let read = acme
        .0
        .store()
        .get(acme.3, "operator:ops")
        .await
        .unwrap()
        .unwrap();
    assert!(
        read.authentication.is_none(),
        "a destroyed scope reads as absent"
    );
    let read = globex
        .0
        .store()
        .get(globex.3, "operator:ops")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(read.authentication.unwrap().credentials.expose(), TOKEN);

    let mut at = start;
    for round in 0..6 {
        // globex keeps writing records while acme's registration fails its way to the park.
        globex
            .2
            .note(globex.3, &format!("round {round}"), at)
            .await
            .unwrap();
        acme.1.run_once(at, 10).await.unwrap();
        globex.1.run_once(at, 10).await.unwrap();
        at += chrono::Duration::seconds(30);
    }
    let parked = acme.0.store().parked(10).await.unwrap();
    assert_eq!(parked.len(), 1);
    assert_eq!(parked[0].next_seq, Seq(1));
    assert!(parked[0].last_error.as_deref().unwrap().contains("401"));
    assert_eq!(
        rx.hits("/auth/acme").len(),
        3,
        "three attempts, then parked"
    );
    assert!(
        rx.hits("/auth/acme")
            .iter()
            .all(|h| h.header("authorization").is_none())
    );

    assert!(globex.0.store().parked(10).await.unwrap().is_empty());
    let hits = rx.hits("/auth/globex");
    assert_eq!(hits.len(), 2 + 6, "every globex record, once");
    assert!(
        hits.iter()
            .all(|h| h.header("authorization").as_deref() == Some(&format!("Bearer {TOKEN}")[..]))
    );
}

#[tokio::test]
async fn a_key_ring_that_is_down_fails_reads_and_never_parks() {
    let rx = Receiver::start().await;
    let keys = TestKeyRing::new();
    let raw = MemoryPushStore::new(tenant("acme"));
    let journal = journal(&tenant("acme"));
    let at = Utc::now();
    let outbox = Outbox::new(
        Arc::new(raw.clone()),
        vec![with_token(destination("ops", &rx.url("/auth/acme")))],
    )
    .with_clock(Arc::new(ManualClock::new(at)))
    .sealed(Arc::new(keys.clone()), tenant("acme"));
    let worker = DeliveryWorker::new(
        &outbox,
        Arc::new(journal.clone()),
        transport(Duration::from_secs(5)),
    );
    let run = run_with_notes(&journal, 0, at).await;
    outbox.open(run).await.unwrap();

    keys.set_down(true);
    assert!(matches!(
        outbox.store().get(run, "operator:ops").await,
        Err(StoreError::Unavailable { .. })
    ));
    assert!(matches!(
        worker.run_once(at, 10).await,
        Err(StoreError::Unavailable { .. })
    ));
    assert!(rx.all_hits().is_empty());
    assert!(raw.parked(10).await.unwrap().is_empty());

    keys.set_down(false);
    let after_lease = at + chrono::Duration::from_std(worker.settings().lease).unwrap();
    let sweep = worker.run_once(after_lease, 10).await.unwrap();
    assert_eq!(sweep.delivered, 1);
    assert_eq!(
        rx.hits("/auth/acme")[0].header("authorization").unwrap(),
        format!("Bearer {TOKEN}")
    );
}
