//! crewbus ports: the traits every adapter implements, each documented as a contract.
//!
//! Every port is object safe and `Send + Sync` (use them as `Arc<dyn Port>`), has no associated
//! types, and names no adapter, broker or database. The `mock` feature adds `mockall` mocks
//! (`MockMessagingBackend`, `MockInbox`, …) for the application's unit tests. Beside the ports
//! stand a few generic helpers for adapters that name no adapter either ([`TeamRegistry`], a
//! per-team cache that implements [`Backends`]).
#![warn(missing_docs)]

mod backends;
mod clock;
mod feed;
mod inbox;
mod journal;
mod key_ring;
mod leases;
mod ledger;
mod ledger_sections;
mod messaging;
mod operators;
mod oversight;
mod push_store;
mod push_transport;
mod search;
mod send_allowance;
mod stream_admin;
mod wakeups;

pub use backends::{Backends, TeamAdapters, TeamCache, TeamRegistry, check_backend_name};
pub use clock::{Clock, SystemClock};
pub use feed::{Feed, FeedListener};
pub use inbox::Inbox;
pub use journal::Journal;
pub use key_ring::KeyRing;
pub use leases::Leases;
pub use ledger::Ledger;
pub use ledger_sections::LedgerSections;
pub use messaging::MessagingBackend;
pub use operators::Operators;
pub use oversight::Oversight;
pub use push_store::PushStore;
pub use push_transport::PushTransport;
pub use search::Search;
pub use send_allowance::SendAllowance;
pub use stream_admin::StreamAdmin;
pub use wakeups::{WakeupListener, Wakeups};

#[cfg(feature = "mock")]
pub use backends::MockBackends;
#[cfg(feature = "mock")]
pub use clock::MockClock;
#[cfg(feature = "mock")]
pub use feed::MockFeed;
#[cfg(feature = "mock")]
pub use inbox::MockInbox;
#[cfg(feature = "mock")]
pub use journal::MockJournal;
#[cfg(feature = "mock")]
pub use key_ring::MockKeyRing;
#[cfg(feature = "mock")]
pub use leases::MockLeases;
#[cfg(feature = "mock")]
pub use ledger::MockLedger;
#[cfg(feature = "mock")]
pub use messaging::MockMessagingBackend;
#[cfg(feature = "mock")]
pub use operators::MockOperators;
#[cfg(feature = "mock")]
pub use oversight::MockOversight;
#[cfg(feature = "mock")]
pub use push_store::MockPushStore;
#[cfg(feature = "mock")]
pub use push_transport::MockPushTransport;
#[cfg(feature = "mock")]
pub use search::MockSearch;
#[cfg(feature = "mock")]
pub use send_allowance::MockSendAllowance;
#[cfg(feature = "mock")]
pub use stream_admin::MockStreamAdmin;
#[cfg(feature = "mock")]
pub use wakeups::MockWakeups;
