//! The MCP path's own ceiling (issue 21 item 7): `crewbus-load` driving agents through `/mcp`
//! with rmcp's client (`send_message`, `fetch_inbox`, `confirm_deliveries`) ÷ the same load over
//! the HTTP API, in one run, against one in-process `crewbus serve` on the memory store (so the
//! figure is the interfaces' cost — JSON-RPC, the tool dispatch, rmcp's client — not a
//! database's).
//!
//! Set-up (untimed): the memory composition (`compose::memory_with_wakeups`, default
//! configuration), its server on 127.0.0.1:0, one team of 8 agents with tokens.
//!
//! Measured: `crewbus_benches::load::run` (the library of `crewbus-load`) with 16 senders, 2
//! conversations of 4 members (3 recipients per message), 256-byte bodies, unpaced; rounds
//! alternate HTTP, MCP, HTTP, MCP… (4 of each in bench mode, 2,000 messages a round), each ending
//! with the zero-loss check (asserted). The figure per transport is Σ accepted ÷ Σ send time
//! (messages/s) and Σ confirmed deliveries ÷ Σ total time (deliveries/s). Printed: both, and
//! MCP ÷ HTTP (the goal: ≥ 0.8).
//!
//! Then the kept-alive case (issue 33 item 0), as an MCP host calls: one agent calling
//! `tools/call inbox_status` one call after another on one kept-alive HTTP/1.1 connection (a
//! reqwest client reading each SSE answer to its end, so its pooled connection is reused; 1
//! warm-up call, then 500 timed in bench mode, 20 in test mode), against a server of its own on
//! the embedded store (the default `crewbus serve`). Printed: the calls' p50, p99 (nearest-rank,
//! from `support::latency`'s histogram: 3 significant digits; before it, the sample at index
//! round((n − 1) × p) of the sorted list) and calls/s.
//! Asserted in both modes: the median call takes under 30 ms — an answer held by Nagle's
//! algorithm until the client's delayed ACK takes 40 ms or more (without TCP_NODELAY on the
//! accepted socket: p50 42.8 ms in test mode). rmcp's own client, which the load rounds use,
//! did not show the wait (its calls stayed at about 3 ms without TCP_NODELAY).
//!
//! Test mode (`cargo test --bench mcp_load`): one round each of 60 messages, checked to pass the
//! zero-loss check, not measured, and the kept-alive calls. Bench mode: `cargo bench -p
//! crewbus-benches --bench mcp_load`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crewbus::client::ApiClient;
use crewbus::compose;
use crewbus::config::Config;
use crewbus::server::Server;
use crewbus::shutdown::Shutdown;
use crewbus_benches::load::{self, LoadAgent, LoadPlan, LoadTeam, Transport};
use crewbus_memory::MemoryWakeups;
use crewbus_ports::SystemClock;

mod support;
use crewbus_benches::kit::store::sqlite_bus;

use support::cpu::load_average;
use support::latency::{Latencies, ms};
use support::measuring;
use support::rounds::{Order, Tally, rounds};

fn plan(messages: u64, transport: Transport) -> LoadPlan {
    LoadPlan {
        conversations: 2,
        members: 4,
        messages,
        rate: 0.0,
        senders: 16,
        body_bytes: (256, 256),
        fetch_limit: 100,
        retry_for: Duration::from_secs(30),
        drain_timeout: Duration::from_secs(60),
        progress: false,
        receive_after_send: false,
        transport,
    }
}

