//! The memory ledger's delivery: messages as they stand, hand-outs, the top-up and wake-up
//! reads, confirmations, acknowledgements and receipts.

use std::collections::HashSet;

use chrono::{DateTime, Utc};
use crewbus_domain::{
    BusError, BusResult, CandidateFacts, ConfirmFacts, ConfirmOutcome, DeliveryId, HandOutOutcome,
    HandOutRequest, InboxNews, IssuedHandOut, LiveHandOut, Message, NewsItem, Publication, Receipt,
    RecordKind, Reported, RunId, SweepTarget, WakeupTarget, decide_confirms, plan_hand_outs,
};
use uuid::Uuid;

use super::MemoryLedger;
use super::state::{HandOutRow, State};

pub(super) fn message(ledger: &MemoryLedger, team: Uuid, message: Uuid) -> BusResult<Message> {
    ledger.state()?.message_of(team, message).cloned()
}

pub(super) fn messages(ledger: &MemoryLedger, team: Uuid, ids: &[Uuid]) -> BusResult<Vec<Message>> {
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
    held_until: DateTime<Utc>,
    at: DateTime<Utc>,
) -> BusResult<Vec<HandOutOutcome>> {
    let mut st = ledger.state()?;
    st.agent_of(team, recipient)?.ensure_active()?;
    let plan = plan_hand_outs(
        recipient,
        requests,
        |message| candidate_facts(&st, team, recipient, message, at),
        at,
        held_until,
        || DeliveryId(Uuid::new_v4()),
    );
    for IssuedHandOut { hand_out, ack } in plan.issued {
        st.hand_outs_by_pair
            .entry((hand_out.message, recipient))
            .or_default()
            .push(hand_out.delivery);
        st.hand_outs.insert(
            hand_out.delivery,
            HandOutRow {
                team,
                hand_out,
                ack,
                confirmed_at: None,
            },
        );
    }
    for (delivery, ack) in plan.moved_acks {
        st.hand_outs
            .get_mut(&delivery)
            .expect("a live hand-out")
            .ack = Some(ack);
    }
    Ok(plan.outcomes)
}

/// The facts of one `hand_out` candidate for [`plan_hand_outs`], as the tables stand.
fn candidate_facts(
    st: &State,
    team: Uuid,
    recipient: Uuid,
    message: Uuid,
    at: DateTime<Utc>,
) -> CandidateFacts<DeliveryId> {
    let stored = st
        .messages
        .get(&message)
        .filter(|m| m.team == team && m.publication == Publication::Stored);
    let receipt = st.receipts.get(&(message, recipient));
    let (Some(stored), Some(receipt)) = (stored, receipt) else {
        return CandidateFacts::Unknown;
    };
    if receipt.delivered_at.is_some() {
        return CandidateFacts::Delivered;
    }
    CandidateFacts::Open {
        conversation: stored.conversation,
        seq: stored.seq,
        live: st
            .live_hand_out(message, recipient, at)
            .map(|delivery| LiveHandOut {
                holder: delivery,
                held_until: st.hand_outs[&delivery].hand_out.held_until,
            }),
        handed_out_before: st
            .hand_outs_by_pair
            .get(&(message, recipient))
            .is_some_and(|v| !v.is_empty()),
    }
}

pub(super) fn undelivered(
    ledger: &MemoryLedger,
    team: Uuid,
    recipient: Uuid,
    stored_before: DateTime<Utc>,
    at: DateTime<Utc>,
    limit: usize,
) -> BusResult<Vec<Uuid>> {
    let st = ledger.state()?;
    st.agent_of(team, recipient)?.ensure_active()?;
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
    targets: &[SweepTarget],
    stored_before: DateTime<Utc>,
    at: DateTime<Utc>,
) -> BusResult<Vec<WakeupTarget>> {
    let st = ledger.state()?;
    let mut found: Vec<WakeupTarget> = targets
        .iter()
        .filter(
            |SweepTarget {
                 target: t,
                 stored_after,
             }| {
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
                                && m.stored_at.is_some_and(|s| {
                                    s < stored_before && stored_after.is_none_or(|after| s > after)
                                })
                                && st.receipts[&(*id, t.agent)].delivered_at.is_none()
                                && st.live_hand_out(*id, t.agent, at).is_none()
                        })
            },
        )
        .map(|t| t.target)
        .collect();
    found.sort_unstable();
    found.dedup();
    Ok(found)
}

