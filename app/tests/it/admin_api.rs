//! The admin API (`/v1/admin/…`) end to end on the memory store: the app on 127.0.0.1:0, driven
//! through its real HTTP API with operator tokens (`crewbus operator add`'s use case), beside
//! agents using theirs.

use crate::common;
use crate::push_support;

use std::time::Duration;

use common::*;
use crewbus::client::{ApiClient, uuid_of};
use crewbus::push::DestinationSettings;
use crewbus_domain::Uuid;
use push_support::Receiver;
use reqwest::Method;
use serde_json::{Value, json};

/// An operator of `app` (every team when `teams` is empty) and a client presenting its token.
async fn operator(app: &TestApp, name: &str, teams: &[&str]) -> ApiClient {
    let teams: Vec<String> = teams.iter().map(|t| t.to_string()).collect();
    let new = app.bus.add_operator(name, &teams).await.unwrap();
    ApiClient::new(app.server.url(), Some(new.token))
}

async fn get(client: &ApiClient, path: &str) -> (u16, Value) {
    client.call(Method::GET, path, None).await.unwrap()
}

async fn post(client: &ApiClient, path: &str, body: Option<Value>) -> (u16, Value) {
    client.call(Method::POST, path, body).await.unwrap()
}

/// A 401 as the API gives it: JSON `unauthenticated` and `WWW-Authenticate: Bearer`.
async fn assert_refused(url: &str, method: Method, token: Option<&str>) {
    let mut req = reqwest::Client::new().request(method.clone(), url);
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    if method == Method::POST {
        req = req.json(&json!({}));
    }
    let resp = req.send().await.unwrap();
    assert_eq!(resp.status(), 401, "{method} {url}");
    assert_eq!(
        resp.headers()
            .get("www-authenticate")
            .and_then(|v| v.to_str().ok()),
        Some("Bearer"),
        "{method} {url}"
    );
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["code"], "unauthenticated", "{body}");
}

#[tokio::test]
async fn agent_and_operator_tokens_are_refused_on_each_others_routes() {
    let app = MemoryApp::start(&["alice"]).await;
    let ops = operator(&app, "ops", &[]).await;
    let base = app.server.url();
    let alice = app.agents[0].token.clone();
    let ops_token = ops.token().unwrap().to_owned();
    let team = app.team.id;

    // An agent's token, no token, a malformed or an unknown operator token on admin routes.
    let unknown = format!("cbo_{}", "0".repeat(64));
    for token in [Some(alice.as_str()), None, Some("cbo_nope"), Some(&unknown)] {
        for path in ["/v1/admin/me", "/v1/admin/teams", "/v1/admin/overview"] {
            assert_refused(&format!("{base}{path}"), Method::GET, token).await;
        }
        assert_refused(
            &format!("{base}/v1/admin/teams/{team}/agents"),
            Method::POST,
            token,
        )
        .await;
    }
    // The operator's token on agents' routes.
    for path in ["/v1/me", "/v1/agents", "/v1/conversations"] {
        assert_refused(&format!("{base}{path}"), Method::GET, Some(&ops_token)).await;
    }
    assert_refused(
        &format!("{base}/v1/inbox/fetch"),
        Method::POST,
        Some(&ops_token),
    )
    .await;

    // The operator's own token works, and says who it is (never a token or hash).
    let (status, me) = get(&ops, "/v1/admin/me").await;
    assert_eq!(status, 200, "{me}");
    assert_eq!(me["name"], "ops");
    assert!(me["teams"].is_null(), "every team: {me}");
    assert!(!me.to_string().contains(&ops_token[4..]), "{me}");
    assert!(me.get("token_hash").is_none(), "{me}");

    // Revoked, it is refused at once.
    let id = uuid_of(&me["id"]);
    app.bus.revoke_operator(id).await.unwrap();
    assert_refused(
        &format!("{base}/v1/admin/me"),
        Method::GET,
        Some(&ops_token),
    )
    .await;
    app.finish_test().await;
}

