//! The reference worker's side of the ledger (`Ledger::lease_inbox_events`,
//! `Ledger::mark_references_published`), once for both SQL stores: leasing reference markers
//! (one per stored message) and removing them once the message's references are published.

use chrono::{DateTime, Utc};
use crewbus_domain::{BusResult, InboxEvent};
use uuid::Uuid;

use crate::dialect::{BYTEWISE, Conn, Dialect};
use crate::driver::stmt;
use crate::ledger::SqlLedger;
use crate::rows::ReferenceRow;

/// Where writers lock rows (Postgres), the lease in one statement: lock up to `$3` due markers
/// of tenant `$1` at `$2` (`SKIP LOCKED`: two workers never lease one), remove those with no
/// undelivered receipt left, lease the others until `$4` and answer one row per undelivered
/// receipt of each leased marker, with the marker's order (`RETURNING` has none).
const LEASE_LOCKING: &str = "
WITH due AS (
    SELECT message_id FROM reference_marks
    WHERE tenant = $1 AND (leased_until IS NULL OR leased_until <= $2)
    ORDER BY ord
    LIMIT $3
    FOR UPDATE SKIP LOCKED
), open AS (
    SELECT d.message_id FROM due d
    WHERE EXISTS (SELECT 1 FROM receipts r
                  WHERE r.message_id = d.message_id AND r.delivered_at IS NULL)
), done AS (
    DELETE FROM reference_marks k USING due d
    WHERE k.message_id = d.message_id
      AND NOT EXISTS (SELECT 1 FROM open o WHERE o.message_id = d.message_id)
), leased AS (
    UPDATE reference_marks k SET leased_until = $4
    FROM open o WHERE k.message_id = o.message_id
    RETURNING k.message_id, k.team_id, k.inbox, k.created_at, k.ord
)
SELECT l.ord, l.team_id, l.inbox, l.message_id, l.created_at, m.conversation_id, m.seq,
       r.recipient_id, r.recipient_key
FROM leased l
JOIN messages m ON m.id = l.message_id
JOIN receipts r ON r.message_id = l.message_id AND r.delivered_at IS NULL";

/// One reference of a leased marker, with the marker's order.
#[derive(sqlx::FromRow)]
pub struct OrderedReference<T> {
    ord: i64,
    #[sqlx(flatten)]
    reference: ReferenceRow<T>,
}

