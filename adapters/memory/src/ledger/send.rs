//! The memory ledger's `send` and `send_batch`: a message, its receipts and its outbox slot,
//! with the run's record.
//!
//! A batch is its requests applied in queue order under the ledger's one lock, each by `send`'s
//! rules: every check of a request comes before its writes, and nothing else interleaves, so
//! this is exactly the port's batch rule (the first of a `(conversation, sender, request_id)`
//! wins, later ones repeat or conflict, seqs gap-free in queue order) without a plan.

use chrono::{DateTime, Utc};
use crewbus_domain::{
    BusError, BusResult, Envelope, Member, Message, Receipt, RecordKind, SendRequest, Sent,
    body_sha256, validate_request_id,
};
use uuid::Uuid;

use super::MemoryLedger;
use super::state::{Slot, State};

pub(super) fn send(
    ledger: &MemoryLedger,
    request: SendRequest,
    at: DateTime<Utc>,
) -> BusResult<Sent> {
    let mut st = ledger.state()?;
    send_in(&mut st, request, at)
}

/// `send_batch`: every request under one lock, in order; a refused request (a bad request id
/// included) is its own outcome. The outer `Err` is only the lock (an injected outage).
pub(super) fn send_batch(
    ledger: &MemoryLedger,
    requests: &[SendRequest],
    at: DateTime<Utc>,
) -> BusResult<Vec<BusResult<Sent>>> {
    let mut st = ledger.state()?;
    Ok(requests
        .iter()
        .map(|request| {
            validate_request_id(&request.request_id)?;
            send_in(&mut st, request.clone(), at)
        })
        .collect())
}

/// One send on the locked state: every check, then the writes.
fn send_in(st: &mut State, request: SendRequest, at: DateTime<Utc>) -> BusResult<Sent> {
    let row = st.conversation_of(request.team, request.conversation)?;
    let conversation = row.conversation.clone();
    let sender = st
        .agents
        .get(&request.sender)
        .filter(|a| a.team == request.team && !a.revoked())
        .filter(|_| conversation.has_member(request.sender));
    let Some(sender_kind) = sender.map(|a| a.kind) else {
        return Err(BusError::forbidden(
            "the sender is not an active member of the conversation",
        ));
    };
    st.check_run_owner(request.run, request.team, request.sender)?;
    let sha = body_sha256(&request.body);
    let key = (request.sender, request.request_id.clone());
    if let Some(existing) = row.requests.get(&key) {
        let message = st.messages[existing].clone();
        if message.body_sha256 != sha {
            return Err(BusError::conflict(
                "request id was already used with another body",
            ));
        }
        return Ok(Sent {
            message,
            created: false,
        });
    }
    st.check_run_open(request.run)?;

    let seq = row.messages.keys().next_back().copied().unwrap_or(0) + 1;
    let id = Uuid::new_v4();
    let mut message = Message::pending(id, &request, seq, conversation.backend.clone(), sha, at);
    message.sender_kind = sender_kind;
    // Human members get no receipts: nothing is delivered to them.
    let recipients: Vec<&Member> = conversation
        .members
        .iter()
        .filter(|m| m.agent != request.sender)
        .filter(|m| st.agents.get(&m.agent).is_some_and(|a| !a.is_human()))
        .collect();
    for m in &recipients {
        st.receipts.insert(
            (id, m.agent),
            Receipt {
                message: id,
                recipient: m.agent,
                recipient_key: m.recipient_key.clone(),
                stored_at: None,
                delivered_at: None,
                acknowledged_at: None,
            },
        );
        st.by_recipient.entry(m.agent).or_default().push(id);
    }
    st.recipients
        .insert(id, recipients.iter().map(|m| m.agent).collect());
    let order = st.next_order();
    let slot = Slot {
        id: Uuid::new_v4(),
        order,
        backend: conversation.backend.clone(),
        envelope: Envelope {
            message_id: id,
            conversation_id: conversation.id,
            team_id: request.team,
            body: request.body,
            publish_key: Uuid::new_v4(),
        },
        generation: 0,
        attempts: 0,
        uncertain: false,
        failed: false,
        next_attempt_at: at,
        leased_until: None,
        last_error: None,
    };
    st.slots.insert(slot.id, slot);
    st.messages.insert(id, message.clone());
    let row = st
        .conversations
        .get_mut(&conversation.id)
        .expect("checked above");
    row.messages.insert(seq, id);
    row.requests.insert(key, id);
    st.record(
        request.run,
        at,
        RecordKind::MessageSent {
            conversation: conversation.id,
            message: id,
            seq,
        },
    );
    Ok(Sent {
        message,
        created: true,
    })
}
