//! The SQLite ledger: what of the bus's authority SQLite writes its own way, reached by the
//! shared `impl Ledger for SqlLedger<Lite>` (`crewbus-sql`) through the dialect ([`crate::Lite`]).
//!
//! What SQLite writes its own way is its search index (`search`: FTS5); every other section,
//! `send` and `settle` included, runs the shared statements (`crewbus_sql`), row by row as the
//! dialect's defaults.

use crewbus_sql::ledger::SqlLedger;

use crate::dialect::Lite;

pub(crate) mod search;

/// One tenant's ledger in SQLite: [`SqlLedger`] in the SQLite dialect
/// (`SqliteLedger::new(pools, tenant)`, over pools migrated by [`crate::migrate`]).
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
pub type SqliteLedger = SqlLedger<Lite>;