#[tokio::test]
async fn an_operator_scoped_to_one_team_gets_404_for_everything_of_another() {
    let app = MemoryApp::start(&["alice", "bob"]).await;
    let zed = app.other_team_agent("zed").await;
    let team_b = app.bus.find_team("team-zed").await.unwrap().id;
    let team_a = app.team.id;
    // Something of team B behind every kind of id.
    let conv_b = uuid_of(&zed.client.create_conversation("b", &[]).await.unwrap()["id"]);
    let sent_b = zed.client.send(conv_b, "r1", "b's").await.unwrap();
    let message_b = uuid_of(&sent_b["message"]["id"]);
    let run_b = uuid_of(&zed.client.admit_run().await.unwrap()["id"]);

    let a_only = operator(&app, "a-only", &["team-a"]).await;
    let (_, me) = get(&a_only, "/v1/admin/me").await;
    assert_eq!(me["teams"], json!([team_a]));
    for path in [
        format!("/v1/admin/teams/{team_b}/agents"),
        format!("/v1/admin/teams/{team_b}/conversations"),
        format!("/v1/admin/teams/{team_b}/conversations/{conv_b}/messages"),
        format!("/v1/admin/teams/{team_b}/messages/{message_b}"),
        format!("/v1/admin/teams/{team_b}/runs"),
        format!("/v1/admin/teams/{team_b}/runs/{run_b}/records"),
        format!("/v1/admin/teams/{team_b}/push"),
        // Team B's ids under team A's path are not team A's either.
        format!("/v1/admin/teams/{team_a}/conversations/{conv_b}/messages"),
        format!("/v1/admin/teams/{team_a}/messages/{message_b}"),
        format!("/v1/admin/teams/{team_a}/runs/{run_b}/records"),
    ] {
        let (status, body) = get(&a_only, &path).await;
        assert_eq!(status, 404, "GET {path}: {body}");
        assert_eq!(body["code"], "not_found", "{body}");
    }
    for (path, body) in [
        (
            format!("/v1/admin/teams/{team_b}/agents"),
            Some(json!({"name": "mallory"})),
        ),
        (
            format!("/v1/admin/teams/{team_b}/agents/{}/revoke", zed.id),
            None,
        ),
        (
            format!("/v1/admin/teams/{team_b}/conversations/{conv_b}/messages"),
            Some(json!({"request_id": "x1", "body": "hi"})),
        ),
        (
            format!("/v1/admin/runs/{run_b}/push/operator:ops/unpark"),
            None,
        ),
    ] {
        let (status, answer) = post(&a_only, &path, body).await;
        assert_eq!(status, 404, "POST {path}: {answer}");
    }
    // Nothing of team B was changed: zed still works, no mallory, no post.
    assert_eq!(
        zed.client
            .call(Method::GET, "/v1/me", None)
            .await
            .unwrap()
            .0,
        200
    );
    let agents_b = app.bus.ports().ledger.agents(team_b).await.unwrap();
    assert_eq!(agents_b.len(), 1);
    // The lists leave team B out; an operator of every team sees it.
    for path in ["/v1/admin/teams", "/v1/admin/overview", "/v1/admin/storage"] {
        let (status, list) = get(&a_only, path).await;
        assert_eq!(status, 200, "{path}: {list}");
        let text = list.to_string();
        assert!(text.contains(&team_a.to_string()), "{path}: {text}");
        assert!(!text.contains(&team_b.to_string()), "{path}: {text}");
    }
    let everything = operator(&app, "ops", &[]).await;
    let (_, teams) = get(&everything, "/v1/admin/teams").await;
    assert_eq!(teams.as_array().unwrap().len(), 2, "{teams}");
    let (status, _) = get(
        &everything,
        &format!("/v1/admin/teams/{team_b}/messages/{message_b}"),
    )
    .await;
    assert_eq!(status, 200);
    app.finish_test().await;
}

