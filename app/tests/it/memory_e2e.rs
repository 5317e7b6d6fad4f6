//! End to end on the memory combination (ledger, bodies and inbox in memory): the app on
//! 127.0.0.1:0, driven through its HTTP API, with a manual clock for hand-out grace and ack wait.

use crate::common;

use std::collections::HashSet;
use std::time::Duration;

use common::scenarios;
use common::*;
use crewbus::client::uuid_of;
use crewbus_domain::Uuid;
use crewbus_ports::Inbox;
use reqwest::Method;
#[tokio::test]
async fn three_agents_converse_and_every_recipient_gets_every_message_exactly_once() {
    let app = MemoryApp::start(&["alice", "bob", "carol"]).await;
    scenarios::three_agents_converse_and_every_recipient_gets_every_message_exactly_once(&app)
        .await;
    app.finish_test().await;
}

#[tokio::test]
async fn an_unconfirmed_fetch_is_redelivered_after_the_grace_and_never_after_confirm() {
    let app = MemoryApp::start(&["alice", "bob"]).await;
    scenarios::an_unconfirmed_fetch_is_redelivered_after_the_grace_and_never_after_confirm(&app)
        .await;
    app.finish_test().await;
}

#[tokio::test]
async fn a_crash_between_commit_and_ack_redelivers_and_is_recognised() {
    let app = MemoryApp::start(&["alice", "bob"]).await;
    scenarios::a_crash_between_commit_and_ack_redelivers_and_is_recognised(&app).await;
    app.finish_test().await;
}

#[tokio::test]
async fn a_deleted_consumer_is_reported_absent_and_delivery_continues() {
    let app = MemoryApp::start(&["alice", "bob"]).await;
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
    alice.client.send(conv, "r1", "one").await.unwrap();
    let got = fetch_n(bob, 1).await; // creates the consumer
    bob.client.confirm(&delivery_ids(&got)).await.unwrap();
    for k in 2..=4 {
        alice
            .client
            .send(conv, &format!("r{k}"), "more")
            .await
            .unwrap();
    }
    eventually("references published", 10, || async {
        let s = app
            .parts
            .backends
            .team_inbox(app.team.id)
            .inbox_status(&bob.recipient_key)
            .await
            .unwrap();
        (s.pending == 3).then_some(())
    })
    .await;
    assert!(
        app.parts
            .backends
            .team_inbox(app.team.id)
            .delete_consumer(&bob.recipient_key)
    );
    let (status, v) = bob
        .client
        .call(Method::GET, "/v1/inbox/status", None)
        .await
        .unwrap();
    assert_eq!(status, 200);
    assert_eq!(v["present"], false, "{v}");
    let got = fetch_n(bob, 3).await;
    let ids: HashSet<Uuid> = message_ids(&got).into_iter().collect();
    assert_eq!(ids.len(), 3);
    let r = bob.client.confirm(&delivery_ids(&got)).await.unwrap();
    assert!(r.iter().all(|r| r["outcome"] == "confirmed"));
    app.advance(Duration::from_secs(120));
    assert!(bob.client.fetch(10).await.unwrap().is_empty());
}

