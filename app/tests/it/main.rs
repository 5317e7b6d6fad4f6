//! The application's integration tests, one binary (issue 34, item 5): one module per former
//! test target, the shared set-up (`common`, `console_support`, `fault_support`,
//! `push_support`) compiled once. Run one module with a filter, e.g.
//! `cargo test -p crewbus --all-features --test it mcp_http::` (a test's name is its module
//! path: `faults_restarts::nats_server_killed_and_restarted_mid_load_loses_nothing`).
//!
//! All tests share this process and run on the default parallel harness, so what is
//! process-wide is guarded: the heavy fault scenarios take `fault_support::SERIAL` (one at a
//! time); a test that counts log lines captures them with `common::capture_logs` (a thread-local
//! subscriber, never a global one, kept correct when other tests' threads hit the same
//! callsites); a test that re-runs itself in a child process names itself by `module_path!()`.
//! No test sets an environment variable of this process; servers listen on ports the system
//! picks (a fault scenario's server keeps its port across its own restarts).

mod common;
mod console_support;
mod fault_support;
mod push_support;

mod admin_api;
mod cli;
mod console;
mod console_push;
mod dev_team_postgres;
mod embedded_store;
mod faults_cluster;
mod faults_database_cut;
mod faults_embedded;
mod faults_inbox;
mod faults_restarts;
mod fetch_max_bytes;
mod health_bounded;
mod host_hooks;
mod inbox_watch;
mod jetstream_e2e;
mod leases;
mod listener_losses;
mod load_memory;
mod mcp_bridge;
mod mcp_http;
mod memory_e2e;
mod operators;
mod postgres_e2e;
mod presence;
mod push_attempts;
mod push_delivery;
mod push_logs;
mod push_outbox;
mod push_postgres;
mod push_sealing;
mod rate_limit;
mod read_path_bounded;
mod repo_hygiene;
mod runs_push;
mod search;
mod slow_clients;
mod store_rows;
mod stored_instants;
mod token_cache;
mod upgrade_fixtures;
mod waiting_fetch;
