//! `crewbus-load` (the library function) against the app on the embedded memory adapters: the
//! whole run — conversations, paced senders, fetching agents, the zero-loss check — in-process,
//! over the HTTP API and over MCP (rmcp's client at `/mcp`: `send_message`, `fetch_inbox`,
//! `confirm_deliveries`).

use crate::common;

use crewbus_benches::load::{LoadAgent, LoadPlan, LoadTeam, Transport};
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn load_on_memory_delivers_everything_once_and_the_check_agrees() {
    load_delivers_everything_once(Transport::Http).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn load_through_mcp_delivers_everything_once_and_the_check_agrees() {
    load_delivers_everything_once(Transport::Mcp).await;
}

async fn load_delivers_everything_once(transport: Transport) {
    let app = common::TestApp::start(&["a", "b", "c", "d"]).await;
    let team = LoadTeam {
        name: "team-a".into(),
        agents: app
            .agents
            .iter()
            .map(|a| LoadAgent {
                id: a.id,
                client: a.client.clone(),
            })
            .collect(),
    };
    let plan = LoadPlan {
        conversations: 2,
        members: 4,
        messages: 200,
        rate: 0.0,
        senders: 4,
        body_bytes: (10, 500),
        fetch_limit: 50,
        retry_for: Duration::from_secs(10),
        drain_timeout: Duration::from_secs(30),
        progress: false,
        receive_after_send: false,
        transport,
    };
    let report = crewbus_benches::load::run(plan, vec![team]).await.unwrap();
    let z = &report.zero_loss;
    assert!(z.passed, "{z:#?}");
    assert_eq!((report.accepted, report.rejected), (200, 0));
    assert_eq!((report.deliveries_expected, report.delivered), (600, 600));
    assert_eq!((z.messages_checked, z.receipts_checked), (200, 600));
    assert_eq!(report.per_team[0].accepted, 200);
    assert_eq!(report.send_to_delivered.count, 600);
    app.finish_test().await;
}
