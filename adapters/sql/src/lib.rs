//! The Rust the two SQL adapters (`crewbus-postgres`, `crewbus-sqlite`) share: the rows of the
//! ledger's, journal's and push store's tables with their conversions into domain types, how
//! counters are stored, the pure steps around the queries, and the operations that are the same
//! on both stores — the leases ([`leases`]: `impl Leases for SqlLedger<D>`), the journal ([`journal`]: `impl Journal for
//! SqlJournal<D>`), the send allowances ([`send_allowance`]: `impl SendAllowance for
//! SqlLedger<D>`), the operators ([`operators`]: `impl Operators for SqlLedger<D>`), the push store ([`push_store`],
//! [`impl_push_store!`]), the ledger's delivery section ([`delivery`], over
//! [`delivery::SqlDelivery`]) with the inbox watch's read ([`watch`]), the search index ([`search`]: `impl Search for SqlLedger<D>`), the
//! directory section ([`directory`]), history pages ([`history`]), the oversight ([`oversight`]: `impl Oversight for SqlLedger<D>`), the body backend ([`body`], [`impl_body_backend!`], over a
//! [`store::SqlStore`]), the inbox ([`inbox`], [`impl_inbox!`]), the ledger's retention section
//! ([`retention`]) and the ledger itself ([`ledger`]: `impl Ledger for SqlLedger<D>`, by way of
//! `crewbus_ports::LedgerSections`, with its shared lookups). The pools,
//! transactions and error mapping stay in each adapter, as does the SQL text that differs by
//! dialect.
//!
//! No driver here: the row structs derive `sqlx::FromRow` generic over the row type, and are
//! generic over how a time is stored (`T`: `DateTime<Utc>` for a `timestamptz`, the SQLite
//! adapter's microsecond integer), converted with `Into<DateTime<Utc>>`.
//!
//! # Why driver-generic functions over a dialect (and not "plan then write")
//! Most of what the two adapters repeated was not a decision but the statements themselves,
//! their arguments and the order they run in; a plan both adapters then executed would still
//! leave each with its own copy of the writes. So the shared operations are written once as
//! async functions generic over a [`driver::Dialect`] — implemented by each adapter on a marker
//! type (`Pg`, `Lite`): its `sqlx::Database`, how it binds a time (Postgres a `DateTime<Utc>`,
//! SQLite its `Ts` microsecond codec), whether writers take row locks, and the few fragments
//! that differ (`FOR UPDATE`, id lists) — over an adapter trait for what only the adapter knows
//! (its transactions and error mapping: the [`dialect::Dialect`]).
//! Statements use numbered placeholders (`$1`), which both drivers read. The port traits are
//! implemented by the `impl_*!` macros, so neither adapter restates their signatures. Each
//! generic function is instantiated twice (once per adapter), as the copies it replaces were
//! compiled twice; no new dependency beyond the ports and `async-trait`. See [`driver`] for
//! how the sqlx bounds are carried without restating them on every function.
#![warn(missing_docs)]

pub mod body;
pub mod counter;
pub mod delivery;
pub mod dialect;
pub mod directory;
pub mod driver;
pub mod history;
pub mod inbox;
pub mod journal;
pub mod leases;
pub mod ledger;
pub mod operators;
pub mod oversight;
pub mod presence;
pub mod push_store;
pub mod retention;
pub mod rows;
pub mod search;
pub mod send;
pub mod send_allowance;
pub mod settle;
pub mod store;
pub mod watch;

pub use counter::{db_i64, from_db};

/// What the expansions of the `impl_*!` macros ([`impl_push_store!`],
/// [`impl_body_backend!`], [`impl_inbox!`]) name, so the adapter need not
/// import it.
#[doc(hidden)]
pub mod __private {
    pub use async_trait::async_trait;
    pub use chrono::{DateTime, Utc};
    pub use crewbus_domain::{BusResult, RunId, Seq, StoreError, TenantId};
    pub use crewbus_domain::{Envelope, Locator, Published};
    pub use crewbus_domain::{InboxRef, InboxStatus};
    pub use crewbus_domain::{PushAttempt, PushConfig, PushRegistration};
    pub use crewbus_ports::Inbox;
    pub use crewbus_ports::MessagingBackend;
    pub use crewbus_ports::PushStore;
    pub use std::time::Duration;
    pub use uuid::Uuid;
}
