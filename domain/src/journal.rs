//! Runs and their journal records.

use std::fmt;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::{RunId, Seq};

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
}
