//! The send rate limit per agent (`[rate_limit]`) end to end on the memory store over HTTP: a
//! burst is granted, the next send is `429 rate_limited` with `Retry-After` and nothing recorded,
//! the bucket refills on the bus clock, a team override and another agent have buckets of their
//! own, and a rate limit off sends freely; and two servers on one Postgres sharing an agent's
//! bucket within the stated tolerance (`burst + servers × chunk`).

use crate::common;

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

/// Two servers on one Postgres share each agent's bucket: each leases `chunk` tokens at a time
/// from the agent's row. On a stopped clock (no refill), both servers together grant exactly
/// the burst; after a refill while each server still holds part of a chunk, the window's sends
/// are `burst` + what the servers held — never more than `burst + servers × chunk`, the stated
/// tolerance. The agent's bucket is one row of the ledger.
#[tokio::test]
async fn two_servers_on_one_postgres_share_an_agents_bucket_within_burst_plus_servers_times_chunk()
{
    use std::sync::Arc;

    use crewbus::compose::postgres_with_pool;
    use crewbus_benches::kit::servers::Servers;
    use crewbus_conformance::postgres::TestDatabase;
    use crewbus_memory::ManualClock;

    let (burst, chunk) = (20u32, 4u32);
    let mut config = test_config();
    config.rate_limit.enabled = true;
    config.rate_limit.rate_per_second = 1;
    config.rate_limit.burst = burst;
    config.rate_limit.chunk = chunk;
    let db = crewbus_benches::kit::postgres::database("rate_limit::two_servers").await;
    let clock = ManualClock::new(chrono::Utc::now());
    let mut buses = Vec::new();
    for _ in 0..2 {
        let composed = postgres_with_pool(&config, db.pool().clone(), Arc::new(clock.clone()))
            .await
            .unwrap();
        buses.push(composed.bus);
    }
    let Servers {
        servers, agents, ..
    } = Servers::start(&config, &buses, "team-r", None, &["alice", "bob"]).await;
    let (alice, bob) = (&agents[0], &agents[1]);
    let http = reqwest::Client::new();
    let conv: Value = http
        .post(format!("{}/v1/conversations", servers[0].url()))
        .bearer_auth(&alice.token)
        .json(&json!({"title": "rate", "members": [bob.id]}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let conv = uuid_of(&conv["id"]);
    let mut n = 0;
    // Sends alternate between the servers until both refuse; returns how many were granted.
    let until_both_refuse = async |n: &mut usize| {
        let mut granted = 0u32;
        let mut refused = [false, false];
        while !(refused[0] && refused[1]) {
            for (i, server) in servers.iter().enumerate() {
                *n += 1;
                let r = http
                    .post(format!("{}/v1/conversations/{conv}/messages", server.url()))
                    .bearer_auth(&alice.token)
                    .json(&json!({"request_id": format!("r{n}"), "body": "hi"}))
                    .send()
                    .await
                    .unwrap();
                match r.status().as_u16() {
                    201 => {
                        granted += 1;
                        refused[i] = false;
                    }
                    429 => refused[i] = true,
                    other => panic!("send answered {other}"),
                }
                assert!(granted <= 4 * burst, "no refusal after {granted} sends");
            }
        }
        granted
    };
    // A stopped clock: the servers share exactly the burst.
    assert_eq!(until_both_refuse(&mut n).await, burst);
    let rows = |db: &TestDatabase| {
        let pool = db.pool().clone();
        async move {
            sqlx::query_scalar::<_, i64>("SELECT count(*) FROM send_allowances")
                .fetch_one(&pool)
                .await
                .unwrap()
        }
    };
    assert_eq!(rows(&db).await, 1, "one bucket row for alice");

    // Each server takes one chunk after a refill and keeps chunk - 1 of it; a further refill to
    // the full burst, then the window: burst + what the servers still held.
    clock.advance(Duration::from_secs(u64::from(burst)));
    for server in &servers {
        n += 1;
        let r = http
            .post(format!("{}/v1/conversations/{conv}/messages", server.url()))
            .bearer_auth(&alice.token)
            .json(&json!({"request_id": format!("r{n}"), "body": "hi"}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 201);
    }
    clock.advance(Duration::from_secs(u64::from(burst)));
    let window = until_both_refuse(&mut n).await;
    assert_eq!(window, burst + 2 * (chunk - 1));
    assert!(window <= burst + 2 * chunk);
    for server in servers {
        server.stop().await;
    }
    db.passed().await;
}
