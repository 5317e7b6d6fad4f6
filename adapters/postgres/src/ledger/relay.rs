//! The Postgres ledger's settle (set-based, in `settle`); the lease of slots is shared
//! (`crewbus_sql::relay`).

use chrono::{DateTime, Utc};
use crewbus_domain::{BusResult, SettleOutcome, Settlement};

use super::settle;
use crate::dialect::Pg;
use crewbus_sql::ledger::SqlLedger;

pub(crate) async fn settle(
    ledger: &SqlLedger<Pg>,
    settlements: &[Settlement],
    at: DateTime<Utc>,
) -> BusResult<Vec<SettleOutcome>> {
    if settlements.is_empty() {
        return Ok(Vec::new());
    }
    let what = "settle";
    let mut tx = ledger.begin(what).await?;
    let outcomes = settle::settle(&mut tx, ledger.tenant(), settlements, at).await?;
    ledger.commit(tx, what).await?;
    Ok(outcomes)
}
