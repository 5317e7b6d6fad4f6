//! crewbus memory adapters: in-process implementations of the bus ports with the real
//! semantics (idempotent bodies, discard-new quotas, redelivery, max deliver, discard-old
//! overflow, deduplication), the ledger and journal (with the operators and the console's
//! oversight reads), the console feed, a manual clock, and fault injection for tests.
//!
//! Memory adapters never read a clock of their own: every time-dependent decision (ack waits,
//! store times for retention, duplicate windows) reads the injected `Arc<dyn Clock>`, so tests
//! drive them with a [`ManualClock`].
//!
//! ```
//! use std::sync::Arc;
//! use crewbus_memory::{ManualClock, MemoryBackends, MemoryConfig};
//! use crewbus_ports::Backends;
//!
//! # tokio_test_block_on(async {
//! let clock = ManualClock::default();
//! let registry = MemoryBackends::new(MemoryConfig::default(), Arc::new(clock.clone())).unwrap();
//! let team = crewbus_domain::Uuid::new_v4();
//! let bodies = registry.body_backend(team, "memory").await.unwrap();
//! assert_eq!(bodies.name(), "memory");
//! assert!(registry.body_backend(team, "jetstream").await.is_err());
//! # });
//! # fn tokio_test_block_on<F: std::future::Future>(f: F) -> F::Output {
//! #     tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(f)
//! # }
//! ```
#![warn(missing_docs)]

mod ack_subject;
mod backends;
mod bodies;
mod clock;
mod config;
mod faults;
mod feed;
mod inbox;
mod key_ring;
mod ledger;
mod locator;
mod lock;
mod push_store;
mod stream_admin;
#[cfg(test)]
mod test_support;
mod transport;
mod wakeups;

pub use backends::MemoryBackends;
pub use bodies::MemoryBackend;
pub use clock::ManualClock;
pub use config::{BodiesConfig, InboxConfig, MemoryConfig};
pub use faults::Faults;
pub use feed::MemoryFeed;
pub use inbox::MemoryInbox;
pub use key_ring::TestKeyRing;
pub use ledger::MemoryJournal;
pub use ledger::MemoryLedger;
pub use push_store::MemoryPushStore;
pub use stream_admin::{MemoryAdminConfig, MemoryStreamAdmin};
pub use transport::RecordingTransport;
pub use wakeups::MemoryWakeups;
