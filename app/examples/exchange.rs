//! One exchange through a crewbus server started in this process, on the memory store: alice
//! opens a conversation with bob and sends; bob's fetch waits for the message, and he confirms
//! it; a retried send with the same request id stores nothing twice; alice reads bob's receipt.
//! It is what an agent does over the HTTP API (docs/agents.md), in the code an integrator
//! writes. It took the place of `crewbus demo`.
//!
//! Run: `cargo run -p crewbus --example exchange` (it needs no service and keeps nothing).

use std::time::Instant;

use anyhow::{Context as _, Result, anyhow, ensure};
use crewbus::client::{ApiClient, ApiFailure, uuid_of};
use crewbus::compose::compose;
use crewbus::config::{Config, StorageKind};
use crewbus::server::Server;
use crewbus::shutdown::Shutdown;
use serde_json::Value;

/// An API answer, or its failure as an error naming the status and code.
fn api<T>(what: &str, answer: Result<T, ApiFailure>) -> Result<T> {
    answer.map_err(|f| anyhow!("{what}: {} {}: {}", f.status, f.code, f.message))
}

#[tokio::main]
async fn main() -> Result<()> {
    // The memory store and a free port on loopback.
    let mut config = Config {
        listen: "127.0.0.1:0".parse()?,
        ..Config::default()
    };
    config.storage.kind = Some(StorageKind::Memory);
    let bus = compose(&config).await.context("compose")?.bus;
    let team = bus.add_team("example", None, None).await?;
    let alice = bus.add_agent(team.id, "alice").await?;
    let bob = bus.add_agent(team.id, "bob").await?;
    let server = Server::start(bus.clone(), config.listen, Shutdown::new()).await?;
    println!("crewbus listening on {} (memory store)", server.url());
    let as_alice = ApiClient::new(server.url(), Some(alice.token));
    let as_bob = ApiClient::new(server.url(), Some(bob.token));

    // alice opens a conversation with bob and sends into it.
    let conv = api(
        "create conversation",
        as_alice
            .create_conversation("ticket 42", &[bob.agent.id])
            .await,
    )?;
    let conversation = uuid_of(&conv["id"]);
    let sent = api(
        "send",
        as_alice
            .send(conversation, "t42-1", "Can you take ticket 42?")
            .await,
    )?;
    let message = uuid_of(&sent["message"]["id"]);
    println!(
        "alice → bob: message {message} (created: {})",
        sent["created"]
    );

    // bob's fetch waits up to 5 s; he confirms what he was handed.
    let started = Instant::now();
    let (status, page) = as_bob.fetch_waiting(10, 5_000).await?;
    ensure!(status == 200, "fetch answered {status}: {page}");
    let deliveries: Vec<Value> = page["deliveries"].as_array().cloned().unwrap_or_default();
    ensure!(deliveries.len() == 1, "bob expected one delivery: {page}");
    let delivery = &deliveries[0];
    println!(
        "bob fetched {:?} after {:.1} ms (redelivered: {})",
        delivery["body"].as_str().unwrap_or_default(),
        started.elapsed().as_secs_f64() * 1e3,
        delivery["redelivered"]
    );
    let results = api(
        "confirm",
        as_bob.confirm(&[uuid_of(&delivery["delivery_id"])]).await,
    )?;
    println!("bob confirmed: {}", results[0]["outcome"]);

    // A retry of the same send (same request id) returns the stored message: nothing twice.
    let again = api(
        "retried send",
        as_alice
            .send(conversation, "t42-1", "Can you take ticket 42?")
            .await,
    )?;
    ensure!(
        again["created"] == false && uuid_of(&again["message"]["id"]) == message,
        "the retry stored a second message: {again}"
    );
    println!(
        "alice's retry: created {}, the same message",
        again["created"]
    );

    // Bob's receipt, as alice reads it; then nothing more is waiting for bob.
    for r in api("receipts", as_alice.receipts(message).await)? {
        println!(
            "receipt of {}: stored {}, delivered {}",
            r["recipient"], r["stored_at"], r["delivered_at"]
        );
    }
    let after = api("fetch", as_bob.fetch(10).await)?;
    ensure!(after.is_empty(), "a confirmed message came back: {after:?}");
    println!("bob's inbox is empty: a confirmed message never comes back");

    server.stop().await;
    Ok(())
}
