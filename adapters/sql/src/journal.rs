//! The journal's rows and records, for both SQL adapters: how a record is stored (`kind` as
//! serde's JSON text, the seal written on the run row) and how runs and records are read back.

use chrono::{DateTime, Utc};
use crewbus_domain::{Record, RecordKind, Run, RunId, Seq, StoreError};
use uuid::Uuid;

use crate::counter::from_db;

/// The columns of a [`RunRow`], read from `runs`.
pub const RUN_COLUMNS: &str = "id, team_id, agent_id, admitted_at, last_seq, sealed_at, outcome";

/// A row of `runs` ([`RUN_COLUMNS`]); `T` is how the adapter stores a time.
#[derive(sqlx::FromRow)]
pub struct RunRow<T = DateTime<Utc>> {
    id: Uuid,
    team_id: Uuid,
    agent_id: Uuid,
    admitted_at: T,
    last_seq: i64,
    sealed_at: Option<T>,
    outcome: Option<String>,
}

impl<T: Into<DateTime<Utc>>> From<RunRow<T>> for Run {
    /// The run as stored (`Run::from_stored`: a seal needs both its time and a known outcome).
    fn from(r: RunRow<T>) -> Run {
        Run::from_stored(
            RunId(r.id),
            r.team_id,
            r.agent_id,
            r.admitted_at.into(),
            Seq(from_db(r.last_seq)),
            r.sealed_at.map(Into::into),
            r.outcome.as_deref(),
        )
    }
}

/// What appending `kind` at `at` writes on its run row: the seal's time and outcome name for a
/// `RunSealed` record, `(None, None)` (the row's values kept) for any other.
pub fn sealing(
    kind: &RecordKind,
    at: DateTime<Utc>,
) -> (Option<DateTime<Utc>>, Option<&'static str>) {
    match kind {
        RecordKind::RunSealed { outcome, .. } => (Some(at), Some(outcome.as_str())),
        _ => (None, None),
    }
}

/// The stored text of a record's kind: serde's JSON (a note's U+0000 is escaped by JSON). A kind
/// that does not serialise (never, for the domain's kinds) is an encode error.
pub fn kind_text(kind: &RecordKind) -> Result<String, sqlx::Error> {
    serde_json::to_string(kind).map_err(|e| sqlx::Error::Encode(Box::new(e)))
}

/// The records of `run` from the rows of one statement that joins the run to its records from
/// the requested seq on: `(seq, at, kind)`, all `NULL` for a run with none left. No row at all →
/// the run is unknown (`StoreError::NotFound`); a stored kind that does not parse →
/// `StoreError::Backend`.
pub fn records<T: Into<DateTime<Utc>>>(
    run: RunId,
    rows: Vec<(Option<i64>, Option<T>, Option<String>)>,
) -> Result<Vec<Record>, StoreError> {
    if rows.is_empty() {
        return Err(StoreError::not_found(format!("run {run}")));
    }
    let mut records = Vec::with_capacity(rows.len());
    for row in rows {
        let (Some(seq), Some(at), Some(kind)) = row else {
            continue;
        };
        records.push(Record::from_stored(
            run,
            Seq(from_db(seq)),
            at.into(),
            &kind,
        )?);
    }
    Ok(records)
}
