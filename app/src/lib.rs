//! crewbus application: use cases, workers, HTTP API, CLI, configuration and the composition
//! root.
//!
//! Use cases take ports only (`Arc<dyn Ledger>`, `Arc<dyn Backends>`, `Arc<dyn Clock>`); the
//! composition root ([`compose`]) is the only module that names adapters.
#![warn(missing_docs)]

pub mod cli;
pub mod config;
pub mod http;
pub mod load;
pub mod mcp;
pub mod metrics;
pub mod push;
pub mod push_commands;
pub mod shutdown;
pub mod usecases;

pub mod client;
pub mod commands;
pub mod compose;
pub mod demo;
mod demo_receiver;
pub mod dev_team;
pub mod logging;
pub mod mcp_bridge;
pub mod server;
pub mod streams;

// The paths from before the use cases had their own folder.
pub use usecases::{
    acknowledge, admin, backends, bus, conversations, deliver, health, history, references, relay,
    retention, runs, send, token, wait, workers,
};