#[tokio::test]
async fn an_operator_adds_and_revokes_an_agent_and_the_revoked_agents_next_call_is_401() {
    let app = MemoryApp::start(&["alice"]).await;
    let ops = operator(&app, "ops", &[]).await;
    let team = app.team.id;
    let agents = format!("/v1/admin/teams/{team}/agents");

    let (status, new) = post(&ops, &agents, Some(json!({"name": "carol"}))).await;
    assert_eq!(status, 201, "{new}");
    assert_eq!(new["agent"]["name"], "carol");
    assert_eq!(new["agent"]["kind"], "agent");
    assert!(new["agent"]["revoked_at"].is_null());
    let token = new["token"].as_str().unwrap().to_owned();
    assert!(token.starts_with("cbt_"), "{token}");
    let carol = ApiClient::new(app.server.url(), Some(token));
    let (status, me) = carol.call(Method::GET, "/v1/me", None).await.unwrap();
    assert_eq!((status, me["name"].as_str()), (200, Some("carol")));

    // Taken names and bad names; unknown fields.
    let (status, _) = post(&ops, &agents, Some(json!({"name": "carol"}))).await;
    assert_eq!(status, 409);
    for bad in [json!({"name": "has space"}), json!({"name": ""}), json!({})] {
        let (status, body) = post(&ops, &agents, Some(bad.clone())).await;
        assert_eq!(status, 400, "{bad}: {body}");
    }
    let (status, _) = post(&ops, &agents, Some(json!({"name": "x", "token": "t"}))).await;
    assert_eq!(status, 400);

    // Listed with activity (carol made a call: noted, flushed within a few seconds).
    let (status, list) = get(&ops, &agents).await;
    assert_eq!(status, 200, "{list}");
    let names: Vec<&str> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["alice", "carol"]);
    for a in list.as_array().unwrap() {
        assert_eq!(a["pending"], 0, "{a}");
        assert!(a["oldest_pending_age_seconds"].is_null(), "{a}");
        assert!(
            a.get("token_hash").is_none() && a.get("token").is_none(),
            "{a}"
        );
    }

    // Revoked: the answer says so, and carol's next call is refused.
    let carol_id = uuid_of(&new["agent"]["id"]);
    let (status, revoked) = post(&ops, &format!("{agents}/{carol_id}/revoke"), None).await;
    assert_eq!(status, 200, "{revoked}");
    assert!(!revoked["revoked_at"].is_null(), "{revoked}");
    let (status, _) = carol.call(Method::GET, "/v1/me", None).await.unwrap();
    assert_eq!(status, 401);
    // Idempotent; an unknown agent is 404.
    let (status, _) = post(&ops, &format!("{agents}/{carol_id}/revoke"), None).await;
    assert_eq!(status, 200);
    let (status, _) = post(&ops, &format!("{agents}/{}/revoke", Uuid::new_v4()), None).await;
    assert_eq!(status, 404);
    let (status, _) = post(&ops, &format!("{agents}/not-an-id/revoke"), None).await;
    assert_eq!(status, 400);
    app.finish_test().await;
}

