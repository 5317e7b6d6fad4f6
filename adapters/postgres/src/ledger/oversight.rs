//! The Postgres ledger's oversight reads and human members (schema:
//! `20261201000003_console.sql`): the shared operations (`crewbus_sql::oversight`) with
//! Postgres's statements. The reads join `LATERAL` and count with `FILTER`; `touch_agents` is
//! one `UPDATE … FROM unnest` on a pool connection. Bucket starts are computed on the times'
//! microseconds since the epoch (`extract(epoch …)`).

use chrono::{DateTime, Utc};
use crewbus_domain::{BusResult, WakeupTarget};
use crewbus_sql::oversight::SqlOversight;
use uuid::Uuid;

use super::rows::AGENT_COLUMNS;
use super::{PostgresLedger, db};

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

impl SqlOversight for PostgresLedger {
    fn agent_activity_sql() -> String {
        format!(
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
        )
    }

    const SET_STATUS: &'static str = "UPDATE agents a
         SET status = CASE WHEN a.revoked_at IS NULL THEN $3::text ELSE a.status END,
             status_set_at = CASE WHEN a.revoked_at IS NOT NULL THEN a.status_set_at
                                  WHEN $3::text IS NULL THEN NULL ELSE $4::timestamptz END
         FROM teams t
         WHERE a.id = $1 AND a.team_id = $2 AND t.id = a.team_id AND t.tenant = $5
         RETURNING a.revoked_at IS NOT NULL";

    const RECIPIENT_STATES: &'static str =
        "SELECT r.message_id, r.recipient_id, r.recipient_key, m.stored_at, r.delivered_at,
                r.acknowledged_at,
                coalesce(h.n, 0) AS hand_outs, h.last AS last_handed_out_at
         FROM receipts r JOIN messages m ON m.id = r.message_id
         JOIN teams t ON t.id = m.team_id
         LEFT JOIN LATERAL (
             SELECT count(*) AS n, max(issued_at) AS last FROM hand_outs h
             WHERE h.message_id = r.message_id AND h.recipient_id = r.recipient_id) h ON true
         WHERE m.team_id = $1 AND t.tenant = $2";

    const ACTIVITY: &'static str = concat!(
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

    const STORAGE_USE: &'static str = "SELECT backend,
                count(*) FILTER (WHERE publication = 'stored'),
                coalesce(sum(body_len) FILTER (WHERE publication = 'stored'), 0)::bigint,
                count(*) FILTER (WHERE publication = 'pending_publication')
         FROM messages
         WHERE team_id = $1
           AND ((publication = 'stored' AND retained_at IS NULL)
                OR publication = 'pending_publication')
         GROUP BY backend ORDER BY backend COLLATE \"C\"";

    /// One statement on a pool connection (`unnest` of the targets).
    async fn touch(&self, seen: &[WakeupTarget], at: DateTime<Utc>) -> BusResult<u64> {
        let (teams, agents): (Vec<Uuid>, Vec<Uuid>) =
            seen.iter().map(|t| (t.team, t.agent)).unzip();
        let changed = sqlx::query(
            "UPDATE agents a SET last_active_at = $3
             FROM unnest($1::uuid[], $2::uuid[]) AS u(team, agent), teams t
             WHERE a.id = u.agent AND a.team_id = u.team AND t.id = a.team_id AND t.tenant = $4
               AND (a.last_active_at IS NULL OR a.last_active_at < $3)",
        )
        .bind(&teams)
        .bind(&agents)
        .bind(at)
        .bind(self.tenant().as_str())
        .execute(self.pool())
        .await
        .map_err(db("touch agents"))?;
        Ok(changed.rows_affected())
    }
}

crewbus_sql::impl_oversight!(PostgresLedger);
