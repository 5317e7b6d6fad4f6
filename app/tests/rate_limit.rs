//! The send rate limit per agent (`[rate_limit]`) end to end on the memory store over HTTP: a
//! burst is granted, the next send is `429 rate_limited` with `Retry-After` and nothing recorded,
//! the bucket refills on the bus clock, a team override and another agent have buckets of their
//! own, and a rate limit off sends freely.

mod common;

use std::time::Duration;

use common::{MemoryApp, test_config};
use crewbus::client::uuid_of;
use crewbus::compose::memory_config;
use crewbus::config::TeamRateLimit;
use serde_json::{Value, json};

async fn send(
    app: &MemoryApp,
    i: usize,
    conv: &str,
    request_id: &str,
) -> (u16, Option<String>, Value) {
    let agent = &app.agents[i];
    let r = reqwest::Client::new()
        .post(format!(
            "{}/v1/conversations/{conv}/messages",
            app.server.url()
        ))
        .bearer_auth(&agent.token)
        .json(&json!({"request_id": request_id, "body": "hi"}))
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    let retry_after = r
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().to_owned());
    (status, retry_after, r.json().await.unwrap())
}

async fn start(rate: u32, burst: u32, enabled: bool) -> MemoryApp {
    let mut config = test_config();
    config.rate_limit.enabled = enabled;
    config.rate_limit.rate_per_second = rate;
    config.rate_limit.burst = burst;
    let memory = memory_config(&config);
    MemoryApp::start_with(config, memory, &["alice", "bob"]).await
}

async fn conversation(app: &MemoryApp) -> String {
    let conv = app.agents[0]
        .client
        .create_conversation("rate", &[app.agents[1].id])
        .await
        .unwrap();
    uuid_of(&conv["id"]).to_string()
}

#[tokio::test]
async fn over_the_burst_a_send_is_429_with_retry_after_until_the_bucket_refills() {
    // Rate 1/s and burst 3: the 4th send at once waits 1 s.
    let app = start(1, 3, true).await;
    let conv = conversation(&app).await;
    for n in 0..3 {
        let (status, _, body) = send(&app, 0, &conv, &format!("r{n}")).await;
        assert_eq!(status, 201, "{body}");
    }
    let (status, retry_after, body) = send(&app, 0, &conv, "r3").await;
    assert_eq!(status, 429, "{body}");
    assert_eq!(body["code"], "rate_limited");
    assert_eq!(body["retry_after_seconds"], 1);
    assert_eq!(retry_after.as_deref(), Some("1"));
    // Bob has a bucket of his own.
    let (status, _, body) = send(&app, 1, &conv, "b0").await;
    assert_eq!(status, 201, "{body}");
    // Nothing was recorded for the refused send: history holds the three of alice and bob's.
    let history = app.agents[0]
        .client
        .history(uuid_of(&json!(conv)), 0, 100)
        .await
        .unwrap();
    assert_eq!(
        history["messages"].as_array().unwrap().len(),
        4,
        "{history}"
    );
    // One second on the bus clock refills one token: one more send, then refused again.
    app.advance(Duration::from_secs(1));
    let (status, _, body) = send(&app, 0, &conv, "r3").await;
    assert_eq!(status, 201, "{body}");
    let (status, _, body) = send(&app, 0, &conv, "r4").await;
    assert_eq!((status, body["code"].as_str()), (429, Some("rate_limited")));
    app.finish_test().await;
}

#[test]
fn a_team_override_replaces_the_default_for_that_team_only() {
    // Team ids are minted at start, after composition; the override is checked on the
    // settings the composition root hands the bus (`RateLimitConfig::settings`).
    let mut config = test_config().rate_limit;
    config.enabled = true;
    config.rate_per_second = 1;
    config.burst = 1;
    let team = crewbus_domain::Uuid::new_v4();
    config.teams.insert(
        team,
        TeamRateLimit {
            rate_per_second: 7,
            burst: 5,
        },
    );
    let limits = config.settings().expect("enabled");
    assert_eq!(
        (
            limits.for_team(team).rate_per_second,
            limits.for_team(team).burst
        ),
        (7, 5)
    );
    assert_eq!(limits.for_team(crewbus_domain::Uuid::new_v4()).burst, 1);
    config.enabled = false;
    assert_eq!(config.settings(), None, "off is no limit, overrides or not");
}

#[tokio::test]
async fn with_the_limit_off_sends_are_not_limited() {
    let off = start(1, 1, false).await;
    let conv = conversation(&off).await;
    for n in 0..5 {
        assert_eq!(send(&off, 0, &conv, &format!("o{n}")).await.0, 201);
    }
    off.finish_test().await;
}

#[test]
fn a_zero_rate_or_burst_is_refused_at_load() {
    let mut config = test_config();
    config.rate_limit.enabled = true;
    config.rate_limit.burst = 0;
    assert!(matches!(
        config.validate(),
        Err(crewbus_domain::BusError::Invalid { .. })
    ));
    let mut config = test_config();
    config.rate_limit.teams.insert(
        crewbus_domain::Uuid::new_v4(),
        TeamRateLimit {
            rate_per_second: 0,
            burst: 1,
        },
    );
    assert!(matches!(
        config.validate(),
        Err(crewbus_domain::BusError::Invalid { .. })
    ));
}

#[test]
fn the_section_loads_from_toml_with_team_overrides_keyed_by_team_id() {
    let dir = std::env::temp_dir().join(format!("crewbus-rate-{}", crewbus_domain::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("crewbus.toml");
    let team = crewbus_domain::Uuid::new_v4();
    std::fs::write(
        &path,
        format!(
            "[rate_limit]\nenabled = true\nrate_per_second = 20\nburst = 40\n\
             [rate_limit.teams.\"{team}\"]\nrate_per_second = 200\nburst = 400\n"
        ),
    )
    .unwrap();
    let config = crewbus::config::Config::load(Some(&path)).unwrap();
    let limits = config.rate_limit.settings().unwrap();
    assert_eq!(
        (limits.default.rate_per_second, limits.default.burst),
        (20, 40)
    );
    assert_eq!(limits.for_team(team).burst, 400);
    std::fs::write(&path, "[rate_limit]\nburst = 0\n").unwrap();
    assert!(matches!(
        crewbus::config::Config::load(Some(&path)),
        Err(crewbus_domain::BusError::Invalid { .. })
    ));
    std::fs::remove_dir_all(&dir).unwrap();
}
