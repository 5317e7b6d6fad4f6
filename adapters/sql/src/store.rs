//! [`SqlStore`]: a store of dialect `D` as the body backend and the inbox hold it — its writes,
//! transactions and reads, each mapped to the bus's error by the dialect. They are no ledger
//! sections: a store serves one team's bodies or inbox, not a tenant's ledger.

use crewbus_domain::{BusError, BusResult};

use crate::dialect::Dialect;

/// The open store of dialect `D` (`PgPool`, `SqlitePools`) for one team's bodies or inbox.
///
/// Postgres: a write is a pool connection whose statements each commit on their own
/// (autocommit: the row locks and `ON CONFLICT` make each statement safe alone), a transaction a
/// pool transaction, a read a pool connection. SQLite: a write and a transaction are both a
/// write transaction on the one write connection (`BEGIN IMMEDIATE`, group commit), a read a
/// read-pool connection. ([`Dialect::write`], [`Dialect::begin`], [`Dialect::reader`].)
pub struct SqlStore<D: Dialect>(D::Store);

impl<D: Dialect> Clone for SqlStore<D> {
    fn clone(&self) -> Self {
        SqlStore(self.0.clone())
    }
}

impl<D: Dialect> SqlStore<D> {
    /// The store `store` (migrated by the driver crate's `migrate`).
    pub fn new(store: D::Store) -> Self {
        SqlStore(store)
    }

    /// A driver error of the operation `what` as the bus's error ([`Dialect::bus_error`]).
    pub fn bus_error(&self, err: sqlx::Error, what: &str) -> BusError {
        D::bus_error(&self.0, err, what)
    }

    /// `|e| self.bus_error(e, what)`.
    pub fn db<'a>(&'a self, what: &'a str) -> impl Fn(sqlx::Error) -> BusError + 'a {
        move |e| self.bus_error(e, what)
    }

    /// A connection for one write. Errors: unreachable, busy past the busy timeout →
    /// `Unavailable` (nothing was sent).
    pub async fn write(&self, what: &'static str) -> BusResult<D::Write> {
        D::write(&self.0).await.map_err(self.db(what))
    }

    /// Ends a write (Postgres: returns the connection, every statement has committed; SQLite:
    /// commits the write transaction).
    pub async fn end_write(&self, write: D::Write) -> Result<(), sqlx::Error> {
        D::end_write(write).await
    }

    /// Begins a transaction.
    pub async fn begin(&self, what: &'static str) -> BusResult<D::Tx> {
        D::begin(&self.0).await.map_err(self.db(what))
    }

    /// Commits a transaction taken with [`SqlStore::begin`].
    pub async fn commit(&self, tx: D::Tx) -> Result<(), sqlx::Error> {
        D::commit(tx).await
    }

    /// A connection for reads.
    pub async fn reader(&self, what: &'static str) -> BusResult<D::Reader> {
        D::reader(&self.0).await.map_err(self.db(what))
    }
}

/// Ends `write` ([`SqlStore::end_write`]), its error as the bus's for `what`.
pub async fn finish<D: Dialect>(store: &SqlStore<D>, write: D::Write, what: &str) -> BusResult<()> {
    store.end_write(write).await.map_err(store.db(what))
}
