//! The SQLite ledger's oversight reads and human members (schema: `20261201000003_console.sql`).
//!
//! Reads run on the read pool in one read transaction (one snapshot); `touch_agents` and
//! `human_member` are write transactions. Bucket starts are computed in SQL on the stored
//! microseconds, `t − ((t mod b) + b) mod b` (floor, also before 1970), so they are multiples of
//! the bucket length since the epoch as [`crewbus_domain::bucket_start`] says.

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

use super::SqliteLedger;
use super::rows::{AGENT_COLUMNS, ActivityRow, AgentRow, RecipientRow};
use crate::codec::{Ts, from_db, marks, opt};

#[async_trait]
impl Oversight for SqliteLedger {
    async fn touch_agents(&self, seen: &[WakeupTarget], at: DateTime<Utc>) -> BusResult<u64> {
        validate_batch(seen.len())?;
        if seen.is_empty() {
            return Ok(0);
        }
        let what = "touch agents";
        let mut tx = self.begin(what).await?;
        let mut changed = 0;
        let mut done = HashSet::new();
        for target in seen.iter().filter(|t| done.insert(**t)) {
            changed += sqlx::query(
                "UPDATE agents SET last_active_at = ?1
                 WHERE id = ?2 AND team_id = ?3
                   AND (last_active_at IS NULL OR last_active_at < ?1)
                   AND team_id IN (SELECT id FROM teams WHERE tenant = ?4)",
            )
            .bind(Ts(at))
            .bind(target.agent)
            .bind(target.team)
            .bind(self.tenant.as_str())
            .execute(&mut *tx)
            .await
            .map_err(self.db(what))?
            .rows_affected();
        }
        self.commit(tx, what).await?;
        Ok(changed)
    }

    async fn agent_activity(&self, team: Uuid) -> BusResult<Vec<AgentActivity>> {
        let what = "agent activity";
        let mut tx = self.read(what).await?;
        self.require_team(&mut tx, team).await?;
        let rows: Vec<ActivityRow> = sqlx::query_as(&format!(
            "SELECT {AGENT_COLUMNS}, a.last_active_at,
                    (SELECT count(*) FROM receipts r JOIN messages m ON m.id = r.message_id
                     WHERE r.recipient_id = a.id AND r.delivered_at IS NULL
                       AND m.stored_at IS NOT NULL) AS pending,
                    (SELECT min(m.stored_at) FROM receipts r JOIN messages m ON m.id = r.message_id
                     WHERE r.recipient_id = a.id AND r.delivered_at IS NULL
                       AND m.stored_at IS NOT NULL) AS oldest_pending_at,
                    a.status, a.status_set_at,
                    (SELECT r.id FROM runs r WHERE r.agent_id = a.id AND r.sealed_at IS NULL
                     ORDER BY r.admitted_at DESC, r.id DESC LIMIT 1) AS current_run
             FROM agents a WHERE a.team_id = ? ORDER BY a.name"
        ))
        .bind(team)
        .fetch_all(&mut *tx)
        .await
        .map_err(self.db(what))?;
        rows.into_iter().map(AgentActivity::try_from).collect()
    }

    async fn set_status(&self, agent: &Agent, status: &str, at: DateTime<Utc>) -> BusResult<()> {
        let what = "set status";
        let line = (!status.is_empty()).then_some(status);
        let mut tx = self.begin(what).await?;
        let revoked: Option<(bool,)> = sqlx::query_as(
            "UPDATE agents
             SET status = CASE WHEN revoked_at IS NULL THEN ?1 ELSE status END,
                 status_set_at = CASE WHEN revoked_at IS NOT NULL THEN status_set_at
                                      WHEN ?1 IS NULL THEN NULL ELSE ?2 END
             WHERE id = ?3 AND team_id = ?4
               AND team_id IN (SELECT id FROM teams WHERE tenant = ?5)
             RETURNING revoked_at IS NOT NULL",
        )
        .bind(line)
        .bind(Ts(at))
        .bind(agent.id)
        .bind(agent.team)
        .bind(self.tenant.as_str())
        .fetch_optional(&mut *tx)
        .await
        .map_err(self.db(what))?;
        self.commit(tx, what).await?;
        crewbus_sql::presence::status_set(revoked.map(|(r,)| r), agent)
    }

    async fn conversation_summaries(&self, team: Uuid) -> BusResult<Vec<ConversationSummary>> {
        let what = "conversation summaries";
        let mut tx = self.read(what).await?;
        self.require_team(&mut tx, team).await?;
        type Row = (Uuid, String, String, Ts, i64, Option<Ts>);
        let rows: Vec<Row> = sqlx::query_as(
            "SELECT c.id, c.title, c.backend, c.created_at, c.next_seq - 1,
                    (SELECT m.sent_at FROM messages m WHERE m.conversation_id = c.id
                     ORDER BY m.seq DESC LIMIT 1)
             FROM conversations c WHERE c.team_id = ? ORDER BY c.ord",
        )
        .bind(team)
        .fetch_all(&mut *tx)
        .await
        .map_err(self.db(what))?;
        let sizes: Vec<(i64, Option<Ts>)> = rows.iter().map(|r| (r.4, r.5)).collect();
        let conversations = with_members(
            self,
            &mut tx,
            team,
            rows.into_iter().map(|r| (r.0, r.1, r.2, r.3)).collect(),
        )
        .await?;
        Ok(conversations
            .into_iter()
            .zip(sizes)
            .map(|(conversation, (messages, last))| ConversationSummary {
                conversation,
                messages: from_db(messages),
                last_sent_at: opt(last),
            })
            .collect())
    }

