//! Rows of the ledger's tables: the ones both SQL adapters share (`crewbus_sql::rows`), with
//! times stored as microseconds ([`Ts`]).

use crate::codec::Ts;

pub(crate) use crewbus_sql::rows::{AGENT_COLUMNS, MESSAGE_COLUMNS, RECEIPT_COLUMNS, RECEIPTS};

pub(crate) type MessageRow = crewbus_sql::rows::MessageRow<Ts>;
pub(crate) type ReceiptRow = crewbus_sql::rows::ReceiptRow<Ts>;
/// An operator without the teams of its scope (read from `operator_teams` separately).
pub(crate) type OperatorRow = crewbus_sql::rows::OperatorRow<Ts>;
pub(crate) type SlotRow = crewbus_sql::rows::SlotRow<Ts, i64>;
pub(crate) type ReferenceRow = crewbus_sql::rows::ReferenceRow<Ts>;

pub(crate) const OPERATOR_COLUMNS: &str =
    "o.id, o.name, o.token_hash, o.all_teams, o.created_at, o.revoked_at";
