//! The Postgres ledger's retention: the section is [`crewbus_sql::retention`].

pub(super) use crewbus_sql::retention::{mark_retained, retention_due};
