//! Search end to end over HTTP (`GET /v1/search`), on the memory store and on Postgres with
//! JetStream bodies (the index worker reads them from the broker): messages sent are found once
//! indexed, best match first with the matched words marked, a member sees only its own
//! conversations, pages do not overlap, bad parameters are `400 invalid` (a text with no word
//! to find finds nothing), and a conversation the caller is not in is `404`.

use crate::common;

use std::collections::HashSet;
use std::time::{Duration, Instant};

use common::{MemoryApp, TestApp};
use crewbus::client::{ApiClient, uuid_of};
use reqwest::Method;
use serde_json::Value;

async fn search(client: &ApiClient, query: &str) -> (u16, Value) {
    client
        .call(Method::GET, &format!("/v1/search?{query}"), None)
        .await
        .unwrap()
}

/// Searches `q` until `n` hits come back, failing after 20 s (the index worker's lag is ~2 s).
async fn until_found(client: &ApiClient, q: &str, n: usize) -> Value {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (status, page) = search(client, &format!("q={q}")).await;
        assert_eq!(status, 200, "{page}");
        if page["hits"].as_array().unwrap().len() >= n {
            return page;
        }
        assert!(
            Instant::now() < deadline,
            "{q:?}: {n} hits never came: {page}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn messages_are_found_ranked_and_scoped(app: TestApp) {
    let [alice, bob, carol] = &app.agents[..] else {
        unreachable!()
    };
    let ours = uuid_of(
        &alice
            .client
            .create_conversation("release plan", &[bob.id])
            .await
            .unwrap()["id"],
    );
    let theirs = uuid_of(
        &carol
            .client
            .create_conversation("carol alone", &[alice.id])
            .await
            .unwrap()["id"],
    );
    let once = alice
        .client
        .send(ours, "r1", "the parser breaks on tabs")
        .await
        .unwrap();
    let thrice = bob
        .client
        .send(
            ours,
            "r2",
            "parser, parser and the parser again: <b>bold</b>",
        )
        .await
        .unwrap();
    bob.client
        .send(ours, "r3", "nothing to see here")
        .await
        .unwrap();
    carol
        .client
        .send(theirs, "r4", "a parser bob cannot see")
        .await
        .unwrap();

    // Bob is in one conversation with two parser messages: the one saying it thrice first.
    let page = until_found(&bob.client, "parser", 2).await;
    let hits = page["hits"].as_array().unwrap();
    assert_eq!(hits.len(), 2, "{page}");
    assert_eq!(hits[0]["message"], thrice["message"]["id"], "{page}");
    assert_eq!(hits[1]["message"], once["message"]["id"], "{page}");
    assert_eq!(hits[0]["conversation"], ours.to_string());
    assert_eq!(hits[0]["conversation_title"], "release plan");
    assert_eq!(hits[0]["sender"], bob.id.to_string());
    assert!(hits[0]["rank"].as_f64().unwrap() > hits[1]["rank"].as_f64().unwrap());
    let matched: Vec<&str> = hits[0]["snippet"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["matched"] == true)
        .map(|s| s["text"].as_str().unwrap())
        .collect();
    assert!(
        !matched.is_empty() && matched.iter().all(|w| w.eq_ignore_ascii_case("parser")),
        "{page}"
    );
    let text: String = hits[0]["snippet"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["text"].as_str().unwrap())
        .collect();
    assert!(
        text.contains("<b>bold</b>"),
        "the snippet is the body's text: {text}"
    );
    assert_eq!(page["next_offset"], Value::Null);

    // Alice is in both conversations: three hits; carol's conversation only for her.
    let page = until_found(&alice.client, "parser", 3).await;
    assert_eq!(page["hits"].as_array().unwrap().len(), 3, "{page}");
    let (_, only) = search(&alice.client, &format!("q=parser&conversation={theirs}")).await;
    assert_eq!(only["hits"].as_array().unwrap().len(), 1, "{only}");
    // Pages of one: three distinct hits, then no next page.
    let mut seen = HashSet::new();
    let mut offset = Some(0u64);
    while let Some(o) = offset {
        let (status, page) = search(&alice.client, &format!("q=parser&limit=1&offset={o}")).await;
        assert_eq!(status, 200, "{page}");
        for h in page["hits"].as_array().unwrap() {
            assert!(
                seen.insert(h["message"].as_str().unwrap().to_owned()),
                "a hit twice: {page}"
            );
        }
        offset = page["next_offset"].as_u64();
    }
    assert_eq!(seen.len(), 3);
    // Phrases and exclusions.
    let (_, phrase) = search(&alice.client, "q=%22breaks+on+tabs%22").await;
    assert_eq!(
        phrase["hits"][0]["message"], once["message"]["id"],
        "{phrase}"
    );
    assert_eq!(phrase["hits"].as_array().unwrap().len(), 1);
    let (_, excluded) = search(&bob.client, "q=parser+-tabs").await;
    assert_eq!(excluded["hits"].as_array().unwrap().len(), 1, "{excluded}");

    // Bob may not search carol's conversation; bad parameters are invalid.
    let (status, refused) = search(&bob.client, &format!("q=parser&conversation={theirs}")).await;
    assert_eq!(
        (status, refused["code"].as_str()),
        (404, Some("not_found")),
        "{refused}"
    );
    for bad in [
        "q=",
        "q=parser&limit=0",
        "q=parser&limit=101",
        "q=parser&offset=1000",
        "limit=3",
    ] {
        let (status, refused) = search(&bob.client, bad).await;
        assert_eq!(
            (status, refused["code"].as_str()),
            (400, Some("invalid")),
            "{bad}: {refused}"
        );
    }
    // Text with no word that could be found finds nothing; a page past the depth is cut.
    let long = "0".repeat(200);
    for nothing in ["q=%21%21%21", "q=-parser", "q=+++", &format!("q={long}")] {
        let (status, page) = search(&bob.client, nothing).await;
        assert_eq!(status, 200, "{nothing}: {page}");
        assert_eq!(page["hits"], serde_json::json!([]), "{nothing}");
    }
    let (status, deep) = search(&bob.client, "q=parser&offset=995&limit=100").await;
    assert_eq!(
        (status, deep["hits"].as_array().map(Vec::len)),
        (200, Some(0)),
        "{deep}"
    );
    // Two teams' messages in one index batch: each body is indexed with its own team's
    // backend (found by a body word, not only by the title).
    let dora = app.other_team_agent("dora").await;
    let hers = uuid_of(
        &dora
            .client
            .create_conversation("dora notes", &[])
            .await
            .unwrap()["id"],
    );
    for i in 0..3 {
        dora.client
            .send(hers, &format!("d{i}"), &format!("walrus tusk {i}"))
            .await
            .unwrap();
        alice
            .client
            .send(ours, &format!("a{i}"), &format!("pelican beak {i}"))
            .await
            .unwrap();
    }
    until_found(&dora.client, "tusk", 3).await;
    until_found(&alice.client, "beak", 3).await;
    let (_, none) = search(&dora.client, "q=beak").await;
    assert_eq!(
        none["hits"],
        serde_json::json!([]),
        "another team's messages: {none}"
    );
    let (status, _) = ApiClient::new(app.server.url(), None)
        .call(Method::GET, "/v1/search?q=parser", None)
        .await
        .unwrap();
    assert_eq!(status, 401);
    app.finish_test().await;
}

#[tokio::test]
async fn search_on_the_memory_store() {
    messages_are_found_ranked_and_scoped(MemoryApp::start(&["alice", "bob", "carol"]).await).await;
}

#[tokio::test]
async fn search_on_postgres_with_jetstream_bodies() {
    messages_are_found_ranked_and_scoped(
        TestApp::postgres_jetstream("search", &["alice", "bob", "carol"]).await,
    )
    .await;
}
