//! The SQLite ledger's oversight reads and human members (schema: `20261201000003_console.sql`):
//! the shared operations (`crewbus_sql::oversight`) with SQLite's statements. The reads count
//! with subqueries and sums of conditions; `touch_agents` is one write transaction of one
//! update per agent. Bucket starts are computed on the stored microseconds.

use chrono::{DateTime, Utc};
use crewbus_domain::{BusResult, WakeupTarget};
use crewbus_sql::oversight::SqlOversight;

use super::SqliteLedger;
use super::rows::AGENT_COLUMNS;
use crate::codec::Ts;

impl SqlOversight for SqliteLedger {
    fn agent_activity_sql() -> String {
        format!(
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
             FROM agents a WHERE a.team_id = $1 ORDER BY a.name"
        )
    }

    const SET_STATUS: &'static str = "UPDATE agents
         SET status = CASE WHEN revoked_at IS NULL THEN $3 ELSE status END,
             status_set_at = CASE WHEN revoked_at IS NOT NULL THEN status_set_at
                                  WHEN $3 IS NULL THEN NULL ELSE $4 END
         WHERE id = $1 AND team_id = $2
           AND team_id IN (SELECT id FROM teams WHERE tenant = $5)
         RETURNING revoked_at IS NOT NULL";

    const RECIPIENT_STATES: &'static str =
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
         WHERE m.team_id = $1 AND t.tenant = $2";

    /// The deliveries of the window from `receipts_delivered` (`CROSS JOIN` pins that order:
    /// the planner would otherwise read every message of the team by `messages_sent` and look
    /// up its receipts).
    const ACTIVITY: &'static str = "SELECT start, sum(sent), sum(delivered) FROM (
             SELECT m.sent_at - (((m.sent_at % $1) + $1) % $1) AS start,
                    1 AS sent, 0 AS delivered
             FROM messages m
             WHERE m.team_id = $2 AND m.sent_at >= $3 AND m.sent_at < $4
             UNION ALL
             SELECT r.delivered_at - (((r.delivered_at % $1) + $1) % $1), 0, 1
             FROM receipts r CROSS JOIN messages m ON m.id = r.message_id
             WHERE m.team_id = $2 AND r.delivered_at >= $3 AND r.delivered_at < $4)
         GROUP BY start ORDER BY start";

    const STORAGE_USE: &'static str = "SELECT backend,
                sum(publication = 'stored'),
                sum(CASE WHEN publication = 'stored' THEN body_len ELSE 0 END),
                sum(publication = 'pending_publication')
         FROM messages
         WHERE team_id = $1
           AND ((publication = 'stored' AND retained_at IS NULL)
                OR publication = 'pending_publication')
         GROUP BY backend ORDER BY backend";

    /// One write transaction, one update per agent.
    async fn touch(&self, seen: &[WakeupTarget], at: DateTime<Utc>) -> BusResult<u64> {
        let what = "touch agents";
        let mut tx = self.begin(what).await?;
        let mut changed = 0;
        for target in seen {
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
}

crewbus_sql::impl_oversight!(SqliteLedger);
