//! The embedded store's rows per table in `/metrics` (`crewbus_store_rows_total{table, op}`,
//! counted with `storage.count_rows`): the server composed as `crewbus serve` composes it
//! (SQLite in a fresh data directory, on the system clock) on 127.0.0.1:0, driven through its
//! HTTP API. A known number of messages sent to three recipients and confirmed moves the
//! counters of the tables each message writes by exactly what the message path writes: one
//! `messages` row and one body per message, one receipt per recipient, each receipt updated when
//! it is confirmed. The group commit's
//! counters (`crewbus_store_commits_total`, `crewbus_store_commit_parts_total`) move with them:
//! at least one transaction, never fewer parts than transactions.

use crate::common;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crewbus::client::{ApiClient, uuid_of};
use crewbus::compose::compose_server;
use crewbus::config::{Config, StorageKind};
use crewbus::server::Server;
use crewbus::shutdown::Shutdown;
use crewbus_domain::Uuid;

/// Messages the test sends; each goes to three recipients.
const MESSAGES: u64 = 12;
const RECIPIENTS: u64 = 3;

/// `crewbus_store_rows_total` of one scrape: (table, op) → rows.
type Rows = HashMap<(String, String), u64>;

async fn scrape(url: &str) -> (String, Rows) {
    let text = common::metrics_text(url).await;
    let sample = regex::Regex::new(
        r#"^crewbus_store_rows_total\{table="([a-z_]+)",op="(insert|update|delete)"\} ([0-9]+)$"#,
    )
    .unwrap();
    let rows = text
        .lines()
        .filter_map(|l| sample.captures(l))
        .map(|c| ((c[1].to_owned(), c[2].to_owned()), c[3].parse().unwrap()))
        .collect();
    (text, rows)
}

/// `crewbus_store_commits_total` and `crewbus_store_commit_parts_total` of one scrape's text.
fn commits(text: &str) -> (u64, u64) {
    let read = |name: &str| -> u64 {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
            .unwrap_or_else(|| panic!("{name} missing in\n{text}"))
    };
    (
        read("crewbus_store_commits_total"),
        read("crewbus_store_commit_parts_total"),
    )
}

fn delta(before: &Rows, after: &Rows, table: &str, op: &str) -> u64 {
    let key = (table.to_owned(), op.to_owned());
    after.get(&key).copied().unwrap_or(0) - before.get(&key).copied().unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_embedded_store_counts_the_rows_each_message_writes() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = Config {
        listen: "127.0.0.1:0".parse().unwrap(),
        ..Config::default()
    };
    config.storage.kind = Some(StorageKind::Sqlite);
    config.storage.data_dir = Some(dir.path().to_owned());
    // The counts are kept only when asked (the write audit's switch).
    config.storage.count_rows = true;
    config.bus.idle_poll_ms = 10;
    let bus = compose_server(&config).await.unwrap().bus;
    let server = Server::start(bus.clone(), config.listen, Shutdown::new())
        .await
        .unwrap();
    let url = server.url().to_owned();

    let team = bus.add_team("rows", None, None).await.unwrap();
    let mut agents: Vec<(Uuid, ApiClient)> = Vec::new();
    for name in ["alice", "bob", "carol", "dave"] {
        let new = bus.add_agent(team.id, name).await.unwrap();
        agents.push((new.agent.id, ApiClient::new(&url, Some(new.token))));
    }
    let members: Vec<Uuid> = agents.iter().map(|(id, _)| *id).collect();
    let conv = uuid_of(
        &agents[0]
            .1
            .create_conversation("rows", &members)
            .await
            .unwrap()["id"],
    );

    let (text, before) = scrape(&url).await;
    let (transactions_before, parts_before) = commits(&text);
    assert!(
        text.contains("# TYPE crewbus_store_rows_total counter"),
        "the embedded store exposes its rows:\n{text}"
    );
    assert!(
        before.contains_key(&("members".to_owned(), "insert".to_owned())),
        "the set-up's rows are counted already: {before:?}"
    );

    for i in 0..MESSAGES {
        agents[0]
            .1
            .send(conv, &format!("r{i}"), &format!("message {i}"))
            .await
            .unwrap();
    }
    for (_, client) in &agents[1..] {
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut confirmed = 0u64;
        while confirmed < MESSAGES {
            assert!(
                Instant::now() < deadline,
                "{confirmed} of {MESSAGES} confirmed"
            );
            let (status, answer) = client.fetch_waiting(100, 1_000).await.unwrap();
            assert_eq!(status, 200, "{answer}");
            let ids: Vec<Uuid> = answer["deliveries"]
                .as_array()
                .unwrap()
                .iter()
                .map(|d| uuid_of(&d["delivery_id"]))
                .collect();
            if !ids.is_empty() {
                client.confirm(&ids).await.unwrap();
                confirmed += ids.len() as u64;
            }
        }
    }

    // Every confirm has answered, so its commit is counted; poll only for the scrape to see it.
    let deadline = Instant::now() + Duration::from_secs(10);
    let (after, after_text) = loop {
        let (text, now) = scrape(&url).await;
        if delta(&before, &now, "receipts", "update") >= MESSAGES * RECIPIENTS {
            break (now, text);
        }
        assert!(
            Instant::now() < deadline,
            "receipts updated by confirm: {:?} → {now:?}",
            before
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(delta(&before, &after, "messages", "insert"), MESSAGES);
    assert_eq!(delta(&before, &after, "bodies", "insert"), MESSAGES);
    assert_eq!(
        delta(&before, &after, "receipts", "insert"),
        MESSAGES * RECIPIENTS
    );
    assert_eq!(delta(&before, &after, "messages", "delete"), 0);
    assert_eq!(
        delta(&before, &after, "conversations", "insert"),
        0,
        "only what the messages wrote"
    );
    let all: u64 = after.values().sum::<u64>() - before.values().sum::<u64>();
    assert!(
        all >= MESSAGES * (2 + 2 * RECIPIENTS),
        "at least a message, a body and a receipt inserted and updated per recipient: {all}"
    );
    let (transactions, parts) = commits(&after_text);
    assert!(
        transactions > transactions_before,
        "the sends and confirms committed: {transactions_before} → {transactions}"
    );
    assert!(
        parts - parts_before >= transactions - transactions_before,
        "every transaction holds at least one part: {parts_before} → {parts} parts, \
         {transactions_before} → {transactions} transactions"
    );
    server.stop().await;
}
