//! `SqliteLedger`: the bus's authority in SQLite.
//!
//! One file per section of the port, as the trait lists them (the Postgres ledger's layout):
//! `directory` (teams, agents, conversations), `send`, `relay` (leasing outbox slots), `settle`,
//! `references` (inbox events), `delivery` (messages, hand-outs, confirmations, receipts),
//! `history`, `retention` and `counts`; table rows and their conversions are in `rows`. The
//! `impl Ledger` is [`crewbus_ports::impl_ledger_by_sections!`]: it applies the port's argument
//! rules and delegates to the sections. The same store holds the operators (`operators`:
//! `impl Operators`) and answers the console's reads (`oversight`: `impl Oversight`). The
//! lookups and run checks the sections share are here.

use std::ops::Deref;

use crewbus_domain::{BusError, BusResult, TenantId};
use crewbus_sql::ledger::SqlLedger;
use sqlx::{Sqlite, Transaction};

use crate::body::SCHEME;
use crate::connect::{SqlitePools, WriteTx};
use crate::dialect::Lite;
use crate::journal::SqliteJournal;

mod counts;
pub(crate) mod delivery;
pub(crate) mod directory;
mod history;
pub(crate) mod operators;
pub(crate) mod oversight;
mod references;
mod relay;
mod retention;
mod rows;
pub(crate) mod search;
mod send;
mod settle;

/// One tenant's ledger in SQLite.
///
/// Every method is one transaction. Invariants are also enforced by the schema (unique
/// `(conversation, seq)` and `(conversation, sender, request_id)`, one receipt per (message,
/// recipient), one inbox event per (kind, message, recipient), non-negative counters). SQLite has no row
/// locks: every method that writes runs in a write transaction begun with `BEGIN IMMEDIATE` on
/// the pools' single write connection, so write transactions are serialised as a whole and
/// everything a transaction reads stays as read until it commits. What Postgres gets from row
/// locks follows from that:
///
/// - **send** reads the conversation's `next_seq`, checks the sender, applies the repeat rule and
///   writes the message, its receipts and its outbox slot or inbox events in one write
///   transaction: `seq` is gap-free (a rolled-back send gives its number back) and two identical
///   concurrent requests create one message (the second one sees the first). For SQLite
///   conversations ([`Ledger::local_backend`](crewbus_ports::Ledger::local_backend) is
///   `Some("sqlite")`) the body is written to the table [`crate::SqliteBackend`] reads, and the
///   inbox events enqueued, in the same transaction; other backends get an outbox slot holding
///   the body.
/// - **lease_slots** / **lease_inbox_events** are `UPDATE … WHERE id IN (SELECT … LIMIT ?)
///   RETURNING` (no `SKIP LOCKED`: a second caller waits for the write connection and then
///   sees the first one's leases), scanning every due row each time (no cursor), so a slot whose
///   send committed after a later one is never skipped. Settlements are fenced by `generation`
///   and `leased_until`, as on Postgres.
/// - **hand_out** / **confirm** read the facts and write the decision of the domain's delivery
///   rules (`plan_hand_outs`, `decide_confirms`, the ones every ledger applies) in one write
///   transaction.
/// - Reads that need no write (`team`, `messages`, `history`, `undelivered`, `counts`, …) use the
///   read pool; WAL readers see the last commit before they start and never block the writer.
/// - Time is always the caller's `at`, bound as a parameter, stored as microseconds since the
///   epoch: times read back are the caller's truncated to µs.
#[derive(Clone, Debug)]
pub struct SqliteLedger {
    sql: SqlLedger<Lite>,
    /// The tenant again, for `impl_ledger_by_sections!` (it reads a field), until `Ledger` is
    /// implemented on [`SqlLedger`].
    tenant: TenantId,
}

impl Deref for SqliteLedger {
    type Target = SqlLedger<Lite>;
    fn deref(&self) -> &SqlLedger<Lite> {
        &self.sql
    }
}

impl SqliteLedger {
    /// The ledger of `tenant` over `pools` (migrated: [`crate::migrate`]).
    pub fn new(pools: SqlitePools, tenant: TenantId) -> Self {
        SqliteLedger {
            sql: SqlLedger::new(pools, tenant.clone()),
            tenant,
        }
    }

    /// The ledger written once for every SQL store, underneath this one.
    pub fn sql(&self) -> &SqlLedger<Lite> {
        &self.sql
    }

    /// The journal over the same store and tenant: the runs this ledger checks and writes the
    /// bus's records to.
    pub fn journal(&self) -> SqliteJournal {
        SqliteJournal::new(self.pools().clone(), self.tenant.clone())
    }

    /// The pools this ledger runs on.
    pub fn pools(&self) -> &SqlitePools {
        self.sql.store()
    }

    /// `|e| bus_error(e, what)`, counting busy errors.
    fn db<'a>(&'a self, what: &'a str) -> impl Fn(sqlx::Error) -> BusError + 'a {
        self.pools().db(what)
    }

    async fn begin(&self, what: &str) -> BusResult<WriteTx> {
        self.pools().begin(what).await
    }

    async fn commit(&self, tx: WriteTx, what: &str) -> BusResult<()> {
        tx.commit().await.map_err(self.db(what))
    }

    /// A read-only transaction on the read pool: one snapshot for several statements.
    async fn read(&self, what: &str) -> BusResult<Transaction<'static, Sqlite>> {
        self.pools().reader().begin().await.map_err(self.db(what))
    }
}

crewbus_ports::impl_ledger_by_sections! {
    SqliteLedger { tenant: tenant, local_backend: Some(SCHEME), sections: async }
}
