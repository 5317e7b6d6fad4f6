//! crewbus application: use cases, workers, HTTP API, MCP, CLI, configuration
//! and the composition root.
//!
//! Each room is one module, and no two import each other:
//!
//! | room | what |
//! | --- | --- |
//! | [`usecases`] | the [`bus::Bus`] and its use cases, the workers, the waiting room |
//! | [`http`] | the HTTP API (axum) |
//! | [`mcp`] | the MCP endpoint `/mcp` |
//! | [`console`] | the operator console `/console` (server-rendered pages) |
//! | [`cli`] | the command line: arguments and the commands' bodies, the HTTP client |
//! | [`push`] | pushing a run's history to its destinations |
//! | [`config`] | the configuration file and its sections |
//! | [`compose`] | the composition root |
//! | [`server`] | the listener, the API, `/mcp`, `/console` and the workers, with graceful shutdown |
//!
//! Use cases take ports only (`Arc<dyn Ledger>`, `Arc<dyn Backends>`, `Arc<dyn Clock>`); the
//! composition root ([`compose`]) is the only module that names adapters.
#![warn(missing_docs)]

pub mod cli;
pub mod compose;
pub mod config;
pub mod console;
pub mod edge;
pub mod http;
pub mod logging;
pub mod mcp;
pub mod metrics;
pub mod push;
pub mod server;
pub mod shutdown;
pub mod tls;
pub mod usecases;

// The paths from before the modules moved into their rooms.
pub use cli::{
    client, commands, dev_team, embedded, lease_commands, mcp_bridge, push_commands,
    search_command, streams,
};
pub use usecases::{
    acknowledge, admin, backends, bus, conversations, deliver, health, history, references, relay,
    retention, runs, send, token, wait, workers,
};
