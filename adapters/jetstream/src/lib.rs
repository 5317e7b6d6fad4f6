//! crewbus JetStream adapter: one team's body stream and inbox stream over async-nats, stream
//! provisioning and quota changes, the registry and the stream administration port.
//!
//! - [`JetStreamBackend`]: a connected adapter for one team; implements
//!   [`MessagingBackend`](crewbus_ports::MessagingBackend) (bodies) and
//!   [`Inbox`](crewbus_ports::Inbox) (references), and carries the provisioning associated
//!   functions (`provision`, `check_update`, `storage_account`, …) that take a [`Config`].
//! - [`JetStreamBackends`]: [`Backends`](crewbus_ports::Backends), one shared connection.
//! - [`JetStreamAdmin`]: [`StreamAdmin`](crewbus_ports::StreamAdmin) with a provisioning config.
//!
//! Layout on the broker (names from the team UUID in hex): body stream `<PREFIX>_B_<team>` on
//! `<prefix>.<team>.b.<conversation>.<message>` (one body per subject, discard new per subject),
//! inbox stream `<PREFIX>_I_<team>` on `<prefix>.<team>.i.<recipient>` (work queue, discard old,
//! one durable pull consumer per recipient).
//!
//! ```no_run
//! # async fn example() -> crewbus_domain::BusResult<()> {
//! use crewbus_domain::{Envelope, Published, Secret, Uuid};
//! use crewbus_jetstream::{Config, Credential, JetStreamBackend};
//! use crewbus_ports::MessagingBackend;
//!
//! let team = Uuid::new_v4();
//! // The operator provisions with the provisioning credential…
//! let provisioning = Config {
//!     credential: Credential::UserPassword {
//!         user: "provisioner".into(),
//!         password: Secret::new("…"),
//!     },
//!     ..Config::default()
//! };
//! JetStreamBackend::provision(&provisioning, team).await?;
//! JetStreamBackend::provision_inbox(&provisioning, team).await?;
//! // …the server connects with the runtime credential and never creates a stream.
//! let runtime = Config {
//!     credential: Credential::Token(Secret::new("…")),
//!     ..Config::default()
//! };
//! let bodies = JetStreamBackend::connect(&runtime, team).await?;
//! let envelope = Envelope {
//!     message_id: Uuid::new_v4(),
//!     conversation_id: Uuid::new_v4(),
//!     team_id: team,
//!     body: "hello".into(),
//!     publish_key: Uuid::new_v4(),
//! };
//! if let Published::Confirmed { locator, .. } = bodies.publish(envelope.clone()).await {
//!     assert_eq!(
//!         bodies.fetch(&locator, envelope.message_id).await?.as_deref(),
//!         Some("hello")
//!     );
//! }
//! # Ok(())
//! # }
//! ```
//!
//! Operations note: each retained body holds per-subject state in the server, so server memory
//! and restart time grow with the number of retained bodies. R3 streams need a server with the
//! per-subject-discard replication fix (the current line, 2.10.x late-2025 releases and later);
//! 2.9.x is supported for R1 only.
#![warn(missing_docs)]

mod admin;
mod backend;
mod bodies;
mod config;
mod connection;
mod errors;
mod inbox;
mod provision;
mod registry;

pub use admin::JetStreamAdmin;
pub use backend::{HEADER_ALLOWANCE, JetStreamBackend};
pub use config::{Config, Credential};
pub use provision::{BODY_STREAM_MAX_MESSAGE_SIZE, INBOX_STREAM_MAX_MESSAGE_SIZE};
pub use registry::{JetStreamBackends, REVALIDATE_AFTER};
