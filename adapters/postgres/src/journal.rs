//! `PostgresJournal`: runs and their records in `runs` and `journal_records`.

use crewbus_domain::{StoreError, TenantId};
use crewbus_sql::journal::SqlJournal;
use sqlx::pool::PoolConnection;
use sqlx::{PgPool, Postgres, Transaction};

use crate::dialect::Pg;
use crate::error::store_error;

/// One tenant's runs and journals in Postgres.
///
/// Each append locks the run's row (`SELECT … FOR NO KEY UPDATE`: foreign-key checks of inserted records are not blocked), refuses a sealed run, and takes
/// `last_seq + 1` in the same transaction as the record, so seqs are gap-free from 1 under any
/// concurrency, and nothing follows `RunSealed`. The ledger appends the bus's own records through
/// the same function inside its transactions. Record kinds are stored as JSON text (a note may
/// hold U+0000, which `jsonb` would refuse). Time comes from the caller.
#[derive(Clone)]
pub struct PostgresJournal {
    pool: PgPool,
    tenant: TenantId,
}

impl std::fmt::Debug for PostgresJournal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresJournal")
            .field("tenant", &self.tenant)
            .finish_non_exhaustive()
    }
}

impl PostgresJournal {
    /// The journal of `tenant` over `pool` (migrated: [`crate::migrate`]).
    pub fn new(pool: PgPool, tenant: TenantId) -> Self {
        PostgresJournal { pool, tenant }
    }
}

impl SqlJournal for PostgresJournal {
    type D = Pg;
    type Tx = Transaction<'static, Postgres>;
    type Reader = PoolConnection<Postgres>;

    const READ_RECORDS: &'static str = "SELECT j.seq, j.at, j.kind
         FROM runs r LEFT JOIN LATERAL (
             SELECT seq, at, kind FROM journal_records
             WHERE run_id = r.id AND seq >= $3
             ORDER BY seq LIMIT $4) j ON true
         WHERE r.id = $1 AND r.tenant = $2
         ORDER BY j.seq";

    fn tenant(&self) -> &TenantId {
        &self.tenant
    }

    fn store_error(&self, err: sqlx::Error, what: &str) -> StoreError {
        store_error(err, what)
    }

    async fn begin(&self, what: &'static str) -> Result<Self::Tx, StoreError> {
        self.pool.begin().await.map_err(|e| store_error(e, what))
    }

    async fn commit(&self, tx: Self::Tx, what: &'static str) -> Result<(), StoreError> {
        tx.commit().await.map_err(|e| store_error(e, what))
    }

    async fn reader(&self, what: &'static str) -> Result<Self::Reader, StoreError> {
        self.pool.acquire().await.map_err(|e| store_error(e, what))
    }
}

crewbus_sql::impl_journal!(PostgresJournal);