pub(super) fn inbox_news(
    ledger: &MemoryLedger,
    team: Uuid,
    recipient: Uuid,
    reported: &Reported,
    at: DateTime<Utc>,
    limit: usize,
) -> BusResult<InboxNews> {
    let st = ledger.state()?;
    st.agent_of(team, recipient)?.ensure_active()?;
    let mut answer = InboxNews::default();
    let mut news: Vec<(DateTime<Utc>, Uuid, u64, Uuid)> = Vec::new();
    for id in st.by_recipient.get(&recipient).into_iter().flatten() {
        let m = &st.messages[id];
        let Some(stored_at) = m.stored_at else {
            continue;
        };
        if m.team != team
            || m.publication != Publication::Stored
            || st.receipts[&(*id, recipient)].delivered_at.is_some()
        {
            continue;
        }
        let told = reported.covers(*id, stored_at);
        match st.live_hand_out(*id, recipient, at) {
            None => {
                answer.pending += 1;
                if !told {
                    news.push((stored_at, m.conversation, m.seq, m.id));
                }
            }
            Some(_) if told => {}
            Some(_) => {
                // The message is news when its last live hand-out lapses.
                let held_until = st.hand_outs_by_pair[&(*id, recipient)]
                    .iter()
                    .map(|d| &st.hand_outs[d])
                    .filter(|row| row.confirmed_at.is_none())
                    .map(|row| row.hand_out.held_until)
                    .max()
                    .expect("a live hand-out");
                answer.next_lapse =
                    Some(answer.next_lapse.map_or(held_until, |t| t.min(held_until)));
                answer.oldest_held =
                    Some(answer.oldest_held.map_or(stored_at, |t| t.min(stored_at)));
            }
        }
    }
    news.sort();
    news.truncate(limit);
    answer.news = news
        .into_iter()
        .map(|(_, conversation, _, id)| NewsItem {
            message: st.messages[&id].clone(),
            conversation_title: st.conversations[&conversation].conversation.title.clone(),
            sender_name: st.agents[&st.messages[&id].sender].name.clone(),
        })
        .collect();
    Ok(answer)
}

pub(super) fn confirm(
    ledger: &MemoryLedger,
    team: Uuid,
    recipient: Uuid,
    deliveries: &[DeliveryId],
    run: Option<RunId>,
    at: DateTime<Utc>,
) -> BusResult<Vec<ConfirmOutcome>> {
    let mut st = ledger.state()?;
    st.agent_of(team, recipient)?.ensure_active()?;
    st.check_run(run, team, recipient)?;
    let outcomes = decide_confirms(deliveries, |delivery| {
        let row = st
            .hand_outs
            .get(&delivery)
            .filter(|r| r.team == team && r.hand_out.recipient == recipient)?;
        let message = row.hand_out.message;
        let receipt = st
            .receipts
            .get(&(message, recipient))
            .expect("hand-outs exist only for receipts");
        Some(ConfirmFacts {
            message,
            ack: row.ack.clone(),
            delivered: receipt.delivered_at.is_some(),
        })
    });
    for (delivery, outcome) in deliveries.iter().zip(&outcomes) {
        let ConfirmOutcome::Confirmed { message, .. } = outcome else {
            continue;
        };
        let message = *message;
        st.receipts
            .get_mut(&(message, recipient))
            .expect("hand-outs exist only for receipts")
            .delivered_at = Some(at);
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
