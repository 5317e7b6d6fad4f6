//! How this crate runs statements on either driver without naming one: the capabilities of a
//! database ([`Binds`], [`Runs`], [`Reads`]) the [`Dialect`] lists, and the statements
//! ([`Stmt`]) the shared functions build their queries with.
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

use sqlx::{Database, Encode, Executor, FromRow, IntoArguments, Type};

use crate::dialect::Dialect;

/// sqlx's statement on `DB` with its own argument buffer.
type Query<'q, DB> = sqlx::query::Query<'q, DB, <DB as Database>::Arguments<'q>>;

/// `sqlx::query(sql)` on the database of dialect `D`.
pub fn stmt<D: Dialect>(sql: &str) -> Stmt<'_, D::Db> {
    Stmt(sqlx::query(sql))
}

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
