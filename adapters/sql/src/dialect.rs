//! [`Dialect`]: one SQL store as the shared code sees it, implemented by each driver crate on a
//! marker type (`crewbus_postgres::Pg`, `crewbus_sqlite::Lite`), as sqlx's `Database` is on
//! `Postgres`: its driver, how it stores a time, the store it opens and how an operation holds
//! it (transactions, reads, snapshots), its error mapping, and the few SQL words that differ.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::ops::{Deref, DerefMut};

use chrono::{DateTime, Utc};
use crewbus_domain::{
    Agent, BusError, BusResult, DeliveryId, InboxAck, IndexEntry, IssuedHandOut, Message, Operator,
    RunId, SearchQuery, SearchTerms, SendDecision, SendFacts, SendRequest, SlotOutcome, StoreError,
    SweepTarget, WakeupTarget,
};
use sqlx::Database;
use uuid::Uuid;

use crate::delivery::{Candidate, Prior};
use crate::driver::{Binds, Reads, Runs, Stmt, stmt};
use crate::inbox::StoredText;
use crate::journal::{RecordRow, RunRow};
use crate::leases::LeaseRow;
use crate::ledger::SqlLedger;
use crate::push_store::{AttemptRow, PushRow, SqlPushStore};
use crate::rows::{ActivityRow, AgentRow, MemberRow, MessageRow, RecipientRow, SlotRow, TeamRow};
use crate::search::HitRow;
use crate::settle::LiveSlot;

/// The connection of dialect `D` (`PgConnection`, `SqliteConnection`).
pub type Conn<D> = <<D as Dialect>::Db as Database>::Connection;

/// Which SQL store a [`Dialect`] is: picks its text of a [`PerDialect`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flavor {
    /// `crewbus_postgres::Pg`.
    Postgres,
    /// `crewbus_sqlite::Lite`.
    Sqlite,
}

/// What makes an `ORDER BY` of text compare bytes: ` COLLATE "C"` on Postgres, nothing on SQLite
/// (its default `BINARY` collation is byte order).
pub const BYTEWISE: PerDialect<&str> = PerDialect {
    postgres: " COLLATE \"C\"",
    sqlite: "",
};

/// The scalar "larger of two values".
pub const GREATEST: PerDialect<&str> = PerDialect {
    postgres: "GREATEST",
    sqlite: "max",
};

/// The scalar "smaller of two values".
pub const LEAST: PerDialect<&str> = PerDialect {
    postgres: "LEAST",
    sqlite: "min",
};

/// One thing — mostly a statement's text — as each store has it, written beside the shared code
/// that uses it, so a reader sees both and a text that differs is changed in one file.
#[derive(Clone, Copy, Debug)]
pub struct PerDialect<T> {
    /// Postgres's.
    pub postgres: T,
    /// SQLite's.
    pub sqlite: T,
}

impl<T: Copy> PerDialect<T> {
    /// Dialect `D`'s.
    pub fn of<D: Dialect>(&self) -> T {
        match D::FLAVOR {
            Flavor::Postgres => self.postgres,
            Flavor::Sqlite => self.sqlite,
        }
    }
}

