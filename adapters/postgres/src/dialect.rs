//! Postgres as a [`Dialect`] of the shared SQL code (`crewbus-sql`): times bound as
//! `timestamptz` (`DateTime<Utc>`), row locks, id lists as one `uuid[]` (`= ANY($n)`), a pool
//! whose transactions are read committed, snapshots repeatable read, and one error mapping by
//! SQLSTATE (`error.rs`).

use std::collections::{BTreeMap, HashMap};

use chrono::{DateTime, Utc};
use crewbus_domain::{
    Agent, BusError, BusResult, DeliveryId, InboxAck, IndexEntry, IssuedHandOut, Message, Operator,
    RunId, SearchQuery, SearchTerms, SendDecision, SendFacts, SendRequest, SlotOutcome, StoreError,
    SweepTarget, WakeupTarget,
};
use crewbus_sql::delivery::{Candidate, Prior};
use crewbus_sql::dialect::{Dialect, Flavor, Via};
use crewbus_sql::driver::Stmt;
use crewbus_sql::ledger::SqlLedger;
use crewbus_sql::push_store::SqlPushStore;
use crewbus_sql::search::HitRow;
use crewbus_sql::settle::LiveSlot;
use sqlx::pool::PoolConnection;
use sqlx::{PgConnection, PgPool, Postgres, Transaction};
use uuid::Uuid;

use crate::error;
use crate::ledger::{delivery, directory, operators, oversight, search, send, settle};
use crate::push_store;

/// The Postgres dialect.
pub struct Pg;

impl Dialect for Pg {
    type Db = Postgres;
    type SlotAttempts = i32;
    type Time = DateTime<Utc>;
    type Store = PgPool;
    type Tx = Transaction<'static, Postgres>;
    type Reader = PoolConnection<Postgres>;
    type Snapshot = Transaction<'static, Postgres>;
    type Write = PoolConnection<Postgres>;
    const NAME: &'static str = crate::NAME;
    const FLAVOR: Flavor = Flavor::Postgres;
    const READS: Via = Via::Connection;
    const LISTS: Via = Via::Transaction;
    const ONE_WRITE: Via = Via::Connection;
    type InboxPayload = String;
    const INBOX_ACK_PREFIX: &'static str = "pg-inbox";
    type OperatorRow = operators::OperatorRow;
    const OPERATOR_COLUMNS: &'static str = operators::OPERATOR_COLUMNS;
    const ROW_LOCKS: bool = true;
    const FOR_UPDATE: &'static str = " FOR UPDATE";
    const FOR_NO_KEY_UPDATE: &'static str = " FOR NO KEY UPDATE";

    async fn begin(pool: &PgPool) -> Result<Self::Tx, sqlx::Error> {
        pool.begin().await
    }

    async fn commit(tx: Self::Tx) -> Result<(), sqlx::Error> {
        tx.commit().await
    }

    async fn reader(pool: &PgPool) -> Result<Self::Reader, sqlx::Error> {
        pool.acquire().await
    }

    /// A repeatable-read, read-only transaction.
    async fn snapshot(pool: &PgPool) -> Result<Self::Snapshot, sqlx::Error> {
        let mut tx = pool.begin().await?;
        sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            .execute(&mut *tx)
            .await?;
        Ok(tx)
    }

    async fn end_snapshot(snapshot: Self::Snapshot) -> Result<(), sqlx::Error> {
        snapshot.commit().await
    }

    async fn write(pool: &PgPool) -> Result<Self::Write, sqlx::Error> {
        pool.acquire().await
    }

    /// Returns the connection to the pool: its statements have committed.
    async fn end_write(_write: Self::Write) -> Result<(), sqlx::Error> {
        Ok(())
    }

    fn bus_error(_pool: &PgPool, err: sqlx::Error, what: &str) -> BusError {
        error::bus_error(err, what)
    }

    fn store_error(_pool: &PgPool, err: sqlx::Error, what: &str) -> StoreError {
        error::store_error(err, what)
    }

    fn may_have_committed(err: &sqlx::Error) -> bool {
        error::may_have_committed(err)
    }

    async fn send_facts(
        ledger: &SqlLedger<Pg>,
        conn: &mut PgConnection,
        requests: &[SendRequest],
    ) -> BusResult<SendFacts> {
        send::send_facts(ledger, conn, requests).await
    }

