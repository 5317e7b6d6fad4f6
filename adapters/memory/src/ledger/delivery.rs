//! The memory ledger's delivery: messages as they stand, hand-outs, the top-up and wake-up
//! reads, confirmations, acknowledgements and receipts.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use chrono::{DateTime, Utc};
use crewbus_domain::{
    BusError, BusResult, ConfirmOutcome, DeliveryId, HandOut, HandOutOutcome, HandOutRequest,
    HandOutSource, Message, Publication, Receipt, RecordKind, RunId, WakeupTarget, ledger_span,
    validate_batch, validate_limit,
};
use uuid::Uuid;

use super::MemoryLedger;
use super::state::HandOutRow;

pub(super) fn message(ledger: &MemoryLedger, team: Uuid, message: Uuid) -> BusResult<Message> {
    ledger.state()?.message_of(team, message).cloned()
}

pub(super) fn messages(ledger: &MemoryLedger, team: Uuid, ids: &[Uuid]) -> BusResult<Vec<Message>> {
    validate_batch(ids.len())?;
    let st = ledger.state()?;
    let mut seen = HashSet::with_capacity(ids.len());
    Ok(ids
        .iter()
        .filter(|id| seen.insert(**id))
        .filter_map(|id| st.message_of(team, *id).ok().cloned())
        .collect())
}

pub(super) fn hand_out(
    ledger: &MemoryLedger,
    team: Uuid,
    recipient: Uuid,
    requests: &[HandOutRequest],
    grace: Duration,
    at: DateTime<Utc>,
) -> BusResult<Vec<HandOutOutcome>> {
    validate_batch(requests.len())?;
    let held_until = at + ledger_span(grace)?;
    let mut st = ledger.state()?;
    st.agent_of(team, recipient)?;
    let mut in_batch: HashMap<Uuid, DeliveryId> = HashMap::new();
    let mut outcomes = Vec::with_capacity(requests.len());
    for request in requests {
        let message_id = request.message;
        let message = st
            .messages
            .get(&message_id)
            .filter(|m| m.team == team && m.publication == Publication::Stored);
        let receipt = st.receipts.get(&(message_id, recipient));
        let (Some(message), Some(receipt)) = (message, receipt) else {
            outcomes.push(HandOutOutcome::Unknown {
                message: message_id,
            });
            continue;
        };
        if receipt.delivered_at.is_some() {
            outcomes.push(HandOutOutcome::AlreadyDelivered {
                message: message_id,
            });
            continue;
        }
        let (conversation, seq) = (message.conversation, message.seq);
        let holding = in_batch
            .get(&message_id)
            .copied()
            .or_else(|| st.live_hand_out(message_id, recipient, at));
        if let Some(delivery) = holding {
            let row = st.hand_outs.get_mut(&delivery).expect("indexed hand-out");
            if let HandOutSource::Inbox { ack, .. } = &request.source {
                row.ack = Some(ack.clone());
            }
            outcomes.push(HandOutOutcome::Held {
                message: message_id,
                until: row.hand_out.held_until,
            });
            continue;
        }
        let earlier = st
            .hand_outs_by_pair
            .get(&(message_id, recipient))
            .is_some_and(|v| !v.is_empty());
        let (ack, deliveries) = match &request.source {
            HandOutSource::Inbox {
                ack, deliveries, ..
            } => (Some(ack.clone()), *deliveries),
            HandOutSource::Ledger => (None, 1),
        };
        let hand_out = HandOut {
            delivery: DeliveryId(Uuid::new_v4()),
            message: message_id,
            conversation,
            seq,
            recipient,
            redelivered: earlier || deliveries > 1,
            issued_at: at,
            held_until,
        };
        st.hand_outs.insert(
            hand_out.delivery,
            HandOutRow {
                team,
                hand_out: hand_out.clone(),
                ack,
                confirmed_at: None,
            },
        );
        st.hand_outs_by_pair
            .entry((message_id, recipient))
            .or_default()
            .push(hand_out.delivery);
        in_batch.insert(message_id, hand_out.delivery);
        outcomes.push(HandOutOutcome::Issued(hand_out));
    }
    Ok(outcomes)
}

pub(super) fn undelivered(
    ledger: &MemoryLedger,
    team: Uuid,
    recipient: Uuid,
    stored_before: DateTime<Utc>,
    at: DateTime<Utc>,
    limit: usize,
) -> BusResult<Vec<Uuid>> {
    validate_limit(limit)?;
    let st = ledger.state()?;
    st.agent_of(team, recipient)?;
    let mut found: Vec<(DateTime<Utc>, Uuid, u64, Uuid)> = st
        .by_recipient
        .get(&recipient)
        .into_iter()
        .flatten()
        .filter_map(|id| {
            let m = &st.messages[id];
            let stored_at = m.stored_at?;
            let waiting = m.publication == Publication::Stored
                && stored_at < stored_before
                && st.receipts[&(*id, recipient)].delivered_at.is_none()
                && st.live_hand_out(*id, recipient, at).is_none();
            waiting.then_some((stored_at, m.conversation, m.seq, m.id))
        })
        .collect();
    found.sort();
    found.truncate(limit);
    Ok(found.into_iter().map(|(_, _, _, id)| id).collect())
}