    async fn recipient_states(
        &self,
        team: Uuid,
        messages: &[Uuid],
    ) -> BusResult<Vec<RecipientState>> {
        validate_batch(messages.len())?;
        let mut seen = HashSet::new();
        let ids: Vec<Uuid> = messages
            .iter()
            .copied()
            .filter(|m| seen.insert(*m))
            .collect();
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let what = "recipient states";
        let sql = format!(
            "SELECT r.message_id, r.recipient_id, r.recipient_key, m.stored_at, r.delivered_at,
                    r.acknowledged_at,
                    (SELECT count(*) FROM hand_outs h
                     WHERE h.message_id = r.message_id AND h.recipient_id = r.recipient_id)
                        AS hand_outs,
                    (SELECT max(h.issued_at) FROM hand_outs h
                     WHERE h.message_id = r.message_id AND h.recipient_id = r.recipient_id)
                        AS last_handed_out_at
             FROM receipts r JOIN messages m ON m.id = r.message_id
             JOIN teams t ON t.id = m.team_id
             WHERE m.team_id = ? AND t.tenant = ? AND r.message_id IN ({})",
            marks(ids.len())
        );
        let mut query = sqlx::query_as::<_, RecipientRow>(&sql)
            .bind(team)
            .bind(self.tenant.as_str());
        for id in &ids {
            query = query.bind(*id);
        }
        let rows = query
            .fetch_all(self.pools.reader())
            .await
            .map_err(self.db(what))?;
        Ok(in_asked_order(
            &ids,
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
        let mut tx = self.read(what).await?;
        self.require_team(&mut tx, team).await?;
        // The deliveries of the window from `receipts_delivered` (`CROSS JOIN` pins that
        // order: the planner would otherwise read every message of the team by
        // `messages_sent` and look up its receipts).
        let rows: Vec<(i64, i64, i64)> = sqlx::query_as(
            "SELECT start, sum(sent), sum(delivered) FROM (
                 SELECT m.sent_at - (((m.sent_at % ?1) + ?1) % ?1) AS start,
                        1 AS sent, 0 AS delivered
                 FROM messages m
                 WHERE m.team_id = ?2 AND m.sent_at >= ?3 AND m.sent_at < ?4
                 UNION ALL
                 SELECT r.delivered_at - (((r.delivered_at % ?1) + ?1) % ?1), 0, 1
                 FROM receipts r CROSS JOIN messages m ON m.id = r.message_id
                 WHERE m.team_id = ?2 AND r.delivered_at >= ?3 AND r.delivered_at < ?4)
             GROUP BY start ORDER BY start",
        )
        .bind(step)
        .bind(team)
        .bind(Ts(since))
        .bind(Ts(until))
        .fetch_all(&mut *tx)
        .await
        .map_err(self.db(what))?;
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
        let mut tx = self.read(what).await?;
        self.require_team(&mut tx, team).await?;
        let rows: Vec<(String, i64, i64, i64)> = sqlx::query_as(
            "SELECT backend,
                    sum(publication = 'stored'),
                    sum(CASE WHEN publication = 'stored' THEN body_len ELSE 0 END),
                    sum(publication = 'pending_publication')
             FROM messages
             WHERE team_id = ?
               AND ((publication = 'stored' AND retained_at IS NULL)
                    OR publication = 'pending_publication')
             GROUP BY backend ORDER BY backend",
        )
        .bind(team)
        .fetch_all(&mut *tx)
        .await
        .map_err(self.db(what))?;
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
        self.require_team(&mut tx, team).await?;
        let known: Option<i64> =
            sqlx::query_scalar("SELECT 1 FROM conversations WHERE id = ? AND team_id = ?")
                .bind(conversation)
                .bind(team)
                .fetch_optional(&mut *tx)
                .await
                .map_err(self.db(what))?;
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
             WHERE a.team_id = ? AND a.operator_id = ? AND a.kind = 'human'"
        ))
        .bind(team)
        .bind(stored.id)
        .fetch_optional(&mut *tx)
        .await
        .map_err(self.db(what))?;
        let agent = match found {
            Some(row) => Agent::try_from(row)?,
            None => {
                let id = Uuid::new_v4();
                let name = human_member_name(&stored.name);
                sqlx::query(
                    "INSERT INTO agents
                         (id, team_id, name, recipient_key, token_hash, created_at, kind,
                          operator_id)
                     VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                )
                .bind(id)
                .bind(team)
                .bind(&name)
                .bind(recipient_key_for(id))
                .bind(&TokenHash::held_by_nobody().0[..])
                .bind(Ts(at))
                .bind(AgentKind::Human.as_str())
                .bind(stored.id)
                .execute(&mut *tx)
                .await
                .map_err(|e| match self.pools.bus_error(e, what) {
                    BusError::Conflict { .. } => {
                        BusError::conflict(format!("agent name {name:?} is taken"))
                    }
                    other => other,
                })?;
                self.agent_row(&mut tx, team, id).await?
            }
        };
        if agent.revoked() {
            return Err(BusError::forbidden(
                "the operator's human member is revoked",
            ));
        }
        sqlx::query(
            "INSERT INTO members (conversation_id, agent_id, recipient_key, joined_at)
             VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING",
        )
        .bind(conversation)
        .bind(agent.id)
        .bind(&agent.recipient_key)
        .bind(Ts(at))
        .execute(&mut *tx)
        .await
        .map_err(self.db(what))?;
        self.commit(tx, what).await?;
        Ok(agent)
    }
}
