//! Presence: the short status line an agent sets ("reviewing PR 12"), shown with its current
//! run and last activity wherever the team's agents are listed (`GET /v1/agents`, MCP
//! `list_agents`, the console's team page).
//!
//! The ledger keeps the line on the agent's row (`Oversight::set_status`) and reads it back
//! with the agent's activity (`Oversight::agent_activity`, [`crate::AgentActivity`]).

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::{BusError, BusResult};

/// The status line an agent set, and when (time from the bus's clock at the call).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatusLine {
    /// One line of plain text, 1 to [`MAX_STATUS_CHARS`] characters (see [`validate_status`]).
    pub text: String,
    /// When the agent set it.
    pub set_at: DateTime<Utc>,
}

/// Longest status line, in characters (Unicode scalar values, as JSON Schema's `maxLength`
/// counts them; at most 800 bytes of UTF-8): a line for a list, not a message body.
pub const MAX_STATUS_CHARS: usize = 200;

/// Invisible and bidirectional format characters: zero-width spaces and joiners, directional
/// marks (U+200B–U+200F), embeddings and overrides (U+202A–U+202E), word joiners, invisible
/// operators and isolates (U+2060–U+206F), the byte-order mark (U+FEFF). In a line shown beside
/// an agent's name they hide or reorder what a person reads.
fn is_hidden_format(c: char) -> bool {
    matches!(c, '\u{200B}'..='\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2060}'..='\u{206F}' | '\u{FEFF}')
}

/// Checks a status line. The empty line is allowed (it clears the status).
///
/// Errors (`Invalid`): above [`MAX_STATUS_CHARS`] characters; any invisible or bidirectional
/// format character (U+200B–U+200F, U+202A–U+202E, U+2060–U+206F, U+FEFF); any control character (newlines, tabs,
/// escapes: a status is one line of plain text, shown as text in the console and in listings).
pub fn validate_status(status: &str) -> BusResult<()> {
    let chars = status.chars().count();
    if chars > MAX_STATUS_CHARS {
        return Err(BusError::invalid(format!(
            "a status is at most {MAX_STATUS_CHARS} characters, this one has {chars}"
        )));
    }
    if status
        .chars()
        .any(|c| c.is_control() || is_hidden_format(c))
    {
        return Err(BusError::invalid(
            "a status is one line of plain text: control characters (newlines, tabs, escapes) \
             and invisible or bidirectional format characters are refused",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_line_up_to_the_bound_passes_and_beyond_or_with_controls_is_invalid() {
        assert!(validate_status("").is_ok());
        assert!(validate_status("reviewing PR 12").is_ok());
        assert!(validate_status(&"é".repeat(MAX_STATUS_CHARS)).is_ok());
        assert!(validate_status(&"🦀".repeat(MAX_STATUS_CHARS)).is_ok());
        for bad in [
            "x".repeat(MAX_STATUS_CHARS + 1),
            "é".repeat(MAX_STATUS_CHARS + 1),
            "two\nlines".to_owned(),
            "tab\there".to_owned(),
            "esc\u{1b}[31m".to_owned(),
            "nul\0".to_owned(),
            "c1\u{85}".to_owned(),
            "rlo\u{202e}txt".to_owned(),
            "zero\u{200b}width".to_owned(),
            "bom\u{feff}".to_owned(),
            "isolate\u{2066}".to_owned(),
        ] {
            assert!(
                matches!(validate_status(&bad), Err(BusError::Invalid { .. })),
                "{bad:?}"
            );
        }
    }

    proptest! {
        #[test]
        fn accepted_lines_are_bounded_and_control_free(s in "\\PC{0,220}|.{0,300}") {
            let fits = s.chars().count() <= MAX_STATUS_CHARS
                && !s.chars().any(|c| c.is_control() || is_hidden_format(c));
            match validate_status(&s) {
                Ok(()) => prop_assert!(fits),
                Err(e) => {
                    let invalid = matches!(e, BusError::Invalid { .. });
                    prop_assert!(invalid && !fits);
                }
            }
        }
    }
}
