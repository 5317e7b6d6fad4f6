//! Runs through the HTTP API with the push outbox wired by the composition root, end to end
//! against a real local webhook receiver: memory and Postgres (sealed with the
//! local key ring). Postgres tests need `DATABASE_URL` and fail loudly without it.

use crate::common;
use crate::push_support;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use common::TestApp;
use crewbus::cli::PushCommand;
use crewbus::client::uuid_of;
use crewbus::config::Config;
use crewbus::push::{
    AuthenticationSettings, DestinationSettings, KeyRingSettings, MasterKey, PushRuntime,
    SecretSource,
};
use crewbus::push_commands::run_push_command;
use crewbus_domain::{BusError, StoreError, TenantId, Uuid};
use crewbus_memory::ManualClock;
use push_support::{Hit, KEY_NEW, KEY_OLD, Receiver, TOKEN};
use serde_json::Value;

/// Secrets handed to the configuration in files (never inline), and the key ring's files.
struct Secrets {
    dir: tempfile::TempDir,
}

impl Secrets {
    fn new() -> Secrets {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("token"), TOKEN).unwrap();
        std::fs::write(dir.path().join("whsec"), KEY_OLD).unwrap();
        std::fs::write(dir.path().join("whsec-new"), KEY_NEW).unwrap();
        std::fs::write(
            dir.path().join("master"),
            MasterKey::generate().to_base64().as_str(),
        )
        .unwrap();
        Secrets { dir }
    }

    fn file(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn key_ring(&self) -> KeyRingSettings {
        KeyRingSettings {
            master_key_env: None,
            master_key_file: Some(self.file("master")),
            dir: self.dir.path().join("keys"),
        }
    }
}

fn source(path: &Path) -> SecretSource {
    SecretSource {
        env: None,
        file: Some(path.to_owned()),
    }
}

/// The test configuration with one destination `ops` at `url` (bearer token and signing key from
/// files) and a fast worker.
fn push_config(secrets: &Secrets, url: &str) -> Config {
    let mut c = common::test_config();
    c.push.destinations = vec![DestinationSettings {
        name: "ops".into(),
        url: url.into(),
        authentication: Some(AuthenticationSettings {
            scheme: "Bearer".into(),
            credentials: source(&secrets.file("token")),
        }),
        signing_keys: vec![source(&secrets.file("whsec"))],
    }];
    c.push.poll_ms = 10;
    c.push.idle_ms = 20;
    c.push.backoff_base_ms = 20;
    c.push.backoff_cap_ms = 100;
    c
}

/// The events `path` got for `run`, in arrival order.
fn run_hits(rx: &Receiver, path: &str, run: Uuid) -> Vec<Hit> {
    let suffix = format!("/runs/{run}");
    rx.hits(path)
        .into_iter()
        .filter(|h| h.json()["source"].as_str().unwrap().ends_with(&suffix))
        .collect()
}

