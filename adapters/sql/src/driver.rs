//! How this crate runs statements on either driver without naming one: the [`Dialect`] an
//! adapter implements on a marker type, and the statements ([`Stmt`]) the shared
//! functions build their queries with.
//!
//! # Why a dialect trait with capability traits
//! The shared functions are generic over a [`Dialect`] (its database, how it stores a time, and
//! the few places where the SQL differs). Written directly against `sqlx::Database`, every such
//! function would have to restate what the driver can bind and decode (`Uuid: Encode<'q, DB>`,
//! `&mut DB::Connection: Executor`, …): Rust does not carry those bounds from a trait to its
//! users. So the capabilities are traits *of the database* — [`Binds`]`<T>`, [`Reads`]`<R>`,
//! [`Runs`] — implemented once here for every driver that has them (blanket impls, checked when
//! an adapter names its `sqlx::Postgres` or `sqlx::Sqlite`), and listed once as bounds on
//! [`Dialect::Db`], where the compiler does carry them. Each generic function is instantiated
//! twice (once per adapter), as the copies it replaces were compiled twice.
//!
//! Statements are written with numbered placeholders (`$1`, `$2`, …), which both drivers accept;
//! a placeholder may repeat. On Postgres the server numbers them. On SQLite, `$N` is a named
//! parameter to SQLite itself, and it is sqlx-sqlite that binds it to the N-th argument: a
//! statement naming a higher `$N` than the arguments bound gets NULL there (and in every later
//! placeholder) rather than an error, where Postgres refuses it. Bind as many arguments as the
//! highest placeholder; the conformance suites run every shared statement on both stores.

use std::future::Future;

use chrono::{DateTime, Utc};
use sqlx::{Database, Encode, Executor, FromRow, IntoArguments, Type};
use uuid::Uuid;

use crate::journal::{RecordRow, RunRow};
use crate::leases::LeaseRow;
use crate::push_store::{AttemptRow, PushRow};
use crate::rows::{ActivityRow, AgentRow, MemberRow, MessageRow, RecipientRow, TeamRow};

/// sqlx's statement on `DB` with its own argument buffer.
type Query<'q, DB> = sqlx::query::Query<'q, DB, <DB as Database>::Arguments<'q>>;

/// `sqlx::query(sql)` on the database of dialect `D`.
pub fn stmt<D: Dialect>(sql: &str) -> Stmt<'_, D::Db> {
    Stmt(sqlx::query(sql))
}

/// The connection of dialect `D` (`PgConnection`, `SqliteConnection`).
pub type Conn<D> = <<D as Dialect>::Db as Database>::Connection;

/// A database that can bind a `T` as a statement's argument.
pub trait Binds<T>: Database {
    /// `q` with `v` bound as its next argument (an encoding error surfaces when it runs).
    fn bind<'q>(q: Query<'q, Self>, v: T) -> Query<'q, Self>
    where
        T: 'q;
}

impl<DB: Database, T> Binds<T> for DB
where
    T: for<'q> Encode<'q, DB> + Type<DB>,
{
    fn bind<'q>(q: Query<'q, DB>, v: T) -> Query<'q, DB>
    where
        T: 'q,
    {
        q.bind(v)
    }
}

/// A database that runs statements (the executor and argument bounds, once).
pub trait Runs: Database {
    /// Runs `q` on `conn` (what it affected is the driver's: not read here).
    fn run<'c, 'q: 'c>(
        q: Query<'q, Self>,
        conn: &'c mut Self::Connection,
    ) -> impl Future<Output = Result<(), sqlx::Error>> + Send + 'c;

    /// Runs `q` on `conn`; returns its rows.
    fn rows<'c, 'q: 'c>(
        q: Query<'q, Self>,
        conn: &'c mut Self::Connection,
    ) -> impl Future<Output = Result<Vec<Self::Row>, sqlx::Error>> + Send + 'c;

    /// Runs `q` on `conn`; returns its first row, `None` without one (the driver stops reading
    /// after that row: sqlx's `fetch_optional`).
    fn row<'c, 'q: 'c>(
        q: Query<'q, Self>,
        conn: &'c mut Self::Connection,
    ) -> impl Future<Output = Result<Option<Self::Row>, sqlx::Error>> + Send + 'c;

    /// Runs `q` on `conn`; returns the driver's result (how many rows it changed:
    /// [`Dialect::rows_affected`]).
    fn execute<'c, 'q: 'c>(
        q: Query<'q, Self>,
        conn: &'c mut Self::Connection,
    ) -> impl Future<Output = Result<Self::QueryResult, sqlx::Error>> + Send + 'c;
}

impl<DB: Database> Runs for DB
where
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
{
    async fn run<'c, 'q: 'c>(
        q: Query<'q, DB>,
        conn: &'c mut DB::Connection,
    ) -> Result<(), sqlx::Error> {
        q.execute(&mut *conn).await?;
        Ok(())
    }

    fn rows<'c, 'q: 'c>(
        q: Query<'q, DB>,
        conn: &'c mut DB::Connection,
    ) -> impl Future<Output = Result<Vec<DB::Row>, sqlx::Error>> + Send + 'c {
        q.fetch_all(conn)
    }

    fn row<'c, 'q: 'c>(
        q: Query<'q, DB>,
        conn: &'c mut DB::Connection,
    ) -> impl Future<Output = Result<Option<DB::Row>, sqlx::Error>> + Send + 'c {
        q.fetch_optional(conn)
    }

    fn execute<'c, 'q: 'c>(
        q: Query<'q, DB>,
        conn: &'c mut DB::Connection,
    ) -> impl Future<Output = Result<DB::QueryResult, sqlx::Error>> + Send + 'c {
        q.execute(conn)
    }
}

