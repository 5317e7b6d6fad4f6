//! The oversight port (`crewbus_ports::Oversight`: what the console reads, and the operators'
//! human members) on every SQL store, `impl<D: Dialect> Oversight for SqlLedger<D>`, each
//! statement whose text differs by dialect a [`PerDialect`] pair beside it (Postgres `LATERAL`
//! joins and `FILTER`, SQLite subqueries and sums of conditions), the agents' touch the
//! dialect's ([`Dialect::touch_agents`]).
//!
//! How each operation holds the store follows the [`Dialect`]: the team's reads of several
//! statements (`agent_activity`, `activity`, `storage_use`) as its lookups (Postgres a pool
//! connection, SQLite one read transaction), `conversation_summaries` as its lists (Postgres a
//! read-committed transaction, SQLite one read transaction), `set_status` as its one-statement
//! writes (Postgres a pool connection, SQLite a write transaction), `recipient_states` on a
//! connection (one statement), `human_member` in a write transaction. Each read is one
//! statement after the team check, a constant number whatever the team's size.
//!
//! `human_member` locks the team's row where writers lock rows (`FOR NO KEY UPDATE`), so two
//! first posts of one operator in one team create one human member (the partial unique index
//! `agents_human` says so too); on SQLite the write transaction serialises them.
//!
//! Bucket starts (`activity`) are computed in SQL on the times' microseconds,
//! `t − ((t mod b) + b) mod b` (floor, also before 1970), so they are multiples of the bucket
//! length since the epoch as `crewbus_domain::bucket_start` says.

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
use uuid::Uuid;

use crate::counter::from_db;
use crate::dialect::{Dialect, PerDialect};
use crate::directory::{agent_insert, inserted_agent, team_rows, with_members};
use crate::driver::stmt;
use crate::ledger::SqlLedger;
use crate::rows::{AGENT_COLUMNS, ActivityRow, AgentRow, RecipientRow};

/// `t`'s bucket start in microseconds, for a Postgres `timestamptz` expression `t` and the
/// bucket length in microseconds `$1`.
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

/// `agent_activity`'s select of [`ActivityRow`]s after `SELECT {AGENT_COLUMNS}`: the agents of
/// team `$1` by name (byte order), each with its last activity, its undelivered stored receipts
/// (count and oldest `stored_at`), its status and its current (unsealed, latest admitted) run.
/// Postgres joins `LATERAL`; SQLite counts with subqueries.
const AGENT_ACTIVITY: PerDialect<&str> = PerDialect {
    postgres: ", a.last_active_at,
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
             WHERE a.team_id = $1 ORDER BY a.name COLLATE \"C\"",
    sqlite: ", a.last_active_at,
                    (SELECT count(*) FROM receipts r JOIN messages m ON m.id = r.message_id
                     WHERE r.recipient_id = a.id AND r.delivered_at IS NULL
                       AND m.stored_at IS NOT NULL) AS pending,
                    (SELECT min(m.stored_at) FROM receipts r JOIN messages m ON m.id = r.message_id
                     WHERE r.recipient_id = a.id AND r.delivered_at IS NULL
                       AND m.stored_at IS NOT NULL) AS oldest_pending_at,
                    a.status, a.status_set_at,
                    (SELECT r.id FROM runs r WHERE r.agent_id = a.id AND r.sealed_at IS NULL
                     ORDER BY r.admitted_at DESC, r.id DESC LIMIT 1) AS current_run
             FROM agents a WHERE a.team_id = $1 ORDER BY a.name",
};

/// `set_status`'s update of agent `$1` of team `$2` of tenant `$5`: status `$3` (text, `NULL`
/// to clear) set at `$4` unless it is revoked, returning whether it is revoked (one `bool`
/// column; no row for an unknown agent).
const SET_STATUS: PerDialect<&str> = PerDialect {
    postgres: "UPDATE agents a
         SET status = CASE WHEN a.revoked_at IS NULL THEN $3::text ELSE a.status END,
             status_set_at = CASE WHEN a.revoked_at IS NOT NULL THEN a.status_set_at
                                  WHEN $3::text IS NULL THEN NULL ELSE $4::timestamptz END
         FROM teams t
         WHERE a.id = $1 AND a.team_id = $2 AND t.id = a.team_id AND t.tenant = $5
         RETURNING a.revoked_at IS NOT NULL",
    sqlite: "UPDATE agents
         SET status = CASE WHEN revoked_at IS NULL THEN $3 ELSE status END,
             status_set_at = CASE WHEN revoked_at IS NOT NULL THEN status_set_at
                                  WHEN $3 IS NULL THEN NULL ELSE $4 END
         WHERE id = $1 AND team_id = $2
           AND team_id IN (SELECT id FROM teams WHERE tenant = $5)
         RETURNING revoked_at IS NOT NULL",
};