pub(super) fn wakeable(
    ledger: &MemoryLedger,
    targets: &[WakeupTarget],
    stored_before: DateTime<Utc>,
    at: DateTime<Utc>,
) -> BusResult<Vec<WakeupTarget>> {
    validate_batch(targets.len())?;
    let st = ledger.state()?;
    let mut found: Vec<WakeupTarget> = targets
        .iter()
        .filter(|t| {
            let Ok(agent) = st.agent_of(t.team, t.agent) else {
                return true;
            };
            agent.revoked()
                || st
                    .by_recipient
                    .get(&t.agent)
                    .into_iter()
                    .flatten()
                    .any(|id| {
                        let m = &st.messages[id];
                        m.publication == Publication::Stored
                            && m.stored_at.is_some_and(|s| s < stored_before)
                            && st.receipts[&(*id, t.agent)].delivered_at.is_none()
                            && st.live_hand_out(*id, t.agent, at).is_none()
                    })
        })
        .copied()
        .collect();
    found.sort_unstable();
    found.dedup();
    Ok(found)
}

pub(super) fn confirm(
    ledger: &MemoryLedger,
    team: Uuid,
    recipient: Uuid,
    deliveries: &[DeliveryId],
    run: Option<RunId>,
    at: DateTime<Utc>,
) -> BusResult<Vec<ConfirmOutcome>> {
    validate_batch(deliveries.len())?;
    let mut st = ledger.state()?;
    st.agent_of(team, recipient)?;
    st.check_run(run, team, recipient)?;
    let mut outcomes = Vec::with_capacity(deliveries.len());
    for delivery in deliveries {
        let Some(row) = st
            .hand_outs
            .get(delivery)
            .filter(|r| r.team == team && r.hand_out.recipient == recipient)
        else {
            outcomes.push(ConfirmOutcome::Unknown);
            continue;
        };
        let message = row.hand_out.message;
        let ack = row.ack.clone();
        let receipt = st
            .receipts
            .get_mut(&(message, recipient))
            .expect("hand-outs exist only for receipts");
        if receipt.delivered_at.is_some() {
            outcomes.push(ConfirmOutcome::AlreadyConfirmed { message, ack });
            continue;
        }
        receipt.delivered_at = Some(at);
        st.hand_outs
            .get_mut(delivery)
            .expect("found above")
            .confirmed_at = Some(at);
        let conversation = st.messages[&message].conversation;
        st.record(
            run,
            at,
            RecordKind::MessageDelivered {
                conversation,
                message,
            },
        );
        outcomes.push(ConfirmOutcome::Confirmed { message, ack });
    }
    Ok(outcomes)
}

pub(super) fn acknowledge(
    ledger: &MemoryLedger,
    team: Uuid,
    agent: Uuid,
    message: Uuid,
    run: Option<RunId>,
    at: DateTime<Utc>,
) -> BusResult<Receipt> {
    let mut st = ledger.state()?;
    let conversation = st.message_of(team, message)?.conversation;
    let receipt = st
        .receipts
        .get(&(message, agent))
        .ok_or_else(|| BusError::forbidden("only a recipient acknowledges a message"))?;
    st.check_run_owner(run, team, agent)?;
    if receipt.acknowledged_at.is_some() {
        return Ok(receipt.clone());
    }
    if receipt.delivered_at.is_none() {
        return Err(BusError::conflict(
            "the message has not been delivered to this recipient yet",
        ));
    }
    st.check_run_open(run)?;
    let receipt = st.receipts.get_mut(&(message, agent)).expect("found above");
    receipt.acknowledged_at = Some(at);
    let receipt = receipt.clone();
    st.record(
        run,
        at,
        RecordKind::MessageAcknowledged {
            conversation,
            message,
        },
    );
    Ok(receipt)
}

pub(super) fn receipts(
    ledger: &MemoryLedger,
    team: Uuid,
    message: Uuid,
) -> BusResult<Vec<Receipt>> {
    let st = ledger.state()?;
    st.message_of(team, message)?;
    let mut receipts: Vec<Receipt> = st
        .recipients
        .get(&message)
        .into_iter()
        .flatten()
        .map(|r| st.receipts[&(message, *r)].clone())
        .collect();
    receipts.sort_by(|a, b| a.recipient_key.cmp(&b.recipient_key));
    Ok(receipts)
}
