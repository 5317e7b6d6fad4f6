//! [`Store`]: the pools as the shared body backend and inbox use them ([`SqlStore`]).

use crewbus_domain::{BusError, BusResult};
use crewbus_sql::store::SqlStore;
use sqlx::Sqlite;
use sqlx::pool::PoolConnection;

use crate::body::SCHEME;
use crate::connect::{SqlitePools, WriteTx};
use crate::dialect::Lite;

/// The pools of a [`crate::SqliteBackend`] or [`crate::SqliteInbox`]: a write and a
/// transaction are both a write transaction (one write connection, `BEGIN IMMEDIATE`, group
/// commit), a read a read-pool connection.
#[derive(Clone)]
pub(crate) struct Store(pub(crate) SqlitePools);

impl SqlStore for Store {
    type D = Lite;
    type Write = WriteTx;
    type Tx = WriteTx;
    type Reader = PoolConnection<Sqlite>;

    const NAME: &'static str = SCHEME;

    fn bus_error(&self, err: sqlx::Error, what: &str) -> BusError {
        self.0.bus_error(err, what)
    }

    /// SQLite runs in process: any error but a lost worker thread means the transaction did not
    /// commit.
    fn may_have_committed(err: &sqlx::Error) -> bool {
        matches!(err, sqlx::Error::WorkerCrashed)
    }

    async fn write(&self, what: &'static str) -> BusResult<WriteTx> {
        self.0.begin(what).await
    }

    async fn end_write(&self, write: WriteTx) -> Result<(), sqlx::Error> {
        write.commit().await
    }

    async fn begin(&self, what: &'static str) -> BusResult<WriteTx> {
        self.0.begin(what).await
    }

    async fn commit(&self, tx: WriteTx) -> Result<(), sqlx::Error> {
        tx.commit().await
    }

    async fn reader(&self, what: &'static str) -> BusResult<PoolConnection<Sqlite>> {
        self.0.reader().acquire().await.map_err(self.0.db(what))
    }
}
