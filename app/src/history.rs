//! History: a conversation's messages by `seq`, with bodies read back from their backends.

use std::collections::HashMap;

use crewbus_domain::{Absence, Agent, BusResult, Message, Uuid};

use crate::bus::Bus;

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

impl Bus {
    /// A page of `conversation` after `after_seq`, for a member. An unreachable backend yields an
    /// explained empty body (`Unavailable`), never a failed page. Errors: not a member, unknown
    /// or another team's conversation → `NotFound`; bad `limit` → `Invalid`.
    pub async fn history(
        &self,
        agent: &Agent,
        conversation: Uuid,
        after_seq: u64,
        limit: usize,
    ) -> BusResult<History> {
        crewbus_domain::validate_limit(limit)?;
        self.conversation_for(agent, conversation).await?;
        let page = self
            .ports
            .ledger
            .history(agent.team, conversation, after_seq, limit)
            .await?;
        let mut backends = HashMap::new();
        let mut entries = Vec::with_capacity(page.items.len());
        for item in page.items {
            let (body, absence) = match item.absence {
                Some(a) => (None, Some(a)),
                None => {
                    let reachable = self
                        .ports
                        .backends
                        .body_backend(item.message.team, &item.message.backend)
                        .await
                        .is_ok();
                    match self.body_of(&item.message, &mut backends).await {
                        Some(body) => (Some(body), None),
                        None if reachable => {
                            (None, Some(self.classify_missing(&item.message).await))
                        }
                        None => (None, Some(Absence::Unavailable)),
                    }
                }
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

    /// Tells "the backend did not answer" from "the backend does not hold it".
    async fn classify_missing(&self, message: &Message) -> Absence {
        let Some(locator) = &message.locator else {
            return Absence::Missing;
        };
        match self
            .ports
            .backends
            .body_backend(message.team, &message.backend)
            .await
        {
            Ok(b) => match b.fetch(locator, message.id).await {
                Ok(_) => Absence::Missing,
                Err(e) if e.is_retryable() => Absence::Unavailable,
                Err(_) => Absence::Missing,
            },
            Err(_) => Absence::Unavailable,
        }
    }
}
