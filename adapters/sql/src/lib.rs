//! The Rust the two SQL adapters (`crewbus-postgres`, `crewbus-sqlite`) share: the rows of the
//! ledger's, journal's and push store's tables with their conversions into domain types, how
//! counters are stored, and the pure steps around the queries. The SQL text that differs by
//! dialect, the pools, transactions and error mapping stay in each adapter.
//!
//! No driver here: the row structs derive `sqlx::FromRow` generic over the row type, and are
//! generic over how a time is stored (`T`: `DateTime<Utc>` for a `timestamptz`, the SQLite
//! adapter's microsecond integer), converted with `Into<DateTime<Utc>>`.
#![warn(missing_docs)]

pub mod counter;
pub mod driver;
pub mod journal;
pub mod leases;
pub mod ledger;
pub mod presence;
pub mod rows;
pub mod search;
pub mod settle;

pub use counter::{db_i64, from_db};

/// What the expansions of [`impl_leases!`] and [`impl_journal!`] name, so the adapter need not import it.
#[doc(hidden)]
pub mod __private {
    pub use async_trait::async_trait;
    pub use chrono::{DateTime, Utc};
    pub use crewbus_domain::{
        Acquired, BusResult, FencingToken, Lease, LeaseClaim, LeaseEvent, LeaseFilter, Record, Run,
        RunId, RunOutcome, Seq, StoreError, TenantId,
    };
    pub use crewbus_ports::{Journal, Leases};
    pub use std::time::Duration;
    pub use uuid::Uuid;
}