/// `Ledger::lease_inbox_events`, the lease ending at `until`: the references of the leased
/// markers in marker order, then recipient key in byte order. Markers whose receipts are all
/// delivered (by the top-up) are removed, not leased. Every due marker is scanned each time (no
/// cursor). Where writers lock rows, one statement on a connection of its own
/// ([`LEASE_LOCKING`]); where write transactions are serialised whole (SQLite), the due markers
/// read, the finished ones removed, the others leased and their references read, in one write
/// transaction (a concurrent worker waits for it, then finds these leased).
pub async fn lease_inbox_events<D: Dialect>(
    ledger: &SqlLedger<D>,
    at: DateTime<Utc>,
    until: DateTime<Utc>,
    limit: usize,
) -> BusResult<Vec<InboxEvent>> {
    let what = "lease references";
    let tenant = ledger.tenant().as_str().to_owned();
    if D::ROW_LOCKS {
        let mut write = ledger.write(what).await?;
        let mut rows: Vec<OrderedReference<D::Time>> = stmt::<D>(LEASE_LOCKING)
            .arg(tenant)
            .arg(D::time(at))
            .arg(limit as i64)
            .arg(D::time(until))
            .all(&mut write)
            .await
            .map_err(ledger.db(what))?;
        ledger.end_write(write, what).await?;
        rows.sort_by(|a, b| {
            (a.ord, a.reference.recipient_key()).cmp(&(b.ord, b.reference.recipient_key()))
        });
        return Ok(rows
            .into_iter()
            .map(|r| InboxEvent::from(r.reference))
            .collect());
    }
    let mut tx = ledger.begin(what).await?;
    let due: Vec<(Uuid,)> = stmt::<D>(
        "SELECT message_id FROM reference_marks
         WHERE tenant = $1 AND (leased_until IS NULL OR leased_until <= $2)
         ORDER BY ord LIMIT $3",
    )
    .arg(tenant)
    .arg(D::time(at))
    .arg(limit as i64)
    .all(&mut tx)
    .await
    .map_err(ledger.db(what))?;
    let due: Vec<Uuid> = due.into_iter().map(|(id,)| id).collect();
    if due.is_empty() {
        ledger.commit(tx, what).await?;
        return Ok(Vec::new());
    }
    let sql = format!(
        "DELETE FROM reference_marks WHERE {}
           AND NOT EXISTS (SELECT 1 FROM receipts r
                           WHERE r.message_id = reference_marks.message_id
                             AND r.delivered_at IS NULL)",
        D::any_id("message_id", 1, due.len())
    );
    D::bind_ids(stmt::<D>(&sql), &due)
        .run(&mut tx)
        .await
        .map_err(ledger.db(what))?;
    let sql = format!(
        "UPDATE reference_marks SET leased_until = $1 WHERE {}",
        D::any_id("message_id", 2, due.len())
    );
    D::bind_ids(stmt::<D>(&sql).arg(D::time(until)), &due)
        .run(&mut tx)
        .await
        .map_err(ledger.db(what))?;
    let sql = format!(
        "SELECT k.team_id, k.inbox, k.message_id, k.created_at, m.conversation_id, m.seq,
                r.recipient_id, r.recipient_key
         FROM reference_marks k
         JOIN messages m ON m.id = k.message_id
         JOIN receipts r ON r.message_id = k.message_id AND r.delivered_at IS NULL
         WHERE {}
         ORDER BY k.ord, r.recipient_key{}",
        D::any_id("k.message_id", 1, due.len()),
        BYTEWISE.of::<D>()
    );
    let rows: Vec<ReferenceRow<D::Time>> = D::bind_ids(stmt::<D>(&sql), &due)
        .all(&mut tx)
        .await
        .map_err(ledger.db(what))?;
    ledger.commit(tx, what).await?;
    Ok(rows.into_iter().map(InboxEvent::from).collect())
}

/// `Ledger::mark_references_published`: the markers of `messages` (this tenant's) removed, in
/// one statement on [`Dialect::write`]; returns how many were.
pub async fn mark_published<D: Dialect>(
    ledger: &SqlLedger<D>,
    messages: &[Uuid],
) -> BusResult<u64> {
    if messages.is_empty() {
        return Ok(0);
    }
    let what = "mark references published";
    let sql = format!(
        "DELETE FROM reference_marks WHERE tenant = $1 AND {}",
        D::any_id("message_id", 2, messages.len())
    );
    let q = stmt::<D>(&sql).arg(ledger.tenant().as_str().to_owned());
    let mut write = ledger.write(what).await?;
    let done = D::bind_ids(q, messages)
        .execute(&mut write)
        .await
        .map_err(ledger.db(what))?;
    ledger.end_write(write, what).await?;
    Ok(D::rows_affected(&done))
}

/// Writes the reference marker of `message` (of `team`, stored at `at`) with the team's current
/// inbox, when the message has recipients: one row, whatever their number (the reference worker
/// reads the recipients from the receipts). Shared by SQLite's `send` (local backend) and the
/// row-by-row settle ([`crate::settle::write_each`]).
pub async fn mark_due<D: Dialect>(
    ledger: &SqlLedger<D>,
    conn: &mut Conn<D>,
    team: Uuid,
    message: Uuid,
    at: DateTime<Utc>,
) -> BusResult<()> {
    stmt::<D>(
        "INSERT INTO reference_marks (message_id, tenant, team_id, inbox, created_at)
         SELECT $1, $2, $3, t.inbox, $4 FROM teams t
         WHERE t.id = $3 AND EXISTS (SELECT 1 FROM receipts r WHERE r.message_id = $1)",
    )
    .arg(message)
    .arg(ledger.tenant().as_str().to_owned())
    .arg(team)
    .arg(D::time(at))
    .run(conn)
    .await
    .map_err(ledger.db("reference marker"))
}
