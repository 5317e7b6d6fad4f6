//! `hand_out`'s reads and writes a statement at a time, and the wake-up sweep's waiters as
//! `VALUES`: the defaults of the [`Dialect`] items `hand_out` and the sweep call, what SQLite
//! runs (in its write transaction: it is exclusive, so the facts read hold until the commit, and
//! a statement per row costs no round trip). Postgres writes them its own way (`unnest` arrays,
//! the receipts locked in message id order).

use std::collections::{BTreeMap, HashMap};

use chrono::{DateTime, Utc};
use crewbus_domain::{BusResult, DeliveryId, InboxAck, IssuedHandOut, LiveHandOut, SweepTarget};
use uuid::Uuid;

use crate::db_i64;
use crate::delivery::{Candidate, Prior};
use crate::dialect::{Conn, Dialect};
use crate::driver::{Stmt, stmt};
use crate::ledger::SqlLedger;

/// [`Dialect::sweep_targets`]' default: the waiters as `VALUES`.
pub fn sweep_targets(first: usize, n: usize) -> String {
    let values: Vec<String> = (0..n)
        .map(|i| {
            let p = first + 3 * i;
            format!("(${p}, ${}, ${})", p + 1, p + 2)
        })
        .collect();
    format!(
        "WITH w(team, agent, stored_after) AS (VALUES {})
         SELECT DISTINCT w.team, w.agent FROM w",
        values.join(", ")
    )
}

/// [`Dialect::bind_sweep_targets`]' default: three arguments per waiter.
pub fn bind_sweep_targets<'q, D: Dialect>(
    q: Stmt<'q, D::Db>,
    targets: &[SweepTarget],
) -> Stmt<'q, D::Db> {
    targets.iter().fold(q, |q, t| {
        q.arg(t.target.team)
            .arg(t.target.agent)
            .arg(t.stored_after.map(D::time))
    })
}

/// [`Dialect::hand_out_candidates`]' default: the recipient looked up
/// ([`SqlLedger::agent_row`]), then the candidates: `Stored` messages of `team` (of this tenant)
/// with a receipt for `recipient`.
pub async fn candidates<D: Dialect>(
    ledger: &SqlLedger<D>,
    conn: &mut Conn<D>,
    team: Uuid,
    recipient: Uuid,
    ids: &[Uuid],
) -> BusResult<HashMap<Uuid, Candidate>> {
    ledger
        .agent_row(conn, team, recipient)
        .await?
        .ensure_active()?;
    if ids.is_empty() {
        return Ok(HashMap::new());
    }
    let sql = format!(
        "SELECT m.id, m.conversation_id, m.seq, r.delivered_at IS NOT NULL
         FROM messages m
         JOIN teams t ON t.id = m.team_id AND t.tenant = $1
         JOIN receipts r ON r.message_id = m.id AND r.recipient_id = $2
         WHERE m.team_id = $3 AND m.publication = 'stored' AND {}",
        D::any_id("m.id", 4, ids.len())
    );
    let q = stmt::<D>(&sql)
        .arg(ledger.tenant().as_str().to_owned())
        .arg(recipient)
        .arg(team);
    let rows: Vec<(Uuid, Uuid, i64, bool)> = D::bind_ids(q, ids)
        .all(conn)
        .await
        .map_err(ledger.db("hand-out"))?;
    Ok(rows
        .into_iter()
        .map(|(id, conversation, seq, delivered)| {
            let candidate = Candidate {
                conversation,
                seq,
                delivered,
            };
            (id, candidate)
        })
        .collect())
}

/// [`Dialect::prior_hand_outs`]' default: every earlier hand-out read; the live one with the
/// greatest `ord` kept.
pub async fn prior<D: Dialect>(
    ledger: &SqlLedger<D>,
    conn: &mut Conn<D>,
    recipient: Uuid,
    ids: &[Uuid],
    at: DateTime<Utc>,
) -> BusResult<HashMap<Uuid, Prior>> {
    let sql = format!(
        "SELECT message_id, held_until > $1, delivery_id, held_until, ord
         FROM hand_outs WHERE recipient_id = $2 AND {}",
        D::any_id("message_id", 3, ids.len())
    );
    let q = stmt::<D>(&sql).arg(D::time(at)).arg(recipient);
    let rows: Vec<(Uuid, bool, Uuid, D::Time, i64)> = D::bind_ids(q, ids)
        .all(conn)
        .await
        .map_err(ledger.db("hand-out"))?;
    let mut prior: HashMap<Uuid, Option<(i64, LiveHandOut<DeliveryId>)>> = HashMap::new();
    for (message, live, delivery, until, ord) in rows {
        let entry = prior.entry(message).or_default();
        if live && entry.as_ref().is_none_or(|(o, _)| *o < ord) {
            let hand_out = LiveHandOut {
                holder: DeliveryId(delivery),
                held_until: until.into(),
            };
            *entry = Some((ord, hand_out));
        }
    }
    Ok(prior
        .into_iter()
        .map(|(message, live)| (message, live.map(|(_, l)| l)))
        .collect())
}

/// [`Dialect::write_hand_outs`]' default: a statement per hand-out whose ack moves, then one
/// per new hand-out.
pub async fn write<D: Dialect>(
    ledger: &SqlLedger<D>,
    conn: &mut Conn<D>,
    team: Uuid,
    acks: &BTreeMap<DeliveryId, InboxAck>,
    rows: &[IssuedHandOut],
) -> BusResult<()> {
    for (delivery, ack) in acks {
        stmt::<D>("UPDATE hand_outs SET ack_inbox = $1, ack_subject = $2 WHERE delivery_id = $3")
            .arg(ack.inbox.clone())
            .arg(ack.ack_subject.clone())
            .arg(delivery.0)
            .run(conn)
            .await
            .map_err(ledger.db("hand-out"))?;
    }
    for issued in rows {
        let h = &issued.hand_out;
        stmt::<D>(
            "INSERT INTO hand_outs
                 (delivery_id, team_id, message_id, recipient_id, conversation_id, seq,
                  redelivered, issued_at, held_until, ack_inbox, ack_subject)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
        )
        .arg(h.delivery.0)
        .arg(team)
        .arg(h.message)
        .arg(h.recipient)
        .arg(h.conversation)
        .arg(db_i64(h.seq))
        .arg(h.redelivered)
        .arg(D::time(h.issued_at))
        .arg(D::time(h.held_until))
        .arg(issued.ack.as_ref().map(|a| a.inbox.clone()))
        .arg(issued.ack.as_ref().map(|a| a.ack_subject.clone()))
        .run(conn)
        .await
        .map_err(ledger.db("hand-out"))?;
    }
    Ok(())
}
