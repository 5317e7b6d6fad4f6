//! The SQLite ledger's history pages: the shared ones (`crewbus_sql::history`), read in one read
//! transaction (the directory's lookups), so the conversation check and its page agree.

pub(super) use crewbus_sql::history::history;