    async fn write_sends(
        ledger: &SqlLedger<Pg>,
        conn: &mut PgConnection,
        requests: &[SendRequest],
        plan: &[SendDecision],
        at: DateTime<Utc>,
    ) -> BusResult<HashMap<usize, Message>> {
        send::write_plan(ledger, conn, requests, plan, at).await
    }

    async fn write_settlements(
        ledger: &SqlLedger<Pg>,
        conn: &mut PgConnection,
        applied: &[(LiveSlot, &SlotOutcome)],
        at: DateTime<Utc>,
    ) -> BusResult<()> {
        settle::write_settlements(conn, ledger.tenant(), applied, at).await
    }

    async fn push_write_attempt<'q>(
        store: &SqlPushStore<Pg>,
        insert: Stmt<'q, Postgres>,
        _run: RunId,
        _id: &str,
        keep: usize,
    ) -> Result<(), StoreError> {
        push_store::write_attempt(store, insert, keep).await
    }

    async fn hand_out_candidates(
        ledger: &SqlLedger<Pg>,
        conn: &mut PgConnection,
        team: Uuid,
        recipient: Uuid,
        ids: &[Uuid],
    ) -> BusResult<HashMap<Uuid, Candidate>> {
        delivery::hand_out_candidates(ledger, conn, team, recipient, ids).await
    }

    async fn prior_hand_outs(
        _ledger: &SqlLedger<Pg>,
        conn: &mut PgConnection,
        recipient: Uuid,
        ids: &[Uuid],
        at: DateTime<Utc>,
    ) -> BusResult<HashMap<Uuid, Prior>> {
        delivery::prior_hand_outs(conn, recipient, ids, at).await
    }

    async fn write_hand_outs(
        _ledger: &SqlLedger<Pg>,
        conn: &mut PgConnection,
        team: Uuid,
        acks: &BTreeMap<DeliveryId, InboxAck>,
        issued: &[IssuedHandOut],
    ) -> BusResult<()> {
        delivery::write_hand_outs(conn, team, acks, issued).await
    }

    async fn operators_of(
        _ledger: &SqlLedger<Pg>,
        _conn: &mut PgConnection,
        rows: Vec<operators::OperatorRow>,
    ) -> BusResult<Vec<Operator>> {
        operators::operators_of(rows)
    }

    async fn insert_operator<'q>(
        conn: &mut PgConnection,
        insert: Stmt<'q, Postgres>,
        _id: Uuid,
        teams: &[Uuid],
    ) -> Result<(), sqlx::Error> {
        operators::insert_operator(conn, insert, teams).await
    }

    async fn insert_members(
        _ledger: &SqlLedger<Pg>,
        conn: &mut PgConnection,
        conversation: Uuid,
        members: &[(Uuid, String)],
        at: DateTime<Utc>,
    ) -> BusResult<()> {
        directory::insert_members(conn, conversation, members, at).await
    }

    async fn touch_agents(
        ledger: &SqlLedger<Pg>,
        seen: &[WakeupTarget],
        at: DateTime<Utc>,
    ) -> BusResult<u64> {
        oversight::touch_agents(ledger, seen, at).await
    }

    async fn write_index(
        ledger: &SqlLedger<Pg>,
        conn: &mut PgConnection,
        entries: &[IndexEntry],
        at: DateTime<Utc>,
    ) -> BusResult<u64> {
        search::write_index(ledger, conn, entries, at).await
    }

    async fn hits(
        ledger: &SqlLedger<Pg>,
        conn: &mut PgConnection,
        agent: &Agent,
        query: &SearchQuery,
        terms: &SearchTerms,
    ) -> BusResult<Vec<HitRow>> {
        search::hits(ledger, conn, agent, query, terms).await
    }

    fn any_id(column: &str, first: usize, _n: usize) -> String {
        format!("{column} = ANY(${first})")
    }

    fn bind_ids<'q>(q: Stmt<'q, Postgres>, ids: &[Uuid]) -> Stmt<'q, Postgres> {
        q.arg(ids.to_vec())
    }

    fn sweep_targets(first: usize, _n: usize) -> String {
        delivery::sweep_targets(first)
    }

    fn bind_sweep_targets<'q>(
        q: Stmt<'q, Postgres>,
        targets: &[SweepTarget],
    ) -> Stmt<'q, Postgres> {
        delivery::bind_sweep_targets(q, targets)
    }

    fn rows_affected(done: &sqlx::postgres::PgQueryResult) -> u64 {
        done.rows_affected()
    }
}
