//! Rows of the ledger's tables: the ones both SQL adapters share (`crewbus_sql::rows`), with
//! times stored as microseconds ([`Ts`]).

use crate::codec::Ts;

pub(crate) use crewbus_sql::rows::MESSAGE_COLUMNS;

pub(crate) type MessageRow = crewbus_sql::rows::MessageRow<Ts>;
