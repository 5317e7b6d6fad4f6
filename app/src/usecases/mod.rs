//! The use cases: [`bus::Bus`] and its operations (send, deliver, acknowledge, history, runs,
//! administration), the background workers (relay, references, retention) and the waiting room
//! for a waiting fetch. They take ports only (`Arc<dyn Ledger>`, `Arc<dyn Backends>`,
//! `Arc<dyn Clock>`) and name no adapter.

pub mod acknowledge;
pub mod activity;
pub mod admin;
pub mod backends;
pub mod body_room;
pub mod bus;
pub mod conversations;
pub mod deliver;
pub mod feed;
pub mod health;
pub mod history;
pub mod leases;
pub mod operators;
pub mod oversight;
pub mod presence;
pub mod references;
pub mod relay;
pub mod retention;
pub mod runs;
pub mod search;
pub mod send;
pub(crate) mod send_batch;
pub mod token;
pub mod token_cache;
pub mod wait;
pub mod watch;
pub mod workers;

#[cfg(test)]
mod tests;
