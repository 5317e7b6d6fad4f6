//! crewbus domain: the bus's value types, errors and pure rules.
//!
//! Nothing here does I/O or names an adapter, a broker or a database. Adapters and use cases
//! share these types through the ports in `crewbus-ports`.
#![warn(missing_docs)]

mod backoff;
mod envelope;
mod error;
mod ids;
mod inbox;
mod locator;
mod published;
mod push;
mod push_transport;
mod quota;
mod secret;

pub use backoff::Backoff;
pub use envelope::Envelope;
pub use error::{BusError, BusResult, Source};
pub use ids::{RunId, Seq, TenantId};
pub use inbox::{InboxRef, InboxStatus, MAX_RECIPIENT_KEY_LEN, validate_recipient_key};
pub use locator::Locator;
pub use published::Published;
pub use push::{
    DataKey, Destination, PushAuthentication, PushConfig, PushRegistration, WrappedKey, redact_url,
};
pub use push_transport::{PushRequest, PushResponse, TransportError};
pub use quota::{Provisioned, QuotaChange, Quotas, StorageAccount, StreamKind};
pub use secret::Secret;

/// Re-exported so adapters and the app agree on one id and time type.
pub use chrono::{DateTime, Utc};
pub use uuid::Uuid;

/// The bus's body size contract: 1 MiB per body, in bytes. Adapters may be configured lower.
pub const MAX_BODY_BYTES: u64 = 1024 * 1024;