#[tokio::test]
async fn an_operator_posts_as_the_human_member_and_agents_see_it_marked_from_a_human() {
    let app = MemoryApp::start(&["alice", "bob"]).await;
    let [alice, bob] = &app.agents[..] else {
        unreachable!()
    };
    let ops = operator(&app, "ops", &[]).await;
    let team = app.team.id;
    let conv = uuid_of(
        &alice
            .client
            .create_conversation("c", &[bob.id])
            .await
            .unwrap()["id"],
    );
    alice.client.send(conv, "a1", "from alice").await.unwrap();
    let messages = format!("/v1/admin/teams/{team}/conversations/{conv}/messages");
    let post_body = json!({"request_id": "h1", "body": "from a person"});
    let (status, sent) = post(&ops, &messages, Some(post_body.clone())).await;
    assert_eq!(status, 201, "{sent}");
    assert_eq!(sent["message"]["sender_kind"], "human");
    let human = uuid_of(&sent["message"]["sender"]);
    // A repeat is 200 with the same message; another body under the same id is 409.
    let (status, again) = post(&ops, &messages, Some(post_body)).await;
    assert_eq!(
        (status, &again["message"]["id"]),
        (200, &sent["message"]["id"])
    );
    let (status, _) = post(
        &ops,
        &messages,
        Some(json!({"request_id": "h1", "body": "other"})),
    )
    .await;
    assert_eq!(status, 409);

    // Bob gets both; the person's is marked.
    let got = fetch_n(bob, 2).await;
    let kinds: Vec<(&str, &str)> = got
        .iter()
        .map(|d| {
            (
                d["body"].as_str().unwrap(),
                d["message"]["sender_kind"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(kinds, [("from alice", "agent"), ("from a person", "human")]);
    bob.client.confirm(&delivery_ids(&got)).await.unwrap();
    // Alice too (she is a recipient of the human member's message), in history as well.
    let history = alice.client.history(conv, 0, 10).await.unwrap();
    assert_eq!(history["messages"][1]["message"]["sender_kind"], "human");
    // The human member is listed to agents, as a human.
    let (_, agents) = alice
        .client
        .call(Method::GET, "/v1/agents", None)
        .await
        .unwrap();
    let member = agents
        .as_array()
        .unwrap()
        .iter()
        .find(|a| uuid_of(&a["id"]) == human)
        .unwrap_or_else(|| panic!("{agents}"));
    assert_eq!(
        (member["name"].as_str(), member["kind"].as_str()),
        (Some("ops (human)"), Some("human"))
    );

    // The operator's page: senders named, every recipient's state; the human member receives
    // nothing (no receipt of its own).
    let (status, page) = get(&ops, &messages).await;
    assert_eq!(status, 200, "{page}");
    let items = page["messages"].as_array().unwrap();
    assert_eq!(items.len(), 2, "{page}");
    assert_eq!(page["next_after_seq"], 2);
    assert_eq!(items[0]["sender_name"], "alice");
    assert_eq!(items[0]["body"], "from alice");
    assert_eq!(items[1]["sender_name"], "ops (human)");
    assert_eq!(items[1]["message"]["sender_kind"], "human");
    let states = |item: &Value| -> Vec<(String, String)> {
        item["recipients"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                (
                    r["name"].as_str().unwrap().to_owned(),
                    r["state"].as_str().unwrap().to_owned(),
                )
            })
            .collect()
    };
    assert_eq!(
        states(&items[0]),
        [("bob".to_owned(), "confirmed".to_owned())]
    );
    let mut second = states(&items[1]);
    second.sort();
    assert_eq!(
        second,
        [
            ("alice".to_owned(), "stored".to_owned()),
            ("bob".to_owned(), "confirmed".to_owned())
        ]
    );
    assert!(items[1]["recipients"][0]["hand_outs"].as_u64().is_some());
    // One message, whole; paging and ids checked.
    let message = uuid_of(&sent["message"]["id"]);
    let (status, one) = get(&ops, &format!("/v1/admin/teams/{team}/messages/{message}")).await;
    assert_eq!(status, 200, "{one}");
    assert_eq!(one["body"], "from a person");
    assert_eq!(one["recipients"].as_array().unwrap().len(), 2);
    let (status, _) = get(&ops, &format!("{messages}?limit=0")).await;
    assert_eq!(status, 400);
    let (status, _) = get(&ops, &format!("{messages}?after_seq=-1")).await;
    assert_eq!(status, 400);
    let (status, _) = get(
        &ops,
        &format!("/v1/admin/teams/{team}/messages/{}", Uuid::new_v4()),
    )
    .await;
    assert_eq!(status, 404);

    // The conversation list names its members, the human member included.
    let (status, convs) = get(&ops, &format!("/v1/admin/teams/{team}/conversations")).await;
    assert_eq!(status, 200, "{convs}");
    let c = &convs[0];
    assert_eq!(
        (c["messages"].as_u64(), c["title"].as_str()),
        (Some(2), Some("c"))
    );
    let mut members: Vec<(String, String)> = c["members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["name"].as_str().unwrap().to_owned(),
                m["kind"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    members.sort();
    assert_eq!(
        members,
        [
            ("alice".to_owned(), "agent".to_owned()),
            ("bob".to_owned(), "agent".to_owned()),
            ("ops (human)".to_owned(), "human".to_owned()),
        ]
    );
    app.finish_test().await;
}

#[tokio::test]
async fn the_overview_runs_records_and_storage_read_the_teams_of_the_scope() {
    let app = MemoryApp::start(&["alice", "bob"]).await;
    let [alice, bob] = &app.agents[..] else {
        unreachable!()
    };
    let ops = operator(&app, "ops", &[]).await;
    let team = app.team.id;
    let conv = uuid_of(
        &alice
            .client
            .create_conversation("c", &[bob.id])
            .await
            .unwrap()["id"],
    );
    let run = uuid_of(&alice.client.admit_run().await.unwrap()["id"]);
    alice
        .client
        .send_in(conv, "r1", "hello", Some(run))
        .await
        .unwrap();
    // The body stored (the relay), so bob has one pending delivery.
    eventually("the message stored", 10, || async {
        let (_, page) = get(
            &ops,
            &format!("/v1/admin/teams/{team}/conversations/{conv}/messages"),
        )
        .await;
        (page["messages"][0]["recipients"][0]["state"] == "stored").then_some(())
    })
    .await;
    app.advance(Duration::from_secs(90));

    let (status, overview) = get(&ops, "/v1/admin/overview").await;
    assert_eq!(status, 200, "{overview}");
    let t = &overview[0];
    assert_eq!(t["team"]["id"], team.to_string());
    assert_eq!(t["series"].as_array().unwrap().len(), 61, "{t}");
    let sent: u64 = t["series"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["sent"].as_u64().unwrap())
        .sum();
    assert_eq!(sent, 1);
    assert_eq!(
        (
            t["pending"].as_u64(),
            t["agents"].as_u64(),
            t["active_agents"].as_u64()
        ),
        (Some(1), Some(2), Some(2))
    );
    assert!(
        t["oldest_pending_age_seconds"].as_u64().unwrap() >= 90,
        "{t}"
    );
    assert_eq!(t["parked"], 0);

    let (status, agents) = get(&ops, &format!("/v1/admin/teams/{team}/agents")).await;
    assert_eq!(status, 200);
    let bob_row = agents
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["name"] == "bob")
        .unwrap();
    assert_eq!(bob_row["pending"], 1, "{bob_row}");
    assert!(bob_row["oldest_pending_age_seconds"].as_u64().unwrap() >= 90);

    let (status, runs) = get(&ops, &format!("/v1/admin/teams/{team}/runs")).await;
    assert_eq!(status, 200, "{runs}");
    assert_eq!(runs[0]["id"], run.to_string());
    let before = runs[0]["admitted_at"].as_str().unwrap().to_owned();
    let (status, older) = get(
        &ops,
        &format!(
            "/v1/admin/teams/{team}/runs?before={}&limit=5",
            urlencode(&before)
        ),
    )
    .await;
    assert_eq!(
        (status, older.as_array().map(Vec::len)),
        (200, Some(0)),
        "{older}"
    );
    let (status, records) = get(&ops, &format!("/v1/admin/teams/{team}/runs/{run}/records")).await;
    assert_eq!(status, 200, "{records}");
    assert_eq!(records["run"]["id"], run.to_string());
    let kinds: Vec<&str> = records["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["run_admitted", "message_sent"]);
    assert_eq!(records["next_from_seq"], 3);
    // Positions past the largest a ledger stores, or before the first record, are refused.
    for bad in [
        "?from_seq=9223372036854775808",
        "?from_seq=0",
        "?limit=0",
        "?limit=1001",
    ] {
        let (status, body) = get(
            &ops,
            &format!("/v1/admin/teams/{team}/runs/{run}/records{bad}"),
        )
        .await;
        assert_eq!(status, 400, "{bad}: {body}");
    }
    for bad in ["?limit=0", "?limit=1001", "?before=yesterday", "?other=1"] {
        let (status, _) = get(&ops, &format!("/v1/admin/teams/{team}/runs{bad}")).await;
        assert_eq!(status, 400, "{bad}");
    }
    let (status, _) = get(
        &ops,
        &format!("/v1/admin/teams/{team}/runs/{}/records", Uuid::new_v4()),
    )
    .await;
    assert_eq!(status, 404);

    let (status, storage) = get(&ops, "/v1/admin/storage").await;
    assert_eq!(status, 200, "{storage}");
    let uses = storage[0]["backends"].as_array().unwrap();
    assert_eq!(uses[0]["backend"], "memory", "{storage}");
    assert_eq!(
        (uses[0]["messages"].as_u64(), uses[0]["bytes"].as_u64()),
        (Some(1), Some(5))
    );
    assert_eq!(storage[0]["streams"], json!([]));

    // Without push destinations there are no registrations; nothing parked.
    let (status, push) = get(&ops, &format!("/v1/admin/teams/{team}/push")).await;
    assert_eq!(status, 200, "{push}");
    assert_eq!(push[0]["registrations"], json!([]));
    for bad in ["?runs=0", "?runs=101"] {
        let (status, _) = get(&ops, &format!("/v1/admin/teams/{team}/push{bad}")).await;
        assert_eq!(status, 400, "{bad}");
    }
    let (status, parked) = get(&ops, "/v1/admin/push/parked").await;
    assert_eq!((status, parked), (200, json!([])));
    app.finish_test().await;
}

fn urlencode(s: &str) -> String {
    s.replace('+', "%2B").replace(':', "%3A")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parked_registration_shows_its_attempts_log_and_is_unparked() {
    let rx = Receiver::start().await;
    rx.script("/ok/parked", [(410, None)]);
    let mut config = test_config();
    config.push.destinations = vec![DestinationSettings {
        name: "ops".into(),
        url: rx.url("/ok/parked?sig=query-secret"),
        authentication: None,
        signing_keys: Vec::new(),
    }];
    config.push.poll_ms = 10;
    let app = MemoryApp::start_with(
        config.clone(),
        crewbus::compose::memory_config(&config),
        &["alice"],
    )
    .await;
    let ops = operator(&app, "ops", &[]).await;
    let team = app.team.id;
    let run = uuid_of(&app.agents[0].client.admit_run().await.unwrap()["id"]);

    let parked = eventually("the registration parked", 20, || async {
        let (_, parked) = get(&ops, "/v1/admin/push/parked").await;
        (!parked.as_array().unwrap().is_empty()).then_some(parked)
    })
    .await;
    let r = &parked[0];
    assert_eq!(r["run"], run.to_string());
    assert_eq!(r["team"], team.to_string());
    assert_eq!(r["id"], "operator:ops");
    assert_eq!(r["parked"], true);
    assert_eq!(r["url"], rx.url("/ok/parked"), "no query: {r}");
    assert!(!r.to_string().contains("query-secret"), "{r}");
    assert!(r["last_error"].as_str().unwrap().contains("410"), "{r}");
    let log = r["attempts_log"].as_array().unwrap();
    assert_eq!(log.len(), 1, "{r}");
    assert_eq!(
        (log[0]["status"].as_u64(), log[0]["seq"].as_u64()),
        (Some(410), Some(1))
    );
    assert_eq!(log[0]["acknowledged"], false);
    assert!(log[0]["error"].is_null());
    // The team's push view shows the same registration under its run; the overview counts it.
    let (_, push) = get(&ops, &format!("/v1/admin/teams/{team}/push?runs=5")).await;
    assert_eq!(push[0]["run"]["id"], run.to_string());
    assert_eq!(push[0]["registrations"][0]["parked"], true);
    let (_, overview) = get(&ops, "/v1/admin/overview").await;
    assert_eq!(overview[0]["parked"], 1);

    // Un-parked: delivered from its cursor (the script is used up: 200), logged.
    let unpark = format!("/v1/admin/runs/{run}/push/operator:ops/unpark");
    let (status, answer) = post(&ops, &unpark, None).await;
    assert_eq!((status, answer), (200, json!({"unparked": true})));
    let (status, again) = post(&ops, &unpark, None).await;
    assert_eq!(status, 404, "{again}");
    let (status, _) = post(
        &ops,
        &format!("/v1/admin/runs/{run}/push/operator:other/unpark"),
        None,
    )
    .await;
    assert_eq!(status, 404);
    let log = eventually("the redelivery logged", 20, || async {
        let (_, push) = get(&ops, &format!("/v1/admin/teams/{team}/push")).await;
        let log = push[0]["registrations"][0]["attempts_log"].clone();
        (log.as_array().is_some_and(|l| l.len() >= 2)).then_some(log)
    })
    .await;
    assert_eq!(
        (log[0]["status"].as_u64(), log[0]["acknowledged"].as_bool()),
        (Some(200), Some(true))
    );
    assert_eq!(log[1]["status"], 410);
    let (_, parked) = get(&ops, "/v1/admin/push/parked").await;
    assert_eq!(parked, json!([]));
    app.finish_test().await;
}
