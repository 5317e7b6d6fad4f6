//! crewbus application: use cases, workers, HTTP API, CLI, configuration and the composition
//! root.
//!
//! Use cases take ports only (`Arc<dyn Ledger>`, `Arc<dyn Backends>`, `Arc<dyn Clock>`); the
//! composition root ([`compose`]) is the only module that names adapters.
#![warn(missing_docs)]

pub mod cli;
pub mod config;
pub mod http;
pub mod metrics;
pub mod shutdown;
pub mod token;
