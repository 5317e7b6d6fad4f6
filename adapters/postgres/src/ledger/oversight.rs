//! The Postgres ledger's oversight reads and human members (schema:
//! `20261201000003_console.sql`).
//!
//! Each read is one statement (one snapshot) after the team check, a constant number whatever
//! the team's size; `touch_agents` is one `UPDATE … FROM unnest`. Bucket starts are computed in
//! SQL on the times' microseconds, `t − ((t mod b) + b) mod b` (floor, also before 1970), so they
//! are multiples of the bucket length since the epoch as [`crewbus_domain::bucket_start`] says.
//! `human_member` locks the team's row, so two first posts of one operator in one team create
//! one human member (the partial unique index `agents_human` says so too).

use std::collections::HashSet;
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use crewbus_domain::{
    ActivityBucket, Agent, AgentActivity, AgentKind, BusError, BusResult, ConversationSummary,
    Operator, RecipientState, StorageUse, TokenHash, WakeupTarget, human_member_name,
    in_asked_order, recipient_key_for, validate_activity, validate_batch,
};
use crewbus_ports::Oversight;
use crewbus_sql::directory::with_members;
use crewbus_sql::ledger::SqlLedger;
use uuid::Uuid;

use super::rows::{AGENT_COLUMNS, ActivityRow, AgentRow, RecipientRow, from_db};
use super::{PostgresLedger, db};
use crate::error::bus_error;

/// `t`'s bucket start in microseconds, for a `timestamptz` expression `t` and the bucket
/// length in microseconds `$1`.
macro_rules! bucket_of {
    ($t:literal) => {
        concat!(
            "(floor(extract(epoch FROM ",
            $t,
            ") * 1000000)::bigint - ",
            "((floor(extract(epoch FROM ",
            $t,
            ") * 1000000)::bigint % $1) + $1) % $1)"
        )
    };
}

#[async_trait]
impl Oversight for PostgresLedger {
    async fn touch_agents(&self, seen: &[WakeupTarget], at: DateTime<Utc>) -> BusResult<u64> {
        validate_batch(seen.len())?;
        let mut done = HashSet::new();
        let (teams, agents): (Vec<Uuid>, Vec<Uuid>) = seen
            .iter()
            .filter(|t| done.insert(**t))
            .map(|t| (t.team, t.agent))
            .unzip();
        if agents.is_empty() {
            return Ok(0);
        }
        let changed = sqlx::query(
            "UPDATE agents a SET last_active_at = $3
             FROM unnest($1::uuid[], $2::uuid[]) AS u(team, agent), teams t
             WHERE a.id = u.agent AND a.team_id = u.team AND t.id = a.team_id AND t.tenant = $4
               AND (a.last_active_at IS NULL OR a.last_active_at < $3)",
        )
        .bind(&teams)
        .bind(&agents)
        .bind(at)
        .bind(self.tenant.as_str())
        .execute(&self.pool)
        .await
        .map_err(db("touch agents"))?;
        Ok(changed.rows_affected())
    }

    async fn agent_activity(&self, team: Uuid) -> BusResult<Vec<AgentActivity>> {
        let what = "agent activity";
        let mut conn = self.pool.acquire().await.map_err(db(what))?;
        self.require_team(&mut conn, team).await?;
        let rows: Vec<ActivityRow> = sqlx::query_as(&format!(
            "SELECT {AGENT_COLUMNS}, a.last_active_at,
                    coalesce(p.pending, 0) AS pending, p.oldest AS oldest_pending_at,
                    a.status, a.status_set_at,
                    (SELECT r.id FROM runs r WHERE r.agent_id = a.id AND r.sealed_at IS NULL
                     ORDER BY r.admitted_at DESC, r.id DESC LIMIT 1) AS current_run
             FROM agents a
             LEFT JOIN LATERAL (
                 SELECT count(*) AS pending, min(m.stored_at) AS oldest
                 FROM receipts r JOIN messages m ON m.id = r.message_id
                 WHERE r.recipient_id = a.id AND r.delivered_at IS NULL
                   AND m.stored_at IS NOT NULL) p ON true
             WHERE a.team_id = $1 ORDER BY a.name COLLATE \"C\""
        ))
        .bind(team)
        .fetch_all(&mut *conn)
        .await
        .map_err(db(what))?;
        rows.into_iter().map(AgentActivity::try_from).collect()
    }

