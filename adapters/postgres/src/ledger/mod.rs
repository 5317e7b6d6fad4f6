//! The Postgres ledger: what of the bus's authority Postgres writes its own way, reached by the
//! shared `impl Ledger for SqlLedger<Pg>` (`crewbus-sql`) through the dialect ([`crate::Pg`]).
//!
//! One file per section the dialect answers: `send` (set-based `unnest` writes), `settle`
//! (the settle's set-based writes); and the SQL of the shared sections that differs on Postgres: `delivery` (hand-outs, the
//! wake-up sweep), `directory` (members), `operators`, `oversight` and `search`. Table rows and
//! their conversions are in `rows`.

use crewbus_domain::BusError;
use crewbus_sql::ledger::SqlLedger;

use crate::dialect::Pg;
use crate::error::bus_error;

pub(crate) mod delivery;
pub(crate) mod directory;
pub(crate) mod operators;
pub(crate) mod oversight;
mod rows;
pub(crate) mod search;
pub(crate) mod send;
pub(crate) mod settle;

/// One tenant's ledger in Postgres: [`SqlLedger`] in the Postgres dialect
/// (`PostgresLedger::new(pool, tenant)`, over a pool migrated by [`crate::migrate`]).
///
/// Every method is one transaction. Invariants are also enforced by the schema (unique
/// `(conversation, seq)` and `(conversation, sender, request_id)`, one receipt per (message,
/// recipient), one inbox event per (kind, message, recipient), non-negative counters). In
/// particular:
///
/// - **send_batch** (and `send`, a batch of one) locks the batch's conversation rows in id order
///   (`SELECT … ORDER BY id FOR NO KEY UPDATE`, one statement), so concurrent senders are
///   serialised per conversation and two batches cannot deadlock: `seq` comes from the row's
///   counter, gap-free (a rolled-back batch gives its numbers back), and a concurrent duplicate
///   request waits and then finds the first one's message. The next statement (its snapshot
///   taken after the locks were granted) reads every sender's membership and request id at once
///   (`unnest`); the batch is decided in memory (`plan_sends`); the writes (seq bumps,
///   messages, receipts, then the outbox slots or the bodies and inbox events) are one statement
///   of data-modifying CTEs over `unnest` arrays, the runs' records one more — five round trips
///   for a batch of any size without runs (BEGIN, lock, read, write, COMMIT; see
///   `ledger/send.rs`). For Postgres conversations ([`Ledger::local_backend`](crewbus_ports::Ledger::local_backend) is `Some("postgres")`) the body is
///   written to the table [`crate::PostgresBackend`] reads and the inbox events are enqueued in
///   the same transaction (same statement); other backends get an outbox slot holding the
///   body.
/// - **lease_slots** / **lease_inbox_events** take rows with `FOR UPDATE SKIP LOCKED`, so
///   concurrent relays never lease the same row, and scan every due row each time (no cursor),
///   so a slot whose send committed after a later one is never skipped.
/// - **settle** locks the batch's live slots in one statement (`FOR UPDATE`, in id order, so
///   concurrent settlers never deadlock) and applies a settlement only with the current
///   generation before `leased_until`; the writes are one statement per outcome kind, whatever
///   the batch size (see `ledger/settle.rs`).
/// - **hand_out** / **confirm** are set-based: a constant number of statements per call
///   (`= ANY($1)` reads, `unnest` writes), whatever the batch size; each item is decided in
///   order in memory by the domain's delivery rules (`plan_hand_outs`, `decide_confirms`, the
///   ones the memory ledger applies too), with exactly the per-item rules of the trait. Both
///   lock the receipt rows first, in message id order (`ORDER BY … FOR NO KEY UPDATE OF r`), so
///   concurrent calls serialise per (message, recipient) and cannot deadlock. `confirm` appends
///   one journal record per first confirmation when a run is given.
/// - **messages** is one `id = ANY($1)` read.
/// - Time is always the caller's `at`, bound as a parameter (never `now()` in SQL). Postgres
///   keeps timestamps to the microsecond: times read back are the caller's truncated to µs.
pub type PostgresLedger = SqlLedger<Pg>;

/// `|e| bus_error(e, what)`.
fn db(what: &'static str) -> impl Fn(sqlx::Error) -> BusError {
    move |e| bus_error(e, what)
}