/// Waits until `path` got at least `n` events of `run`, moving the manual clock on so idle and
/// retrying registrations come due again (the worker takes its time from the app's clock). 20 s
/// at most.
async fn hits_at_least(app: &TestApp, rx: &Receiver, path: &str, run: Uuid, n: usize) -> Vec<Hit> {
    let end = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let hits = run_hits(rx, path, run);
        if hits.len() >= n {
            return hits;
        }
        assert!(
            tokio::time::Instant::now() < end,
            "{path} got {} of {n} events",
            hits.len()
        );
        app.advance(Duration::from_millis(50));
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn seq_of(hit: &Hit) -> u64 {
    hit.json()["subject"].as_str().unwrap().parse().unwrap()
}

fn kind_of(hit: &Hit) -> String {
    hit.json()["type"]
        .as_str()
        .unwrap()
        .trim_start_matches("dev.crewbus.run.")
        .to_owned()
}

fn verify(hit: &Hit) {
    standardwebhooks::Webhook::new(KEY_OLD)
        .unwrap()
        .verify(&hit.body, &hit.headers)
        .expect("a valid Standard Webhooks signature");
    assert_eq!(
        hit.header("authorization").as_deref(),
        Some(format!("Bearer {TOKEN}").as_str())
    );
}

/// Admit → send/confirm/acknowledge in runs → seal; records through the API; every record
/// arrives at the receiver in order, signed; no credential anywhere in the API's answers.
async fn admit_records_and_events_arrive(app: TestApp, rx: Receiver) {
    let path = "/auth/ops";
    let alice = &app.agents[0];
    let bob = &app.agents[1];
    let (status, admitted) = alice
        .client
        .call(reqwest::Method::POST, "/v1/runs", None)
        .await
        .unwrap();
    assert_eq!(status, 201, "{admitted}");
    let run = uuid_of(&admitted["id"]);
    assert_eq!(admitted["agent"], alice.id.to_string());
    assert_eq!(admitted["last_seq"], 1);
    assert!(admitted["outcome"].is_null());

    let conv = alice
        .client
        .create_conversation("runs", &[bob.id])
        .await
        .unwrap();
    let conv = uuid_of(&conv["id"]);
    let sent = alice
        .client
        .send_in(conv, "r-1", "hello in a run", Some(run))
        .await
        .unwrap();
    let message = uuid_of(&sent["message"]["id"]);
    let got = common::fetch_n(bob, 1).await;
    bob.client
        .confirm(&[uuid_of(&got[0]["delivery_id"])])
        .await
        .unwrap();

    // Bob cannot act in alice's run (same team: 403), another team cannot see it (404).
    let denied = bob
        .client
        .send_in(conv, "b-1", "in alice's run", Some(run))
        .await
        .unwrap_err();
    assert_eq!(denied.status, 403);
    let (status, _) = bob
        .client
        .call(
            reqwest::Method::GET,
            &format!("/v1/runs/{run}/records"),
            None,
        )
        .await
        .unwrap();
    assert_eq!(status, 403);
    let stranger = app.other_team_agent("mallory").await;
    for (method, p) in [
        (reqwest::Method::GET, format!("/v1/runs/{run}/records")),
        (reqwest::Method::GET, format!("/v1/runs/{run}")),
        (reqwest::Method::POST, format!("/v1/runs/{run}/resume")),
    ] {
        let (status, v) = stranger.client.call(method, &p, None).await.unwrap();
        assert_eq!(status, 404, "{p}: {v}");
    }
    let (status, _) = stranger
        .client
        .call(
            reqwest::Method::POST,
            &format!("/v1/runs/{run}/seal"),
            Some(serde_json::json!({"outcome": "failed", "reason": "x"})),
        )
        .await
        .unwrap();
    assert_eq!(status, 404);

    let records = alice.client.run_records(run, 1, 100).await.unwrap();
    let kinds: Vec<&str> = records
        .iter()
        .map(|r| r["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["run_admitted", "message_sent"]);
    assert_eq!(records[1]["data"]["message"], message.to_string());
    assert!(
        !records[1].to_string().contains("hello in a run"),
        "no body in records"
    );

    // Bob reads the message later, acting in his own run.
    let bobs = bob.client.admit_run().await.unwrap();
    let bobs = uuid_of(&bobs["id"]);
    bob.client
        .acknowledge_in(message, Some(bobs))
        .await
        .unwrap();
    let bob_records = bob.client.run_records(bobs, 2, 10).await.unwrap();
    assert_eq!(bob_records[0]["kind"], "message_acknowledged");

    let sealed = alice
        .client
        .seal_run(run, "succeeded", "done")
        .await
        .unwrap();
    assert_eq!(sealed["outcome"], "succeeded");
    assert_eq!(sealed["last_seq"], 3);
    let again = alice.client.seal_run(run, "failed", "x").await.unwrap_err();
    assert_eq!(again.status, 409);
    let page = alice.client.run_records(run, 3, 1).await.unwrap();
    assert_eq!(page[0]["kind"], "run_sealed");
    assert_eq!(page[0]["data"]["outcome"], "succeeded");
    let bad = alice
        .client
        .call(
            reqwest::Method::GET,
            &format!("/v1/runs/{run}/records?limit=0"),
            None,
        )
        .await
        .unwrap();
    assert_eq!(bad.0, 400);

    let alices = hits_at_least(&app, &rx, path, run, 3).await;
    let seqs: Vec<u64> = alices.iter().map(seq_of).collect();
    assert_eq!(seqs, [1, 2, 3], "in journal order, each once");
    let kinds: Vec<String> = alices.iter().map(kind_of).collect();
    assert_eq!(kinds, ["run_admitted", "message_sent", "run_sealed"]);
    let bobs_hits = hits_at_least(&app, &rx, path, bobs, 2).await;
    assert_eq!(kind_of(&bobs_hits[1]), "message_acknowledged");
    for hit in alices.iter().chain(&bobs_hits) {
        verify(hit);
        assert!(!String::from_utf8_lossy(&hit.body).contains("hello in a run"));
    }
    // The terminal record acknowledged: alice's registration is deleted.
    let store = app
        .bus
        .push()
        .expect("push is wired")
        .outbox
        .store()
        .clone();
    common::eventually("alice's registration deleted", 10, || {
        let store = store.clone();
        async move {
            store
                .list(crewbus_domain::RunId(run))
                .await
                .unwrap()
                .is_empty()
                .then_some(())
        }
    })
    .await;

    // No credential in any API answer.
    let mut answers = vec![admitted.to_string(), sealed.to_string()];
    for p in [
        "/openapi.json",
        "/health",
        "/v1/me",
        &format!("/v1/runs/{bobs}"),
    ] {
        let (_, v): (u16, Value) = bob
            .client
            .call(reqwest::Method::GET, p, None)
            .await
            .unwrap();
        answers.push(v.to_string());
    }
    answers.push(serde_json::to_string(&bob_records).unwrap());
    for a in &answers {
        assert!(
            !a.contains(TOKEN) && !a.contains("very-secret"),
            "credential leaked: {a}"
        );
        assert!(!a.contains(&KEY_OLD[6..]), "signing key leaked");
    }
    let openapi = &answers[2];
    for p in [
        "/v1/runs",
        "/v1/runs/{id}/resume",
        "/v1/runs/{id}/seal",
        "/v1/runs/{id}/records",
    ] {
        assert!(openapi.contains(p), "OpenAPI lacks {p}");
    }
    app.finish_test().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_admit_records_and_signed_events_arrive_in_order() {
    let rx = Receiver::start().await;
    let secrets = Secrets::new();
    let config = push_config(&secrets, &rx.url("/auth/ops"));
    let app = TestApp::start_with(
        config.clone(),
        crewbus::compose::memory_config(&config),
        &["alice", "bob"],
    )
    .await;
    assert!(
        !app.bus.push().unwrap().outbox.is_sealed(),
        "memory: no key ring configured"
    );
    admit_records_and_events_arrive(app, rx).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_admit_records_and_signed_events_arrive_in_order_sealed_at_rest() {
    let rx = Receiver::start().await;
    let secrets = Secrets::new();
    let mut config = push_config(&secrets, &rx.url("/auth/ops"));
    config.push.key_ring = Some(secrets.key_ring());
    let app = TestApp::postgres_with("runs_push::admit", config, &["alice", "bob"]).await;
    assert!(app.bus.push().unwrap().outbox.is_sealed());
    // A run's registration at rest: URL and scheme clear, the credential sealed.
    let run = app.agents[0].client.admit_run().await.unwrap();
    let run = uuid_of(&run["id"]);
    let (url, scheme, credentials): (String, String, String) = sqlx::query_as(
        "SELECT url, auth_scheme, auth_credentials FROM push_registrations WHERE run_id = $1",
    )
    .bind(run)
    .fetch_one(app.db.as_ref().unwrap().pool())
    .await
    .unwrap();
    assert_eq!(url, rx.url("/auth/ops"));
    assert_eq!(scheme, "Bearer");
    assert!(!credentials.contains(TOKEN) && !credentials.contains("very-secret"));
    app.agents[0]
        .client
        .seal_run(run, "cancelled", "only checking the store")
        .await
        .unwrap();
    let hits = hits_at_least(&app, &rx, "/auth/ops", run, 2).await;
    hits.iter().for_each(verify);
    admit_records_and_events_arrive(app, rx).await;
}

/// An admission whose push registration fails is refused (retryable 503) and the run is sealed
/// `failed` with the reason.
async fn admission_refused(alice: &crewbus::client::ApiClient) {
    let (status, body) = alice
        .call(reqwest::Method::POST, "/v1/runs", None)
        .await
        .unwrap();
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["code"], "unavailable");
    assert!(!body.to_string().contains(TOKEN));
}

/// The run whose admission was refused is sealed `failed` with the reason.
async fn sealed_failed(
    alice: &crewbus::client::ApiClient,
    journal: &dyn crewbus_ports::Journal,
    run: crewbus_domain::RunId,
) {
    let found = journal.run(run).await.unwrap();
    assert!(matches!(
        found.sealed,
        Some((_, crewbus_domain::RunOutcome::Failed))
    ));
    let records = journal.read(run, crewbus_domain::Seq(1), 10).await.unwrap();
    assert_eq!(records.len(), 2);
    match &records[1].kind {
        crewbus_domain::RecordKind::RunSealed { outcome, reason } => {
            assert_eq!(*outcome, crewbus_domain::RunOutcome::Failed);
            assert!(reason.contains("push registration failed"), "{reason}");
        }
        other => panic!("expected the seal, got {other:?}"),
    }
    // The run is sealed: it cannot be resumed.
    let (status, _) = alice
        .call(
            reqwest::Method::POST,
            &format!("/v1/runs/{}/resume", run.0),
            None,
        )
        .await
        .unwrap();
    assert_eq!(status, 409);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_a_failed_open_fails_the_admission_and_seals_the_run_failed() {
    let config = common::test_config();
    let clock = ManualClock::new(chrono::Utc::now());
    let (composed, _) = crate::common::memory_with_clock(&config, Arc::new(clock.clone())).unwrap();
    let minted: Arc<std::sync::Mutex<Option<crewbus_domain::RunId>>> = Arc::default();
    let mut store = crewbus_ports::MockPushStore::new();
    store
        .expect_tenant()
        .return_const(TenantId::default_tenant());
    {
        let minted = Arc::clone(&minted);
        store.expect_put().returning(move |config, _, _| {
            *minted.lock().unwrap() = Some(config.run);
            Err(StoreError::unavailable("push store (test)"))
        });
    }
    store.expect_due().returning(|_, _, _| Ok(Vec::new()));
    let rx = Receiver::start().await;
    let outbox = crewbus::push::Outbox::new(
        Arc::new(store),
        vec![push_support::with_token(push_support::destination(
            "ops",
            &rx.url("/auth/ops"),
        ))],
    );
    let worker = crewbus::push::DeliveryWorker::new(
        &outbox,
        composed.journal.clone(),
        push_support::transport(Duration::from_secs(5)),
    );
    let bus =
        composed
            .bus
            .clone()
            .with_push(PushRuntime::new(outbox, worker, Duration::from_millis(10)));
    let server = crewbus::server::Server::start(
        bus.clone(),
        config.listen,
        crewbus::shutdown::Shutdown::new(),
    )
    .await
    .unwrap();
    let team = bus.add_team("t", None, None).await.unwrap();
    let new = bus.add_agent(team.id, "alice").await.unwrap();
    let client = crewbus::client::ApiClient::new(server.url(), Some(new.token.clone()));
    admission_refused(&client).await;
    let run = minted.lock().unwrap().expect("the admission minted a run");
    sealed_failed(&client, composed.journal.as_ref(), run).await;
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_failed_open_fails_the_admission_and_seals_the_run_failed() {
    let rx = Receiver::start().await;
    let secrets = Secrets::new();
    let mut config = push_config(&secrets, &rx.url("/auth/ops"));
    config.push.key_ring = Some(secrets.key_ring());
    let app = TestApp::postgres_with("runs_push::failed_open", config, &["alice"]).await;
    let pool = app.db.as_ref().unwrap().pool().clone();
    // The push store breaks (its table is gone): registration fails after RunAdmitted.
    sqlx::query("ALTER TABLE push_registrations RENAME TO push_registrations_gone")
        .execute(&pool)
        .await
        .unwrap();
    let before: Vec<Uuid> = sqlx::query_scalar("SELECT id FROM runs")
        .fetch_all(&pool)
        .await
        .unwrap();
    assert!(before.is_empty());
    admission_refused(&app.agents[0].client).await;
    let run: Uuid = sqlx::query_scalar("SELECT id FROM runs")
        .fetch_one(&pool)
        .await
        .unwrap();
    sealed_failed(
        &app.agents[0].client,
        app.journal.as_ref(),
        crewbus_domain::RunId(run),
    )
    .await;
    sqlx::query("ALTER TABLE push_registrations_gone RENAME TO push_registrations")
        .execute(&pool)
        .await
        .unwrap();
    app.finish_test().await;
}

/// Resume never rewinds a receiver: after records 1..2 were acknowledged, a resume registers the
/// destination again and only the new record (3, `run_resumed`) follows.
async fn resume_never_rewinds(app: TestApp, rx: Receiver) {
    let path = "/auth/ops";
    let alice = &app.agents[0];
    let bob = &app.agents[1];
    let run = uuid_of(&alice.client.admit_run().await.unwrap()["id"]);
    let conv = alice
        .client
        .create_conversation("c", &[bob.id])
        .await
        .unwrap();
    alice
        .client
        .send_in(uuid_of(&conv["id"]), "r-1", "hi", Some(run))
        .await
        .unwrap();
    hits_at_least(&app, &rx, path, run, 2).await;
    // Bob may not resume alice's run; a stranger does not see it.
    let (status, _) = bob
        .client
        .call(
            reqwest::Method::POST,
            &format!("/v1/runs/{run}/resume"),
            None,
        )
        .await
        .unwrap();
    assert_eq!(status, 403);
    let resumed = alice.client.resume_run(run).await.unwrap();
    assert_eq!(resumed["last_seq"], 3);
    let resumed_again = alice.client.resume_run(run).await.unwrap();
    assert_eq!(resumed_again["last_seq"], 4);
    let hits = hits_at_least(&app, &rx, path, run, 4).await;
    let seqs: Vec<u64> = hits.iter().map(seq_of).collect();
    assert_eq!(seqs, [1, 2, 3, 4], "a resume re-sent acknowledged records");
    assert_eq!(kind_of(&hits[2]), "run_resumed");
    hits.iter().for_each(verify);
    // Same webhook-id per record, never reused across records.
    let ids: std::collections::HashSet<String> = hits
        .iter()
        .map(|h| h.header("webhook-id").unwrap())
        .collect();
    assert_eq!(ids.len(), 4);
    alice.client.seal_run(run, "succeeded", "").await.unwrap();
    let sealed = alice.client.resume_run(run).await.unwrap_err();
    assert_eq!(sealed.status, 409);
    let unknown = alice.client.resume_run(Uuid::new_v4()).await.unwrap_err();
    assert_eq!(unknown.status, 404);
    app.finish_test().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_resume_never_rewinds_the_cursor() {
    let rx = Receiver::start().await;
    let secrets = Secrets::new();
    let config = push_config(&secrets, &rx.url("/auth/ops"));
    let app = TestApp::start_with(
        config.clone(),
        crewbus::compose::memory_config(&config),
        &["alice", "bob"],
    )
    .await;
    resume_never_rewinds(app, rx).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_resume_never_rewinds_the_cursor() {
    let rx = Receiver::start().await;
    let secrets = Secrets::new();
    let mut config = push_config(&secrets, &rx.url("/auth/ops"));
    config.push.key_ring = Some(secrets.key_ring());
    let app = TestApp::postgres_with("runs_push::resume", config, &["alice", "bob"]).await;
    resume_never_rewinds(app, rx).await;
}

/// A 410 parks the registration; `push parked` lists it (no credential, URL without query),
/// `push unpark` resumes it from its cursor, a second unpark finds nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_push_parked_and_unpark_through_the_cli_functions() {
    let rx = Receiver::start().await;
    rx.script("/ok/parked", [(410, None)]);
    let secrets = Secrets::new();
    let config = push_config(&secrets, &rx.url("/ok/parked?sig=query-secret"));
    let app = TestApp::start_with(
        config.clone(),
        crewbus::compose::memory_config(&config),
        &["alice"],
    )
    .await;
    let alice = &app.agents[0];
    let run = uuid_of(&alice.client.admit_run().await.unwrap()["id"]);

    let parked = {
        let end = tokio::time::Instant::now() + Duration::from_secs(20);
        loop {
            let out = run_push_command(&app.bus, &PushCommand::Parked { limit: 10 }, true)
                .await
                .unwrap();
            let v: Value = serde_json::from_str(&out.text).unwrap();
            if !v.as_array().unwrap().is_empty() {
                break v;
            }
            assert!(tokio::time::Instant::now() < end, "never parked");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    assert_eq!(parked[0]["run"], run.to_string());
    assert_eq!(parked[0]["id"], "operator:ops");
    assert_eq!(parked[0]["next_seq"], 1);
    assert_eq!(parked[0]["parked"], true);
    assert_eq!(parked[0]["authentication"], "Bearer");
    let human = run_push_command(&app.bus, &PushCommand::Parked { limit: 10 }, false)
        .await
        .unwrap();
    let listed = run_push_command(&app.bus, &PushCommand::List { run }, false)
        .await
        .unwrap();
    for text in [&human.text, &listed.text, &parked.to_string()] {
        assert!(text.contains("operator:ops"), "{text}");
        assert!(
            !text.contains(TOKEN) && !text.contains("very-secret"),
            "{text}"
        );
        assert!(
            !text.contains("query-secret"),
            "URL printed with its query: {text}"
        );
    }
    assert!(listed.text.contains(&rx.url("/ok/parked")));
    assert!(matches!(
        run_push_command(&app.bus, &PushCommand::Parked { limit: 0 }, false).await,
        Err(BusError::Invalid { .. })
    ));

    let unpark = PushCommand::Unpark {
        run,
        id: "operator:ops".into(),
    };
    let out = run_push_command(&app.bus, &unpark, false).await.unwrap();
    assert!(out.success, "{}", out.text);
    // Resumes from its cursor: record 1 arrives (after the 410), then nothing is parked.
    let hits = hits_at_least(&app, &rx, "/ok/parked", run, 2).await;
    assert_eq!(seq_of(&hits[0]), 1);
    assert_eq!(
        seq_of(&hits[1]),
        1,
        "the same record again after un-parking"
    );
    assert_eq!(hits[0].header("webhook-id"), hits[1].header("webhook-id"));
    let out = run_push_command(&app.bus, &unpark, true).await.unwrap();
    assert!(!out.success);
    assert_eq!(
        serde_json::from_str::<Value>(&out.text).unwrap()["unparked"],
        false
    );
    app.finish_test().await;
}

/// `crewbus push parked|unpark|list` — the binary, against a Postgres deployment sealed with the
/// key ring (configuration file with secrets from files).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_push_commands_through_the_binary() {
    let rx = Receiver::start().await;
    rx.script("/ok/bin", [(410, None)]);
    let secrets = Secrets::new();
    let mut config = push_config(&secrets, &rx.url("/ok/bin?sig=query-secret"));
    config.push.key_ring = Some(secrets.key_ring());
    let app = TestApp::postgres_with("runs_push::cli", config, &["alice"]).await;
    let run = uuid_of(&app.agents[0].client.admit_run().await.unwrap()["id"]);
    let pool = app.db.as_ref().unwrap().pool().clone();
    common::eventually("the registration parked", 20, || {
        let pool = pool.clone();
        async move {
            let parked: Option<bool> =
                sqlx::query_scalar("SELECT parked FROM push_registrations WHERE run_id = $1")
                    .bind(run)
                    .fetch_optional(&pool)
                    .await
                    .unwrap();
            (parked == Some(true)).then_some(())
        }
    })
    .await;

    let base = std::env::var("DATABASE_URL").expect("DATABASE_URL must be set for Postgres tests");
    let (server, _) = base.rsplit_once('/').unwrap();
    let db_url = format!("{server}/{}", app.db.as_ref().unwrap().name());
    let kr = secrets.key_ring();
    let toml = format!(
        "[database]\nurl = {db_url:?}\n\n[push.key_ring]\nmaster_key_file = {:?}\ndir = {:?}\n\n\
         [[push.destinations]]\nname = \"ops\"\nurl = {:?}\n\
         authentication = {{ scheme = \"Bearer\", credentials = {{ file = {:?} }} }}\n\
         signing_keys = [{{ file = {:?} }}]\n",
        kr.master_key_file.unwrap(),
        kr.dir,
        rx.url("/ok/bin?sig=query-secret"),
        secrets.file("token"),
        secrets.file("whsec"),
    );
    let config_file = secrets.file("crewbus.toml");
    std::fs::write(&config_file, toml).unwrap();
    let crewbus = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_crewbus"))
            .arg("--config")
            .arg(&config_file)
            .args(args)
            .env_remove("CREWBUS_DATABASE__URL")
            .env_remove("CREWBUS_CONFIG")
            .env("CREWBUS_LOG__LEVEL", "debug")
            .output()
            .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            !text.contains(TOKEN) && !text.contains("very-secret"),
            "credential printed: {text}"
        );
        assert!(!text.contains("query-secret"), "URL query printed: {text}");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    };
    let (code, out) = crewbus(&["--json", "push", "parked"]);
    assert_eq!(code, Some(0), "{out}");
    let v: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(v[0]["run"], run.to_string());
    assert_eq!(v[0]["id"], "operator:ops");
    let (code, out) = crewbus(&["push", "list", "--run", &run.to_string()]);
    assert_eq!(code, Some(0));
    assert!(
        out.contains("operator:ops") && out.contains("Bearer"),
        "{out}"
    );
    let run_s = run.to_string();
    let unpark = [
        "push",
        "unpark",
        "--run",
        run_s.as_str(),
        "--id",
        "operator:ops",
    ];
    let (code, out) = crewbus(&unpark);
    assert_eq!(code, Some(0), "{out}");
    let (code, _) = crewbus(&unpark);
    assert_eq!(code, Some(1), "nothing left to un-park");
    // The running server's worker delivers it again from the cursor.
    let hits = hits_at_least(&app, &rx, "/ok/bin", run, 2).await;
    assert_eq!(seq_of(&hits[1]), 1);
    verify_signature_only(&hits[1]);
    app.finish_test().await;
}

fn verify_signature_only(hit: &Hit) {
    standardwebhooks::Webhook::new(KEY_OLD)
        .unwrap()
        .verify(&hit.body, &hit.headers)
        .expect("a valid Standard Webhooks signature");
}

/// The composition root seals a Postgres push store, or refuses without a key ring unless
/// `allow_unsealed`; memory needs no key ring; with nothing configured there is no outbox.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_composition_root_refuses_an_unsealed_postgres_push_store() {
    let db = crewbus_benches::kit::postgres::database("runs_push::refuse").await;
    let secrets = Secrets::new();
    let clock: Arc<dyn crewbus_ports::Clock> = Arc::new(ManualClock::new(chrono::Utc::now()));
    let config = push_config(&secrets, "https://hooks.example.com/in");
    let compose = |c: Config| {
        let pool = db.pool().clone();
        let clock = clock.clone();
        async move { crewbus::compose::postgres_with_pool(&c, pool, clock).await }
    };
    assert!(matches!(
        compose(config.clone()).await.err(),
        Some(BusError::Invalid { .. })
    ));
    let mut allowed = config.clone();
    allowed.push.allow_unsealed = true;
    let composed = compose(allowed).await.unwrap();
    assert!(!composed.bus.push().unwrap().outbox.is_sealed());
    let mut sealed = config.clone();
    sealed.push.key_ring = Some(secrets.key_ring());
    let composed = compose(sealed).await.unwrap();
    assert!(composed.bus.push().unwrap().outbox.is_sealed());
    assert!(
        composed.description.contains("credentials sealed"),
        "{}",
        composed.description
    );
    // Nothing configured: no outbox (runs still work), nothing to refuse.
    let composed = compose(common::test_config()).await.unwrap();
    assert!(composed.bus.push().is_none());
    // Memory: no key ring needed.
    let (composed, _) = crate::common::memory_with_clock(&config, clock.clone()).unwrap();
    assert!(!composed.bus.push().unwrap().outbox.is_sealed());
    // A bad secret source is an error, never a panic, and never echoes a secret.
    let mut missing = config.clone();
    missing.push.destinations[0].signing_keys = vec![source(&secrets.file("nope"))];
    assert!(matches!(
        crate::common::memory_with_clock(&missing, clock.clone()).err(),
        Some(BusError::Invalid { .. })
    ));
    assert!(!format!("{config:?}").contains(TOKEN));
    db.passed().await;
}
