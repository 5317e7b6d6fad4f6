//! Scenarios every backend combination runs: the app on 127.0.0.1:0 driven through its HTTP
//! API, with a manual clock.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use crewbus::client::uuid_of;
use crewbus_domain::{DeliveryId, RunId, Uuid};
use reqwest::Method;
use serde_json::json;

use super::*;

pub async fn three_agents_converse_and_every_recipient_gets_every_message_exactly_once(
    app: &TestApp,
) {
    let [alice, bob, carol] = &app.agents[..] else {
        unreachable!()
    };
    let conv = alice
        .client
        .create_conversation("plan", &[bob.id, carol.id])
        .await
        .unwrap();
    let conv_id = uuid_of(&conv["id"]);
    assert_eq!(conv["members"].as_array().unwrap().len(), 3);
    assert_eq!(conv["backend"], app.team.body_backend.as_str());

    let per_agent = 10;
    let mut sent: HashMap<Uuid, Uuid> = HashMap::new(); // message → sender
    for k in 0..per_agent {
        for a in &app.agents {
            let v = a
                .client
                .send(
                    conv_id,
                    &format!("{}-{k}", a.name),
                    &format!("{} says {k}", a.name),
                )
                .await
                .unwrap();
            assert_eq!(v["created"], true);
            sent.insert(uuid_of(&v["message"]["id"]), a.id);
        }
    }
    // Each agent receives the others' messages, confirming as it goes.
    for a in &app.agents {
        let mut seen = HashSet::new();
        let want = 2 * per_agent;
        while seen.len() < want {
            let got = fetch_n(a, 1).await;
            let results = a.client.confirm(&delivery_ids(&got)).await.unwrap();
            assert!(
                results.iter().all(|r| r["outcome"] == "confirmed"),
                "{results:?}"
            );
            for d in &got {
                let m = uuid_of(&d["message"]["id"]);
                assert_ne!(sent[&m], a.id, "{} received its own message", a.name);
                assert!(seen.insert(m), "{} got a message twice", a.name);
                let body = d["body"].as_str().unwrap();
                assert!(body.contains(" says "), "{body}");
            }
        }
    }
    // Nothing comes back after confirming, even after the grace and ack wait.
    app.advance(Duration::from_secs(120));
    for a in &app.agents {
        assert!(a.client.fetch(100).await.unwrap().is_empty());
    }
    // The ledger's view: one receipt per (message, recipient), delivered once.
    for (m, sender) in &sent {
        let receipts = alice.client.receipts(*m).await.unwrap();
        assert_eq!(receipts.len(), 2, "{m}");
        for r in &receipts {
            assert_ne!(uuid_of(&r["recipient"]), *sender);
            assert!(!r["delivered_at"].is_null());
        }
    }
    // History: all 30 in seq order with bodies.
    let page = bob.client.history(conv_id, 0, 100).await.unwrap();
    let seqs: Vec<u64> = page["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["message"]["seq"].as_u64().unwrap())
        .collect();
    assert_eq!(seqs, (1..=30).collect::<Vec<u64>>());
    assert_eq!(page["next_after_seq"], 30);
}

pub async fn an_unconfirmed_fetch_is_redelivered_after_the_grace_and_never_after_confirm(
    app: &TestApp,
) {
    let [alice, bob] = &app.agents[..] else {
        unreachable!()
    };
    let conv = uuid_of(
        &alice
            .client
            .create_conversation("c", &[bob.id])
            .await
            .unwrap()["id"],
    );
    alice.client.send(conv, "r1", "hello").await.unwrap();
    let first = fetch_n(bob, 1).await;
    assert_eq!(first[0]["redelivered"], false);
    // Within the grace it is not handed out again.
    assert!(bob.client.fetch(10).await.unwrap().is_empty());
    app.advance(Duration::from_secs(31));
    let again = fetch_n(bob, 1).await;
    assert_eq!(message_ids(&again), message_ids(&first));
    assert_eq!(again[0]["redelivered"], true);
    assert_ne!(again[0]["delivery_id"], first[0]["delivery_id"]);
    // Confirming the OLD delivery id still commits the receipt once.
    let r = bob.client.confirm(&delivery_ids(&first)).await.unwrap();
    assert_eq!(r[0]["outcome"], "confirmed");
    let r = bob.client.confirm(&delivery_ids(&again)).await.unwrap();
    assert_eq!(r[0]["outcome"], "already_confirmed");
    app.advance(Duration::from_secs(120));
    assert!(bob.client.fetch(10).await.unwrap().is_empty());
    let receipts = alice.client.receipts(message_ids(&first)[0]).await.unwrap();
    assert_eq!(receipts.len(), 1);
    assert!(!receipts[0]["delivered_at"].is_null());
}

pub async fn a_crash_between_commit_and_ack_redelivers_and_is_recognised(app: &TestApp) {
    let [alice, bob] = &app.agents[..] else {
        unreachable!()
    };
    let conv = uuid_of(
        &alice
            .client
            .create_conversation("c", &[bob.id])
            .await
            .unwrap()["id"],
    );
    alice.client.send(conv, "r1", "hello").await.unwrap();
    let got = fetch_n(bob, 1).await;
    let message = message_ids(&got)[0];
    // "Crash": the receipt is committed, the process dies before the inbox ack.
    let outcomes = app
        .bus
        .ports()
        .ledger
        .confirm(
            app.team.id,
            bob.id,
            &[DeliveryId(uuid_of(&got[0]["delivery_id"]))],
            None,
            app.bus.ports().clock.now(),
        )
        .await
        .unwrap();
    assert!(matches!(
        outcomes[0],
        crewbus_domain::ConfirmOutcome::Confirmed { .. }
    ));
    let delivered_at = alice.client.receipts(message).await.unwrap()[0]["delivered_at"].clone();
    let inbox = app
        .bus
        .ports()
        .backends
        .inbox(app.team.id, &app.team.inbox)
        .await
        .unwrap();
    assert_eq!(
        inbox
            .inbox_status(&bob.recipient_key)
            .await
            .unwrap()
            .awaiting_ack,
        1
    );
    // After the ack wait the inbox hands the reference out again: the fetch recognises the
    // committed receipt, acks it, and shows bob nothing.
    app.advance(Duration::from_secs(31));
    eventually(
        "the redelivered reference recognised and acked",
        15,
        || async {
            assert!(
                bob.client.fetch(10).await.unwrap().is_empty(),
                "shown again after commit"
            );
            let status = inbox.inbox_status(&bob.recipient_key).await.unwrap();
            (status.pending == 0 && status.awaiting_ack == 0).then_some(())
        },
    )
    .await;
    let receipts = alice.client.receipts(message).await.unwrap();
    assert_eq!(receipts.len(), 1);
    assert_eq!(
        receipts[0]["delivered_at"], delivered_at,
        "delivered_at set once"
    );
    app.advance(Duration::from_secs(120));
    assert!(bob.client.fetch(10).await.unwrap().is_empty());
}

/// A request id is the caller's own: bob sending `t42-1`, which alice used in the same
/// conversation, stores a message of his (201), with her body; each one's repeat is 200 with
/// their own message, another body under it 409; each receives the other's message.
pub async fn two_agents_may_use_one_request_id(app: &TestApp) {
    let [alice, bob] = &app.agents[..] else {
        unreachable!()
    };
    let conv = uuid_of(
        &alice
            .client
            .create_conversation("t42", &[bob.id])
            .await
            .unwrap()["id"],
    );
    let path = format!("/v1/conversations/{conv}/messages");
    let send = |agent: &TestAgent, body: &str| {
        let body = json!({"request_id": "t42-1", "body": body});
        let (client, path) = (agent.client.clone(), path.clone());
        async move { client.call(Method::POST, &path, Some(body)).await.unwrap() }
    };
    let (status, alices) = send(alice, "same body").await;
    assert_eq!(
        (status, alices["created"].as_bool()),
        (201, Some(true)),
        "{alices}"
    );
    let (status, bobs) = send(bob, "same body").await;
    assert_eq!(
        (status, bobs["created"].as_bool()),
        (201, Some(true)),
        "{bobs}"
    );
    assert_eq!(uuid_of(&bobs["message"]["sender"]), bob.id);
    assert_ne!(alices["message"]["id"], bobs["message"]["id"]);
    assert_eq!(
        (&alices["message"]["seq"], &bobs["message"]["seq"]),
        (&json!(1), &json!(2))
    );
    for (agent, own) in [(alice, &alices), (bob, &bobs)] {
        let (status, again) = send(agent, "same body").await;
        assert_eq!((status, again["created"].as_bool()), (200, Some(false)));
        assert_eq!(
            again["message"]["id"], own["message"]["id"],
            "{}",
            agent.name
        );
        let (status, other) = send(agent, "another body").await;
        assert_eq!((status, other["code"].as_str()), (409, Some("conflict")));
    }
    for (agent, from) in [(alice, &bobs), (bob, &alices)] {
        let got = fetch_n(agent, 1).await;
        assert_eq!(
            got[0]["message"]["id"], from["message"]["id"],
            "{}",
            agent.name
        );
        agent.client.confirm(&delivery_ids(&got)).await.unwrap();
    }
}

pub async fn bad_input_of_every_kind_gets_a_clear_error(app: &TestApp) {
    let [alice, bob] = &app.agents[..] else {
        unreachable!()
    };
    let mallory = app.other_team_agent("mallory").await;
    let conv = uuid_of(
        &alice
            .client
            .create_conversation("c", &[bob.id])
            .await
            .unwrap()["id"],
    );
    let sent = alice.client.send(conv, "r1", "hi").await.unwrap();
    let message = uuid_of(&sent["message"]["id"]);
    let url = app.server.url();
    let http = reqwest::Client::new();

    async fn expect(
        r: Result<serde_json::Value, crewbus::client::ApiFailure>,
        status: u16,
        code: &str,
    ) {
        let e = r.expect_err("expected a failure");
        assert_eq!((e.status, e.code.as_str()), (status, code), "{}", e.message);
        assert!(!e.message.is_empty());
    }

    // Authentication.
    expect(
        app.anonymous().ok(Method::GET, "/v1/me", None).await,
        401,
        "unauthenticated",
    )
    .await;
    let forged = crewbus::client::ApiClient::new(url.clone(), Some("cbt_forged".into()));
    expect(
        forged.ok(Method::GET, "/v1/conversations", None).await,
        401,
        "unauthenticated",
    )
    .await;
    let r = http
        .get(format!("{url}/v1/me"))
        .header("authorization", "Basic abc")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    // Malformed JSON, wrong types, unknown fields, missing content type.
    for body in [
        "{",
        "[]",
        "{\"request_id\": 5, \"body\": \"x\"}",
        "{\"request_id\":\"a\",\"body\":\"x\",\"extra\":1}",
    ] {
        let r = http
            .post(format!("{url}/v1/conversations/{conv}/messages"))
            .bearer_auth(&alice.token)
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 400, "{body}");
        let v: serde_json::Value = r.json().await.unwrap();
        assert_eq!(v["code"], "invalid");
    }
    // Bad ids and pagination.
    expect(
        alice
            .client
            .ok(Method::GET, "/v1/conversations/not-a-uuid/messages", None)
            .await,
        400,
        "invalid",
    )
    .await;
    expect(
        alice
            .client
            .ok(
                Method::GET,
                &format!("/v1/conversations/{conv}/messages?limit=0"),
                None,
            )
            .await,
        400,
        "invalid",
    )
    .await;
    expect(
        alice
            .client
            .ok(
                Method::GET,
                &format!("/v1/conversations/{conv}/messages?limit=abc"),
                None,
            )
            .await,
        400,
        "invalid",
    )
    .await;
    expect(
        alice
            .client
            .ok(
                Method::GET,
                &format!("/v1/conversations/{conv}/messages?after_seq=-1"),
                None,
            )
            .await,
        400,
        "invalid",
    )
    .await;
    expect(
        alice
            .client
            .ok(
                Method::GET,
                &format!("/v1/conversations/{conv}/messages?limit=100000"),
                None,
            )
            .await,
        400,
        "invalid",
    )
    .await;
    expect(
        alice
            .client
            .ok(Method::POST, "/v1/inbox/fetch", Some(json!({"limit": 0})))
            .await,
        400,
        "invalid",
    )
    .await;
    expect(
        alice
            .client
            .ok(
                Method::POST,
                "/v1/inbox/confirm",
                Some(json!({"deliveries": []})),
            )
            .await,
        400,
        "invalid",
    )
    .await;
    expect(
        alice
            .client
            .ok(
                Method::POST,
                "/v1/inbox/confirm",
                Some(json!({"deliveries": ["x"]})),
            )
            .await,
        400,
        "invalid",
    )
    .await;
    expect(
        alice.client.send(conv, "bad id with spaces", "x").await,
        400,
        "invalid",
    )
    .await;
    // An unknown member, by id or by name, is an unknown id: 404, named (never a 400, which
    // would say the request is malformed).
    expect(
        alice
            .client
            .create_conversation("c2", &[Uuid::new_v4()])
            .await,
        404,
        "not_found",
    )
    .await;
    let e = alice
        .client
        .ok(
            Method::POST,
            "/v1/conversations",
            Some(json!({"title": "c2", "members": ["bob", "nobody-such"]})),
        )
        .await
        .expect_err("an unknown member name");
    assert_eq!((e.status, e.code.as_str()), (404, "not_found"));
    assert!(e.message.contains("nobody-such"), "{}", e.message);
    let too_many: Vec<String> = vec!["bob".to_owned(); 1001];
    expect(
        alice
            .client
            .ok(
                Method::POST,
                "/v1/conversations",
                Some(json!({"title": "c2", "members": too_many})),
            )
            .await,
        400,
        "invalid",
    )
    .await;
    // A position above 2^63 - 1 (the document's int64) is refused, not read as "the end".
    expect(
        alice
            .client
            .ok(
                Method::GET,
                &format!("/v1/conversations/{conv}/messages?after_seq=9223372036854775808"),
                None,
            )
            .await,
        400,
        "invalid",
    )
    .await;
    assert_eq!(
        alice
            .client
            .ok(
                Method::GET,
                &format!("/v1/conversations/{conv}/messages?after_seq=9223372036854775807"),
                None,
            )
            .await
            .unwrap()["messages"],
        json!([])
    );
    // JSON Schema's integers include 2.0; a fraction is refused. A `null` body is no body.
    let r = alice
        .client
        .ok(
            Method::POST,
            "/v1/inbox/fetch",
            Some(json!({"limit": 2.0, "wait_ms": 0.0})),
        )
        .await
        .unwrap();
    assert!(r["deliveries"].is_array(), "{r}");
    expect(
        alice
            .client
            .ok(Method::POST, "/v1/inbox/fetch", Some(json!({"limit": 2.5})))
            .await,
        400,
        "invalid",
    )
    .await;
    let r = alice
        .client
        .ok(Method::POST, "/v1/inbox/fetch", Some(json!(null)))
        .await
        .unwrap();
    assert!(r["deliveries"].is_array(), "{r}");
    expect(
        alice.client.create_conversation("", &[]).await,
        400,
        "invalid",
    )
    .await;
    // Oversize body: the backend's effective maximum (1 MiB, lower on a JetStream server whose
    // max_payload cannot carry it) is accepted, one byte more is 413.
    let limit = app
        .bus
        .ports()
        .backends
        .body_backend(app.team.id, &app.team.body_backend)
        .await
        .unwrap()
        .max_body_bytes()
        .min(1024 * 1024) as usize;
    let big = "x".repeat(limit + 1);
    expect(alice.client.send(conv, "big", &big).await, 413, "too_large").await;
    let max = "y".repeat(limit);
    assert_eq!(
        alice.client.send(conv, "max", &max).await.unwrap()["created"],
        true
    );
    // A request body above the HTTP limit is 413 too.
    let huge = "z".repeat(8 * 1024 * 1024);
    let r = http
        .post(format!("{url}/v1/conversations/{conv}/messages"))
        .bearer_auth(&alice.token)
        .json(&json!({"request_id": "huge", "body": huge}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 413);
    // Idempotency: same request id, other body → 409; same body → 200 with the original.
    expect(
        alice.client.send(conv, "r1", "other").await,
        409,
        "conflict",
    )
    .await;
    let (status, v) = alice
        .client
        .call(
            Method::POST,
            &format!("/v1/conversations/{conv}/messages"),
            Some(json!({"request_id": "r1", "body": "hi"})),
        )
        .await
        .unwrap();
    assert_eq!((status, v["created"].as_bool()), (200, Some(false)));
    assert_eq!(uuid_of(&v["message"]["id"]), message);
    // Another team's ids are 404, never 403.
    expect(mallory.client.history(conv, 0, 10).await, 404, "not_found").await;
    expect(mallory.client.send(conv, "m1", "x").await, 404, "not_found").await;
    expect(
        mallory.client.receipts(message).await.map(|_| json!(null)),
        404,
        "not_found",
    )
    .await;
    expect(mallory.client.acknowledge(message).await, 404, "not_found").await;
    expect(
        mallory
            .client
            .ok(Method::GET, &format!("/v1/conversations/{conv}"), None)
            .await,
        404,
        "not_found",
    )
    .await;
    expect(
        alice.client.create_conversation("x", &[mallory.id]).await,
        404,
        "not_found",
    )
    .await;
    // Unknown delivery ids are reported, not errors; another agent's delivery is unknown too.
    let got = fetch_n(bob, 1).await;
    let r = mallory.client.confirm(&delivery_ids(&got)).await.unwrap();
    assert_eq!(r[0]["outcome"], "unknown");
    let r = alice.client.confirm(&[Uuid::new_v4()]).await.unwrap();
    assert_eq!(r[0]["outcome"], "unknown");
    // Acknowledge: the sender is not a recipient (403); before delivery it is a conflict (409).
    expect(alice.client.acknowledge(message).await, 403, "forbidden").await;
    let sent2 = alice.client.send(conv, "r2", "second").await.unwrap();
    expect(
        bob.client
            .acknowledge(uuid_of(&sent2["message"]["id"]))
            .await,
        409,
        "conflict",
    )
    .await;
    // Wrong method on a known path.
    expect(
        alice
            .client
            .ok(Method::DELETE, "/v1/inbox/fetch", None)
            .await,
        405,
        "invalid",
    )
    .await;
    // Unknown routes.
    expect(
        alice.client.ok(Method::GET, "/v1/nope", None).await,
        404,
        "not_found",
    )
    .await;
    // Revoked agents are refused: a revocation through the bus drops bob's cached token at
    // once, so his very next call is 401 (one made in the ledger behind the bus's back would
    // take up to `bus.token_cache_ms`).
    app.bus.revoke_agent(app.team.id, bob.id).await.unwrap();
    expect(
        bob.client.fetch(1).await.map(|_| json!(null)),
        401,
        "unauthenticated",
    )
    .await;
    // A revoked agent is no longer a member to invite, by id or by name.
    expect(
        alice.client.create_conversation("x", &[bob.id]).await,
        404,
        "not_found",
    )
    .await;
}

/// `run` is threaded through send, confirm and acknowledge: the run's journal gets the bus's
/// records; another agent's run is 403, another team's run 404 (like an unknown one, also when
/// it bears the acting agent's id), a sealed run 409.
pub async fn runs_get_the_bus_records_of_send_confirm_and_acknowledge(app: &TestApp) {
    use crewbus_domain::{RecordKind, RunOutcome, Seq};
    let [alice, bob] = &app.agents[..] else {
        unreachable!()
    };
    let now = app.bus.ports().clock.now();
    let alice_run = app.journal.admit(app.team.id, alice.id, now).await.unwrap();
    let bob_run = app.journal.admit(app.team.id, bob.id, now).await.unwrap();
    // Another team's runs: its own agent's, and ones bearing alice's and bob's ids.
    let other = app
        .bus
        .add_team(&format!("team-{}", Uuid::new_v4().simple()), None, None)
        .await
        .unwrap();
    let mallory = app.bus.add_agent(other.id, "mallory").await.unwrap().agent;
    let foreign_run = |agent: Uuid| {
        let journal = Arc::clone(&app.journal);
        async move { journal.admit(other.id, agent, now).await.unwrap() }
    };
    let mallory_run = foreign_run(mallory.id).await;
    let alice_elsewhere = foreign_run(alice.id).await;
    let bob_elsewhere = foreign_run(bob.id).await;
    let conv = uuid_of(
        &alice
            .client
            .create_conversation("c", &[bob.id])
            .await
            .unwrap()["id"],
    );
    let path = format!("/v1/conversations/{conv}/messages");
    let sent = alice
        .client
        .ok(
            Method::POST,
            &path,
            Some(json!({"request_id": "r1", "body": "hi", "run": alice_run})),
        )
        .await
        .unwrap();
    let message = uuid_of(&sent["message"]["id"]);
    // Another agent's run is refused.
    let e = alice
        .client
        .ok(
            Method::POST,
            &path,
            Some(json!({"request_id": "r2", "body": "x", "run": bob_run})),
        )
        .await
        .unwrap_err();
    assert_eq!((e.status, e.code.as_str()), (403, "forbidden"));
    for (i, run) in [mallory_run, alice_elsewhere, RunId::new()]
        .into_iter()
        .enumerate()
    {
        let e = alice
            .client
            .ok(
                Method::POST,
                &path,
                Some(json!({"request_id": format!("f{i}"), "body": "x", "run": run})),
            )
            .await
            .unwrap_err();
        assert_eq!(
            (e.status, e.code.as_str()),
            (404, "not_found"),
            "send, run {i}"
        );
    }
    let got = fetch_n(bob, 1).await;
    for (i, run) in [mallory_run, bob_elsewhere].into_iter().enumerate() {
        let e = bob
            .client
            .ok(
                Method::POST,
                "/v1/inbox/confirm",
                Some(json!({"deliveries": delivery_ids(&got), "run": run})),
            )
            .await
            .unwrap_err();
        assert_eq!(
            (e.status, e.code.as_str()),
            (404, "not_found"),
            "confirm, run {i}"
        );
    }
    let r = bob
        .client
        .ok(
            Method::POST,
            "/v1/inbox/confirm",
            Some(json!({"deliveries": delivery_ids(&got), "run": bob_run})),
        )
        .await
        .unwrap();
    assert_eq!(r["results"][0]["outcome"], "confirmed");
    bob.client
        .ok(
            Method::POST,
            &format!("/v1/messages/{message}/acknowledge"),
            Some(json!({"run": bob_run})),
        )
        .await
        .unwrap();
    for (i, run) in [mallory_run, bob_elsewhere].into_iter().enumerate() {
        let e = bob
            .client
            .ok(
                Method::POST,
                &format!("/v1/messages/{message}/acknowledge"),
                Some(json!({"run": run})),
            )
            .await
            .unwrap_err();
        assert_eq!(
            (e.status, e.code.as_str()),
            (404, "not_found"),
            "acknowledge, run {i}"
        );
    }
    let kinds = |records: Vec<crewbus_domain::Record>| -> Vec<&'static str> {
        records
            .into_iter()
            .map(|r| match r.kind {
                RecordKind::RunAdmitted { .. } => "admitted",
                RecordKind::MessageSent { .. } => "sent",
                RecordKind::MessageDelivered { .. } => "delivered",
                RecordKind::MessageAcknowledged { .. } => "acknowledged",
                _ => "other",
            })
            .collect()
    };
    let a = app.journal.read(alice_run, Seq::FIRST, 100).await.unwrap();
    assert_eq!(kinds(a), vec!["admitted", "sent"]);
    let b = app.journal.read(bob_run, Seq::FIRST, 100).await.unwrap();
    assert_eq!(kinds(b), vec!["admitted", "delivered", "acknowledged"]);
    for run in [mallory_run, alice_elsewhere, bob_elsewhere] {
        let records = app.journal.read(run, Seq::FIRST, 100).await.unwrap();
        assert_eq!(
            kinds(records),
            vec!["admitted"],
            "refused calls journal nothing"
        );
    }
    // A sealed run is a conflict.
    app.journal
        .seal(alice_run, RunOutcome::Succeeded, "done", now)
        .await
        .unwrap();
    let e = alice
        .client
        .ok(
            Method::POST,
            &path,
            Some(json!({"request_id": "r3", "body": "late", "run": alice_run})),
        )
        .await
        .unwrap_err();
    assert_eq!((e.status, e.code.as_str()), (409, "conflict"));
}
