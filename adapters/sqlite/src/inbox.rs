//! `SqliteInbox`: per-recipient references in the `inbox_queue` table (written once for both
//! SQL stores: [`crewbus_sql::inbox`]).

use std::sync::Arc;

use crewbus_ports::Clock;
use crewbus_sql::inbox::{SqlInbox, SqlInboxStore};
use uuid::Uuid;

use crate::connect::SqlitePools;
use crate::settings::SqliteSettings;
use crate::store::Store;

/// One team's inbox as a queue table.
///
/// - `publish_reference` inserts one row, deduplicated on `(team, event id)` for the life of
///   the row (acknowledged rows are kept, so a late re-publish stays a duplicate), in one write
///   transaction. The confirmed locator is `sqlite:inbox:<seq>`, which the body backend's
///   `fetch` refuses (`Forbidden`). SQLite runs in process: a failed transaction did not
///   commit, so every error is a refusal (`Retryable` for busy or unavailable).
/// - `fetch_references` leases, in one write transaction, up to `limit` rows that are not
///   acknowledged, visible at the clock's now, and handed out fewer than `max_deliver` times
///   (`UPDATE … WHERE seq IN (SELECT … LIMIT ?) RETURNING`; write transactions are serialised,
///   so two fetches never lease the same row); each gets `deliveries + 1` and becomes invisible
///   for `ack_wait` (the visibility timeout). Oldest first. Nothing is ever deleted or dropped
///   by the inbox.
/// - `ack_reference` takes the opaque token `sqlite-inbox:<team>:<seq>`; a token of another team
///   or any other string is `Forbidden`; acknowledging twice is `Ok`.
/// - Time comes from the injected [`Clock`], bound into every statement.
#[derive(Clone)]
pub struct SqliteInbox(SqlInbox<Store>);

crewbus_sql::impl_inbox!(SqliteInbox);

impl SqlInboxStore for Store {
    /// `inbox_queue.payload` is a `BLOB` of UTF-8 bytes.
    type Payload = Vec<u8>;

    const ACK_PREFIX: &'static str = "sqlite-inbox";

    /// One statement in the write transaction: no other writer runs meanwhile.
    const PICK: &'static str = "UPDATE inbox_queue SET deliveries = deliveries + 1, visible_at = ?6
         WHERE seq IN (
             SELECT seq FROM inbox_queue
             WHERE team_id = ?1 AND recipient_key = ?2 AND acked_at IS NULL
               AND visible_at <= ?3 AND deliveries < ?4
             ORDER BY seq
             LIMIT ?5)
         RETURNING seq, event_id, payload, deliveries";
}

impl SqliteInbox {
    /// The inbox of `team` over `pools`, with `settings`' ack wait and max deliver, timed by
    /// `clock`. The schema must be migrated ([`crate::migrate`]).
    pub fn new(
        pools: SqlitePools,
        team: Uuid,
        clock: Arc<dyn Clock>,
        settings: &SqliteSettings,
    ) -> Self {
        SqliteInbox(SqlInbox::new(
            Store(pools),
            team,
            clock,
            settings.ack_wait,
            settings.max_deliver,
        ))
    }
}
