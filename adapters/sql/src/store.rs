//! What the shared body backend ([`crate::body`]) and inbox ([`crate::inbox`]) need of an SQL
//! store ([`SqlStore`]): its connections for one write, a transaction and reads, and its error
//! mapping. They are no ledger sections: a store serves
//! one team's bodies or inbox, over the pool(s) the adapter holds.

use std::future::Future;
use std::ops::DerefMut;

use crewbus_domain::{BusError, BusResult};

use crate::dialect::{Conn, Dialect};

/// The pool side of an SQL body backend or inbox, implemented by each adapter on a newtype of
/// its pool(s).
///
/// Postgres: `Write` a pool connection whose statements each commit on their own (autocommit:
/// the row locks and `ON CONFLICT` make each statement safe alone), `Tx` a pool transaction,
/// `Reader` a pool connection. SQLite: `Write` and `Tx` a write transaction on the one write
/// connection (`BEGIN IMMEDIATE`, group commit), `Reader` a read-pool connection.
pub trait SqlStore: Send + Sync {
    /// The store's dialect.
    type D: Dialect;
    /// What one write runs on, ended by [`SqlStore::end_write`].
    type Write: DerefMut<Target = Conn<Self::D>> + Send;
    /// A transaction: several statements at once or not at all, ended by [`SqlStore::commit`].
    type Tx: DerefMut<Target = Conn<Self::D>> + Send;
    /// A connection for reads.
    type Reader: DerefMut<Target = Conn<Self::D>> + Send;

    /// The backend's name and the scheme of its locators (`"postgres"`, `"sqlite"`).
    const NAME: &'static str;

    /// A driver error of the operation `what` as the bus's error (the adapter's mapping:
    /// unavailability → `Unavailable`, unique violations → `Conflict`, …).
    fn bus_error(&self, err: sqlx::Error, what: &str) -> BusError;

    /// Whether a failed statement or commit may nevertheless have committed (Postgres: the
    /// connection broke after the request was sent; SQLite runs in process: only when the
    /// driver's worker thread was lost).
    fn may_have_committed(err: &sqlx::Error) -> bool;

    /// A connection for one write. Errors: unreachable, busy past the busy timeout →
    /// `Unavailable` (nothing was sent).
    fn write(&self, what: &'static str) -> impl Future<Output = BusResult<Self::Write>> + Send;

    /// Ends a write (Postgres: returns the connection, every statement has committed; SQLite:
    /// commits the write transaction).
    fn end_write(&self, write: Self::Write)
    -> impl Future<Output = Result<(), sqlx::Error>> + Send;

    /// Begins a transaction.
    fn begin(&self, what: &'static str) -> impl Future<Output = BusResult<Self::Tx>> + Send;

    /// Commits a transaction taken with [`SqlStore::begin`].
    fn commit(&self, tx: Self::Tx) -> impl Future<Output = Result<(), sqlx::Error>> + Send;

    /// A connection for reads.
    fn reader(&self, what: &'static str) -> impl Future<Output = BusResult<Self::Reader>> + Send;

    /// `|e| self.bus_error(e, what)`.
    fn db<'a>(&'a self, what: &'a str) -> impl Fn(sqlx::Error) -> BusError + 'a {
        move |e| self.bus_error(e, what)
    }
}

/// Ends `write` ([`SqlStore::end_write`]), its error as the bus's for `what`.
pub async fn finish<S: SqlStore>(store: &S, write: S::Write, what: &str) -> BusResult<()> {
    store.end_write(write).await.map_err(store.db(what))
}
