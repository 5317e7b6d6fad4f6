//! crewbus application: use cases, workers, HTTP API, CLI, configuration and the composition
//! root.
//!
//! Use cases take ports only (`Arc<dyn Ledger>`, `Arc<dyn Backends>`, `Arc<dyn Clock>`); the
//! composition root ([`compose`]) is the only module that names adapters.
#![warn(missing_docs)]

pub mod acknowledge;
pub mod admin;
pub mod backends;
pub mod bus;
pub mod cli;
pub mod config;
pub mod conversations;
pub mod deliver;
pub mod health;
pub mod history;
pub mod http;
pub mod load;
pub mod mcp;
pub mod metrics;
pub mod push;
pub mod push_commands;
pub mod references;
pub mod relay;
pub mod retention;
pub mod runs;
pub mod send;
pub mod shutdown;
pub mod token;
pub mod wait;
pub mod workers;

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
#[cfg(test)]
mod usecase_tests;
