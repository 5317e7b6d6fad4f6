//! The Postgres ledger's history pages: the shared ones (`crewbus_sql::history`), read on a pool
//! connection (the directory's lookups).

pub(super) use crewbus_sql::history::history;
