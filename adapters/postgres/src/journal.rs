//! `PostgresJournal`: runs and their records in `runs` and `journal_records`.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use crewbus_domain::{
    LeaseEnd, Record, RecordKind, Run, RunId, RunOutcome, Seq, StoreError, TenantId,
    check_appendable, validate_journal_limit, validate_note_text,
};
use crewbus_ports::Journal;
use crewbus_sql::db_i64;
use crewbus_sql::journal::{RUN_COLUMNS, RunRow, append, insert_record, lock_run, records};
use crewbus_sql::leases::{Ending, end_leases, lock_fence};
use sqlx::PgPool;
use uuid::Uuid;

use crate::dialect::Pg;
use crate::error::store_error;

/// One tenant's runs and journals in Postgres.
///
/// Each append locks the run's row (`SELECT … FOR NO KEY UPDATE`: foreign-key checks of inserted records are not blocked), refuses a sealed run, and takes
/// `last_seq + 1` in the same transaction as the record, so seqs are gap-free from 1 under any
/// concurrency, and nothing follows `RunSealed`. The ledger appends the bus's own records through
/// the same function inside its transactions. Record kinds are stored as JSON text (a note may
/// hold U+0000, which `jsonb` would refuse). Time comes from the caller.
#[derive(Clone)]
pub struct PostgresJournal {
    pool: PgPool,
    tenant: TenantId,
}

impl std::fmt::Debug for PostgresJournal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresJournal")
            .field("tenant", &self.tenant)
            .finish_non_exhaustive()
    }
}

impl PostgresJournal {
    /// The journal of `tenant` over `pool` (migrated: [`crate::migrate`]).
    pub fn new(pool: PgPool, tenant: TenantId) -> Self {
        PostgresJournal { pool, tenant }
    }

    /// Appends to an open run in one transaction.
    async fn append_open(
        &self,
        run: RunId,
        at: DateTime<Utc>,
        kind: RecordKind,
    ) -> Result<Seq, StoreError> {
        let what = "journal append";
        let mut tx = self.pool.begin().await.map_err(|e| store_error(e, what))?;
        let locked = lock_run::<Pg>(&mut tx, &self.tenant, run)
            .await
            .map_err(|e| store_error(e, what))?;
        check_appendable(run, locked.map(|r| r.sealed))?;
        let seq = append::<Pg>(&mut tx, run, at, &kind)
            .await
            .map_err(|e| store_error(e, what))?;
        tx.commit().await.map_err(|e| store_error(e, what))?;
        Ok(seq)
    }
}

#[async_trait]
impl Journal for PostgresJournal {
    fn tenant(&self) -> &TenantId {
        &self.tenant
    }

    async fn admit(&self, team: Uuid, agent: Uuid, at: DateTime<Utc>) -> Result<RunId, StoreError> {
        let what = "journal admit";
        let run = RunId::new();
        let mut tx = self.pool.begin().await.map_err(|e| store_error(e, what))?;
        sqlx::query(
            "INSERT INTO runs (id, tenant, team_id, agent_id, admitted_at, last_seq)
             VALUES ($1, $2, $3, $4, $5, 1)",
        )
        .bind(run.0)
        .bind(self.tenant.as_str())
        .bind(team)
        .bind(agent)
        .bind(at)
        .execute(&mut *tx)
        .await
        .map_err(|e| store_error(e, what))?;
        insert_record::<Pg>(
            &mut tx,
            run,
            1,
            at,
            &RecordKind::RunAdmitted { team, agent },
        )
        .await
        .map_err(|e| store_error(e, what))?;
        tx.commit().await.map_err(|e| store_error(e, what))?;
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
        let err = |e| store_error(e, what);
        let mut tx = self.pool.begin().await.map_err(err)?;
        // The lease lock order: the team's fence before the run (see the ledger's leases).
        let team: Option<Uuid> =
            sqlx::query_scalar("SELECT team_id FROM runs WHERE id = $1 AND tenant = $2")
                .bind(run.0)
                .bind(self.tenant.as_str())
                .fetch_optional(&mut *tx)
                .await
                .map_err(err)?;
        if let Some(team) = team {
            lock_fence::<Pg>(&mut tx, team).await.map_err(err)?;
        }
        let locked = lock_run::<Pg>(&mut tx, &self.tenant, run)
            .await
            .map_err(err)?;
        check_appendable(run, locked.map(|r| r.sealed))?;
        // Its live leases end first, their records before the seal's.
        end_leases::<Pg>(
            &mut tx,
            &self.tenant,
            Ending::Run(run),
            LeaseEnd::RunSealed,
            at,
        )
        .await
        .map_err(err)?;
        let seq = append::<Pg>(&mut tx, run, at, &kind).await.map_err(err)?;
        tx.commit().await.map_err(err)?;
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
        // One statement, one snapshot: the run's existence and its records agree.
        let rows: Vec<(Option<i64>, Option<DateTime<Utc>>, Option<String>)> = sqlx::query_as(
            "SELECT j.seq, j.at, j.kind
             FROM runs r LEFT JOIN LATERAL (
                 SELECT seq, at, kind FROM journal_records
                 WHERE run_id = r.id AND seq >= $3
                 ORDER BY seq LIMIT $4) j ON true
             WHERE r.id = $1 AND r.tenant = $2
             ORDER BY j.seq",
        )
        .bind(run.0)
        .bind(self.tenant.as_str())
        .bind(db_i64(from_seq.0))
        .bind(limit as i64)
        .fetch_all(&self.pool)
        .await
        .map_err(|e| store_error(e, what))?;
        records(run, rows)
    }

    async fn run(&self, run: RunId) -> Result<Run, StoreError> {
        let row: Option<RunRow> = sqlx::query_as(&format!(
            "SELECT {RUN_COLUMNS} FROM runs WHERE id = $1 AND tenant = $2"
        ))
        .bind(run.0)
        .bind(self.tenant.as_str())
        .fetch_optional(&self.pool)
        .await
        .map_err(|e| store_error(e, "journal run"))?;
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
        let rows: Vec<RunRow> = sqlx::query_as(&format!(
            "SELECT {RUN_COLUMNS} FROM runs
             WHERE tenant = $1 AND team_id = $2
               AND ($3::timestamptz IS NULL OR admitted_at < $3)
             ORDER BY admitted_at DESC, id DESC LIMIT $4"
        ))
        .bind(self.tenant.as_str())
        .bind(team)
        .bind(before)
        .bind(limit as i64)
        .fetch_all(&self.pool)
        .await
        .map_err(|e| store_error(e, "journal runs"))?;
        Ok(rows.into_iter().map(Run::from).collect())
    }
}
