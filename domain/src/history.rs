//! A conversation's history page and the page rule of the bus.

use serde::{Deserialize, Serialize};

use crate::{BusError, BusResult, Message, Publication};

/// Largest page a history read (or any ledger list with a `limit`) returns, in items.
pub const MAX_PAGE: usize = 1000;

/// Validates a page `limit`: 1 to [`MAX_PAGE`]. Errors: [`BusError::Invalid`].
pub fn validate_limit(limit: usize) -> BusResult<()> {
    if limit == 0 || limit > MAX_PAGE {
        return Err(BusError::invalid(format!(
            "limit must be between 1 and {MAX_PAGE}"
        )));
    }
    Ok(())
}

/// Largest position (`seq`) a cursor may name: `i64::MAX`, the largest a ledger stores (a
/// Postgres `BIGINT`), so every position fits the OpenAPI `int64` the API documents.
pub const MAX_POSITION: u64 = i64::MAX as u64;

/// Validates a cursor position named `what` (`after_seq`, `from_seq`): at most
/// [`MAX_POSITION`]. Errors: [`BusError::Invalid`] naming `what`.
pub fn validate_position(what: &str, position: u64) -> BusResult<()> {
    if position > MAX_POSITION {
        return Err(BusError::invalid(format!(
            "{what} must be at most {MAX_POSITION}"
        )));
    }
    Ok(())
}

/// Why a history item carries no body.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Absence {
    /// The body is not yet confirmed by its backend. Ends the page; it is read again once stored.
    Pending,
    /// The backend refused the body for good. Does not stop the cursor.
    Failed,
    /// Retention removed the body. Does not stop the cursor.
    Retained,
    /// Set by the reader, never by the ledger: the body backend could not be reached (the page
    /// is still served).
    Unavailable,
    /// Set by the reader, never by the ledger: the backend no longer holds a body the ledger
    /// recorded as stored.
    Missing,
}

/// One message of a page, with its body's absence explained when there is no body to fetch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HistoryItem {
    /// The message as recorded.
    pub message: Message,
    /// `None`: the body is stored; fetch it by `message.locator`.
    pub absence: Option<Absence>,
}

/// A page of a conversation's history, by `seq`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HistoryPage {
    /// Messages in ascending `seq`, gap-free from the cursor + 1.
    pub items: Vec<HistoryItem>,
    /// The cursor to read the next page after (`after_seq` of the next call). Equal to the
    /// cursor asked for when nothing new is readable (an empty page, or a pending message first).
    pub next_after_seq: u64,
}

impl HistoryPage {
    /// The page rule, shared by every ledger.
    ///
    /// `messages` are the conversation's messages with `seq > after_seq` in ascending `seq`, at
    /// most one page of them. The page holds messages up to and including the first pending one,
    /// which appears as [`Absence::Pending`]; the next cursor is then that message's `seq − 1`,
    /// so it is read again once stored. Failed and retained messages appear as explained
    /// absences and do not stop the cursor. Otherwise the next cursor is the last item's `seq`
    /// (or `after_seq` for an empty page).
    pub fn build(after_seq: u64, messages: impl IntoIterator<Item = Message>) -> HistoryPage {
        let mut items = Vec::new();
        let mut next_after_seq = after_seq;
        for message in messages {
            let seq = message.seq;
            let absence = match message.publication {
                Publication::PendingPublication => Some(Absence::Pending),
                Publication::Failed => Some(Absence::Failed),
                Publication::Stored if message.retained_at.is_some() => Some(Absence::Retained),
                Publication::Stored => None,
            };
            items.push(HistoryItem { message, absence });
            if absence == Some(Absence::Pending) {
                next_after_seq = seq - 1;
                break;
            }
            next_after_seq = seq;
        }
        HistoryPage {
            items,
            next_after_seq,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Locator;
    use chrono::Utc;
    use uuid::Uuid;

    fn msg(seq: u64, publication: Publication, retained: bool) -> Message {
        Message {
            id: Uuid::new_v4(),
            team: Uuid::nil(),
            conversation: Uuid::nil(),
            seq,
            sender: Uuid::nil(),
            request_id: format!("r{seq}"),
            body_sha256: String::new(),
            body_len: 0,
            backend: "memory".into(),
            locator: (publication == Publication::Stored).then(|| Locator::new("memory", "x")),
            publication,
            sent_at: Utc::now(),
            stored_at: None,
            retained_at: retained.then(Utc::now),
            failure: None,
            sender_kind: crate::AgentKind::Agent,
        }
    }

    #[test]
    fn stops_at_the_first_pending_with_cursor_before_it() {
        use Publication::*;
        let page = HistoryPage::build(
            4,
            vec![
                msg(5, Stored, false),
                msg(6, Failed, false),
                msg(7, Stored, true),
                msg(8, PendingPublication, false),
                msg(9, Stored, false),
            ],
        );
        let seqs: Vec<_> = page.items.iter().map(|i| i.message.seq).collect();
        assert_eq!(seqs, vec![5, 6, 7, 8]);
        let absences: Vec<_> = page.items.iter().map(|i| i.absence).collect();
        assert_eq!(
            absences,
            vec![
                None,
                Some(Absence::Failed),
                Some(Absence::Retained),
                Some(Absence::Pending)
            ]
        );
        assert_eq!(page.next_after_seq, 7);
    }

    #[test]
    fn pending_first_keeps_the_cursor_and_empty_keeps_it_too() {
        let page = HistoryPage::build(2, vec![msg(3, Publication::PendingPublication, false)]);
        assert_eq!(page.next_after_seq, 2);
        assert_eq!(page.items.len(), 1);
        let empty = HistoryPage::build(9, Vec::new());
        assert_eq!(empty.next_after_seq, 9);
        assert!(empty.items.is_empty());
    }

    #[test]
    fn limits() {
        assert!(validate_limit(1).is_ok() && validate_limit(MAX_PAGE).is_ok());
        assert!(validate_limit(0).is_err() && validate_limit(MAX_PAGE + 1).is_err());
    }

    #[test]
    fn positions_fit_an_int64() {
        assert!(validate_position("after_seq", 0).is_ok());
        assert!(validate_position("after_seq", MAX_POSITION).is_ok());
        assert!(matches!(
            validate_position("after_seq", MAX_POSITION + 1),
            Err(BusError::Invalid { .. })
        ));
        assert!(matches!(
            validate_position("from_seq", u64::MAX),
            Err(BusError::Invalid { .. })
        ));
    }
}