/// A database that decodes its rows as `R` (a row struct, or a tuple of columns).
pub trait Reads<R>: Runs {
    /// One row as `R`. Errors: a column that does not decode → `sqlx::Error::ColumnDecode`.
    fn decode(row: &Self::Row) -> Result<R, sqlx::Error>;
}

impl<DB: Runs, R> Reads<R> for DB
where
    R: for<'r> FromRow<'r, DB::Row>,
{
    fn decode(row: &DB::Row) -> Result<R, sqlx::Error> {
        R::from_row(row)
    }
}

/// A statement being built on database `DB` (`sqlx::query(sql)` underneath), with the binder
/// and runners generic code uses: `arg` needs only the database's [`Binds`] (sqlx's `bind`
/// needs the encode bounds themselves), the runners its [`Runs`] and [`Reads`].
pub struct Stmt<'q, DB: Database>(Query<'q, DB>);

impl<'q, DB: Database> Stmt<'q, DB> {
    /// Binds `v` as the next argument.
    pub fn arg<T: 'q>(self, v: T) -> Self
    where
        DB: Binds<T>,
    {
        Stmt(DB::bind(self.0, v))
    }

    /// Runs the statement.
    pub fn run<'c>(
        self,
        conn: &'c mut DB::Connection,
    ) -> impl Future<Output = Result<(), sqlx::Error>> + Send + 'c
    where
        DB: Runs,
        'q: 'c,
    {
        <DB as Runs>::run(self.0, conn)
    }

    /// Every row, as `R`.
    pub fn all<'c, R: Send + 'c>(
        self,
        conn: &'c mut DB::Connection,
    ) -> impl Future<Output = Result<Vec<R>, sqlx::Error>> + Send + 'c
    where
        DB: Reads<R>,
        'q: 'c,
    {
        let rows = DB::rows(self.0, conn);
        async move { rows.await?.iter().map(DB::decode).collect() }
    }

    /// The first row as `R`, `None` without one (the rows after it are not read).
    pub fn optional<'c, R: Send + 'c>(
        self,
        conn: &'c mut DB::Connection,
    ) -> impl Future<Output = Result<Option<R>, sqlx::Error>> + Send + 'c
    where
        DB: Reads<R>,
        'q: 'c,
    {
        let row = DB::row(self.0, conn);
        async move { row.await?.as_ref().map(DB::decode).transpose() }
    }

    /// The first row as `R`. Errors: no row → `sqlx::Error::RowNotFound`.
    pub fn one<'c, R: Send + 'c>(
        self,
        conn: &'c mut DB::Connection,
    ) -> impl Future<Output = Result<R, sqlx::Error>> + Send + 'c
    where
        DB: Reads<R>,
        'q: 'c,
    {
        let row = self.optional(conn);
        async move { row.await?.ok_or(sqlx::Error::RowNotFound) }
    }

    /// Runs the statement; returns the driver's result, read with [`Dialect::rows_affected`].
    pub fn execute<'c>(
        self,
        conn: &'c mut DB::Connection,
    ) -> impl Future<Output = Result<DB::QueryResult, sqlx::Error>> + Send + 'c
    where
        DB: Runs,
        'q: 'c,
    {
        <DB as Runs>::execute(self.0, conn)
    }
}

/// One SQL dialect: what the shared functions need to know of a driver. Implemented by each
/// SQL adapter on a marker type (`Pg`, `Lite`).
pub trait Dialect: Send + Sync + 'static {
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
        + Reads<(Uuid, Uuid)>
        + Reads<(Uuid, Uuid, Uuid, Option<String>, Option<String>, bool)>
        + Binds<Vec<u8>>
        + Binds<bool>
        + Reads<(bool,)>
        + Reads<(Uuid, Self::Time, Self::Time)>
        + Binds<Option<i64>>
        + Reads<PushRow<Self::Time>>
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
        + Reads<(String, i64, i64, i64)>
        + Reads<(Uuid, String, String, Self::Time, i64, Option<Self::Time>)>
        + Reads<ActivityRow<Self::Time>>
        + Reads<RecipientRow<Self::Time>>
        + Reads<crate::watch::SummaryRow<Self::Time>>
        + Reads<crate::watch::NewsRow<Self::Time>>;

    /// How a time is stored: Postgres binds a `DateTime<Utc>` (`timestamptz`), SQLite its
    /// microsecond integer codec.
    type Time: From<DateTime<Utc>> + Into<DateTime<Utc>> + Send + Sync + Unpin + 'static;

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

    /// An SQL condition "`column` is one of `n` ids" whose arguments start at placeholder
    /// `first`, bound by [`Dialect::bind_ids`]: Postgres `column = ANY($first)` (one array),
    /// SQLite `column IN ($first, …)` (`n` placeholders; `n ≥ 1`).
    fn any_id(column: &str, first: usize, n: usize) -> String;

    /// Binds `ids` for the condition of [`Dialect::any_id`].
    fn bind_ids<'q>(q: Stmt<'q, Self::Db>, ids: &[Uuid]) -> Stmt<'q, Self::Db>;

    /// A time as the dialect binds it.
    fn time(at: DateTime<Utc>) -> Self::Time {
        Self::Time::from(at)
    }

    /// How many rows a statement run with [`Stmt::execute`] inserted, updated or deleted (sqlx
    /// has no driver-generic accessor: `PgQueryResult::rows_affected`,
    /// `SqliteQueryResult::rows_affected`).
    fn rows_affected(done: &<Self::Db as Database>::QueryResult) -> u64;
}
