//! crewbus Postgres adapter: the ledger, the journal, an inbox (queue table), a body backend and
//! its registry, over sqlx. Built in the Postgres issue; nothing is exported yet.