    async fn set_status(&self, agent: &Agent, status: &str, at: DateTime<Utc>) -> BusResult<()> {
        let what = "set status";
        let line = (!status.is_empty()).then_some(status);
        let changed: Option<(bool,)> = sqlx::query_as(
            "UPDATE agents a
             SET status = CASE WHEN a.revoked_at IS NULL THEN $3::text ELSE a.status END,
                 status_set_at = CASE WHEN a.revoked_at IS NOT NULL THEN a.status_set_at
                                      WHEN $3::text IS NULL THEN NULL ELSE $4::timestamptz END
             FROM teams t
             WHERE a.id = $1 AND a.team_id = $2 AND t.id = a.team_id AND t.tenant = $5
             RETURNING a.revoked_at IS NOT NULL",
        )
        .bind(agent.id)
        .bind(agent.team)
        .bind(line)
        .bind(at)
        .bind(self.tenant.as_str())
        .fetch_optional(&self.pool)
        .await
        .map_err(db(what))?;
        crewbus_sql::presence::status_set(changed.map(|(revoked,)| revoked), agent)
    }

    async fn conversation_summaries(&self, team: Uuid) -> BusResult<Vec<ConversationSummary>> {
        let what = "conversation summaries";
        let mut tx = self.begin(what).await?;
        self.require_team(&mut tx, team).await?;
        type Row = (
            Uuid,
            String,
            String,
            DateTime<Utc>,
            i64,
            Option<DateTime<Utc>>,
        );
        let rows: Vec<Row> = sqlx::query_as(
            "SELECT c.id, c.title, c.backend, c.created_at, c.next_seq - 1,
                    (SELECT m.sent_at FROM messages m WHERE m.conversation_id = c.id
                     ORDER BY m.seq DESC LIMIT 1)
             FROM conversations c WHERE c.team_id = $1 ORDER BY c.ord",
        )
        .bind(team)
        .fetch_all(&mut *tx)
        .await
        .map_err(db(what))?;
        let sizes: Vec<(i64, Option<DateTime<Utc>>)> = rows.iter().map(|r| (r.4, r.5)).collect();
        let conversations = with_members(
            self,
            &mut tx,
            team,
            rows.into_iter().map(|r| (r.0, r.1, r.2, r.3)).collect(),
        )
        .await?;
        PostgresLedger::commit(tx, "conversations").await?;
        Ok(conversations
            .into_iter()
            .zip(sizes)
            .map(
                |(conversation, (messages, last_sent_at))| ConversationSummary {
                    conversation,
                    messages: from_db(messages),
                    last_sent_at,
                },
            )
            .collect())
    }

    async fn recipient_states(
        &self,
        team: Uuid,
        messages: &[Uuid],
    ) -> BusResult<Vec<RecipientState>> {
        validate_batch(messages.len())?;
        if messages.is_empty() {
            return Ok(Vec::new());
        }
        let rows: Vec<RecipientRow> = sqlx::query_as(
            "SELECT r.message_id, r.recipient_id, r.recipient_key, m.stored_at, r.delivered_at,
                    r.acknowledged_at,
                    coalesce(h.n, 0) AS hand_outs, h.last AS last_handed_out_at
             FROM receipts r JOIN messages m ON m.id = r.message_id
             JOIN teams t ON t.id = m.team_id
             LEFT JOIN LATERAL (
                 SELECT count(*) AS n, max(issued_at) AS last FROM hand_outs h
                 WHERE h.message_id = r.message_id AND h.recipient_id = r.recipient_id) h ON true
             WHERE m.team_id = $1 AND t.tenant = $2 AND r.message_id = ANY($3)",
        )
        .bind(team)
        .bind(self.tenant.as_str())
        .bind(messages)
        .fetch_all(&self.pool)
        .await
        .map_err(db("recipient states"))?;
        Ok(in_asked_order(
            messages,
            rows.into_iter().map(RecipientState::from).collect(),
        ))
    }

    async fn activity(
        &self,
        team: Uuid,
        since: DateTime<Utc>,
        until: DateTime<Utc>,
        bucket: Duration,
    ) -> BusResult<Vec<ActivityBucket>> {
        let step = validate_activity(since, until, bucket)?;
        let what = "activity";
        let mut conn = self.pool.acquire().await.map_err(db(what))?;
        self.require_team(&mut conn, team).await?;
        let sql = concat!(
            "SELECT start, count(*) FILTER (WHERE sent), count(*) FILTER (WHERE NOT sent)
             FROM (
                 SELECT ",
            bucket_of!("m.sent_at"),
            " AS start, true AS sent
                 FROM messages m
                 WHERE m.team_id = $2 AND m.sent_at >= $3 AND m.sent_at < $4
                 UNION ALL
                 SELECT ",
            bucket_of!("r.delivered_at"),
            ", false
                 FROM receipts r JOIN messages m ON m.id = r.message_id
                 WHERE m.team_id = $2 AND r.delivered_at >= $3 AND r.delivered_at < $4) b
             GROUP BY start ORDER BY start"
        );
        let rows: Vec<(i64, i64, i64)> = sqlx::query_as(sql)
            .bind(step)
            .bind(team)
            .bind(since)
            .bind(until)
            .fetch_all(&mut *conn)
            .await
            .map_err(db(what))?;
        Ok(rows
            .into_iter()
            .map(|(start, sent, delivered)| ActivityBucket {
                start: DateTime::from_timestamp_micros(start).unwrap_or(since),
                sent: from_db(sent),
                delivered: from_db(delivered),
            })
            .collect())
    }

