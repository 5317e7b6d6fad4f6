//! Presence: the short status line an agent sets ("reviewing PR 12"), crewbus issue 21 item 2.
//!
//! Only the rule lives here so far: the ledgers, routes, MCP tool and console page that store
//! and show it are not built yet.

use crate::{BusError, BusResult};

/// Longest status line, in bytes of UTF-8: a line for a list, not a message body.
pub const MAX_STATUS_BYTES: usize = 200;

/// Checks a status line. The empty line is allowed (it clears the status).
///
/// Errors (`Invalid`): above [`MAX_STATUS_BYTES`] bytes; any control character (newlines, tabs,
/// escapes: a status is one line of plain text, shown as text in the console and in listings).
pub fn validate_status(status: &str) -> BusResult<()> {
    if status.len() > MAX_STATUS_BYTES {
        return Err(BusError::invalid(format!(
            "a status is at most {MAX_STATUS_BYTES} bytes of UTF-8, this one is {}",
            status.len()
        )));
    }
    if status.chars().any(char::is_control) {
        return Err(BusError::invalid(
            "a status is one line of text: control characters (newlines, tabs, escapes) are refused",
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
        assert!(validate_status(&"é".repeat(MAX_STATUS_BYTES / 2)).is_ok());
        for bad in [
            "x".repeat(MAX_STATUS_BYTES + 1),
            "é".repeat(MAX_STATUS_BYTES / 2 + 1),
            "two\nlines".to_owned(),
            "tab\there".to_owned(),
            "esc\u{1b}[31m".to_owned(),
            "nul\0".to_owned(),
            "c1\u{85}".to_owned(),
        ] {
            assert!(
                matches!(validate_status(&bad), Err(BusError::Invalid { .. })),
                "{bad:?}"
            );
        }
    }

    proptest! {
        #[test]
        fn accepted_lines_are_bounded_and_control_free(s in "\\PC{0,120}|.{0,300}") {
            let fits = s.len() <= MAX_STATUS_BYTES && !s.chars().any(char::is_control);
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
