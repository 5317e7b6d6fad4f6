//! Runs and their journal records.

use std::fmt;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::{MAX_PAGE, RunId, Seq, StoreError};

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunOutcome {
    /// The agent finished its work.
    Succeeded,
    /// The run failed (including an admission that could not be completed).
    Failed,
    /// The run was stopped from outside (operator, shutdown, abandoned session).
    Cancelled,
}

impl RunOutcome {
    /// The snake_case name (`succeeded`, `failed`, `cancelled`).
    pub fn as_str(self) -> &'static str {
        match self {
            RunOutcome::Succeeded => "succeeded",
            RunOutcome::Failed => "failed",
            RunOutcome::Cancelled => "cancelled",
        }
    }

    /// The outcome whose [`RunOutcome::as_str`] is `name`; `None` for any other name.
    pub fn from_name(name: &str) -> Option<RunOutcome> {
        [
            RunOutcome::Succeeded,
            RunOutcome::Failed,
            RunOutcome::Cancelled,
        ]
        .into_iter()
        .find(|o| o.as_str() == name)
    }
}

impl fmt::Display for RunOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a record says. Records carry ids, never message bodies.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
#[non_exhaustive]
pub enum RecordKind {
    /// The run was admitted (always seq 1).
    RunAdmitted {
        /// The run's team.
        team: Uuid,
        /// The run's agent.
        agent: Uuid,
    },
    /// The run's agent reconnected.
    RunResumed,
    /// The run's agent sent a message (written by the ledger in the send transaction).
    MessageSent {
        /// The conversation.
        conversation: Uuid,
        /// The message.
        message: Uuid,
        /// Its position in the conversation.
        seq: u64,
    },
    /// The run's agent confirmed a delivery (written in the confirm transaction).
    MessageDelivered {
        /// The conversation.
        conversation: Uuid,
        /// The message.
        message: Uuid,
    },
    /// The run's agent acknowledged a message (written in the acknowledge transaction).
    MessageAcknowledged {
        /// The conversation.
        conversation: Uuid,
        /// The message.
        message: Uuid,
    },
    /// The run's agent was granted a lease (written in the acquire transaction).
    LeaseGranted {
        /// The lease.
        lease: Uuid,
        /// Its pattern.
        pattern: crate::LeasePattern,
        /// How it is held.
        mode: crate::LeaseMode,
        /// Its fencing token.
        token: crate::FencingToken,
        /// When it lapses unless renewed.
        expires_at: DateTime<Utc>,
    },
    /// The run's agent renewed a lease the run took (written in the renewal's transaction).
    LeaseRenewed {
        /// The lease.
        lease: Uuid,
        /// Its new expiry.
        expires_at: DateTime<Utc>,
    },
    /// A lease the run took ended (released, expired, its agent revoked, or this run sealed:
    /// written in that change's transaction, before the seal's own record).
    LeaseEnded {
        /// The lease.
        lease: Uuid,
        /// Why.
        reason: crate::LeaseEnd,
    },
    /// Free text from the agent or the app.
    Note {
        /// The text (at most [`MAX_NOTE_LEN`] bytes).
        text: String,
    },
    /// The terminal record: nothing is appended after it.
    RunSealed {
        /// How the run ended.
        outcome: RunOutcome,
        /// Why, in the app's words.
        reason: String,
    },
}

impl RecordKind {
    /// Whether this is the terminal record.
    pub fn is_terminal(&self) -> bool {
        matches!(self, RecordKind::RunSealed { .. })
    }
}

/// Longest accepted note or seal reason, in bytes.
pub const MAX_NOTE_LEN: usize = 16 * 1024;

/// Validates a note's text or a seal's reason (`what` names it in the error): at most
/// [`MAX_NOTE_LEN`] bytes. Errors: [`StoreError::Invalid`].
pub fn validate_note_text(what: &str, text: &str) -> Result<(), StoreError> {
    if text.len() > MAX_NOTE_LEN {
        return Err(StoreError::invalid(format!(
            "{what} is longer than {MAX_NOTE_LEN} bytes"
        )));
    }
    Ok(())
}

/// Validates the `limit` of a journal read: 1 to [`MAX_PAGE`]. Errors: [`StoreError::Invalid`].
pub fn validate_journal_limit(limit: usize) -> Result<(), StoreError> {
    if limit == 0 || limit > MAX_PAGE {
        return Err(StoreError::invalid(format!(
            "limit must be between 1 and {MAX_PAGE}"
        )));
    }
    Ok(())
}

/// The rule for appending to `run`, given whether it is sealed (`None`: no such run of the
/// tenant). Errors: no such run → [`StoreError::NotFound`]; sealed → [`StoreError::Conflict`].
pub fn check_appendable(run: RunId, sealed: Option<bool>) -> Result<(), StoreError> {
    match sealed {
        None => Err(StoreError::not_found(format!("run {run}"))),
        Some(true) => Err(StoreError::conflict(format!("run {run} is sealed"))),
        Some(false) => Ok(()),
    }
}