    async fn storage_use(&self, team: Uuid) -> BusResult<Vec<StorageUse>> {
        let what = "storage use";
        let mut conn = self.pool.acquire().await.map_err(db(what))?;
        self.require_team(&mut conn, team).await?;
        let rows: Vec<(String, i64, i64, i64)> = sqlx::query_as(
            "SELECT backend,
                    count(*) FILTER (WHERE publication = 'stored'),
                    coalesce(sum(body_len) FILTER (WHERE publication = 'stored'), 0)::bigint,
                    count(*) FILTER (WHERE publication = 'pending_publication')
             FROM messages
             WHERE team_id = $1
               AND ((publication = 'stored' AND retained_at IS NULL)
                    OR publication = 'pending_publication')
             GROUP BY backend ORDER BY backend COLLATE \"C\"",
        )
        .bind(team)
        .fetch_all(&mut *conn)
        .await
        .map_err(db(what))?;
        Ok(rows
            .into_iter()
            .map(|(backend, messages, bytes, pending)| StorageUse {
                backend,
                messages: from_db(messages),
                bytes: from_db(bytes),
                pending: from_db(pending),
            })
            .collect())
    }

    async fn human_member(
        &self,
        team: Uuid,
        conversation: Uuid,
        operator: &Operator,
        at: DateTime<Utc>,
    ) -> BusResult<Agent> {
        let what = "human member";
        let mut tx = self.begin(what).await?;
        // The team's row lock serialises first posts into the team (see the module docs).
        let locked: Option<i32> = sqlx::query_scalar(
            "SELECT 1 FROM teams WHERE id = $1 AND tenant = $2 FOR NO KEY UPDATE",
        )
        .bind(team)
        .bind(self.tenant.as_str())
        .fetch_optional(&mut *tx)
        .await
        .map_err(db(what))?;
        if locked.is_none() {
            return Err(BusError::not_found(format!("team {team}")));
        }
        let known: Option<i32> =
            sqlx::query_scalar("SELECT 1 FROM conversations WHERE id = $1 AND team_id = $2")
                .bind(conversation)
                .bind(team)
                .fetch_optional(&mut *tx)
                .await
                .map_err(db(what))?;
        if known.is_none() {
            return Err(BusError::not_found(format!("conversation {conversation}")));
        }
        let stored = self
            .operator_row(&mut tx, operator.id)
            .await?
            .filter(|o| !o.revoked() && !operator.revoked())
            .ok_or_else(|| BusError::forbidden("the operator is revoked"))?;
        stored.check_team(team, &format!("team {team}"))?;
        let found: Option<AgentRow> = sqlx::query_as(&format!(
            "SELECT {AGENT_COLUMNS} FROM agents a
             WHERE a.team_id = $1 AND a.operator_id = $2 AND a.kind = 'human'"
        ))
        .bind(team)
        .bind(stored.id)
        .fetch_optional(&mut *tx)
        .await
        .map_err(db(what))?;
        let agent: Agent = match found {
            Some(row) => row.try_into()?,
            None => {
                let id = Uuid::new_v4();
                let name = human_member_name(&stored.name);
                let row: AgentRow = sqlx::query_as(&format!(
                    "INSERT INTO agents AS a
                         (id, team_id, name, recipient_key, token_hash, created_at, kind,
                          operator_id)
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING {AGENT_COLUMNS}"
                ))
                .bind(id)
                .bind(team)
                .bind(&name)
                .bind(recipient_key_for(id))
                .bind(&TokenHash::held_by_nobody().0[..])
                .bind(at)
                .bind(AgentKind::Human.as_str())
                .bind(stored.id)
                .fetch_one(&mut *tx)
                .await
                .map_err(|e| match bus_error(e, what) {
                    BusError::Conflict { .. } => {
                        BusError::conflict(format!("agent name {name:?} is taken"))
                    }
                    other => other,
                })?;
                row.try_into()?
            }
        };
        if agent.revoked() {
            return Err(BusError::forbidden(
                "the operator's human member is revoked",
            ));
        }
        sqlx::query(
            "INSERT INTO members (conversation_id, agent_id, recipient_key, joined_at)
             VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING",
        )
        .bind(conversation)
        .bind(agent.id)
        .bind(&agent.recipient_key)
        .bind(at)
        .execute(&mut *tx)
        .await
        .map_err(db(what))?;
        PostgresLedger::commit(tx, what).await?;
        Ok(agent)
    }
}
