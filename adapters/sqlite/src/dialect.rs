//! SQLite as a [`Dialect`] of the shared SQL code (`crewbus-sql`): times bound as microsecond
//! integers ([`Ts`]), no row locks (write transactions are serialised whole), id lists as
//! `IN ($n, …)`.

use crewbus_sql::driver::{Dialect, Stmt};
use sqlx::Sqlite;
use uuid::Uuid;

use crate::codec::Ts;

/// The SQLite dialect.
pub struct Lite;

impl Dialect for Lite {
    type Db = Sqlite;
    type Time = Ts;
    const ROW_LOCKS: bool = false;
    const FOR_UPDATE: &'static str = "";
    const FOR_NO_KEY_UPDATE: &'static str = "";

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
