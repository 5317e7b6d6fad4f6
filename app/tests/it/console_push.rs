//! The console's push page against a real local webhook receiver on the memory store: a
//! registration the receiver answers 410 is parked, the page shows it with its reason (its URL
//! without the query, its authorization by scheme only), and the un-park button resumes it.

use crate::common;
use crate::console_support;
use crate::push_support;

use std::time::Duration;

use common::TestApp;
use console_support::signed_in;
use crewbus::client::uuid_of;
use crewbus::push::{AuthenticationSettings, DestinationSettings, SecretSource};
use push_support::{KEY_OLD, Receiver, TOKEN};
use reqwest::StatusCode;

#[tokio::test]
async fn a_parked_registration_is_shown_with_its_reason_and_unparked_from_the_page() {
    let rx = Receiver::start().await;
    rx.script("/ok/parked", [(410, None)]);
    let secrets = tempfile::tempdir().unwrap();
    std::fs::write(secrets.path().join("token"), TOKEN).unwrap();
    std::fs::write(secrets.path().join("whsec"), KEY_OLD).unwrap();
    let file = |name: &str| SecretSource {
        env: None,
        file: Some(secrets.path().join(name)),
    };
    let mut config = common::test_config();
    config.push.destinations = vec![DestinationSettings {
        name: "ops".into(),
        url: rx.url("/ok/parked?sig=query-secret"),
        authentication: Some(AuthenticationSettings {
            scheme: "Bearer".into(),
            credentials: file("token"),
        }),
        signing_keys: vec![file("whsec")],
    }];
    config.push.poll_ms = 10;
    config.push.idle_ms = 20;
    let app = TestApp::start_with(
        config.clone(),
        crewbus::compose::memory_config(&config),
        &["alice"],
    )
    .await;
    let alice = &app.agents[0];
    let run = uuid_of(&alice.client.admit_run().await.unwrap()["id"]);
    let mut b = signed_in(&app).await;
    let row = format!(r#"<tr data-registration="operator:ops" data-run="{run}">"#);
    let parked_table = |body: &str| {
        let start = body.find(r#"<table id="parked">"#).unwrap();
        let end = start + body[start..].find("</table>").unwrap();
        body[start..end].to_owned()
    };
    let page = b
        .get_until("/console/push", "the registration parked", |p| {
            parked_table(&p.body).contains(&row)
        })
        .await;
    let parked = parked_table(&page.body);
    assert!(
        parked.contains("410"),
        "the reason names the answer: {parked}"
    );
    assert!(
        parked.contains(r#"<form class="unpark" method="post" action="/console/push/unpark">"#)
    );
    for secret in [TOKEN, "query-secret"] {
        assert!(!page.body.contains(secret), "the page shows {secret}");
    }
    assert!(page.body.contains(&rx.url("/ok/parked")));
    assert!(page.body.contains("Bearer"));

    let csrf = page.input("_csrf");
    let r = b
        .post(
            "/console/push/unpark",
            &[
                ("_csrf", csrf.as_str()),
                ("run", &run.to_string()),
                ("id", "operator:ops"),
            ],
        )
        .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER);
    assert_eq!(r.location(), "/console/push");
    // Resumed: the receiver's next answer is 200, and nothing is parked any more.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let page = b.get("/console/push").await;
        if !parked_table(&page.body).contains(&row) {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "still parked");
        app.advance(Duration::from_millis(50));
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // A second un-park finds nothing parked.
    let r = b
        .post(
            "/console/push/unpark",
            &[
                ("_csrf", csrf.as_str()),
                ("run", &run.to_string()),
                ("id", "operator:ops"),
            ],
        )
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    app.finish_test().await;
}