/// One SQL dialect: what the shared functions need to know of a driver. Implemented by each
/// SQL adapter on a marker type (`Pg`, `Lite`).
pub trait Dialect: Sized + Send + Sync + 'static {
    /// The driver's database. The bounds are what the shared functions bind and read (text as
    /// `String`: SQLite encodes a `&str` only for the statement's own lifetime).
    type Db: Runs
        + Binds<Uuid>
        + Binds<Option<Uuid>>
        + Binds<i64>
        + Binds<i32>
        + Binds<String>
        + Binds<Option<String>>
        + Binds<Self::Time>
        + Binds<Option<Self::Time>>
        + Reads<(i64,)>
        + Reads<(i32,)>
        + Reads<(Uuid,)>
        + Reads<(Uuid, Uuid, bool)>
        + Reads<(i32, Self::Time, String)>
        + Reads<(i64, Self::Time)>
        + Reads<RecordRow<Self::Time>>
        + Reads<LeaseRow<Self::Time>>
        + Reads<RunRow<Self::Time>>
        + Reads<AgentRow<Self::Time>>
        + Reads<MessageRow<Self::Time>>
        + Reads<crate::rows::ReceiptRow<Self::Time>>
        + Reads<LiveSlot>
        + Reads<(String,)>
        + Reads<(Uuid, Uuid, i64, bool)>
        + Reads<(Uuid, bool, Uuid, Self::Time, i64)>
        + Reads<crate::rows::ReferenceRow<Self::Time>>
        + Reads<crate::references::OrderedReference<Self::Time>>
        + Reads<(Uuid, Uuid)>
        + Reads<(Uuid, Uuid, Uuid, Option<String>, Option<String>, bool)>
        + Binds<Vec<u8>>
        + Binds<bool>
        + Reads<(bool,)>
        + Reads<(Uuid, Self::Time, Self::Time)>
        + Binds<Option<i64>>
        + Reads<PushRow<Self::Time>>
        + Reads<(Uuid, String, Self::Time)>
        + Reads<AttemptRow<Self::Time>>
        + Reads<(Uuid, Vec<u8>)>
        + Reads<(Uuid, Uuid, Uuid)>
        + Reads<(bool, i64, i64, i64)>
        + Reads<(Uuid, String, i64)>
        + Reads<(Uuid, String)>
        + Reads<(Uuid, String, String, Self::Time)>
        + Reads<TeamRow<Self::Time>>
        + Reads<MemberRow<Self::Time>>
        + Reads<(i64, i64, i64)>
        + Reads<(i64, i64)>
        + Reads<(i64, i64, Option<Self::Time>)>
        + Reads<SlotRow<Self::Time, Self::SlotAttempts>>
        + Reads<(String, i64, i64, i64)>
        + Reads<(Uuid, String, String, Self::Time, i64, Option<Self::Time>)>
        + Reads<ActivityRow<Self::Time>>
        + Reads<RecipientRow<Self::Time>>
        + Reads<crate::watch::SummaryRow<Self::Time>>
        + Reads<crate::watch::NewsRow<Self::Time>>
        + Reads<Self::OperatorRow>;

    /// How a time is stored: Postgres binds a `DateTime<Utc>` (`timestamptz`), SQLite its
    /// microsecond integer codec.
    type Time: From<DateTime<Utc>>
        + Into<DateTime<Utc>>
        + Ord
        + Copy
        + Send
        + Sync
        + Unpin
        + 'static;

    /// How an outbox slot's attempt count is read (`int4` on Postgres, `INTEGER` on SQLite).
    type SlotAttempts: TryInto<u32> + Send + Unpin + 'static;

    /// The open store every generic store type holds (cloned): `PgPool`, `SqlitePools`.
    type Store: Clone + Send + Sync + 'static;

    /// A write transaction, ended by [`Dialect::commit`] (dropped: rolled back). Postgres: a
    /// pool transaction (read committed). SQLite: a part of the group-committed `BEGIN
    /// IMMEDIATE` on the one write connection.
    type Tx: DerefMut<Target = Conn<Self>> + Send;

    /// A connection for reads that need no snapshot across statements. Postgres: a pool
    /// connection. SQLite: a read-pool connection.
    type Reader: DerefMut<Target = Conn<Self>> + Send;

    /// One snapshot for several reads, ended by [`Dialect::end_snapshot`]. Postgres: a
    /// repeatable-read, read-only transaction. SQLite: a read-pool transaction (one WAL
    /// snapshot).
    type Snapshot: DerefMut<Target = Conn<Self>> + Send;

    /// What one autocommitted write runs on, ended by [`Dialect::end_write`]. Postgres: a pool
    /// connection (each statement commits on its own). SQLite: a write transaction, as
    /// [`Dialect::Tx`].
    type Write: DerefMut<Target = Conn<Self>> + Send;

    /// The store's name: the backend name, the scheme of its locators (`"postgres"`,
    /// `"sqlite"`).
    const NAME: &'static str;

    /// Which of the two texts of a [`PerDialect`] this store runs.
    const FLAVOR: Flavor;

    /// How reads of more than one statement hold the store (a lookup, then the rows; a search's
    /// conversation check, then its hits): Postgres [`Via::Connection`] (each statement its own
    /// read-committed snapshot), SQLite [`Via::Snapshot`] (one WAL snapshot).
    const READS: Via;

    /// How lists of several statements (`conversations`, `conversations_for`, the oversight's
    /// conversation summaries) hold the store: Postgres [`Via::Transaction`] (read committed),
    /// SQLite [`Via::Snapshot`].
    const LISTS: Via;

    /// How a write of one statement (`create_team`, `set_team_backends`, `set_status`) holds
    /// the store: Postgres [`Via::Connection`] (the statement is its own transaction), SQLite
    /// [`Via::Transaction`] (its one write connection).
    const ONE_WRITE: Via;

    /// Begins a write transaction.
    fn begin(store: &Self::Store) -> impl Future<Output = Result<Self::Tx, sqlx::Error>> + Send;

    /// Commits a write transaction.
    fn commit(tx: Self::Tx) -> impl Future<Output = Result<(), sqlx::Error>> + Send;

    /// A connection for reads.
    fn reader(
        store: &Self::Store,
    ) -> impl Future<Output = Result<Self::Reader, sqlx::Error>> + Send;

    /// Begins a snapshot.
    fn snapshot(
        store: &Self::Store,
    ) -> impl Future<Output = Result<Self::Snapshot, sqlx::Error>> + Send;

    /// Ends a snapshot (it wrote nothing).
    fn end_snapshot(
        snapshot: Self::Snapshot,
    ) -> impl Future<Output = Result<(), sqlx::Error>> + Send;

    /// A connection for one write.
    fn write(store: &Self::Store) -> impl Future<Output = Result<Self::Write, sqlx::Error>> + Send;

    /// Ends a write (Postgres: returns the connection, every statement has committed; SQLite:
    /// commits the write transaction).
    fn end_write(write: Self::Write) -> impl Future<Output = Result<(), sqlx::Error>> + Send;

    /// A driver error of the operation `what` as the bus's error: the store's one mapping
    /// (SQLSTATE, SQLite's result codes; unique violations → `Conflict`, unavailability →
    /// `Unavailable`, …). SQLite counts busy errors on its store.
    fn bus_error(store: &Self::Store, err: sqlx::Error, what: &str) -> BusError;

    /// [`Dialect::bus_error`] for the stores' error (journal, push store).
    fn store_error(store: &Self::Store, err: sqlx::Error, what: &str) -> StoreError;

    /// Whether a failed statement or commit may nevertheless have committed (Postgres: the
    /// connection broke after the request was sent; SQLite runs in process: only when the
    /// driver's worker thread was lost).
    fn may_have_committed(err: &sqlx::Error) -> bool;

    /// Whether writers take row locks (Postgres: concurrent transactions, so a change locks the
    /// rows it decides on, in one order) or are serialised whole (SQLite: one write connection,
    /// `BEGIN IMMEDIATE`, so what a write transaction read stays as read and there is nothing
    /// to lock).
    const ROW_LOCKS: bool;

    /// What a select that locks its rows for an update ends with: ` FOR UPDATE` on Postgres,
    /// nothing on SQLite.
    const FOR_UPDATE: &'static str;

    /// What a select of a run row to append to ends with: ` FOR NO KEY UPDATE` on Postgres (the
    /// foreign-key checks of inserted records are not blocked), nothing on SQLite.
    const FOR_NO_KEY_UPDATE: &'static str;

    /// How the inbox's `inbox_queue.payload` column is stored (the schema's): Postgres `text`
    /// (`String`), SQLite a `BLOB` of UTF-8 bytes (`Vec<u8>`).
    type InboxPayload: StoredText<Self::Db>;

    /// The prefix of every ack token the inbox issues (`<prefix>:<team>:<seq>`): `pg-inbox`,
    /// `sqlite-inbox`.
    const INBOX_ACK_PREFIX: &'static str;

    /// An operator as [`Dialect::OPERATOR_COLUMNS`] reads it (completed into an [`Operator`] by
    /// [`Dialect::operators_of`]): Postgres with the teams of its scope aggregated in the query,
    /// SQLite without them.
    type OperatorRow: Send + Unpin + 'static;

    /// The columns of an [`Dialect::OperatorRow`], read from `operators o`.
    const OPERATOR_COLUMNS: &'static str;

    /// The operators of `rows`, in their order, with the teams of their scopes (SQLite reads
    /// them on `conn`, one statement; Postgres' rows hold them). Errors: a stored token hash the
    /// domain refuses.
    fn operators_of(
        ledger: &SqlLedger<Self>,
        conn: &mut Conn<Self>,
        rows: Vec<Self::OperatorRow>,
    ) -> impl Future<Output = BusResult<Vec<Operator>>> + Send;

    /// Runs `insert` (the operator row's insert, its six arguments bound) and records `teams`
    /// as the scope of the operator `id` (`operator_teams`: Postgres in the same statement, one
    /// `uuid[]`; SQLite one row per statement). Errors are the driver's (the caller maps them).
    fn insert_operator<'q>(
        conn: &mut Conn<Self>,
        insert: Stmt<'q, Self::Db>,
        id: Uuid,
        teams: &[Uuid],
    ) -> impl Future<Output = Result<(), sqlx::Error>> + Send {
        crate::operators::insert_each::<Self>(conn, insert, id, teams)
    }

    /// `hand_out`, step 1: the recipient checked (unknown or another team's → `NotFound`;
    /// revoked → `Unauthenticated`, whatever the app's token cache says), and the candidates
    /// among `ids` (sorted, distinct; possibly none) by message id: `Stored` messages of `team`
    /// with a receipt for `recipient`. Where writers lock rows, the candidates' receipt rows are
    /// locked, in message id order (Postgres: one statement).
    fn hand_out_candidates(
        ledger: &SqlLedger<Self>,
        conn: &mut Conn<Self>,
        team: Uuid,
        recipient: Uuid,
        ids: &[Uuid],
    ) -> impl Future<Output = BusResult<HashMap<Uuid, Candidate>>> + Send {
        crate::hand_out::candidates(ledger, conn, team, recipient, ids)
    }

    /// `hand_out`, step 2: the hand-outs of `ids` (at least one) to `recipient` recorded so far,
    /// by message id (a message never handed out is absent), live ones as of `at`.
    fn prior_hand_outs(
        ledger: &SqlLedger<Self>,
        conn: &mut Conn<Self>,
        recipient: Uuid,
        ids: &[Uuid],
        at: DateTime<Utc>,
    ) -> impl Future<Output = BusResult<HashMap<Uuid, Prior>>> + Send {
        crate::hand_out::prior(ledger, conn, recipient, ids, at)
    }

    /// `hand_out`, step 3: replaces the acks of hand-outs recorded before the call (`acks`
    /// possibly empty), then inserts the new hand-outs of `team` (`issued` possibly empty; they
    /// share their recipient and times). Postgres: one statement each (`unnest`); SQLite: one
    /// per row.
    fn write_hand_outs(
        ledger: &SqlLedger<Self>,
        conn: &mut Conn<Self>,
        team: Uuid,
        acks: &BTreeMap<DeliveryId, InboxAck>,
        issued: &[IssuedHandOut],
    ) -> impl Future<Output = BusResult<()>> + Send {
        crate::hand_out::write(ledger, conn, team, acks, issued)
    }

    /// Inserts the members `(agent, recipient key)` of the new `conversation`, joined at `at`.
    /// By default one statement per member; Postgres writes them in one (`unnest`).
    fn insert_members(
        ledger: &SqlLedger<Self>,
        conn: &mut Conn<Self>,
        conversation: Uuid,
        members: &[(Uuid, String)],
        at: DateTime<Utc>,
    ) -> impl Future<Output = BusResult<()>> + Send {
        async move {
            for (agent, key) in members {
                stmt::<Self>(
                    "INSERT INTO members (conversation_id, agent_id, recipient_key, joined_at)
                     VALUES ($1, $2, $3, $4)",
                )
                .arg(conversation)
                .arg(*agent)
                .arg(key.clone())
                .arg(Self::time(at))
                .run(conn)
                .await
                .map_err(ledger.db("create conversation"))?;
            }
            Ok(())
        }
    }

    /// `Oversight::touch_agents`' write: marks each of `seen` (non-empty, each once) active at
    /// `at` unless it was later already; returns how many agents changed. Unknown agents are
    /// left out. Postgres: one `UPDATE … FROM unnest` on a pool connection; SQLite: one write
    /// transaction of one update per agent.
    fn touch_agents(
        ledger: &SqlLedger<Self>,
        seen: &[WakeupTarget],
        at: DateTime<Utc>,
    ) -> impl Future<Output = BusResult<u64>> + Send {
        crate::oversight::touch_each(ledger, seen, at)
    }

    /// `Search::index`'s writes, in the caller's write transaction: each entry's message, if it
    /// is a stored, unretained message of this tenant (and, where writers lock rows, not held
    /// by another index write), indexed (title and body) and marked indexed at `at`. `entries`
    /// is not empty. Returns how many were (re)indexed: Postgres counts each message once (the
    /// last entry for it wins; a `tsvector` under a GIN index), SQLite each entry in order (a
    /// message repeated in the batch counts again; FTS5).
    fn write_index(
        ledger: &SqlLedger<Self>,
        conn: &mut Conn<Self>,
        entries: &[IndexEntry],
        at: DateTime<Utc>,
    ) -> impl Future<Output = BusResult<u64>> + Send;

    /// The hits of `terms` for `agent` (its team's conversations it is a member of;
    /// `query.conversation` only, when given, already checked), of the [`MAX_SEARCH_DEPTH`]
    /// matches indexed last, best first — rank descending (Postgres `ts_rank_cd`, SQLite
    /// `bm25`), then `sent_at` newest first, then message id — `query.offset` skipped, at most
    /// `query.limit + 1` (the page's one more).
    ///
    /// [`MAX_SEARCH_DEPTH`]: crewbus_domain::MAX_SEARCH_DEPTH
    fn hits(
        ledger: &SqlLedger<Self>,
        conn: &mut Conn<Self>,
        agent: &Agent,
        query: &SearchQuery,
        terms: &SearchTerms,
    ) -> impl Future<Output = BusResult<Vec<HitRow<Self::Time>>>> + Send;

    /// `send_batch`, first, in its write transaction: what `plan_sends` needs — the batch's
    /// conversations, whether each sender is an active member, the messages holding the batch's
    /// idempotency keys, its runs (locked where writers lock rows). By default a statement per
    /// request ([`crate::send::facts_each`]); Postgres first locks the batch's conversations in
    /// id order, then reads over `unnest`.
    fn send_facts(
        ledger: &SqlLedger<Self>,
        conn: &mut Conn<Self>,
        requests: &[SendRequest],
    ) -> impl Future<Output = BusResult<SendFacts>> + Send {
        crate::send::facts_each(ledger, conn, requests)
    }

    /// `send_batch`, then: each `Create` of `plan` written (the message, its seq bump and
    /// receipts, its body and reference marker or outbox slot, its run's record); returns the
    /// created messages by request index. By default a statement per row
    /// ([`crate::send::write_each`]); Postgres one statement of data-modifying CTEs over
    /// `unnest` (and one for the runs' records).
    fn write_sends(
        ledger: &SqlLedger<Self>,
        conn: &mut Conn<Self>,
        requests: &[SendRequest],
        plan: &[SendDecision],
        at: DateTime<Utc>,
    ) -> impl Future<Output = BusResult<HashMap<usize, Message>>> + Send {
        crate::send::write_each(ledger, conn, requests, plan, at)
    }

    /// `Ledger::settle`'s writes, in its write transaction: each settlement of `applied` (the
    /// ones the fence applied, in call order, with their live slots) written as its
    /// [`SlotWrite`](crate::settle::SlotWrite) says. By default a statement per row
    /// ([`crate::settle::write_each`]); Postgres one statement per outcome kind (`unnest`).
    fn write_settlements(
        ledger: &SqlLedger<Self>,
        conn: &mut Conn<Self>,
        applied: &[(LiveSlot, &SlotOutcome)],
        at: DateTime<Utc>,
    ) -> impl Future<Output = BusResult<()>> + Send {
        crate::settle::write_each(ledger, conn, applied, at)
    }

    /// `PushStore::record_attempt`'s write: runs `insert` (the attempt's insert with its eight
    /// arguments bound) and trims the log of (`run`, `id`) to the newest `keep` (`keep ≥ 1`),
    /// atomically (Postgres: one statement, `$9` the older entries kept; SQLite: two in one
    /// write transaction).
    fn push_write_attempt<'q>(
        store: &SqlPushStore<Self>,
        insert: Stmt<'q, Self::Db>,
        run: RunId,
        id: &str,
        keep: usize,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// An SQL condition "`column` is one of `n` ids" whose arguments start at placeholder
    /// `first`, bound by [`Dialect::bind_ids`]: Postgres `column = ANY($first)` (one array),
    /// SQLite `column IN ($first, …)` (`n` placeholders; `n ≥ 1`).
    fn any_id(column: &str, first: usize, n: usize) -> String;

    /// Binds `ids` for the condition of [`Dialect::any_id`].
    fn bind_ids<'q>(q: Stmt<'q, Self::Db>, ids: &[Uuid]) -> Stmt<'q, Self::Db>;

    /// The select of the wake-up sweep's `n` waiters, named `w(team, agent, stored_after)`
    /// (`stored_after` NULL for none), from placeholder `first` on, bound by
    /// [`Dialect::bind_sweep_targets`]: `SELECT DISTINCT w.team, w.agent FROM …` (the sweep's
    /// condition follows as its `WHERE`). Postgres: `unnest` of three arrays; SQLite: `VALUES`.
    fn sweep_targets(first: usize, n: usize) -> String {
        crate::hand_out::sweep_targets(first, n)
    }

    /// Binds `targets` for the select of [`Dialect::sweep_targets`].
    fn bind_sweep_targets<'q>(
        q: Stmt<'q, Self::Db>,
        targets: &[SweepTarget],
    ) -> Stmt<'q, Self::Db> {
        crate::hand_out::bind_sweep_targets::<Self>(q, targets)
    }

    /// A time as the dialect binds it.
    fn time(at: DateTime<Utc>) -> Self::Time {
        Self::Time::from(at)
    }

    /// How many rows a statement run with [`Stmt::execute`] inserted, updated or deleted (sqlx
    /// has no driver-generic accessor: `PgQueryResult::rows_affected`,
    /// `SqliteQueryResult::rows_affected`).
    fn rows_affected(done: &<Self::Db as Database>::QueryResult) -> u64;
}