/// `recipient_states`' select of [`RecipientRow`]s of team `$1` of tenant `$2`, up to
/// (without) the condition on the messages `r.message_id`, which follows as ` AND …` with its
/// ids from `$3` ([`Dialect::any_id`]).
const RECIPIENT_STATES: PerDialect<&str> = PerDialect {
    postgres: "SELECT r.message_id, r.recipient_id, r.recipient_key, m.stored_at, r.delivered_at,
                r.acknowledged_at,
                coalesce(h.n, 0) AS hand_outs, h.last AS last_handed_out_at
         FROM receipts r JOIN messages m ON m.id = r.message_id
         JOIN teams t ON t.id = m.team_id
         LEFT JOIN LATERAL (
             SELECT count(*) AS n, max(issued_at) AS last FROM hand_outs h
             WHERE h.message_id = r.message_id AND h.recipient_id = r.recipient_id) h ON true
         WHERE m.team_id = $1 AND t.tenant = $2",
    sqlite: "SELECT r.message_id, r.recipient_id, r.recipient_key, m.stored_at, r.delivered_at,
                r.acknowledged_at,
                (SELECT count(*) FROM hand_outs h
                 WHERE h.message_id = r.message_id AND h.recipient_id = r.recipient_id)
                    AS hand_outs,
                (SELECT max(h.issued_at) FROM hand_outs h
                 WHERE h.message_id = r.message_id AND h.recipient_id = r.recipient_id)
                    AS last_handed_out_at
         FROM receipts r JOIN messages m ON m.id = r.message_id
         JOIN teams t ON t.id = m.team_id
         WHERE m.team_id = $1 AND t.tenant = $2",
};

/// `activity`'s select of `(bucket start in µs, sent, delivered)` by start: the messages of team
/// `$2` sent, and its receipts delivered, in `[$3, $4)`, in buckets of `$1` µs. Postgres counts
/// with `FILTER`; SQLite sums, and reads the deliveries of the window from
/// `receipts_delivered` (`CROSS JOIN` pins that order: the planner would otherwise read every
/// message of the team by `messages_sent` and look up its receipts).
const ACTIVITY: PerDialect<&str> = PerDialect {
    postgres: concat!(
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
    ),
    sqlite: "SELECT start, sum(sent), sum(delivered) FROM (
             SELECT m.sent_at - (((m.sent_at % $1) + $1) % $1) AS start,
                    1 AS sent, 0 AS delivered
             FROM messages m
             WHERE m.team_id = $2 AND m.sent_at >= $3 AND m.sent_at < $4
             UNION ALL
             SELECT r.delivered_at - (((r.delivered_at % $1) + $1) % $1), 0, 1
             FROM receipts r CROSS JOIN messages m ON m.id = r.message_id
             WHERE m.team_id = $2 AND r.delivered_at >= $3 AND r.delivered_at < $4)
         GROUP BY start ORDER BY start",
};

/// `storage_use`'s select of `(backend, stored messages, their body bytes, pending messages)`
/// of team `$1` by backend (byte order): stored and not yet retained, or pending publication.
const STORAGE_USE: PerDialect<&str> = PerDialect {
    postgres: "SELECT backend,
                count(*) FILTER (WHERE publication = 'stored'),
                coalesce(sum(body_len) FILTER (WHERE publication = 'stored'), 0)::bigint,
                count(*) FILTER (WHERE publication = 'pending_publication')
         FROM messages
         WHERE team_id = $1
           AND ((publication = 'stored' AND retained_at IS NULL)
                OR publication = 'pending_publication')
         GROUP BY backend ORDER BY backend COLLATE \"C\"",
    sqlite: "SELECT backend,
                sum(publication = 'stored'),
                sum(CASE WHEN publication = 'stored' THEN body_len ELSE 0 END),
                sum(publication = 'pending_publication')
         FROM messages
         WHERE team_id = $1
           AND ((publication = 'stored' AND retained_at IS NULL)
                OR publication = 'pending_publication')
         GROUP BY backend ORDER BY backend",
};

#[async_trait]
impl<D: Dialect> Oversight for SqlLedger<D> {
    /// Errors: a batch over `MAX_PAGE` → `Invalid`.
    async fn touch_agents(&self, seen: &[WakeupTarget], at: DateTime<Utc>) -> BusResult<u64> {
        validate_batch(seen.len())?;
        let mut done = HashSet::new();
        let targets: Vec<WakeupTarget> = seen.iter().copied().filter(|t| done.insert(*t)).collect();
        if targets.is_empty() {
            return Ok(0);
        }
        D::touch_agents(self, &targets, at).await
    }

