//! The journal's rows and records, for both SQL adapters: how a record is stored (`kind` as
//! serde's JSON text, the seal written on the run row) and how runs and records are read back.

use chrono::{DateTime, Utc};
use crewbus_domain::{Record, RecordKind, Run, RunId, Seq, StoreError, TenantId};
use uuid::Uuid;

use crate::counter::from_db;
use crate::driver::{Conn, Dialect, StmtExt, stmt};

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

/// A run row as read for an append: locked on Postgres, read inside the write transaction on
/// SQLite (so it cannot change before the append either way).
pub struct RunState {
    /// The run's team.
    pub team: Uuid,
    /// The agent the run is of.
    pub agent: Uuid,
    /// Whether it is sealed.
    pub sealed: bool,
}

/// Reads `run` of `tenant` for an append, locking its row where writers lock rows
/// ([`Dialect::FOR_NO_KEY_UPDATE`]); `None` when it does not exist.
pub async fn lock_run<D: Dialect>(
    conn: &mut Conn<D>,
    tenant: &TenantId,
    run: RunId,
) -> Result<Option<RunState>, sqlx::Error> {
    let sql = format!(
        "SELECT team_id, agent_id, sealed_at IS NOT NULL FROM runs
         WHERE id = $1 AND tenant = $2{}",
        D::FOR_NO_KEY_UPDATE
    );
    let row: Option<(Uuid, Uuid, bool)> = stmt::<D>(&sql)
        .arg(run.0)
        .arg(tenant.as_str().to_owned())
        .optional(conn)
        .await?;
    Ok(row.map(|(team, agent, sealed)| RunState {
        team,
        agent,
        sealed,
    }))
}

/// Appends `kind` at `at` to a run read with [`lock_run`] in the same transaction (and checked
/// open), and returns its seq (`last_seq + 1`). A `RunSealed` record seals the run.
pub async fn append<D: Dialect>(
    conn: &mut Conn<D>,
    run: RunId,
    at: DateTime<Utc>,
    kind: &RecordKind,
) -> Result<Seq, sqlx::Error> {
    let (sealed_at, outcome) = sealing(kind, at);
    let (seq,): (i64,) = stmt::<D>(
        "UPDATE runs SET last_seq = last_seq + 1,
                         sealed_at = COALESCE($2, sealed_at),
                         outcome = COALESCE($3, outcome)
         WHERE id = $1 RETURNING last_seq",
    )
    .arg(run.0)
    .arg(sealed_at.map(D::time))
    .arg(outcome.map(str::to_owned))
    .one(&mut *conn)
    .await?;
    insert_record::<D>(conn, run, seq, at, kind).await?;
    Ok(Seq(from_db(seq)))
}

/// Writes the record `(run, seq, at, kind)` (`kind` as [`kind_text`]).
pub async fn insert_record<D: Dialect>(
    conn: &mut Conn<D>,
    run: RunId,
    seq: i64,
    at: DateTime<Utc>,
    kind: &RecordKind,
) -> Result<(), sqlx::Error> {
    stmt::<D>("INSERT INTO journal_records (run_id, seq, at, kind) VALUES ($1, $2, $3, $4)")
        .arg(run.0)
        .arg(seq)
        .arg(D::time(at))
        .arg(kind_text(kind)?)
        .run(conn)
        .await?;
    Ok(())
}