#[tokio::test]
async fn an_overflowed_inbox_is_topped_up_from_the_ledger() {
    let config = test_config();
    let mut memory = crewbus::compose::memory_config(&config);
    memory.inbox.max_messages = 3; // discard-old beyond 3 references
    let app = MemoryApp::start_with(config, memory, &["alice", "bob"]).await;
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
    for k in 0..10 {
        alice
            .client
            .send(conv, &format!("r{k}"), &format!("m{k}"))
            .await
            .unwrap();
    }
    // Wait until every message is stored and its reference was published (7 were discarded).
    eventually("references published", 10, || async {
        let h = app.bus.health().await;
        (h.publication_pending == Some(0) && h.inbox_events_pending == Some(0)).then_some(())
    })
    .await;
    assert_eq!(
        app.parts
            .backends
            .team_inbox(app.team.id)
            .stored_references(),
        3
    );
    // The inbox has 3; past the top-up delay the ledger hands out the other 7.
    app.advance(Duration::from_secs(3));
    let got = fetch_n(bob, 10).await;
    let bodies: HashSet<String> = got
        .iter()
        .map(|d| d["body"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(bodies.len(), 10, "every message exactly once");
    bob.client.confirm(&delivery_ids(&got)).await.unwrap();
    app.advance(Duration::from_secs(120));
    assert!(bob.client.fetch(100).await.unwrap().is_empty());
}

#[tokio::test]
async fn history_stops_before_a_pending_message_and_an_outage_queues_sends() {
    let app = MemoryApp::start(&["alice", "bob"]).await;
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
    alice.client.send(conv, "r1", "one").await.unwrap();
    eventually("first stored", 10, || async {
        let h = alice.client.history(conv, 0, 10).await.unwrap();
        (h["messages"][0]["absence"].is_null() && h["messages"][0]["body"] == "one").then_some(())
    })
    .await;
    // The body backend goes down: sends are still accepted and queued in the outbox.
    app.parts
        .backends
        .bodies(app.team.id)
        .faults()
        .fail_next_publishes(1_000);
    let v = alice.client.send(conv, "r2", "two").await.unwrap();
    assert_eq!(v["message"]["publication"], "pending_publication");
    eventually("a failed attempt", 10, || async {
        let h = app.bus.health().await;
        (app.bus.metrics().relay_retried.get() > 0 && h.publication_pending == Some(1))
            .then_some(())
    })
    .await;
    let h = bob.client.history(conv, 0, 10).await.unwrap();
    let items = h["messages"].as_array().unwrap();
    assert_eq!(items.len(), 2, "{h}");
    assert_eq!(items[1]["absence"], "pending");
    assert!(items[1]["body"].is_null());
    assert_eq!(
        h["next_after_seq"], 1,
        "the cursor stays before the pending message"
    );
    // The outage ends: after the backoff the relay stores it and history moves on.
    app.parts.backends.bodies(app.team.id).faults().clear();
    app.advance(Duration::from_secs(5));
    let h = eventually("second stored", 10, || async {
        app.advance(Duration::from_secs(1));
        let h = bob.client.history(conv, 1, 10).await.unwrap();
        (h["messages"][0]["body"] == "two").then_some(h)
    })
    .await;
    assert_eq!(h["next_after_seq"], 2);
    let got = fetch_n(bob, 2).await;
    assert_eq!(got.len(), 2);
}

#[tokio::test]
async fn a_lost_puback_is_reconciled_not_duplicated() {
    let app = MemoryApp::start(&["alice", "bob"]).await;
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
    let bodies = app.parts.backends.bodies(app.team.id);
    bodies.faults().lose_next_confirmations(1);
    alice.client.send(conv, "r1", "one").await.unwrap();
    let got = eventually("stored after reconcile", 10, || async {
        app.advance(Duration::from_secs(1));
        let got = bob.client.fetch(10).await.unwrap();
        (!got.is_empty()).then_some(got)
    })
    .await;
    assert_eq!(got[0]["body"], "one");
    assert_eq!(bodies.stored_messages(), 1, "the body was stored once");
}

#[tokio::test]
async fn health_metrics_and_openapi() {
    let app = MemoryApp::start(&["alice"]).await;
    let anon = app.anonymous();
    let (status, v) = anon.call(Method::GET, "/health", None).await.unwrap();
    assert_eq!((status, v["status"].as_str()), (200, Some("ok")));
    assert_eq!(v["broker"], "not_configured");
    app.parts.ledger.set_unavailable(true);
    let (status, v) = anon.call(Method::GET, "/health", None).await.unwrap();
    assert_eq!((status, v["ledger"].as_str()), (503, Some("unavailable")));
    app.parts.ledger.set_unavailable(false);
    let (status, doc) = anon.call(Method::GET, "/openapi.json", None).await.unwrap();
    assert_eq!(status, 200);
    for path in [
        "/v1/conversations/{id}/messages",
        "/v1/inbox/fetch",
        "/v1/inbox/confirm",
        "/health",
    ] {
        assert!(doc["paths"][path].is_object(), "{path} missing");
    }
    assert!(doc["components"]["securitySchemes"]["bearer"].is_object());
    let resp = reqwest::get(format!("{}/metrics", app.server.url()))
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let text = resp.text().await.unwrap();
    for name in [
        "crewbus_publication_pending",
        "crewbus_publication_failed",
        "crewbus_publication_oldest_pending_age_seconds",
        "crewbus_deliveries_total",
        "crewbus_relay_latency_seconds_bucket",
        "crewbus_delivery_latency_seconds_bucket",
        "crewbus_inbox_fetch_latency_seconds_bucket",
    ] {
        assert!(text.contains(name), "{name} missing");
    }
}

#[tokio::test]
async fn two_agents_may_use_one_request_id() {
    let app = MemoryApp::start(&["alice", "bob"]).await;
    scenarios::two_agents_may_use_one_request_id(&app).await;
    app.finish_test().await;
}

#[tokio::test]
async fn bad_input_of_every_kind_gets_a_clear_error() {
    let app = MemoryApp::start(&["alice", "bob"]).await;
    scenarios::bad_input_of_every_kind_gets_a_clear_error(&app).await;
    app.finish_test().await;
}

#[tokio::test]
async fn one_teams_unsendable_messages_never_block_another_team() {
    let app = MemoryApp::start(&["alice", "bob"]).await;
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
    // Team A's body store refuses everything for now.
    app.parts
        .backends
        .bodies(app.team.id)
        .faults()
        .fail_next_publishes(1_000_000);
    for k in 0..20 {
        alice
            .client
            .send(conv, &format!("a{k}"), "stuck")
            .await
            .unwrap();
    }
    // Team B keeps flowing.
    let carol = app.other_team_agent("carol").await;
    let team_b = app.bus.find_team("team-carol").await.unwrap();
    let dave = app.bus.add_agent(team_b.id, "dave").await.unwrap();
    let dave_client = crewbus::client::ApiClient::new(app.server.url(), Some(dave.token.clone()));
    let conv_b = uuid_of(
        &carol
            .client
            .create_conversation("b", &[dave.agent.id])
            .await
            .unwrap()["id"],
    );
    for k in 0..5 {
        carol
            .client
            .send(conv_b, &format!("b{k}"), "flows")
            .await
            .unwrap();
    }
    let dave_agent = TestAgent {
        name: "dave".into(),
        id: dave.agent.id,
        recipient_key: dave.agent.recipient_key.clone(),
        token: dave.token.clone(),
        client: dave_client,
    };
    let got = fetch_n(&dave_agent, 5).await;
    assert!(got.iter().all(|d| d["body"] == "flows"));
    // Team A's messages are still pending, not failed, and nothing reached bob.
    let h = bob.client.history(conv, 0, 100).await.unwrap();
    assert_eq!(h["messages"][0]["absence"], "pending");
    assert!(bob.client.fetch(10).await.unwrap().is_empty());
    app.finish_test().await;
}

#[tokio::test]
async fn runs_get_the_bus_records_of_send_confirm_and_acknowledge() {
    let app = MemoryApp::start(&["alice", "bob"]).await;
    scenarios::runs_get_the_bus_records_of_send_confirm_and_acknowledge(&app).await;
    app.finish_test().await;
}

#[tokio::test]
async fn retention_removes_old_bodies_and_history_explains_them() {
    let mut config = test_config();
    config.bus.retention_days = 1;
    let memory = crewbus::compose::memory_config(&config);
    let app = MemoryApp::start_with(config, memory, &["alice", "bob"]).await;
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
    alice.client.send(conv, "old", "old news").await.unwrap();
    eventually("stored", 10, || async {
        (app.bus.health().await.publication_pending == Some(0)).then_some(())
    })
    .await;
    app.advance(Duration::from_secs(2 * 86_400));
    alice.client.send(conv, "new", "fresh").await.unwrap();
    eventually("stored", 10, || async {
        (app.bus.health().await.publication_pending == Some(0)).then_some(())
    })
    .await;
    let run = app.bus.retention_run().await.unwrap();
    assert_eq!((run.removed, run.marked, run.failed), (1, 1, 0));
    let h = bob.client.history(conv, 0, 10).await.unwrap();
    assert_eq!(h["messages"][0]["absence"], "retained");
    assert!(h["messages"][0]["body"].is_null());
    assert_eq!(h["messages"][1]["body"], "fresh");
    assert_eq!(
        h["next_after_seq"], 2,
        "retained messages do not stop the cursor"
    );
    // A second run removes nothing.
    assert_eq!(app.bus.retention_run().await.unwrap().removed, 0);
    app.finish_test().await;
}

// The `/metrics` exposition, pinned: every family's name, type and help, every sample's name and
// labels (the histograms' `le` bounds exactly as written), and the values that are deterministic
// after the traffic below. Prometheus text 0.0.4 unless OpenMetrics is asked for.

/// The counters: (name, help) as scraped in the Prometheus text format.
const COUNTERS: [(&str, &str); 23] = [
    ("crewbus_messages_sent_total", "Messages accepted by send."),
    (
        "crewbus_relay_published_total",
        "Bodies confirmed by a body backend.",
    ),
    (
        "crewbus_relay_retried_total",
        "Relay attempts to be retried.",
    ),
    (
        "crewbus_request_timeouts_total",
        "Requests answered timeout: not finished within bus.request_timeout_ms (plus a fetch's wait).",
    ),
    (
        "crewbus_relay_failed_total",
        "Messages the relay marked failed.",
    ),
    (
        "crewbus_references_published_total",
        "Inbox references published.",
    ),
    (
        "crewbus_deliveries_total",
        "Deliveries handed to agents (redeliveries included).",
    ),
    (
        "crewbus_deliveries_confirmed_total",
        "Receipts committed by confirm.",
    ),
    (
        "crewbus_inbox_ack_failures_total",
        "Inbox acks that failed after the receipt was committed.",
    ),
    (
        "crewbus_inbox_fetch_failures_total",
        "Inbox fetches whose inbox failed; the ledger topped the agent up alone.",
    ),
    (
        "crewbus_fetch_wakeups_total",
        "Waiting fetches woken to look again.",
    ),
    (
        "crewbus_fetch_bytes_waits_total",
        "Fetches that waited for room for their bodies (bus.max_body_bytes_in_flight).",
    ),
    (
        "crewbus_fetch_bytes_shortened_total",
        "Fetches that answered fewer deliveries for lack of room for their bodies.",
    ),
    (
        "crewbus_fetch_wait_errors_total",
        "Woken waiting fetches whose re-fetch failed (they kept waiting).",
    ),
    (
        "crewbus_wakeup_listener_lost_total",
        "Wake-up listeners whose session was lost.",
    ),
    (
        "crewbus_wakeup_listener_reconnected_total",
        "Wake-up listeners started again after a loss.",
    ),
    (
        "crewbus_feed_listener_lost_total",
        "Console feed listeners whose session was lost.",
    ),
    (
        "crewbus_feed_listener_reconnected_total",
        "Console feed listeners subscribed again after a loss.",
    ),
    (
        "crewbus_wait_sweeps_total",
        "Safety sweeps over this process's waiting fetches and watches.",
    ),
    (
        "crewbus_watch_reads_total",
        "Ledger reads by inbox watches (one per watch, one per wake-up or lapse while it waits).",
    ),
    (
        "crewbus_watch_errors_total",
        "Reads of waiting inbox watches that failed (they kept waiting).",
    ),
    (
        "crewbus_mcp_tool_calls_total",
        "MCP tool calls (bus errors included).",
    ),
    (
        "crewbus_mcp_tool_errors_total",
        "MCP tool calls answered with a bus error (isError).",
    ),
];

/// The ledger's gauges, read at scrape time: (name, help).
const GAUGES: [(&str, &str); 5] = [
    (
        "crewbus_fetch_bodies_in_flight_bytes",
        "Bytes of message bodies held by this server's fetches now.",
    ),
    (
        "crewbus_publication_pending",
        "Messages waiting for the relay.",
    ),
    (
        "crewbus_publication_failed",
        "Messages the relay gave up on.",
    ),
    (
        "crewbus_publication_oldest_pending_age_seconds",
        "Age of the oldest pending publication.",
    ),
    (
        "crewbus_inbox_events_pending",
        "Inbox events not yet published.",
    ),
];

/// The latency histograms: (name, help).
const HISTOGRAMS: [(&str, &str); 3] = [
    (
        "crewbus_relay_latency_seconds",
        "One relay publish to a body backend, seconds.",
    ),
    (
        "crewbus_inbox_fetch_latency_seconds",
        "One fetch of references from an inbox, seconds.",
    ),
    (
        "crewbus_delivery_latency_seconds",
        "Send to first hand-out, seconds.",
    ),
];

/// The histograms' bucket bounds, as the Prometheus text format writes them in `le`.
const LE: [&str; 13] = [
    "0.001", "0.0025", "0.005", "0.01", "0.025", "0.05", "0.1", "0.25", "0.5", "1", "2.5", "10",
    "+Inf",
];

/// One scraped exposition, checked for shape while parsed: every sample belongs to the family
/// whose `# HELP`/`# TYPE` lines came last, with a suffix its type allows.
#[derive(Debug)]
struct Exposition {
    /// (name, type, help) of each family, in order of appearance.
    families: Vec<(String, String, String)>,
    /// (family name, unit) of each `# UNIT` line (OpenMetrics only).
    units: Vec<(String, String)>,
    /// (series: name with labels as written, value as written) of each sample.
    samples: Vec<(String, String)>,
    /// Whether the text ends with OpenMetrics' `# EOF`.
    eof: bool,
}

impl Exposition {
    fn parse(text: &str, openmetrics: bool) -> Exposition {
        let mut e = Exposition {
            families: Vec::new(),
            units: Vec::new(),
            samples: Vec::new(),
            eof: false,
        };
        for line in text.lines() {
            assert!(!e.eof, "a line after # EOF: {line}");
            if line == "# EOF" {
                e.eof = true;
            } else if let Some(rest) = line.strip_prefix("# HELP ") {
                let (name, help) = rest.split_once(' ').expect(line);
                e.families.push((name.into(), String::new(), help.into()));
            } else if let Some(rest) = line.strip_prefix("# TYPE ") {
                let (name, kind) = rest.split_once(' ').expect(line);
                let family = e.families.last_mut().expect("# TYPE before # HELP");
                assert_eq!(family.0, name, "# TYPE of another family than # HELP");
                assert!(family.1.is_empty(), "two # TYPE lines: {line}");
                family.1 = kind.into();
            } else if let Some(rest) = line.strip_prefix("# UNIT ") {
                let (name, unit) = rest.split_once(' ').expect(line);
                assert_eq!(
                    e.families.last().map(|f| f.0.as_str()),
                    Some(name),
                    "{line}"
                );
                e.units.push((name.into(), unit.into()));
            } else {
                assert!(!line.starts_with('#'), "an unexpected comment: {line}");
                let (series, value) = line.rsplit_once(' ').expect(line);
                value.parse::<f64>().expect(line);
                let name = series.split('{').next().unwrap();
                let (family, kind, _) = e.families.last().expect("a sample before any family");
                let suffix = name.strip_prefix(family.as_str()).unwrap_or_else(|| {
                    panic!("{line} is not in the family {family}");
                });
                let allowed: &[&str] = match (kind.as_str(), openmetrics) {
                    ("counter", false) | ("gauge", _) => &[""],
                    ("counter", true) => &["_total"],
                    ("histogram", _) => &["_bucket", "_sum", "_count"],
                    _ => panic!("unexpected type {kind}"),
                };
                assert!(allowed.contains(&suffix), "{line}: suffix {suffix:?}");
                e.samples.push((series.into(), value.into()));
            }
        }
        e
    }

    /// The value written for `series` (name with labels).
    fn value(&self, series: &str) -> Option<f64> {
        self.samples
            .iter()
            .find(|(s, _)| s == series)
            .map(|(_, v)| v.parse().unwrap())
    }

    /// The families as (name, type, help), sorted.
    fn sorted_families(&self) -> Vec<(String, String, String)> {
        let mut f = self.families.clone();
        f.sort();
        f
    }

    /// The samples' series (name with labels as written), sorted.
    fn sorted_series(&self) -> Vec<String> {
        let mut s: Vec<String> = self.samples.iter().map(|(s, _)| s.clone()).collect();
        s.sort();
        s
    }
}

/// Today's families in the Prometheus text format, sorted.
fn expected_families() -> Vec<(String, String, String)> {
    let mut f: Vec<(String, String, String)> = COUNTERS
        .iter()
        .map(|(n, h)| (n.to_string(), "counter".to_string(), h.to_string()))
        .chain(
            GAUGES
                .iter()
                .map(|(n, h)| (n.to_string(), "gauge".into(), h.to_string())),
        )
        .chain(
            HISTOGRAMS
                .iter()
                .map(|(n, h)| (n.to_string(), "histogram".into(), h.to_string())),
        )
        .collect();
    f.sort();
    f
}

/// Today's series (one per sample line), sorted.
fn expected_series() -> Vec<String> {
    let mut s: Vec<String> = COUNTERS
        .iter()
        .chain(&GAUGES)
        .map(|(n, _)| n.to_string())
        .collect();
    for (n, _) in HISTOGRAMS {
        s.extend(LE.iter().map(|le| format!("{n}_bucket{{le=\"{le}\"}}")));
        s.push(format!("{n}_sum"));
        s.push(format!("{n}_count"));
    }
    s.sort();
    s
}

/// `GET /metrics` with an optional `Accept`: (`Content-Type`, body).
async fn scrape(app: &MemoryApp, accept: Option<&str>) -> (String, String) {
    let mut req = reqwest::Client::new().get(format!("{}/metrics", app.server.url()));
    if let Some(accept) = accept {
        req = req.header(reqwest::header::ACCEPT, accept);
    }
    let resp = req.send().await.unwrap();
    assert_eq!(resp.status(), 200);
    let content_type = resp.headers()[reqwest::header::CONTENT_TYPE]
        .to_str()
        .unwrap()
        .to_owned();
    (content_type, resp.text().await.unwrap())
}

/// Two messages sent to bob, fetched and confirmed; then scrapes (with `accept`) until the relay
/// and the reference worker have settled: both published, nothing pending.
async fn scrape_after_traffic(app: &MemoryApp, accept: Option<&str>) -> (String, String) {
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
    alice.client.send(conv, "r1", "one").await.unwrap();
    alice.client.send(conv, "r2", "two").await.unwrap();
    let got = fetch_n(bob, 2).await;
    bob.client.confirm(&delivery_ids(&got)).await.unwrap();
    eventually("relay and references settled", 10, || async {
        let (content_type, text) = scrape(app, accept).await;
        let settled = [
            "crewbus_relay_published_total 2",
            "crewbus_references_published_total 2",
            "crewbus_publication_pending 0",
            "crewbus_inbox_events_pending 0",
        ]
        .iter()
        .all(|l| text.lines().any(|t| t == *l));
        settled.then_some((content_type, text))
    })
    .await
}

/// Asserts the values that are deterministic after [`scrape_after_traffic`], and that each
/// histogram's buckets (`le`: the bounds as the scraped format writes them) are cumulative and end
/// at the count.
fn assert_values_after_traffic(e: &Exposition, le: &[String]) {
    for (name, want) in [
        ("crewbus_messages_sent_total", 2.0),
        ("crewbus_relay_published_total", 2.0),
        ("crewbus_relay_retried_total", 0.0),
        ("crewbus_request_timeouts_total", 0.0),
        ("crewbus_relay_failed_total", 0.0),
        ("crewbus_references_published_total", 2.0),
        ("crewbus_deliveries_total", 2.0),
        ("crewbus_deliveries_confirmed_total", 2.0),
        ("crewbus_inbox_ack_failures_total", 0.0),
        ("crewbus_inbox_fetch_failures_total", 0.0),
        ("crewbus_fetch_wakeups_total", 0.0),
        ("crewbus_fetch_wait_errors_total", 0.0),
        ("crewbus_fetch_bytes_waits_total", 0.0),
        ("crewbus_fetch_bytes_shortened_total", 0.0),
        ("crewbus_fetch_bodies_in_flight_bytes", 0.0),
        ("crewbus_wakeup_listener_lost_total", 0.0),
        ("crewbus_wakeup_listener_reconnected_total", 0.0),
        ("crewbus_feed_listener_lost_total", 0.0),
        ("crewbus_feed_listener_reconnected_total", 0.0),
        ("crewbus_watch_reads_total", 0.0),
        ("crewbus_watch_errors_total", 0.0),
        ("crewbus_mcp_tool_calls_total", 0.0),
        ("crewbus_mcp_tool_errors_total", 0.0),
        ("crewbus_publication_pending", 0.0),
        ("crewbus_publication_failed", 0.0),
        ("crewbus_publication_oldest_pending_age_seconds", 0.0),
        ("crewbus_inbox_events_pending", 0.0),
        ("crewbus_relay_latency_seconds_count", 2.0),
        ("crewbus_delivery_latency_seconds_count", 2.0),
    ] {
        assert_eq!(e.value(name), Some(want), "{name}");
    }
    for (n, _) in HISTOGRAMS {
        let buckets: Vec<f64> = le
            .iter()
            .map(|le| e.value(&format!("{n}_bucket{{le=\"{le}\"}}")).unwrap())
            .collect();
        assert!(buckets.windows(2).all(|w| w[0] <= w[1]), "{n}: {buckets:?}");
        let count = e.value(&format!("{n}_count")).unwrap();
        assert_eq!(buckets.last(), Some(&count), "{n}: +Inf is the count");
        assert!(count >= 1.0, "{n} observed");
        assert!(e.value(&format!("{n}_sum")).unwrap() >= 0.0);
    }
}

#[tokio::test]
async fn metrics_keep_their_names_labels_buckets_and_types() {
    let app = MemoryApp::start(&["alice", "bob"]).await;
    let (content_type, text) = scrape_after_traffic(&app, None).await;
    let params: Vec<&str> = content_type.split(';').map(str::trim).collect();
    assert_eq!(params[0], "text/plain", "{content_type}");
    assert!(params.contains(&"version=0.0.4"), "{content_type}");
    let e = Exposition::parse(&text, false);
    assert!(!e.eof, "no # EOF in the Prometheus text format");
    assert!(
        e.units.is_empty(),
        "no # UNIT in the Prometheus text format"
    );
    assert_eq!(e.sorted_families(), expected_families());
    assert_eq!(e.sorted_series(), expected_series());
    assert_values_after_traffic(&e, &LE.map(String::from));
    // A scraper that accepts the text format (or anything) gets the same.
    for accept in [
        "text/plain",
        "*/*",
        "text/plain;version=0.0.4;q=0.5,*/*;q=0.1",
    ] {
        let (content_type, text) = scrape(&app, Some(accept)).await;
        assert!(
            content_type.starts_with("text/plain"),
            "{accept}: {content_type}"
        );
        let e = Exposition::parse(&text, false);
        assert_eq!(e.sorted_families(), expected_families(), "{accept}");
        assert_eq!(e.sorted_series(), expected_series(), "{accept}");
    }
    app.finish_test().await;
}

/// The bounds as OpenMetrics writes them (its canonical numbers: `1.0`, not `1`).
const LE_OPENMETRICS: [&str; 13] = [
    "0.001", "0.0025", "0.005", "0.01", "0.025", "0.05", "0.1", "0.25", "0.5", "1.0", "2.5",
    "10.0", "+Inf",
];

#[tokio::test]
async fn metrics_in_openmetrics_when_the_scraper_asks_for_it() {
    let app = MemoryApp::start(&["alice", "bob"]).await;
    // Prometheus 2's scrape header: OpenMetrics first, the text format as a fallback.
    let accept = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;\
                  version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
    let (content_type, text) = scrape_after_traffic(&app, Some(accept)).await;
    let params: Vec<&str> = content_type.split(';').map(str::trim).collect();
    assert_eq!(params[0], "application/openmetrics-text", "{content_type}");
    assert!(params.contains(&"version=1.0.0"), "{content_type}");
    let e = Exposition::parse(&text, true);
    assert!(e.eof && text.ends_with("\n# EOF\n"), "ends with # EOF");
    // The same families, a counter's family named without `_total` (its sample keeps it).
    let mut families: Vec<(String, String, String)> = expected_families()
        .into_iter()
        .map(|(name, kind, help)| match kind.as_str() {
            "counter" => (name.strip_suffix("_total").unwrap().into(), kind, help),
            _ => (name, kind, help),
        })
        .collect();
    families.sort();
    assert_eq!(e.sorted_families(), families);
    let mut units: Vec<(String, String)> = e.units.clone();
    units.sort();
    assert_eq!(
        units,
        [
            ("crewbus_delivery_latency_seconds", "seconds"),
            ("crewbus_fetch_bodies_in_flight_bytes", "bytes"),
            ("crewbus_inbox_fetch_latency_seconds", "seconds"),
            ("crewbus_publication_oldest_pending_age_seconds", "seconds"),
            ("crewbus_relay_latency_seconds", "seconds"),
        ]
        .map(|(n, u)| (n.to_string(), u.to_string()))
    );
    // The same series but for the bounds' spelling.
    let mut series: Vec<String> = expected_series()
        .into_iter()
        .map(|s| {
            match LE
                .iter()
                .position(|le| s.ends_with(&format!("{{le=\"{le}\"}}")))
            {
                Some(i) => s.replace(
                    &format!("le=\"{}\"", LE[i]),
                    &format!("le=\"{}\"", LE_OPENMETRICS[i]),
                ),
                None => s,
            }
        })
        .collect();
    series.sort();
    assert_eq!(e.sorted_series(), series);
    assert_values_after_traffic(&e, &LE_OPENMETRICS.map(String::from));
    // Asked for alone, too.
    let (content_type, text) = scrape(&app, Some("application/openmetrics-text")).await;
    assert!(content_type.starts_with("application/openmetrics-text"));
    assert_eq!(Exposition::parse(&text, true).sorted_series(), series);
    app.finish_test().await;
}
