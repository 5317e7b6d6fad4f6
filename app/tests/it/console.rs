//! The operator console (`/console`) end to end on the memory store: the app on 127.0.0.1:0,
//! driven through real HTTP as a browser would (form posts, cookies, no redirects followed),
//! the pages read as HTML text.

use crate::common;
use crate::console_support;

use std::time::{Duration, Instant};

use common::*;
use console_support::{Browser, code, signed_in};
use crewbus::client::uuid_of;
use crewbus_domain::Uuid;
use futures_util::StreamExt;
use reqwest::StatusCode;
use reqwest::header::SET_COOKIE;

const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
                   connect-src 'self'; font-src 'self'; form-action 'self'; frame-ancestors \
                   'none'; base-uri 'none'";

async fn conversation(app: &TestApp, title: &str) -> Uuid {
    let [alice, bob] = &app.agents[..] else {
        unreachable!()
    };
    uuid_of(
        &alice
            .client
            .create_conversation(title, &[bob.id])
            .await
            .unwrap()["id"],
    )
}

#[tokio::test]
async fn a_printed_code_signs_in_once_with_a_strict_session_cookie() {
    let app = MemoryApp::start(&["alice", "bob"]).await;
    let code = code(&app).await;
    let mut b = Browser::new(&app.server.url());

    // The URL serve prints pre-fills the form.
    let form = b.get(&format!("/console/sign-in?code={code}")).await;
    assert_eq!(form.status, StatusCode::OK);
    assert_eq!(form.input("code"), code);
    assert!(form.body.contains(r#"<form id="sign-in""#));
    assert!(form.body.contains(r#"name="token""#));

    let r = b.sign_in(Some(&code), None).await;
    assert_eq!(r.status, StatusCode::SEE_OTHER);
    assert_eq!(r.location(), "/console");
    let cookie = r
        .headers
        .get_all(SET_COOKIE)
        .iter()
        .map(|v| v.to_str().unwrap().to_owned())
        .find(|c| c.starts_with("crewbus_session="))
        .expect("a session cookie");
    let re = regex::Regex::new(
        r"^crewbus_session=[0-9a-f]{64}; HttpOnly; SameSite=Strict; Path=/console$",
    )
    .unwrap();
    assert!(re.is_match(&cookie), "{cookie}");

    let overview = b.get("/console").await;
    assert_eq!(overview.status, StatusCode::OK);
    assert!(
        overview
            .body
            .contains(r#"<section class="card team" data-team="team-a""#)
    );
    assert!(overview.body.contains(r#"<nav aria-label="Console">"#));
    assert!(
        overview
            .body
            .contains(r#"<form id="sign-out" method="post" action="/console/sign-out">"#)
    );

    // The same code a second time: refused, with the reason, and no session.
    let mut again = Browser::new(&app.server.url());
    let r = again.sign_in(Some(&code), None).await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
    assert!(r.body.contains(r#"role="alert""#));
    assert!(!again.cookies.contains_key("crewbus_session"));
    // A code that was never issued: the same.
    let r = again.sign_in(Some("AAAA-BBBB-CCCC-DDDD"), None).await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
    // The first session still works.
    assert_eq!(b.get("/console").await.status, StatusCode::OK);
    app.finish_test().await;
}

#[tokio::test]
async fn an_operator_token_signs_in_and_an_agent_token_does_not() {
    let app = MemoryApp::start(&["alice", "bob"]).await;
    let ops = app.bus.add_operator("ops", &[]).await.unwrap();
    let mut b = Browser::new(&app.server.url());
    let r = b.sign_in(None, Some(&ops.token)).await;
    assert_eq!(r.status, StatusCode::SEE_OTHER);
    let overview = b.get("/console").await;
    assert!(
        overview
            .body
            .contains("Signed in as <strong><bdi>ops</bdi></strong>")
    );

    for bad in [app.agents[0].token.as_str(), "cbo_0000", ""] {
        let mut other = Browser::new(&app.server.url());
        let r = other.sign_in(None, Some(bad)).await;
        assert_eq!(r.status, StatusCode::UNAUTHORIZED, "token {bad:?}");
        assert!(r.body.contains(r#"role="alert""#));
        assert!(!other.cookies.contains_key("crewbus_session"));
    }
    app.finish_test().await;
}

#[tokio::test]
async fn without_a_session_every_page_goes_to_the_sign_in_page() {
    let app = MemoryApp::start(&["alice"]).await;
    let mut b = Browser::new(&app.server.url());
    let r = b.get("/console/").await;
    assert_eq!(r.status, StatusCode::SEE_OTHER);
    assert_eq!(r.location(), "/console");
    for path in [
        "/console",
        &format!("/console/teams/{}", app.team.id),
        "/console/push",
        "/console/storage",
        "/console/anything",
    ] {
        let r = b.get(path).await;
        assert_eq!(r.status, StatusCode::SEE_OTHER, "{path}");
        assert_eq!(r.location(), "/console/sign-in", "{path}");
    }
    // A stale cookie is removed on the way.
    b.cookies.insert("crewbus_session".into(), "00".repeat(32));
    let r = b.get("/console").await;
    assert_eq!(r.status, StatusCode::SEE_OTHER);
    assert!(!b.cookies.contains_key("crewbus_session"));
    // The live stream answers 204 (an EventSource stops reconnecting).
    let r = b.get("/console/events?view=overview").await;
    assert_eq!(r.status, StatusCode::NO_CONTENT);
    app.finish_test().await;
}

#[tokio::test]
async fn a_post_without_the_csrf_token_is_refused() {
    let app = MemoryApp::start(&["alice", "bob"]).await;
    let bob = &app.agents[1];
    let mut b = signed_in(&app).await;
    let revoke = format!("/console/teams/{}/agents/{}/revoke", app.team.id, bob.id);
    let token = b.csrf().await;
    let wrong = "0".repeat(token.len());
    for form in [vec![], vec![("_csrf", "")], vec![("_csrf", wrong.as_str())]] {
        let r = b.post(&revoke, &form).await;
        assert_eq!(r.status, StatusCode::FORBIDDEN, "{form:?}");
        assert!(r.header("content-type").starts_with("text/html"));
        let r = b.post("/console/sign-out", &form).await;
        assert_eq!(r.status, StatusCode::FORBIDDEN);
    }
    assert!(
        bob.client
            .call(reqwest::Method::GET, "/v1/me", None)
            .await
            .unwrap()
            .0
            == 200
    );
    assert_eq!(
        b.get("/console").await.status,
        StatusCode::OK,
        "the session is intact"
    );

    // The token of the page is accepted.
    let r = b.post(&revoke, &[("_csrf", &token)]).await;
    assert_eq!(r.status, StatusCode::SEE_OTHER);
    assert_eq!(r.location(), format!("/console/teams/{}", app.team.id));
    eventually("bob's token refused", 5, || async {
        let (status, _) = bob
            .client
            .call(reqwest::Method::GET, "/v1/me", None)
            .await
            .unwrap();
        (status == 401).then_some(())
    })
    .await;
    let team = b.get(&format!("/console/teams/{}", app.team.id)).await;
    let bob_row = regex::Regex::new(r#"(?s)<tr data-agent="bob">.*?</tr>"#)
        .unwrap()
        .find(&team.body)
        .unwrap()
        .as_str()
        .to_owned();
    assert!(
        bob_row.contains(r#"data-field="status">revoked<"#),
        "{bob_row}"
    );
    assert!(!bob_row.contains("form class=\"revoke\""));

    // The sign-in form is checked too (its token is the pre-session cookie's).
    let mut fresh = Browser::new(&app.server.url());
    let code = code(&app).await;
    let r = fresh.post("/console/sign-in", &[("code", &code)]).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    assert!(!fresh.cookies.contains_key("crewbus_session"));
    // Nothing was tried: the code still works.
    assert_eq!(
        fresh.sign_in(Some(&code), None).await.status,
        StatusCode::SEE_OTHER
    );
    app.finish_test().await;
}

#[tokio::test]
async fn hostile_bodies_and_titles_are_text_never_markup() {
    let app = MemoryApp::start(&["alice", "bob"]).await;
    let alice = &app.agents[0];
    let conv = conversation(&app, "<b>hostile title</b>").await;
    let hostile = [
        "<script>alert(1)</script>",
        "<img src=x onerror=alert(1)>",
        r#"<a href="javascript:alert(1)">x</a>"#,
    ];
    let mut ids = Vec::new();
    for (i, body) in hostile.iter().enumerate() {
        let sent = alice
            .client
            .send(conv, &format!("h{i}"), body)
            .await
            .unwrap();
        ids.push(uuid_of(&sent["message"]["id"]));
    }
    let mut b = signed_in(&app).await;
    // askama's HTML escaping: numeric character references.
    let escaped = hostile.map(|h| {
        h.replace('&', "&#38;")
            .replace('<', "&#60;")
            .replace('>', "&#62;")
            .replace('"', "&#34;")
            .replace('\'', "&#39;")
    });
    assert_eq!(escaped[0], "&#60;script&#62;alert(1)&#60;/script&#62;");
    let check = |html: &str, what: &str| {
        assert!(!html.contains("<script>alert"), "{what}: a live <script>");
        assert!(!html.contains("<img src=x"), "{what}: a live <img>");
        assert!(
            !html.contains("onerror=alert(1)>"),
            "{what}: a live onerror"
        );
        assert!(
            !html.contains(r#"href="javascript:"#),
            "{what}: a live javascript: link"
        );
        assert!(!html.contains("<b>hostile"), "{what}: a live <b>");
    };
    let team = b.get(&format!("/console/teams/{}", app.team.id)).await;
    check(&team.body, "team page");
    assert!(team.body.contains("&#60;b&#62;hostile title&#60;/b&#62;"));
    let page = b
        .get(&format!(
            "/console/teams/{}/conversations/{conv}",
            app.team.id
        ))
        .await;
    assert_eq!(page.status, StatusCode::OK);
    check(&page.body, "conversation page");
    let path = format!("/console/teams/{}/conversations/{conv}", app.team.id);
    b.get_until(&path, "every body stored and shown", |page| {
        escaped.iter().all(|e| {
            page.body
                .contains(&format!(r#"<div class="body" dir="auto">{e}</div>"#))
        })
    })
    .await;
    for (id, e) in ids.iter().zip(&escaped) {
        let m = b
            .get(&format!("/console/teams/{}/messages/{id}", app.team.id))
            .await;
        check(&m.body, "message page");
        assert!(m.body.contains(&format!(
            r#"<div id="body" class="body" dir="auto">{e}</div>"#
        )));
    }
    app.finish_test().await;
}

/// Unicode's explicit bidirectional controls, as an agent may write them into a title, a body,
/// a lease pattern or a seal's reason: every page shows them as `[U+XXXX]` inside an isolated
/// element, never as raw characters that reorder the text (`report \u{202E}gnp.exe` shown as
/// "report exe.png").
#[tokio::test]
async fn bidirectional_controls_an_agent_wrote_are_shown_never_obeyed() {
    const SPOOF: &str = "report \u{202E}gnp.exe";
    const SHOWN: &str = "report [U+202E]gnp.exe";
    let app = MemoryApp::start(&["alice", "bob"]).await;
    let alice = &app.agents[0];
    let conv = conversation(&app, SPOOF).await;
    let body = "invoice \u{202E}fdp.exe\u{202C} and \u{2067}x\u{2069}";
    let sent = alice.client.send(conv, "b1", body).await.unwrap();
    let message = uuid_of(&sent["message"]["id"]);
    let (status, _) = alice
        .client
        .call(
            reqwest::Method::POST,
            "/v1/leases",
            Some(serde_json::json!({ "pattern": format!("q/{SPOOF}") })),
        )
        .await
        .unwrap();
    assert_eq!(status, 200);
    let (_, run) = alice
        .client
        .call(reqwest::Method::POST, "/v1/runs", None)
        .await
        .unwrap();
    let run = uuid_of(&run["id"]);
    alice.client.seal_run(run, "failed", SPOOF).await.unwrap();
    let mut b = signed_in(&app).await;
    let team = format!("/console/teams/{}", app.team.id);
    let conversation = format!("{team}/conversations/{conv}");
    b.get_until(&conversation, "the body stored and shown", |p| {
        p.body
            .contains("invoice [U+202E]fdp.exe[U+202C] and [U+2067]x[U+2069]")
    })
    .await;
    let pages = [
        (team.clone(), vec![format!("<bdi>{SHOWN}</bdi>"), format!("<bdi>q/{SHOWN}</bdi>")]),
        (
            conversation.clone(),
            vec![
                format!("<h1><bdi>{SHOWN}</bdi></h1>"),
                r#"<div class="body" dir="auto">invoice [U+202E]fdp.exe[U+202C] and [U+2067]x[U+2069]</div>"#.to_owned(),
            ],
        ),
        (
            format!("{team}/messages/{message}"),
            vec![format!("<bdi>{SHOWN}</bdi>")],
        ),
        (format!("{team}/runs/{run}"), vec![format!("failed: {SHOWN}</bdi>")]),
    ];
    for (path, wanted) in pages {
        let page = b.get(&path).await;
        assert_eq!(page.status, StatusCode::OK, "{path}");
        let raw: Vec<char> = page
            .body
            .chars()
            .filter(|c| matches!(c, '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}'))
            .collect();
        assert!(raw.is_empty(), "{path}: raw bidirectional controls {raw:?}");
        for want in wanted {
            assert!(
                page.body.contains(&want),
                "{path}: no {want} in\n{}",
                page.body
            );
        }
    }
    app.finish_test().await;
}

/// The team page lists the live leases (holder, pattern, mode, fencing token); a pattern an
/// agent wrote is text, never markup.
#[tokio::test]
async fn the_team_page_lists_live_leases_as_text() {
    let app = MemoryApp::start(&["alice", "bob"]).await;
    let (status, held) = app.agents[0]
        .client
        .call(
            reqwest::Method::POST,
            "/v1/leases",
            Some(serde_json::json!({ "pattern": "<b>x</b>/**", "mode": "shared" })),
        )
        .await
        .unwrap();
    assert_eq!(status, 200, "{held}");
    assert_eq!(held["granted"], true, "{held}");
    let token = held["lease"]["fencing_token"].as_u64().unwrap();
    let mut b = signed_in(&app).await;
    let team = b.get(&format!("/console/teams/{}", app.team.id)).await;
    assert_eq!(team.status, StatusCode::OK);
    assert!(
        !team.body.contains("<b>x"),
        "a live <b> in the leases table"
    );
    let row = format!(
        "<th scope=\"row\"><code><bdi>&#60;b&#62;x&#60;/b&#62;/**</bdi></code></th>\n        <td data-field=\"holder\"><bdi>alice</bdi></td>\n        <td data-field=\"mode\">shared</td>\n        <td data-field=\"token\" class=\"num\">{token}</td>"
    );
    assert!(team.body.contains(&row), "{}", team.body);
    // Released, it is gone from the page.
    let id = uuid_of(&held["lease"]["id"]);
    app.agents[0]
        .client
        .call(
            reqwest::Method::POST,
            &format!("/v1/leases/{id}/release"),
            None,
        )
        .await
        .unwrap();
    let team = b.get(&format!("/console/teams/{}", app.team.id)).await;
    assert!(team.body.contains("No live leases."));
    app.finish_test().await;
}

#[tokio::test]
async fn pages_carry_the_csp_and_security_headers_and_assets_are_cached() {
    let app = MemoryApp::start(&["alice"]).await;
    let mut b = Browser::new(&app.server.url());
    let sign_in = b.get("/console/sign-in").await;
    let mut signed = signed_in(&app).await;
    let overview = signed.get("/console").await;
    let handler = regex::Regex::new(r"<[^>]*\son[a-z]+=").unwrap();
    for page in [&sign_in, &overview] {
        assert_eq!(page.header("content-security-policy"), CSP);
        assert_eq!(page.header("x-content-type-options"), "nosniff");
        assert_eq!(page.header("x-frame-options"), "DENY");
        assert_eq!(page.header("referrer-policy"), "same-origin");
        assert_eq!(page.header("cache-control"), "no-store");
        assert_eq!(page.header("content-type"), "text/html; charset=utf-8");
        assert!(!page.body.contains("<script>"), "no inline script");
        assert!(!page.body.contains("<style"), "no inline style");
        assert!(!page.body.contains(" style="), "no style attribute");
        assert!(!handler.is_match(&page.body), "no event handler attribute");
    }
    let re = regex::Regex::new(r#"(?:src|href)="(/console/static/[^"]+)""#).unwrap();
    let assets: Vec<String> = re
        .captures_iter(&overview.body)
        .map(|c| c[1].to_owned())
        .collect();
    assert!(
        assets.iter().any(|a| a.contains("uplot.min.js")),
        "{assets:?}"
    );
    assert!(assets.iter().any(|a| a.contains("console.js")));
    for asset in assets {
        let r = b.get(&asset).await;
        assert_eq!(r.status, StatusCode::OK, "{asset}");
        assert_eq!(
            r.header("cache-control"),
            "public, max-age=31536000, immutable"
        );
        assert_eq!(r.header("x-content-type-options"), "nosniff");
        let want = if asset.contains(".js") {
            "text/javascript; charset=utf-8"
        } else if asset.contains(".css") {
            "text/css; charset=utf-8"
        } else if asset.contains(".svg") {
            "image/svg+xml"
        } else {
            "text/plain; charset=utf-8"
        };
        assert_eq!(r.header("content-type"), want, "{asset}");
    }
    assert_eq!(
        b.get("/console/static/nothing.js").await.status,
        StatusCode::NOT_FOUND
    );
    app.finish_test().await;
}

#[tokio::test]
async fn an_operator_of_another_team_gets_404_pages_for_this_one() {
    let app = MemoryApp::start(&["alice", "bob"]).await;
    let alice = &app.agents[0];
    let bob = &app.agents[1];
    let conv = conversation(&app, "local only").await;
    let sent = alice
        .client
        .send(conv, "r1", "for team a's eyes")
        .await
        .unwrap();
    let message = uuid_of(&sent["message"]["id"]);
    let other = app.bus.add_team("team-other", None, None).await.unwrap();
    let carol = app
        .bus
        .add_operator("carol", std::slice::from_ref(&other.name))
        .await
        .unwrap();
    let mut b = Browser::new(&app.server.url());
    assert_eq!(
        b.sign_in(None, Some(&carol.token)).await.status,
        StatusCode::SEE_OTHER
    );
    let overview = b.get("/console").await;
    assert!(overview.body.contains(r#"data-team="team-other""#));
    assert!(!overview.body.contains(r#"data-team="team-a""#));
    let team = app.team.id;
    for path in [
        format!("/console/teams/{team}"),
        format!("/console/teams/{team}/conversations/{conv}"),
        format!("/console/teams/{team}/messages/{message}"),
        format!("/console/teams/{team}/runs"),
        format!("/console/events?view=team&team={team}"),
        format!("/console/teams/{}", Uuid::new_v4()),
        "/console/teams/not-an-id".to_owned(),
    ] {
        let r = b.get(&path).await;
        assert_eq!(r.status, StatusCode::NOT_FOUND, "{path}");
        assert_eq!(
            r.header("content-type"),
            "text/html; charset=utf-8",
            "{path}"
        );
        assert!(r.body.contains("<main id=\"main\">"), "{path}");
        assert!(r.body.contains(r#"<form id="sign-out""#), "{path}");
        assert!(!r.body.contains("for team a"), "{path}");
    }
    let csrf = b.csrf().await;
    let r = b
        .post(
            &format!("/console/teams/{team}/agents/{}/revoke", bob.id),
            &[("_csrf", &csrf)],
        )
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    let (status, _) = bob
        .client
        .call(reqwest::Method::GET, "/v1/me", None)
        .await
        .unwrap();
    assert_eq!(status, 200, "bob was not revoked");
    let r = b
        .post(
            &format!("/console/teams/{team}/conversations/{conv}/messages"),
            &[("_csrf", &csrf), ("request_id", "x1"), ("body", "hello")],
        )
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    app.finish_test().await;
}

/// Reads an SSE response until `want` holds for the text read so far, or the deadline passes.
type Chunks = std::pin::Pin<Box<dyn futures_util::Stream<Item = reqwest::Result<Vec<u8>>> + Send>>;

async fn read_until(
    stream: &mut Chunks,
    seen: &mut String,
    secs: u64,
    what: &str,
    want: impl Fn(&str) -> bool,
) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !want(seen) {
        let left = deadline.saturating_duration_since(Instant::now());
        assert!(
            !left.is_zero(),
            "timed out waiting for {what}; read:\n{seen}"
        );
        match tokio::time::timeout(left, stream.next()).await {
            Ok(Some(chunk)) => seen.push_str(&String::from_utf8_lossy(&chunk.unwrap())),
            Ok(None) => panic!("the stream ended before {what}; read:\n{seen}"),
            Err(_) => panic!("timed out waiting for {what}; read:\n{seen}"),
        }
    }
}

async fn open_stream(b: &Browser, url: &str) -> Chunks {
    let r = b
        .http
        .get(format!("{}{url}", b.base))
        .header("cookie", b.cookie_header())
        .header("accept", "text/event-stream")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK, "{url}");
    assert_eq!(
        r.headers()["content-type"].to_str().unwrap(),
        "text/event-stream"
    );
    Box::pin(r.bytes_stream().map(|c| c.map(|b| b.to_vec())))
}

#[tokio::test]
async fn the_live_stream_sends_a_new_message_and_its_receipt_states() {
    let app = MemoryApp::start(&["alice", "bob"]).await;
    let [alice, bob] = &app.agents[..] else {
        unreachable!()
    };
    let conv = conversation(&app, "live").await;
    let mut b = signed_in(&app).await;
    let page = b
        .get(&format!(
            "/console/teams/{}/conversations/{conv}",
            app.team.id
        ))
        .await;
    let url = page.events_url();
    assert!(
        url.starts_with("/console/events?view=conversation&"),
        "{url}"
    );
    let mut stream = open_stream(&b, &url).await;
    let mut seen = String::new();

    let sent = alice
        .client
        .send(conv, "r1", "hello bob, live")
        .await
        .unwrap();
    let id = uuid_of(&sent["message"]["id"]).to_string();
    let receipt = |state: &str| format!(r#"data-recipient="bob" data-state="{state}""#);
    read_until(&mut stream, &mut seen, 10, "the message, stored", |s| {
        s.contains("event: swap")
            && s.contains(&format!(r#"data-message="{id}""#))
            && s.contains(&receipt("stored"))
    })
    .await;
    assert!(seen.contains(r#"<ol id="messages""#));
    assert!(seen.contains("hello bob, live"));

    let got = fetch_n(bob, 1).await;
    seen.clear();
    read_until(
        &mut stream,
        &mut seen,
        10,
        "bob's receipt handed out",
        |s| s.contains(&receipt("handed_out")),
    )
    .await;
    bob.client.confirm(&delivery_ids(&got)).await.unwrap();
    seen.clear();
    read_until(&mut stream, &mut seen, 10, "bob's receipt confirmed", |s| {
        s.contains(&receipt("confirmed"))
    })
    .await;
    app.finish_test().await;
}

/// The team page shows each agent's status line (as text, never markup) and current run, and
/// its live stream sends the agents and leases again when a status line is set, a run is
/// started or a lease is taken — no message needed.
#[tokio::test]
async fn the_team_page_shows_status_lines_and_runs_live() {
    let app = MemoryApp::start(&["alice", "bob"]).await;
    let alice = &app.agents[0];
    let mut b = signed_in(&app).await;
    let page = b.get(&format!("/console/teams/{}", app.team.id)).await;
    assert_eq!(page.status, StatusCode::OK);
    let url = page.events_url();
    assert!(url.starts_with("/console/events?view=team&"), "{url}");
    let mut stream = open_stream(&b, &url).await;
    let mut seen = String::new();

    let (status, _) = alice
        .client
        .call(
            reqwest::Method::PUT,
            "/v1/me/status",
            Some(serde_json::json!({ "status": "fixing <script>x</script> & co" })),
        )
        .await
        .unwrap();
    assert_eq!(status, 200);
    read_until(&mut stream, &mut seen, 10, "alice's status line", |s| {
        s.contains("event: swap")
            && s.contains("fixing &#60;script&#62;x&#60;/script&#62; &#38; co")
    })
    .await;
    assert!(
        !seen.contains("<script>x"),
        "a live <script> on the team page"
    );

    let (_, run) = alice
        .client
        .call(reqwest::Method::POST, "/v1/runs", None)
        .await
        .unwrap();
    let run = uuid_of(&run["id"]);
    seen.clear();
    read_until(&mut stream, &mut seen, 10, "alice's current run", |s| {
        s.contains(&format!("/console/teams/{}/runs/{run}", app.team.id))
    })
    .await;

    let (status, _) = alice
        .client
        .call(
            reqwest::Method::POST,
            "/v1/leases",
            Some(serde_json::json!({ "pattern": "docs/**" })),
        )
        .await
        .unwrap();
    assert_eq!(status, 200);
    seen.clear();
    read_until(&mut stream, &mut seen, 10, "alice's lease", |s| {
        s.contains("<code><bdi>docs/**</bdi></code>")
    })
    .await;
    app.finish_test().await;
}

#[tokio::test]
async fn revoking_the_operator_ends_its_open_stream_before_it_shows_anything_more() {
    let app = MemoryApp::start(&["alice", "bob"]).await;
    let [alice, _bob] = &app.agents[..] else {
        unreachable!()
    };
    let conv = conversation(&app, "watched").await;
    let ops = app.bus.add_operator("watcher", &[]).await.unwrap();
    let mut b = Browser::new(&app.server.url());
    let r = b.sign_in(None, Some(&ops.token)).await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.body);
    let page = b
        .get(&format!(
            "/console/teams/{}/conversations/{conv}",
            app.team.id
        ))
        .await;
    let mut stream = open_stream(&b, &page.events_url()).await;
    // Revoked beside this server (as `crewbus operator revoke` does): no sign-out is broadcast.
    app.bus.revoke_operator(ops.operator.id).await.unwrap();
    alice
        .client
        .send(conv, "after", "SECRET AFTER REVOKE")
        .await
        .unwrap();
    let mut seen = String::new();
    read_until(&mut stream, &mut seen, 10, "the stream's end event", |s| {
        s.contains("event: end")
    })
    .await;
    assert!(
        !seen.contains("SECRET AFTER REVOKE"),
        "the revoked operator's stream showed a message sent after the revocation:\n{seen}"
    );
    app.finish_test().await;
}

#[tokio::test]
async fn signing_out_ends_the_session_and_its_live_stream() {
    let app = MemoryApp::start(&["alice", "bob"]).await;
    let mut b = signed_in(&app).await;
    let old = b.cookies["crewbus_session"].clone();
    let overview = b.get("/console").await;
    let mut stream = open_stream(&b, &overview.events_url()).await;
    let csrf = overview.input("_csrf");
    let r = b.post("/console/sign-out", &[("_csrf", &csrf)]).await;
    assert_eq!(r.status, StatusCode::SEE_OTHER);
    assert_eq!(r.location(), "/console/sign-in");
    assert!(!b.cookies.contains_key("crewbus_session"));
    let mut seen = String::new();
    read_until(&mut stream, &mut seen, 10, "the stream's end event", |s| {
        s.contains("event: end")
    })
    .await;
    let ended = tokio::time::timeout(Duration::from_secs(10), async {
        while stream.next().await.is_some() {}
    })
    .await;
    assert!(ended.is_ok(), "the stream closed after its end event");
    // The old cookie opens nothing any more.
    b.cookies.insert("crewbus_session".into(), old);
    let r = b.get("/console").await;
    assert_eq!(r.status, StatusCode::SEE_OTHER);
    assert_eq!(r.location(), "/console/sign-in");
    app.finish_test().await;
}

#[tokio::test]
async fn repeated_failed_sign_ins_are_slowed_per_client() {
    let app = MemoryApp::start(&["alice"]).await;
    let mut b = Browser::new(&app.server.url());
    for i in 0..5 {
        let r = b.sign_in(Some("AAAA-BBBB-CCCC-DDDD"), None).await;
        assert_eq!(r.status, StatusCode::UNAUTHORIZED, "attempt {}", i + 1);
    }
    let good = code(&app).await;
    let r = b.sign_in(Some(&good), None).await;
    assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS);
    let wait: u64 = r.header("retry-after").parse().unwrap();
    assert!((1..=60).contains(&wait), "Retry-After: {wait}");
    assert!(r.body.contains(r#"role="alert""#));
    assert!(!b.cookies.contains_key("crewbus_session"));
    // A wrong token counts as a failed sign-in too, and is slowed the same way.
    let r = b.sign_in(None, Some("cbo_nothing")).await;
    assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS);
    app.finish_test().await;
}

/// Everything logged at INFO and above while it is the thread's default subscriber (the app's
/// tasks run on the test's one thread).
#[derive(Clone, Default)]
struct Captured(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    fn start() -> (Captured, tracing::subscriber::DefaultGuard) {
        let captured = Captured::default();
        let writer = captured.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::INFO)
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .finish();
        (captured, common::capture_logs(subscriber))
    }

    /// The WARN lines holding `what`.
    fn warnings(&self, what: &str) -> Vec<String> {
        String::from_utf8_lossy(&self.0.lock().unwrap())
            .lines()
            .filter(|l| l.contains(" WARN ") && l.contains(what))
            .map(str::to_owned)
            .collect()
    }
}

/// The `refused=N` count of a warning line.
fn refused_count(line: &str) -> u64 {
    let (_, after) = line.split_once("refused=").expect("a count");
    after.split(' ').next().unwrap().parse().unwrap()
}

#[tokio::test]
async fn refused_sign_ins_are_warned_about_once_a_period_with_a_count() {
    let (log, _guard) = Captured::start();
    let app = MemoryApp::start(&["alice"]).await;
    let mut b = Browser::new(&app.server.url());
    let started = Instant::now();
    // A guessing client: 5 wrong codes refused (401), then 25 slowed (429).
    for i in 0..30 {
        let r = b.sign_in(Some("AAAA-BBBB-CCCC-DDDD"), None).await;
        let want = if i < 5 {
            StatusCode::UNAUTHORIZED
        } else {
            StatusCode::TOO_MANY_REQUESTS
        };
        assert_eq!(r.status, want, "attempt {}", i + 1);
    }
    // At most one line per 5 s period of each warning (the first at once), however fast the
    // guesses come: on a slow machine the 30 may span more than one period.
    let periods = 1 + (started.elapsed().as_secs() / 5) as usize;
    let throttled = log.warnings("too many failed sign-ins");
    assert!(
        (1..=periods).contains(&throttled.len()),
        "{} lines for 25 throttled sign-ins in {periods} period(s): {throttled:#?}",
        throttled.len()
    );
    assert_eq!(
        refused_count(&throttled[0]),
        1,
        "the first is reported at once"
    );
    let reported: u64 = throttled.iter().map(|l| refused_count(l)).sum();
    assert!(reported <= 25, "{throttled:#?}");
    let refused = log.warnings("console sign-in refused");
    assert!(
        (1..=periods).contains(&refused.len()),
        "{} lines for 5 refused codes in {periods} period(s): {refused:#?}",
        refused.len()
    );
    app.finish_test().await;
}

#[tokio::test]
async fn a_long_body_is_cut_with_a_link_to_all_of_it() {
    let app = MemoryApp::start(&["alice", "bob"]).await;
    let alice = &app.agents[0];
    let conv = conversation(&app, "long").await;
    let body: String = (0..60)
        .map(|i| format!("{i:03} {}\n", "x".repeat(60)))
        .collect();
    let sent = alice.client.send(conv, "r1", &body).await.unwrap();
    let id = uuid_of(&sent["message"]["id"]);
    let mut b = signed_in(&app).await;
    let path = format!("/console/teams/{}/conversations/{conv}", app.team.id);
    let re = regex::Regex::new(r#"(?s)<div class="body" dir="auto">(.*?)</div>"#).unwrap();
    let page = b
        .get_until(&path, "the long body shown", |page| re.is_match(&page.body))
        .await;
    let text = re.captures(&page.body).unwrap()[1].to_owned();
    let html = page.body;
    assert!(text.len() <= 2048 + "…".len(), "{} bytes shown", text.len());
    assert!(body.starts_with(text.trim_end_matches('…')));
    let link = format!(
        r#"<a class="show-all" href="/console/teams/{}/messages/{id}">"#,
        app.team.id
    );
    assert!(html.contains(&link), "{html}");
    let whole = b
        .get(&format!("/console/teams/{}/messages/{id}", app.team.id))
        .await;
    assert!(whole.body.contains(&format!(
        r#"<div id="body" class="body" dir="auto">{body}</div>"#
    )));
    app.finish_test().await;
}

#[tokio::test]
async fn an_operator_posts_as_the_teams_human_member_once_per_form() {
    let app = MemoryApp::start(&["alice", "bob"]).await;
    let bob = &app.agents[1];
    let conv = conversation(&app, "with a human").await;
    let mut b = signed_in(&app).await;
    let path = format!("/console/teams/{}/conversations/{conv}", app.team.id);
    let page = b.get(&path).await;
    let (csrf, request_id) = (page.input("_csrf"), page.input("request_id"));
    for _ in 0..2 {
        // A double submit of the same form.
        let r = b
            .post(
                &format!("{path}/messages"),
                &[
                    ("_csrf", csrf.as_str()),
                    ("request_id", request_id.as_str()),
                    ("body", "a word from the operator\r\nsecond line"),
                ],
            )
            .await;
        assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.body);
        assert_eq!(r.location(), path);
    }
    let got = fetch_n(bob, 1).await;
    assert_eq!(got.len(), 1);
    assert_eq!(got[0]["body"], "a word from the operator\nsecond line");
    let page = b.get(&path).await;
    assert_eq!(page.body.matches(r#"data-kind="human""#).count(), 1);
    assert!(page.body.contains("dev (human)"));
    let team = b.get(&format!("/console/teams/{}", app.team.id)).await;
    let human = regex::Regex::new(r#"(?s)<tr data-agent="dev \(human\)">.*?</tr>"#)
        .unwrap()
        .find(&team.body)
        .expect("the human member's row")
        .as_str()
        .to_owned();
    assert!(human.contains(r#"data-field="status">human<"#));
    assert!(!human.contains("revoke"));
    // An empty message sends nothing.
    let r = b
        .post(
            &format!("{path}/messages"),
            &[
                ("_csrf", csrf.as_str()),
                ("request_id", "other"),
                ("body", "  "),
            ],
        )
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    app.finish_test().await;
}

#[tokio::test]
async fn adding_an_agent_shows_its_token_once_and_it_works() {
    let app = MemoryApp::start(&["alice"]).await;
    let mut b = signed_in(&app).await;
    let csrf = b.csrf().await;
    let r = b
        .post(
            &format!("/console/teams/{}/agents", app.team.id),
            &[("_csrf", &csrf), ("name", "carol")],
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    assert_eq!(r.header("cache-control"), "no-store");
    let token = regex::Regex::new(r#"<code id="token" class="secret">(cbt_[0-9a-f]{64})</code>"#)
        .unwrap()
        .captures(&r.body)
        .expect("the token")[1]
        .to_owned();
    let carol = crewbus::client::ApiClient::new(app.server.url(), Some(token));
    let (status, me) = carol
        .call(reqwest::Method::GET, "/v1/me", None)
        .await
        .unwrap();
    assert_eq!(status, 200);
    assert_eq!(me["name"], "carol");
    // The same name again: refused, nothing added.
    let r = b
        .post(
            &format!("/console/teams/{}/agents", app.team.id),
            &[("_csrf", &csrf), ("name", "carol")],
        )
        .await;
    assert_eq!(r.status, StatusCode::CONFLICT);
    app.finish_test().await;
}

#[tokio::test]
async fn every_page_renders_for_a_team_with_a_run() {
    let app = MemoryApp::start(&["alice", "bob"]).await;
    let alice = &app.agents[0];
    let (_, run) = alice
        .client
        .call(reqwest::Method::POST, "/v1/runs", None)
        .await
        .unwrap();
    let run = uuid_of(&run["id"]);
    let conv = conversation(&app, "every page").await;
    alice
        .client
        .send_in(conv, "r1", "a message with a run", Some(run))
        .await
        .unwrap();
    let mut b = signed_in(&app).await;
    let team = app.team.id;
    let overview = b.get("/console").await;
    for field in ["pending", "oldest", "parked"] {
        assert!(overview.body.contains(&format!(r#"data-field="{field}""#)));
    }
    assert!(overview.body.contains(r#"<table class="chart-data""#));
    assert_eq!(overview.body.matches("<tr data-t=").count(), 61);
    let team_page = b.get(&format!("/console/teams/{team}")).await;
    assert!(team_page.body.contains(r#"<table id="agents">"#));
    assert!(
        team_page
            .body
            .contains(&format!(r#"data-conversation="{conv}""#))
    );
    assert!(
        team_page
            .body
            .contains(&format!(r#"href="/console/teams/{team}/runs""#))
    );
    let runs = b.get(&format!("/console/teams/{team}/runs")).await;
    assert!(
        runs.body
            .contains(&format!("/console/teams/{team}/runs/{run}"))
    );
    let journal = b.get(&format!("/console/teams/{team}/runs/{run}")).await;
    assert_eq!(journal.status, StatusCode::OK);
    assert!(journal.body.contains(r#"<ol id="records""#));
    assert!(journal.body.matches("<li data-seq=").count() >= 2);
    let push = b.get("/console/push").await;
    assert!(push.body.contains(r#"<table id="registrations">"#));
    assert!(push.body.contains(r#"<table id="parked">"#));
    let storage = b.get("/console/storage").await;
    assert!(storage.body.contains("<meter"));
    for page in [&overview, &team_page, &runs, &journal, &push, &storage] {
        assert_eq!(page.status, StatusCode::OK);
        assert_eq!(page.body.matches("<main").count(), 1);
        assert!(page.body.contains("<h1>"));
        // Every form carries the session's token.
        assert_eq!(
            page.body.matches("<form").count(),
            page.body.matches(r#"name="_csrf""#).count()
        );
    }
    let r = b.get("/console/push/unpark").await;
    assert_eq!(r.status, StatusCode::METHOD_NOT_ALLOWED);
    let csrf = b.csrf().await;
    let r = b
        .post(
            "/console/push/unpark",
            &[
                ("_csrf", &csrf),
                ("run", &run.to_string()),
                ("id", "operator:none"),
            ],
        )
        .await;
    assert_eq!(
        r.status,
        StatusCode::NOT_FOUND,
        "nothing parked under that id"
    );
    app.finish_test().await;
}

#[tokio::test]
async fn with_the_console_disabled_nothing_is_served_under_console() {
    let mut config = test_config();
    config.console.enabled = false;
    let memory = crewbus::compose::memory_config(&config);
    let app = MemoryApp::start_with(config, memory, &["alice"]).await;
    let mut b = Browser::new(&app.server.url());
    for path in ["/console", "/console/sign-in", "/console/static/console.js"] {
        let r = b.get(path).await;
        assert_eq!(r.status, StatusCode::NOT_FOUND, "{path}");
        assert!(
            r.header("content-type").starts_with("application/json"),
            "{path}"
        );
    }
    app.finish_test().await;
}

#[tokio::test]
async fn a_long_conversation_shows_its_newest_fifty_with_a_way_to_the_earlier_ones() {
    let app = MemoryApp::start(&["alice", "bob"]).await;
    let alice = &app.agents[0];
    let conv = conversation(&app, "busy").await;
    for i in 1..=55 {
        alice
            .client
            .send(conv, &format!("r{i}"), &format!("message number {i}"))
            .await
            .unwrap();
    }
    let mut b = signed_in(&app).await;
    let path = format!("/console/teams/{}/conversations/{conv}", app.team.id);
    let page = b
        .get_until(&path, "every body stored", |p| {
            p.body.contains("message number 55</div>")
        })
        .await;
    assert!(page.body.contains("55 messages"));
    assert_eq!(page.body.matches(r#"<li class="message""#).count(), 50);
    assert!(page.body.contains(r#"data-seq="6""#) && !page.body.contains(r#"data-seq="5""#));
    let earlier = format!(r#"<a href="{path}?after_seq=0">Earlier messages</a>"#);
    assert!(page.body.contains(&earlier), "{}", page.body);
    let first = b.get(&format!("{path}?after_seq=0")).await;
    assert_eq!(first.body.matches(r#"<li class="message""#).count(), 50);
    assert!(first.body.contains(r#"data-seq="1""#) && !first.body.contains(r#"data-seq="51""#));
    assert!(
        first
            .body
            .contains(&format!(r#"<a href="{path}">Newest messages</a>"#))
    );
    assert!(first.events_url().contains("&after_seq=0&"));
    app.finish_test().await;
}
