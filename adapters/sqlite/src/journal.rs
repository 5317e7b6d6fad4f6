//! `SqliteJournal`: runs and their records in `runs` and `journal_records`.

use crewbus_domain::{StoreError, TenantId};
use crewbus_sql::journal::SqlJournal;
use sqlx::Sqlite;
use sqlx::pool::PoolConnection;

use crate::connect::{SqlitePools, WriteTx};
use crate::dialect::Lite;

/// One tenant's runs and journals in SQLite.
///
/// Each append runs in a write transaction (`BEGIN IMMEDIATE`: write transactions are
/// serialised), refuses a sealed run, and takes `last_seq + 1` in the same transaction as the
/// record, so seqs are gap-free from 1 under any concurrency and nothing follows `RunSealed`.
/// The ledger appends the bus's own records through the same function inside its transactions.
/// Record kinds are stored as serde's JSON text (a note's U+0000 is escaped by JSON). Time comes
/// from the caller.
#[derive(Clone)]
pub struct SqliteJournal {
    pools: SqlitePools,
    tenant: TenantId,
}

impl std::fmt::Debug for SqliteJournal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteJournal")
            .field("tenant", &self.tenant)
            .finish_non_exhaustive()
    }
}

impl SqliteJournal {
    /// The journal of `tenant` over `pools` (migrated: [`crate::migrate`]).
    pub fn new(pools: SqlitePools, tenant: TenantId) -> Self {
        SqliteJournal { pools, tenant }
    }
}

impl SqlJournal for SqliteJournal {
    type D = Lite;
    type Tx = WriteTx;
    type Reader = PoolConnection<Sqlite>;

    // A run without records from `$3` on is one row of NULLs.
    const READ_RECORDS: &'static str = "SELECT j.seq, j.at, j.kind
         FROM runs r LEFT JOIN journal_records j ON j.run_id = r.id AND j.seq >= $3
         WHERE r.id = $1 AND r.tenant = $2
         ORDER BY j.seq LIMIT $4";

    fn tenant(&self) -> &TenantId {
        &self.tenant
    }

    fn store_error(&self, err: sqlx::Error, what: &str) -> StoreError {
        self.pools.store_error(err, what)
    }

    async fn begin(&self, what: &'static str) -> Result<WriteTx, StoreError> {
        self.pools.begin_store(what).await
    }

    async fn commit(&self, tx: WriteTx, what: &'static str) -> Result<(), StoreError> {
        tx.commit().await.map_err(self.pools.st(what))
    }

    async fn reader(&self, what: &'static str) -> Result<Self::Reader, StoreError> {
        self.pools
            .reader()
            .acquire()
            .await
            .map_err(self.pools.st(what))
    }
}

crewbus_sql::impl_journal!(SqliteJournal);