/// One journal record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    /// The run.
    pub run: RunId,
    /// Position in the run's journal: gap-free from 1.
    pub seq: Seq,
    /// When it was written (the caller's `at`).
    pub at: DateTime<Utc>,
    /// What it says.
    pub kind: RecordKind,
}

impl Record {
    /// A record read back from a store that keeps its kind as the JSON of [`RecordKind`].
    /// Errors: `kind_json` that is not a record kind → [`StoreError::Backend`] (the store's data
    /// is unreadable), with the JSON error as its source.
    pub fn from_stored(
        run: RunId,
        seq: Seq,
        at: DateTime<Utc>,
        kind_json: &str,
    ) -> Result<Record, StoreError> {
        let kind = serde_json::from_str(kind_json).map_err(|e| StoreError::Backend {
            what: format!("journal record {run}/{seq} is unreadable"),
            source: Some(std::sync::Arc::new(e)),
        })?;
        Ok(Record { run, seq, at, kind })
    }
}

/// A run as the journal knows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Run {
    /// The run.
    pub id: RunId,
    /// Its team.
    pub team: Uuid,
    /// Its agent (a run belongs to one agent for life).
    pub agent: Uuid,
    /// When it was admitted.
    pub admitted_at: DateTime<Utc>,
    /// The seq of its last record.
    pub last_seq: Seq,
    /// When and how it was sealed; `None` while open.
    pub sealed: Option<(DateTime<Utc>, RunOutcome)>,
}

impl Run {
    /// Whether the run is sealed (nothing more can be appended).
    pub fn is_sealed(&self) -> bool {
        self.sealed.is_some()
    }

    /// A run read back from a store's columns: it is sealed when both `sealed_at` and an
    /// `outcome` named as [`RunOutcome::as_str`] names one are stored (an unknown outcome name
    /// reads as open).
    pub fn from_stored(
        id: RunId,
        team: Uuid,
        agent: Uuid,
        admitted_at: DateTime<Utc>,
        last_seq: Seq,
        sealed_at: Option<DateTime<Utc>>,
        outcome: Option<&str>,
    ) -> Run {
        let sealed = match (sealed_at, outcome.and_then(RunOutcome::from_name)) {
            (Some(at), Some(outcome)) => Some((at, outcome)),
            _ => None,
        };
        Run {
            id,
            team,
            agent,
            admitted_at,
            last_seq,
            sealed,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcome_names_round_trip() {
        for o in [
            RunOutcome::Succeeded,
            RunOutcome::Failed,
            RunOutcome::Cancelled,
        ] {
            assert_eq!(RunOutcome::from_name(o.as_str()), Some(o));
        }
        assert_eq!(RunOutcome::from_name("Succeeded"), None);
        assert_eq!(RunOutcome::from_name(""), None);
    }

    #[test]
    fn note_text_and_limit_rules() {
        assert!(validate_note_text("note", &"x".repeat(MAX_NOTE_LEN)).is_ok());
        assert!(matches!(
            validate_note_text("note", &"x".repeat(MAX_NOTE_LEN + 1)),
            Err(StoreError::Invalid { .. })
        ));
        assert!(validate_journal_limit(1).is_ok() && validate_journal_limit(MAX_PAGE).is_ok());
        for bad in [0, MAX_PAGE + 1] {
            assert!(matches!(
                validate_journal_limit(bad),
                Err(StoreError::Invalid { .. })
            ));
        }
    }

    #[test]
    fn appending_needs_an_open_run() {
        let run = RunId::new();
        assert!(check_appendable(run, Some(false)).is_ok());
        assert!(matches!(
            check_appendable(run, Some(true)),
            Err(StoreError::Conflict { .. })
        ));
        assert!(matches!(
            check_appendable(run, None),
            Err(StoreError::NotFound { .. })
        ));
    }

    #[test]
    fn stored_records_and_runs_read_back() {
        let (run, at) = (RunId::new(), Utc::now());
        let kind = RecordKind::Note { text: "hi".into() };
        let json = serde_json::to_string(&kind).unwrap();
        let record = Record::from_stored(run, Seq(2), at, &json).unwrap();
        assert_eq!(record.kind, kind);
        assert!(matches!(
            Record::from_stored(run, Seq(2), at, "{}"),
            Err(StoreError::Backend { .. })
        ));
        let (team, agent) = (Uuid::new_v4(), Uuid::new_v4());
        let sealed = Run::from_stored(run, team, agent, at, Seq(3), Some(at), Some("failed"));
        assert_eq!(sealed.sealed, Some((at, RunOutcome::Failed)));
        let open = Run::from_stored(run, team, agent, at, Seq(3), Some(at), Some("unknown"));
        assert!(!open.is_sealed());
        assert!(!Run::from_stored(run, team, agent, at, Seq(1), None, None).is_sealed());
    }
}
