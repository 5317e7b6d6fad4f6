//! The test kit (feature `kit`): what the app's tests (`app/tests/it`, its fault suite included)
//! and the benches need to run a bus on a real store, written once.
//!
//! - [`postgres`]: a fresh migrated database of `DATABASE_URL`'s server (or of a private
//!   cluster), and the URL a `crewbus serve` process reaches it by.
//! - [`nats`]: the app's `[nats]` settings for the conformance fixture's nats-server, as a
//!   [`crewbus::config::NatsConfig`] or as configuration-file text.
//! - [`store`]: the bus of a configuration on a fresh store (the embedded SQLite store or
//!   Postgres), as `crewbus serve` composes it.
//! - [`servers`]: `crewbus serve`'s HTTP server started in process on one store's buses, a
//!   team and its agents with their clients.
//! - [`open_files`]: the soft open-files limit raised for runs holding many sockets.
//!
//! The real-server harnesses themselves (`NatsServer`, `NatsCluster`, `TestDatabase`,
//! `PgCluster`) are the conformance fixtures (`crewbus_conformance::{nats, postgres}`), which the
//! adapters' conformance targets use too; this kit builds the app's side on them. It lives in
//! this crate because it is the one above the app that the app's tests already depend on (for
//! the load generator): the conformance crate sits below the app and names no adapter, and the
//! app's own `src` is product code.

pub mod nats;
pub mod open_files;
pub mod postgres;
pub mod servers;
pub mod store;
