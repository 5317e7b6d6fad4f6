//! Every port the two SQL stores (`crewbus-postgres`, `crewbus-sqlite`) serve, implemented once
//! here as generic store types over a [`dialect::Dialect`], which each driver crate implements
//! on a marker type (`crewbus_postgres::Pg`, `crewbus_sqlite::Lite`), as sqlx's core owns its
//! generic types over a `Database` each driver implements. The orphan rule allows
//! `impl<D: Dialect> Port for SqlX<D>` here because the local type covers `D`; the driver crates
//! name them with type aliases (`PostgresLedger = SqlLedger<Pg>`, …).
//!
//! | type | ports | module |
//! |---|---|---|
//! | [`ledger::SqlLedger`] | `Ledger` (by way of `crewbus_ports::LedgerSections`), `Leases`, `SendAllowance`, `Operators`, `Oversight`, `Search` | [`ledger`] with the sections [`directory`], [`delivery`], [`watch`], [`history`], [`retention`], [`counts`], [`relay`], [`leases`], [`send_allowance`], [`operators`], [`oversight`], [`search`] |
//! | [`journal::SqlJournal`] | `Journal` | [`journal`] |
//! | [`push_store::SqlPushStore`] | `PushStore` | [`push_store`] |
//! | [`body::SqlBodies`], [`inbox::SqlInbox`], [`registry::SqlBackends`] | `MessagingBackend`, `Inbox`, `Backends` (a `TeamRegistry`) | [`body`], [`inbox`], [`registry`] over [`store::SqlStore`], configured by [`settings::SqlSettings`] |
//!
//! What differs by store sits beside the shared statement: a [`dialect::PerDialect`] pair of
//! texts, or a `Dialect` item — how an operation holds the store (transactions, reads,
//! snapshots), the error mapping, row locks, set-based or per-row writes, and the ledger
//! sections a store still writes its own way (send, the relay's settle, the
//! reference markers, the push store's claim), whose bodies live in the driver crate.
//!
//! No driver here: the row structs ([`rows`]) derive `sqlx::FromRow` generic over the row type,
//! and are generic over how a time is stored (`T`: `DateTime<Utc>` for a `timestamptz`, the
//! SQLite adapter's microsecond integer), converted with `Into<DateTime<Utc>>`. Statements use
//! numbered placeholders (`$1`), which both drivers read. See [`driver`] for how the sqlx bounds
//! are carried without restating them on every function. Each generic function is instantiated
//! twice (once per store), as the copies it replaced were compiled twice.
#![warn(missing_docs)]

pub mod body;
pub mod counter;
pub mod counts;
pub mod delivery;
pub mod dialect;
pub mod directory;
pub mod driver;
pub mod hand_out;
pub mod history;
pub mod inbox;
pub mod journal;
pub mod leases;
pub mod ledger;
pub mod operators;
pub mod oversight;
pub mod presence;
pub mod push_store;
pub mod references;
pub mod registry;
pub mod relay;
pub mod retention;
pub mod rows;
pub mod search;
pub mod send;
pub mod send_allowance;
pub mod settings;
pub mod settle;
pub mod store;
pub mod watch;

pub use counter::{db_i64, from_db};