    /// Errors: unknown team → `NotFound`.
    async fn agent_activity(&self, team: Uuid) -> BusResult<Vec<AgentActivity>> {
        let sql = format!("SELECT {AGENT_COLUMNS}{}", AGENT_ACTIVITY.of::<D>());
        let select = stmt::<D>(&sql).arg(team);
        let rows: Vec<ActivityRow<D::Time>> =
            team_rows(self, D::READS, team, "agent activity", select).await?;
        rows.into_iter().map(AgentActivity::try_from).collect()
    }

    /// `status` (empty clears it) for `agent`. Errors: unknown →
    /// `NotFound`; revoked → `Forbidden` (nothing changed).
    async fn set_status(&self, agent: &Agent, status: &str, at: DateTime<Utc>) -> BusResult<()> {
        let what = "set status";
        let line = (!status.is_empty()).then(|| status.to_owned());
        let mut held = self.hold(D::ONE_WRITE, what).await?;
        let revoked: Option<(bool,)> = stmt::<D>(SET_STATUS.of::<D>())
            .arg(agent.id)
            .arg(agent.team)
            .arg(line)
            .arg(D::time(at))
            .arg(self.tenant().as_str().to_owned())
            .optional(&mut held)
            .await
            .map_err(self.db(what))?;
        self.release(held, what).await?;
        crate::presence::status_set(revoked.map(|(r,)| r), agent)
    }

    /// the team's conversations in creation order with their
    /// members, message counts and last send times. Errors: unknown team → `NotFound`.
    async fn conversation_summaries(&self, team: Uuid) -> BusResult<Vec<ConversationSummary>> {
        let what = "conversation summaries";
        let mut held = self.hold(D::LISTS, what).await?;
        self.require_team(&mut held, team).await?;
        type Row<T> = (Uuid, String, String, T, i64, Option<T>);
        let rows: Vec<Row<D::Time>> = stmt::<D>(
            "SELECT c.id, c.title, c.backend, c.created_at, c.next_seq - 1,
                    (SELECT m.sent_at FROM messages m WHERE m.conversation_id = c.id
                     ORDER BY m.seq DESC LIMIT 1)
             FROM conversations c WHERE c.team_id = $1 ORDER BY c.ord",
        )
        .arg(team)
        .all(&mut held)
        .await
        .map_err(self.db(what))?;
        let mut conversations = Vec::with_capacity(rows.len());
        let mut sizes = Vec::with_capacity(rows.len());
        for (id, title, backend, created_at, messages, last_sent_at) in rows {
            conversations.push((id, title, backend, created_at));
            sizes.push((messages, last_sent_at));
        }
        let conversations = with_members(self, &mut held, team, conversations).await?;
        self.release(held, what).await?;
        Ok(conversations
            .into_iter()
            .zip(sizes)
            .map(
                |(conversation, (messages, last_sent_at))| ConversationSummary {
                    conversation,
                    messages: from_db(messages),
                    last_sent_at: last_sent_at.map(Into::into),
                },
            )
            .collect())
    }

