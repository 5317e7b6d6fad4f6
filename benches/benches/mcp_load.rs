//! The MCP path's own ceiling (issue 21 item 7): `crewbus load` driving agents through `/mcp`
//! with rmcp's client (`send_message`, `fetch_inbox`, `confirm_deliveries`) ÷ the same load over
//! the HTTP API, in one run, against one in-process `crewbus serve` on the memory store (so the
//! figure is the interfaces' cost — JSON-RPC, the tool dispatch, rmcp's client — not a
//! database's).
//!
//! Set-up (untimed): the memory composition (`compose::memory_with`, default configuration),
//! its server on 127.0.0.1:0, one team of 8 agents with tokens.
//!
//! Measured: `crewbus::load::run` (the library of `crewbus load`) with 16 senders, 2
//! conversations of 4 members (3 recipients per message), 256-byte bodies, unpaced; rounds
//! alternate HTTP, MCP, HTTP, MCP… (4 of each in bench mode, 2,000 messages a round), each ending
//! with the zero-loss check (asserted). The figure per transport is Σ accepted ÷ Σ send time
//! (messages/s) and Σ confirmed deliveries ÷ Σ total time (deliveries/s). Printed: both, and
//! MCP ÷ HTTP (the goal: ≥ 0.8).
//!
//! Test mode (`cargo test --bench mcp_load`): one round each of 60 messages, checked to pass the
//! zero-loss check, not measured. Bench mode: `cargo bench -p crewbus-benches --bench mcp_load`.

use std::sync::Arc;
use std::time::Duration;

use crewbus::client::ApiClient;
use crewbus::compose;
use crewbus::config::Config;
use crewbus::load::{self, LoadAgent, LoadPlan, LoadTeam, Transport};
use crewbus::server::Server;
use crewbus::shutdown::Shutdown;
use crewbus_ports::SystemClock;

mod support;

use support::cpu::load_average;
use support::measuring;

#[derive(Default)]
struct Totals {
    accepted: u64,
    send_seconds: f64,
    delivered: u64,
    total_seconds: f64,
}

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
    let (rounds, messages) = if bench { (4, 2_000) } else { (1, 60) };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let config = Config {
            listen: "127.0.0.1:0".parse().expect("an address"),
            ..Config::default()
        };
        let memory = compose::memory_config(&config);
        let (composed, _parts) =
            compose::memory_with(&config, Arc::new(SystemClock), memory).expect("compose memory");
        let bus = composed.bus;
        let server = Server::start(bus.clone(), config.listen, Shutdown::new())
            .await
            .expect("server");
        let mut totals = [Totals::default(), Totals::default()];
        for round in 0..rounds {
            for (i, transport) in [Transport::Http, Transport::Mcp].into_iter().enumerate() {
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
                let t = &mut totals[i];
                t.accepted += report.accepted;
                t.send_seconds += report.send_seconds;
                t.delivered += report.delivered;
                t.total_seconds += report.total_seconds;
            }
        }
        let rate = |t: &Totals| {
            (
                t.accepted as f64 / t.send_seconds,
                t.delivered as f64 / t.total_seconds,
            )
        };
        let (http, mcp) = (rate(&totals[0]), rate(&totals[1]));
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
    });
}
