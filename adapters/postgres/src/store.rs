//! [`Store`]: the pool as the shared body backend and inbox use it ([`SqlStore`]).

use crewbus_domain::{BusError, BusResult};
use crewbus_sql::store::SqlStore;
use sqlx::pool::PoolConnection;
use sqlx::{PgPool, Postgres, Transaction};

use crate::body::SCHEME;
use crate::dialect::Pg;
use crate::error::{bus_error, may_have_committed};

/// The pool of a [`crate::PostgresBackend`] or [`crate::PostgresInbox`]: a write is a pool
/// connection whose statements each commit on their own (autocommit), a transaction a pool
/// transaction, a read a pool connection.
#[derive(Clone)]
pub(crate) struct Store(pub(crate) PgPool);

impl SqlStore for Store {
    type D = Pg;
    type Write = PoolConnection<Postgres>;
    type Tx = Transaction<'static, Postgres>;
    type Reader = PoolConnection<Postgres>;

    const NAME: &'static str = SCHEME;

    fn bus_error(&self, err: sqlx::Error, what: &str) -> BusError {
        bus_error(err, what)
    }

    fn may_have_committed(err: &sqlx::Error) -> bool {
        may_have_committed(err)
    }

    async fn write(&self, what: &'static str) -> BusResult<PoolConnection<Postgres>> {
        self.0.acquire().await.map_err(|e| bus_error(e, what))
    }

    /// Returns the connection to the pool: its statements have committed.
    async fn end_write(&self, _write: PoolConnection<Postgres>) -> Result<(), sqlx::Error> {
        Ok(())
    }

    async fn begin(&self, what: &'static str) -> BusResult<Transaction<'static, Postgres>> {
        self.0.begin().await.map_err(|e| bus_error(e, what))
    }

    async fn commit(&self, tx: Transaction<'static, Postgres>) -> Result<(), sqlx::Error> {
        tx.commit().await
    }

    async fn reader(&self, what: &'static str) -> BusResult<PoolConnection<Postgres>> {
        self.0.acquire().await.map_err(|e| bus_error(e, what))
    }
}