fn main() {
    let bench = measuring();
    eprintln!(
        "mcp load bench ({}): load average {}",
        if bench { "bench mode" } else { "test mode" },
        load_average()
    );
    let (count, messages) = if bench { (4, 2_000) } else { (1, 60) };
    let runtime = support::runtime();
    runtime.block_on(async {
        let config = Config {
            listen: "127.0.0.1:0".parse().expect("an address"),
            ..Config::default()
        };
        let memory = compose::memory_config(&config);
        let wakeups = Arc::new(MemoryWakeups::new());
        let (composed, _parts) =
            compose::memory_with_wakeups(&config, Arc::new(SystemClock), memory, wakeups)
                .expect("compose memory");
        let bus = composed.bus;
        let server = Server::start(bus.clone(), config.listen, Shutdown::new())
            .await
            .expect("server");
        // Per transport: Σ accepted over Σ send time, Σ confirmed deliveries over Σ total time.
        let (accepted, delivered) = (Tally::new(), Tally::new());
        let transports = [(0, Transport::Http), (1, Transport::Mcp)];
        for (round, (i, transport)) in rounds(count, transports, Order::Same) {
            // A team per round and transport: each round starts from empty inboxes.
            let team = bus
                .add_team(&format!("mcp-bench-{round}-{i}"), None, None)
                .await
                .expect("team");
            let mut agents = Vec::new();
            for a in 0..8 {
                let new = bus
                    .add_agent(team.id, &format!("a{a}"))
                    .await
                    .expect("agent");
                agents.push(LoadAgent {
                    id: new.agent.id,
                    client: ApiClient::new(server.url(), Some(new.token)),
                });
            }
            let teams = vec![LoadTeam {
                name: team.name.clone(),
                agents,
            }];
            let report = load::run(plan(messages, transport), teams)
                .await
                .expect("the load run");
            assert!(
                report.zero_loss.passed,
                "{transport:?}: zero-loss check: {:?}",
                report.zero_loss.problems
            );
            let seconds = Duration::from_secs_f64;
            accepted.add(transport, report.accepted, seconds(report.send_seconds));
            delivered.add(transport, report.delivered, seconds(report.total_seconds));
        }
        let rate = |t: Transport| {
            let per_second = |(n, d): (u64, Duration)| n as f64 / d.as_secs_f64();
            (per_second(accepted.sum(&t)), per_second(delivered.sum(&t)))
        };
        let (http, mcp) = (rate(Transport::Http), rate(Transport::Mcp));
        eprintln!();
        eprintln!(
            "| transport | accepted msg/s | confirmed deliveries/s |\n|---|---:|---:|\n\
             | HTTP API | {:.0} | {:.0} |\n| MCP (rmcp client) | {:.0} | {:.0} |\n\
             | MCP ÷ HTTP | {:.3} | {:.3} |",
            http.0,
            http.1,
            mcp.0,
            mcp.1,
            mcp.0 / http.0,
            mcp.1 / http.1
        );
        server.stop().await;
        kept_alive(if bench { 500 } else { 20 }).await;
    });
}

/// `calls` sequential `inbox_status` calls of one agent on one kept-alive connection (after
/// one warm-up call), against a server of its own on the embedded store: prints p50, p99 and
/// calls/s; asserts the median call is under 30 ms (no answer waits for the client's delayed
/// ACK).
async fn kept_alive(calls: usize) {
    let mut config = Config {
        listen: "127.0.0.1:0".parse().expect("an address"),
        ..Config::default()
    };
    let (bus, _dir) = sqlite_bus(&mut config).await;
    let server = Server::start(bus.clone(), config.listen, Shutdown::new())
        .await
        .expect("server");
    let team = bus
        .add_team("mcp-bench-kept-alive", None, None)
        .await
        .expect("team");
    let agent = bus.add_agent(team.id, "solo").await.expect("agent");
    // One connection, kept alive: reqwest reuses its pooled connection when the answer was read
    // to its end (an MCP host's HTTP client does the same).
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(1)
        .build()
        .expect("HTTP client");
    let url = format!("{}/mcp", server.url());
    let body = serde_json::json!({
        "jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "inbox_status", "arguments": {}},
    })
    .to_string();
    let call = || async {
        let answer = http
            .post(&url)
            .bearer_auth(&agent.token)
            .header("accept", "application/json, text/event-stream")
            .header("content-type", "application/json")
            .header("mcp-protocol-version", "2025-11-25")
            .body(body.clone())
            .send()
            .await
            .expect("an answer");
        assert_eq!(answer.status(), 200);
        let text = answer.text().await.expect("the answer's body");
        assert!(text.contains("\"isError\":false"), "{text}");
    };
    call().await;
    let mut took = Latencies::new();
    let started = Instant::now();
    for _ in 0..calls {
        let at = Instant::now();
        call().await;
        took.record(at.elapsed());
    }
    let elapsed = started.elapsed();
    let (p50, p99) = (took.p50(), took.p99());
    eprintln!(
        "\n| MCP, one kept-alive connection (embedded store) | calls | p50 | p99 | calls/s |\n\
         |---|---:|---:|---:|---:|\n\
         | `inbox_status`, one after another | {calls} | {:.2} ms | {:.2} ms | {:.0} |",
        ms(p50),
        ms(p99),
        calls as f64 / elapsed.as_secs_f64()
    );
    assert!(
        p50 < Duration::from_millis(30),
        "MCP calls on a kept-alive connection wait (Nagle and the delayed ACK?): p50 {p50:?}"
    );
    server.stop().await;
}
