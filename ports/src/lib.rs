//! crewbus ports: the traits every adapter implements, each documented as a contract.
//!
//! Every port is object safe and `Send + Sync` (use them as `Arc<dyn Port>`), has no associated
//! types, and names no adapter, broker or database. The `mock` feature adds `mockall` mocks
//! (`MockMessagingBackend`, `MockInbox`, …) for the application's unit tests.
#![warn(missing_docs)]

mod backends;
mod clock;
mod inbox;
mod journal;
mod ledger;
mod messaging;
mod stream_admin;

pub use backends::Backends;
pub use clock::{Clock, SystemClock};
pub use inbox::Inbox;
pub use journal::Journal;
pub use ledger::Ledger;
pub use messaging::MessagingBackend;
pub use stream_admin::StreamAdmin;

#[cfg(feature = "mock")]
pub use backends::MockBackends;
#[cfg(feature = "mock")]
pub use clock::MockClock;
#[cfg(feature = "mock")]
pub use inbox::MockInbox;
#[cfg(feature = "mock")]
pub use journal::MockJournal;
#[cfg(feature = "mock")]
pub use ledger::MockLedger;
#[cfg(feature = "mock")]
pub use messaging::MockMessagingBackend;
#[cfg(feature = "mock")]
pub use stream_admin::MockStreamAdmin;
