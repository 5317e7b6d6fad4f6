//! History: a conversation's messages by `seq`, with bodies read back from their backends.

use crewbus_domain::{Absence, Agent, BusError, BusResult, Message, Uuid};

use crate::usecases::bus::Bus;
use crate::usecases::deliver::BodyBackends;

/// One message of a history page.
#[derive(Debug, Clone)]
pub struct HistoryEntry {
    /// The message as recorded.
    pub message: Message,
    /// Its body, when it could be read.
    pub body: Option<String>,
    /// Why there is no body: pending (the page stops here), failed, retained, unavailable (the
    /// backend did not answer), missing (the backend does not hold it).
    pub absence: Option<Absence>,
}

/// A page of history.
#[derive(Debug, Clone)]
pub struct History {
    /// Messages with `seq > after_seq`, in order, up to and including the first pending one.
    pub entries: Vec<HistoryEntry>,
    /// The cursor for the next page (`seq − 1` of a pending message, so it is read again).
    pub next_after_seq: u64,
}

impl History {
    /// The page cut to `max_body_bytes` of bodies (UTF-8 bytes, summed): entries are kept in
    /// order until the first whose body would take the sum above it; that one and every later
    /// one are left out and `next_after_seq` points at the last kept entry, so the next page
    /// starts with the first one left out. The first entry is always kept, even when its body
    /// alone is larger (the caller decides how to show it). Entries without a body cost nothing.
    pub fn within_bytes(mut self, max_body_bytes: usize) -> History {
        let mut used = 0usize;
        let mut keep = self.entries.len();
        for (i, e) in self.entries.iter().enumerate() {
            let size = e.body.as_ref().map_or(0, String::len);
            if i > 0 && used.saturating_add(size) > max_body_bytes {
                keep = i;
                break;
            }
            used = used.saturating_add(size);
        }
        if keep < self.entries.len() {
            self.entries.truncate(keep);
            if let Some(last) = self.entries.last() {
                self.next_after_seq = last.message.seq;
            }
        }
        self
    }
}

impl Bus {
    /// A page of `conversation` after `after_seq`, for a member. An unreachable backend yields an
    /// explained empty body (`Unavailable`), never a failed page. Errors: not a member, unknown
    /// or another team's conversation → `NotFound`; bad `limit`, `after_seq` above
    /// [`crewbus_domain::MAX_POSITION`] → `Invalid`.
    pub async fn history(
        &self,
        agent: &Agent,
        conversation: Uuid,
        after_seq: u64,
        limit: usize,
    ) -> BusResult<History> {
        crewbus_domain::validate_limit(limit)?;
        crewbus_domain::validate_position("after_seq", after_seq)?;
        self.conversation_for(agent, conversation).await?;
        self.history_page(agent.team, conversation, after_seq, limit)
            .await
    }

    /// The newest `limit` messages of `conversation` (oldest of them first), for a member: a
    /// page as [`Bus::history`] gives it from `count − limit` (`seq` is gap-free from 1), so it
    /// also stops at a message still being stored. Errors: as [`Bus::history`].
    pub async fn latest_history(
        &self,
        agent: &Agent,
        conversation: Uuid,
        limit: usize,
    ) -> BusResult<History> {
        crewbus_domain::validate_limit(limit)?;
        self.conversation_for(agent, conversation).await?;
        let count = self
            .ports
            .oversight
            .conversation_summaries(agent.team)
            .await?
            .into_iter()
            .find(|c| c.conversation.id == conversation)
            .map_or(0, |c| c.messages);
        let after = count.saturating_sub(limit as u64);
        self.history_page(agent.team, conversation, after, limit)
            .await
    }

    /// A page of `conversation` of `team` after `after_seq` with its bodies read, for a caller
    /// already allowed to read it (a member, or an operator whose scope holds the team).
    /// Errors: unknown or another team's conversation → `NotFound`; bad `limit` → `Invalid`.
    pub(crate) async fn history_page(
        &self,
        team: Uuid,
        conversation: Uuid,
        after_seq: u64,
        limit: usize,
    ) -> BusResult<History> {
        let page = self
            .ports
            .ledger
            .history(team, conversation, after_seq, limit)
            .await?;
        let mut backends = BodyBackends::new();
        let to_read: Vec<&Message> = page
            .items
            .iter()
            .filter(|item| item.absence.is_none())
            .map(|item| &item.message)
            .collect();
        let mut reads = self.read_bodies(&to_read, &mut backends).await.into_iter();
        let mut entries = Vec::with_capacity(page.items.len());
        for item in page.items {
            let (body, absence) = match item.absence {
                Some(a) => (None, Some(a)),
                None => match reads
                    .next()
                    .unwrap_or_else(|| Err(BusError::unavailable("body backend")))
                {
                    Ok(Some(body)) => (Some(body), None),
                    Ok(None) => (None, Some(Absence::Missing)),
                    Err(e) if e.is_retryable() => (None, Some(Absence::Unavailable)),
                    Err(BusError::NotProvisioned { .. }) => (None, Some(Absence::Unavailable)),
                    Err(error) => {
                        tracing::warn!(message_id = %item.message.id, code = error.code(), error = ?error, "history: body refused");
                        (None, Some(Absence::Missing))
                    }
                },
            };
            entries.push(HistoryEntry {
                message: item.message,
                body,
                absence,
            });
        }
        Ok(History {
            entries,
            next_after_seq: page.next_after_seq,
        })
    }
}
