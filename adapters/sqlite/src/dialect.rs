//! SQLite as a [`Dialect`] of the shared SQL code (`crewbus-sql`): times bound as microsecond
//! integers ([`Ts`]), no row locks (write transactions are serialised whole), id lists as
//! `IN ($n, …)`, the pools of [`SqlitePools`] (every write a part of the group commit, reads on
//! the read pool) and one error mapping by result code (`error.rs`, counting busy errors).

use chrono::{DateTime, Utc};
use crewbus_domain::{
    Agent, BusError, BusResult, IndexEntry, Operator, RunId, SearchQuery, SearchTerms, StoreError,
};
use crewbus_sql::dialect::{Dialect, Flavor, Via};
use crewbus_sql::driver::Stmt;
use crewbus_sql::ledger::SqlLedger;
use crewbus_sql::push_store::SqlPushStore;
use crewbus_sql::rows::OperatorRow;
use crewbus_sql::search::HitRow;
use sqlx::pool::PoolConnection;
use sqlx::{Sqlite, SqliteConnection, Transaction};
use uuid::Uuid;

use crate::codec::Ts;
use crate::connect::{SqlitePools, WriteTx};
use crate::ledger::search;
use crate::push_store;

/// The SQLite dialect.
pub struct Lite;

impl Dialect for Lite {
    type Db = Sqlite;
    type SlotAttempts = i64;
    type Time = Ts;
    type Store = SqlitePools;
    type Tx = WriteTx;
    type Reader = PoolConnection<Sqlite>;
    type Snapshot = Transaction<'static, Sqlite>;
    type Write = WriteTx;
    const NAME: &'static str = crate::NAME;
    const FLAVOR: Flavor = Flavor::Sqlite;
    const READS: Via = Via::Snapshot;
    const LISTS: Via = Via::Snapshot;
    const ONE_WRITE: Via = Via::Transaction;
    type InboxPayload = Vec<u8>;
    const INBOX_ACK_PREFIX: &'static str = "sqlite-inbox";
    type OperatorRow = OperatorRow<Ts>;
    const OPERATOR_COLUMNS: &'static str = crewbus_sql::operators::OPERATOR_COLUMNS;
    const ROW_LOCKS: bool = false;
    const FOR_UPDATE: &'static str = "";
    const FOR_NO_KEY_UPDATE: &'static str = "";

    /// A part of the group commit's shared write transaction ([`SqlitePools::begin`]).
    async fn begin(pools: &SqlitePools) -> Result<WriteTx, sqlx::Error> {
        pools.group.begin().await
    }

    async fn commit(tx: WriteTx) -> Result<(), sqlx::Error> {
        tx.commit().await
    }

    async fn reader(pools: &SqlitePools) -> Result<Self::Reader, sqlx::Error> {
        pools.reader().acquire().await
    }

    /// A read-only transaction on the read pool: one WAL snapshot.
    async fn snapshot(pools: &SqlitePools) -> Result<Self::Snapshot, sqlx::Error> {
        pools.reader().begin().await
    }

    /// Drops the read transaction (it wrote nothing).
    async fn end_snapshot(_snapshot: Self::Snapshot) -> Result<(), sqlx::Error> {
        Ok(())
    }

    /// A write transaction, as [`Dialect::begin`].
    async fn write(pools: &SqlitePools) -> Result<WriteTx, sqlx::Error> {
        pools.group.begin().await
    }

    async fn end_write(write: WriteTx) -> Result<(), sqlx::Error> {
        write.commit().await
    }

    fn bus_error(pools: &SqlitePools, err: sqlx::Error, what: &str) -> BusError {
        pools.bus_error(err, what)
    }

    fn store_error(pools: &SqlitePools, err: sqlx::Error, what: &str) -> StoreError {
        pools.store_error(err, what)
    }

    /// SQLite runs in process: any error but a lost worker thread means the transaction did not
    /// commit.
    fn may_have_committed(err: &sqlx::Error) -> bool {
        matches!(err, sqlx::Error::WorkerCrashed)
    }

    async fn push_write_attempt<'q>(
        store: &SqlPushStore<Lite>,
        insert: Stmt<'q, Sqlite>,
        run: RunId,
        id: &str,
        keep: usize,
    ) -> Result<(), StoreError> {
        push_store::write_attempt(store, insert, run, id, keep).await
    }

    async fn operators_of(
        ledger: &SqlLedger<Lite>,
        conn: &mut SqliteConnection,
        rows: Vec<OperatorRow<Ts>>,
    ) -> BusResult<Vec<Operator>> {
        crewbus_sql::operators::with_teams(ledger, conn, rows).await
    }

    async fn write_index(
        ledger: &SqlLedger<Lite>,
        conn: &mut SqliteConnection,
        entries: &[IndexEntry],
        at: DateTime<Utc>,
    ) -> BusResult<u64> {
        search::write_index(ledger, conn, entries, at).await
    }

    async fn hits(
        ledger: &SqlLedger<Lite>,
        conn: &mut SqliteConnection,
        agent: &Agent,
        query: &SearchQuery,
        terms: &SearchTerms,
    ) -> BusResult<Vec<HitRow<Ts>>> {
        search::hits(ledger, conn, agent, query, terms).await
    }

    fn any_id(column: &str, first: usize, n: usize) -> String {
        let marks: Vec<String> = (first..first + n).map(|i| format!("${i}")).collect();
        format!("{column} IN ({})", marks.join(", "))
    }

    fn bind_ids<'q>(q: Stmt<'q, Sqlite>, ids: &[Uuid]) -> Stmt<'q, Sqlite> {
        ids.iter().fold(q, |q, id| q.arg(*id))
    }

    fn rows_affected(done: &sqlx::sqlite::SqliteQueryResult) -> u64 {
        done.rows_affected()
    }
}