    /// the receipts of `messages` (of `team`), in the asked order
    /// (`in_asked_order`). Errors: a batch over `MAX_PAGE` → `Invalid`.
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
        let mut conn = self.reader(what).await?;
        let sql = format!(
            "{} AND {}",
            RECIPIENT_STATES.of::<D>(),
            D::any_id("r.message_id", 3, ids.len())
        );
        let q = stmt::<D>(&sql)
            .arg(team)
            .arg(self.tenant().as_str().to_owned());
        let rows: Vec<RecipientRow<D::Time>> = D::bind_ids(q, &ids)
            .all(&mut conn)
            .await
            .map_err(self.db(what))?;
        Ok(in_asked_order(
            &ids,
            rows.into_iter().map(RecipientState::from).collect(),
        ))
    }

    /// the team's sends and deliveries in `[since, until)` by `bucket`.
    /// Errors: a bucket under a second or a window the domain refuses → `Invalid`; unknown team →
    /// `NotFound`.
    async fn activity(
        &self,
        team: Uuid,
        since: DateTime<Utc>,
        until: DateTime<Utc>,
        bucket: Duration,
    ) -> BusResult<Vec<ActivityBucket>> {
        let step = validate_activity(since, until, bucket)?;
        let select = stmt::<D>(ACTIVITY.of::<D>())
            .arg(step)
            .arg(team)
            .arg(D::time(since))
            .arg(D::time(until));
        let rows: Vec<(i64, i64, i64)> =
            team_rows(self, D::READS, team, "activity", select).await?;
        Ok(rows
            .into_iter()
            .map(|(start, sent, delivered)| ActivityBucket {
                start: DateTime::from_timestamp_micros(start).unwrap_or(since),
                sent: from_db(sent),
                delivered: from_db(delivered),
            })
            .collect())
    }

    /// the team's stored and pending messages by backend. Errors: unknown
    /// team → `NotFound`.
    async fn storage_use(&self, team: Uuid) -> BusResult<Vec<StorageUse>> {
        let select = stmt::<D>(STORAGE_USE.of::<D>()).arg(team);
        let rows: Vec<(String, i64, i64, i64)> =
            team_rows(self, D::READS, team, "storage use", select).await?;
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

    /// `operator`'s human member of `team` (created on its first post),
    /// made a member of `conversation`. Errors: unknown team or conversation → `NotFound`; the
    /// operator revoked or its human member revoked → `Forbidden`; the team outside its scope → its
    /// error; the member's name taken → `Conflict`.
    async fn human_member(
        &self,
        team: Uuid,
        conversation: Uuid,
        operator: &Operator,
        at: DateTime<Utc>,
    ) -> BusResult<Agent> {
        let what = "human member";
        let mut tx = self.begin(what).await?;
        // Where writers lock rows, the team's row lock serialises first posts into the team (see
        // the module docs).
        let locked: Option<(i32,)> = stmt::<D>(&format!(
            "SELECT 1 FROM teams WHERE id = $1 AND tenant = $2{}",
            D::FOR_NO_KEY_UPDATE
        ))
        .arg(team)
        .arg(self.tenant().as_str().to_owned())
        .optional(&mut tx)
        .await
        .map_err(self.db(what))?;
        if locked.is_none() {
            return Err(BusError::not_found(format!("team {team}")));
        }
        let known: Option<(i32,)> =
            stmt::<D>("SELECT 1 FROM conversations WHERE id = $1 AND team_id = $2")
                .arg(conversation)
                .arg(team)
                .optional(&mut tx)
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
        let found: Option<AgentRow<D::Time>> = stmt::<D>(&format!(
            "SELECT {AGENT_COLUMNS} FROM agents a
             WHERE a.team_id = $1 AND a.operator_id = $2 AND a.kind = 'human'"
        ))
        .arg(team)
        .arg(stored.id)
        .optional(&mut tx)
        .await
        .map_err(self.db(what))?;
        let agent: Agent = match found {
            Some(row) => row.try_into()?,
            None => {
                let id = Uuid::new_v4();
                let name = human_member_name(&stored.name);
                let sql = agent_insert::<D>(
                    "INSERT INTO agents AS a
                         (id, team_id, name, recipient_key, token_hash, created_at, kind, operator_id)
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
                );
                let insert = stmt::<D>(&sql)
                    .arg(id)
                    .arg(team)
                    .arg(name.clone())
                    .arg(recipient_key_for(id))
                    .arg(TokenHash::held_by_nobody().0.to_vec())
                    .arg(D::time(at))
                    .arg(AgentKind::Human.as_str().to_owned())
                    .arg(stored.id);
                inserted_agent(self, &mut tx, team, id, insert, what, |e| match e {
                    BusError::Conflict { .. } => {
                        BusError::conflict(format!("agent name {name:?} is taken"))
                    }
                    other => other,
                })
                .await?
            }
        };
        if agent.revoked() {
            return Err(BusError::forbidden(
                "the operator's human member is revoked",
            ));
        }
        stmt::<D>(
            "INSERT INTO members (conversation_id, agent_id, recipient_key, joined_at)
             VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING",
        )
        .arg(conversation)
        .arg(agent.id)
        .arg(agent.recipient_key.clone())
        .arg(D::time(at))
        .run(&mut tx)
        .await
        .map_err(self.db(what))?;
        self.commit(tx, what).await?;
        Ok(agent)
    }
}

/// [`Dialect::touch_agents`]' default (what SQLite runs): one write transaction, one update per
/// agent.
pub async fn touch_each<D: Dialect>(
    ledger: &SqlLedger<D>,
    seen: &[WakeupTarget],
    at: DateTime<Utc>,
) -> BusResult<u64> {
    let what = "touch agents";
    let mut tx = ledger.begin(what).await?;
    let mut changed = 0;
    for target in seen {
        let done = stmt::<D>(
            "UPDATE agents SET last_active_at = $1
             WHERE id = $2 AND team_id = $3
               AND (last_active_at IS NULL OR last_active_at < $1)
               AND team_id IN (SELECT id FROM teams WHERE tenant = $4)",
        )
        .arg(D::time(at))
        .arg(target.agent)
        .arg(target.team)
        .arg(ledger.tenant().as_str().to_owned())
        .execute(&mut tx)
        .await
        .map_err(ledger.db(what))?;
        changed += D::rows_affected(&done);
    }
    ledger.commit(tx, what).await?;
    Ok(changed)
}
