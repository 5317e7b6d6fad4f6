//! `SqliteJournal`: runs and their records in `runs` and `journal_records`.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use crewbus_domain::{
    LeaseEnd, Record, RecordKind, Run, RunId, RunOutcome, Seq, StoreError, TenantId,
    check_appendable, validate_journal_limit, validate_note_text,
};
use crewbus_ports::Journal;
use crewbus_sql::journal::{RUN_COLUMNS, RunRow, append, insert_record, lock_run, records};
use crewbus_sql::leases::{Ending, end_leases};
use uuid::Uuid;

use crate::codec::{Ts, db_i64};
use crate::connect::SqlitePools;
use crate::dialect::Lite;

/// One tenant's runs and journals in SQLite.
///
/// Each append runs in a write transaction (`BEGIN IMMEDIATE`: write transactions are
/// serialised), refuses a sealed run, and takes `last_seq + 1` in the same transaction as the
/// record, so seqs are gap-free from 1 under any concurrency and nothing follows `RunSealed`.
/// The ledger appends the bus's own records through the same function inside its transactions.
/// Record kinds are stored as serde's JSON text (a note's U+0000 is escaped by JSON). Time comes
/// from the caller.
#[derive(Clone)]
pub struct SqliteJournal {
    pools: SqlitePools,
    tenant: TenantId,
}

impl std::fmt::Debug for SqliteJournal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteJournal")
            .field("tenant", &self.tenant)
            .finish_non_exhaustive()
    }
}

impl SqliteJournal {
    /// The journal of `tenant` over `pools` (migrated: [`crate::migrate`]).
    pub fn new(pools: SqlitePools, tenant: TenantId) -> Self {
        SqliteJournal { pools, tenant }
    }

    /// Appends to an open run in one transaction.
    async fn append_open(
        &self,
        run: RunId,
        at: DateTime<Utc>,
        kind: RecordKind,
    ) -> Result<Seq, StoreError> {
        let what = "journal append";
        let mut tx = self.pools.begin_store(what).await?;
        let state = lock_run::<Lite>(&mut tx, &self.tenant, run)
            .await
            .map_err(self.pools.st(what))?;
        check_appendable(run, state.map(|r| r.sealed))?;
        let seq = append::<Lite>(&mut tx, run, at, &kind)
            .await
            .map_err(self.pools.st(what))?;
        tx.commit().await.map_err(self.pools.st(what))?;
        Ok(seq)
    }
}

#[async_trait]
impl Journal for SqliteJournal {
    fn tenant(&self) -> &TenantId {
        &self.tenant
    }

    async fn admit(&self, team: Uuid, agent: Uuid, at: DateTime<Utc>) -> Result<RunId, StoreError> {
        let what = "journal admit";
        let run = RunId::new();
        let mut tx = self.pools.begin_store(what).await?;
        sqlx::query(
            "INSERT INTO runs (id, tenant, team_id, agent_id, admitted_at, last_seq)
             VALUES (?, ?, ?, ?, ?, 1)",
        )
        .bind(run.0)
        .bind(self.tenant.as_str())
        .bind(team)
        .bind(agent)
        .bind(Ts(at))
        .execute(&mut *tx)
        .await
        .map_err(self.pools.st(what))?;
        insert_record::<Lite>(
            &mut tx,
            run,
            1,
            at,
            &RecordKind::RunAdmitted { team, agent },
        )
        .await
        .map_err(self.pools.st(what))?;
        tx.commit().await.map_err(self.pools.st(what))?;
        Ok(run)
    }

    async fn resume(&self, run: RunId, at: DateTime<Utc>) -> Result<Seq, StoreError> {
        self.append_open(run, at, RecordKind::RunResumed).await
    }

    async fn note(&self, run: RunId, text: &str, at: DateTime<Utc>) -> Result<Seq, StoreError> {
        validate_note_text("note", text)?;
        let kind = RecordKind::Note {
            text: text.to_owned(),
        };
        self.append_open(run, at, kind).await
    }

    async fn seal(
        &self,
        run: RunId,
        outcome: RunOutcome,
        reason: &str,
        at: DateTime<Utc>,
    ) -> Result<Seq, StoreError> {
        validate_note_text("reason", reason)?;
        let kind = RecordKind::RunSealed {
            outcome,
            reason: reason.to_owned(),
        };
        let what = "journal seal";
        let mut tx = self.pools.begin_store(what).await?;
        let state = lock_run::<Lite>(&mut tx, &self.tenant, run)
            .await
            .map_err(self.pools.st(what))?;
        check_appendable(run, state.map(|r| r.sealed))?;
        // Its live leases end first, their records before the seal's.
        end_leases::<Lite>(
            &mut tx,
            &self.tenant,
            Ending::Run(run),
            LeaseEnd::RunSealed,
            at,
        )
        .await
        .map_err(self.pools.st(what))?;
        let seq = append::<Lite>(&mut tx, run, at, &kind)
            .await
            .map_err(self.pools.st(what))?;
        tx.commit().await.map_err(self.pools.st(what))?;
        Ok(seq)
    }

    async fn read(
        &self,
        run: RunId,
        from_seq: Seq,
        limit: usize,
    ) -> Result<Vec<Record>, StoreError> {
        validate_journal_limit(limit)?;
        let what = "journal read";
        // One statement, one snapshot: the run's existence and its records agree (a run without
        // records from `from_seq` on is one row of NULLs).
        let rows: Vec<(Option<i64>, Option<Ts>, Option<String>)> = sqlx::query_as(
            "SELECT j.seq, j.at, j.kind
             FROM runs r LEFT JOIN journal_records j ON j.run_id = r.id AND j.seq >= ?3
             WHERE r.id = ?1 AND r.tenant = ?2
             ORDER BY j.seq LIMIT ?4",
        )
        .bind(run.0)
        .bind(self.tenant.as_str())
        .bind(db_i64(from_seq.0))
        .bind(limit as i64)
        .fetch_all(self.pools.reader())
        .await
        .map_err(self.pools.st(what))?;
        records(run, rows)
    }

    async fn run(&self, run: RunId) -> Result<Run, StoreError> {
        let row: Option<RunRow<Ts>> = sqlx::query_as(&format!(
            "SELECT {RUN_COLUMNS} FROM runs WHERE id = ? AND tenant = ?"
        ))
        .bind(run.0)
        .bind(self.tenant.as_str())
        .fetch_optional(self.pools.reader())
        .await
        .map_err(self.pools.st("journal run"))?;
        row.map(Run::from)
            .ok_or_else(|| StoreError::not_found(format!("run {run}")))
    }

    async fn runs(
        &self,
        team: Uuid,
        before: Option<DateTime<Utc>>,
        limit: usize,
    ) -> Result<Vec<Run>, StoreError> {
        validate_journal_limit(limit)?;
        let rows: Vec<RunRow<Ts>> = sqlx::query_as(&format!(
            "SELECT {RUN_COLUMNS} FROM runs
             WHERE tenant = ?1 AND team_id = ?2 AND (?3 IS NULL OR admitted_at < ?3)
             ORDER BY admitted_at DESC, id DESC LIMIT ?4"
        ))
        .bind(self.tenant.as_str())
        .bind(team)
        .bind(before.map(Ts))
        .bind(limit as i64)
        .fetch_all(self.pools.reader())
        .await
        .map_err(self.pools.st("journal runs"))?;
        Ok(rows.into_iter().map(Run::from).collect())
    }
}