/// How an operation holds the store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Via {
    /// A connection ([`Dialect::reader`]): each statement is its own transaction. On SQLite a
    /// read-pool connection, so for reads only.
    Connection,
    /// A write transaction ([`Dialect::begin`], then [`Dialect::commit`]); on Postgres read
    /// committed.
    Transaction,
    /// A read-only snapshot ([`Dialect::snapshot`], then [`Dialect::end_snapshot`]).
    Snapshot,
}

/// The store as an operation holds it ([`Via`]): a connection for its statements.
pub enum Held<D: Dialect> {
    /// [`Via::Connection`].
    Connection(D::Reader),
    /// [`Via::Transaction`].
    Transaction(D::Tx),
    /// [`Via::Snapshot`].
    Snapshot(D::Snapshot),
}

impl<D: Dialect> Deref for Held<D> {
    type Target = Conn<D>;
    fn deref(&self) -> &Conn<D> {
        match self {
            Held::Connection(c) => c,
            Held::Transaction(c) => c,
            Held::Snapshot(c) => c,
        }
    }
}

impl<D: Dialect> DerefMut for Held<D> {
    fn deref_mut(&mut self) -> &mut Conn<D> {
        match self {
            Held::Connection(c) => c,
            Held::Transaction(c) => c,
            Held::Snapshot(c) => c,
        }
    }
}
