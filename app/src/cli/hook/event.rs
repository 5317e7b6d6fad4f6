//! The host's hook event, read from stdin: what happened and in which session.
//!
//! Claude Code and Codex send `hook_event_name` (`Stop`, `SessionStart`, `UserPromptSubmit`,
//! `PostToolUse`, …), `session_id` and, on Stop, `stop_hook_active` (true when the session goes
//! on because a Stop hook blocked its previous stop). Cursor sends `hook_event_name: "stop"`,
//! `conversation_id` (no `session_id`), `status` (`completed`, `aborted`, `error`) and
//! `loop_count`. Every other field (a tool's input and output, the transcript path, the last
//! assistant message) is ignored. The session id is untrusted: it is only ever hashed into the
//! state file's name.

use serde_json::Value;

use super::Host;

/// The longest event accepted on stdin, in bytes (a PostToolUse event carries the tool's
/// output).
pub const MAX_EVENT_BYTES: usize = 32 << 20;

/// The events a check answers with `additionalContext`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckEvent {
    /// `SessionStart`.
    SessionStart,
    /// `UserPromptSubmit`: also starts the count of consecutive wakes again.
    UserPromptSubmit,
    /// `PostToolUse`.
    PostToolUse,
}

impl CheckEvent {
    /// The event's name, as `hookSpecificOutput.hookEventName` wants it.
    pub fn name(self) -> &'static str {
        match self {
            CheckEvent::SessionStart => "SessionStart",
            CheckEvent::UserPromptSubmit => "UserPromptSubmit",
            CheckEvent::PostToolUse => "PostToolUse",
        }
    }
}

/// What the hook was called for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EventKind {
    /// Claude Code's or Codex's `Stop`.
    Stop {
        /// The session goes on because a Stop hook blocked its previous stop.
        stop_hook_active: bool,
    },
    /// A check without waiting.
    Check(CheckEvent),
    /// Cursor's `stop`.
    CursorStop {
        /// `completed`, `aborted` or `error` (only `completed` is followed up).
        completed: bool,
        /// How many follow-ups this conversation already had in a row.
        loop_count: u32,
    },
}

/// One event: its kind and the host's session id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// What happened.
    pub kind: EventKind,
    /// The host's session (Cursor: conversation) id, untrusted.
    pub session: String,
}

/// Why an event is not acted on. Each is reported as one stderr line; none is a decision.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EventError {
    /// Not a JSON object.
    #[error("the hook event on stdin is not a JSON object")]
    Malformed,
    /// No `hook_event_name`.
    #[error("the hook event names no hook_event_name")]
    Unnamed,
    /// An event this host's hook does not handle.
    #[error("the {host} hook does not handle the event {name:?}")]
    Unknown {
        /// The host.
        host: &'static str,
        /// The event's name, cut to 64 characters.
        name: String,
    },
    /// No session id to key the state by.
    #[error("the hook event has no {0}")]
    NoSession(&'static str),
    /// A Cursor event reached another host's hook.
    #[error("this is a Cursor hook event: configure `crewbus hook cursor` for Cursor")]
    Cursor,
}

/// Parses `bytes` as `host`'s event. Errors: see [`EventError`].
pub fn parse(host: Host, bytes: &[u8]) -> Result<Event, EventError> {
    let v: Value = serde_json::from_slice(bytes).map_err(|_| EventError::Malformed)?;
    from_value(host, &v)
}

/// Reads `v` as `host`'s event. Errors: see [`EventError`].
pub fn from_value(host: Host, v: &Value) -> Result<Event, EventError> {
    let o = v.as_object().ok_or(EventError::Malformed)?;
    let name = o
        .get("hook_event_name")
        .and_then(Value::as_str)
        .ok_or(EventError::Unnamed)?;
    let text = |key: &str| o.get(key).and_then(Value::as_str).map(str::to_owned);
    let unknown = || EventError::Unknown {
        host: host.name(),
        name: name.chars().take(64).collect(),
    };
    match host {
        Host::ClaudeCode | Host::Codex => {
            if is_cursor(o) {
                return Err(EventError::Cursor);
            }
            let kind = match name {
                "Stop" => EventKind::Stop {
                    stop_hook_active: o
                        .get("stop_hook_active")
                        .and_then(Value::as_bool)
                        .unwrap_or(false),
                },
                "SessionStart" => EventKind::Check(CheckEvent::SessionStart),
                "UserPromptSubmit" => EventKind::Check(CheckEvent::UserPromptSubmit),
                "PostToolUse" => EventKind::Check(CheckEvent::PostToolUse),
                _ => return Err(unknown()),
            };
            let session = text("session_id")
                .filter(|s| !s.is_empty())
                .ok_or(EventError::NoSession("session_id"))?;
            Ok(Event { kind, session })
        }
        Host::Cursor => {
            if name != "stop" {
                return Err(unknown());
            }
            let session = text("conversation_id")
                .filter(|s| !s.is_empty())
                .ok_or(EventError::NoSession("conversation_id"))?;
            let loop_count = o
                .get("loop_count")
                .and_then(Value::as_u64)
                .map_or(0, |n| u32::try_from(n).unwrap_or(u32::MAX));
            Ok(Event {
                kind: EventKind::CursorStop {
                    completed: text("status").as_deref() == Some("completed"),
                    loop_count,
                },
                session,
            })
        }
    }
}

/// A Cursor payload: Cursor's own event names are lowerCamelCase (`stop`, `beforeSubmitPrompt`,
/// …), and its events carry `conversation_id`, `cursor_version` or `workspace_roots`, and no
/// `session_id` on `stop`.
fn is_cursor(o: &serde_json::Map<String, Value>) -> bool {
    let lower_name = o
        .get("hook_event_name")
        .and_then(Value::as_str)
        .and_then(|n| n.chars().next())
        .is_some_and(char::is_lowercase);
    let cursor_fields = ["cursor_version", "workspace_roots", "conversation_id"]
        .iter()
        .any(|k| o.contains_key(*k));
    lower_name || (cursor_fields && !o.contains_key("session_id"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cc(json: &str) -> Result<Event, EventError> {
        parse(Host::ClaudeCode, json.as_bytes())
    }

    #[test]
    fn claude_code_events_are_read() {
        assert_eq!(
            cc(
                r#"{"hook_event_name":"Stop","session_id":"s1","stop_hook_active":true,
                 "last_assistant_message":"done"}"#
            ),
            Ok(Event {
                kind: EventKind::Stop {
                    stop_hook_active: true
                },
                session: "s1".into()
            })
        );
        let stop = cc(r#"{"hook_event_name":"Stop","session_id":"s1"}"#).unwrap();
        assert_eq!(
            stop.kind,
            EventKind::Stop {
                stop_hook_active: false
            }
        );
        for (name, check) in [
            ("SessionStart", CheckEvent::SessionStart),
            ("UserPromptSubmit", CheckEvent::UserPromptSubmit),
            ("PostToolUse", CheckEvent::PostToolUse),
        ] {
            let e = cc(&format!(
                r#"{{"hook_event_name":"{name}","session_id":"x","tool_response":{{"a":1}}}}"#
            ))
            .unwrap();
            assert_eq!(e.kind, EventKind::Check(check));
            assert_eq!(check.name(), name);
        }
    }

    #[test]
    fn bad_events_are_refused_with_their_reason() {
        assert_eq!(cc("not json"), Err(EventError::Malformed));
        assert_eq!(cc("[1]"), Err(EventError::Malformed));
        assert_eq!(cc(r#"{"session_id":"s"}"#), Err(EventError::Unnamed));
        assert!(matches!(
            cc(r#"{"hook_event_name":"PreToolUse","session_id":"s"}"#),
            Err(EventError::Unknown { .. })
        ));
        assert_eq!(
            cc(r#"{"hook_event_name":"Stop"}"#),
            Err(EventError::NoSession("session_id"))
        );
        assert_eq!(
            cc(r#"{"hook_event_name":"Stop","session_id":""}"#),
            Err(EventError::NoSession("session_id"))
        );
    }

    #[test]
    fn a_cursor_payload_reaching_claude_codes_hook_is_recognised() {
        let cursor = r#"{"hook_event_name":"stop","conversation_id":"c1","generation_id":"g",
            "status":"completed","loop_count":0,"workspace_roots":["/p"]}"#;
        assert_eq!(cc(cursor), Err(EventError::Cursor));
        assert_eq!(
            parse(Host::Codex, cursor.as_bytes()),
            Err(EventError::Cursor)
        );
        // Even named like Claude Code's, a payload with Cursor's fields and no session_id.
        assert_eq!(
            cc(r#"{"hook_event_name":"Stop","conversation_id":"c1","cursor_version":"2"}"#),
            Err(EventError::Cursor)
        );
    }

    #[test]
    fn cursor_stop_is_read() {
        let e = parse(
            Host::Cursor,
            br#"{"hook_event_name":"stop","conversation_id":"c1","status":"completed","loop_count":3}"#,
        )
        .unwrap();
        assert_eq!(
            e,
            Event {
                kind: EventKind::CursorStop {
                    completed: true,
                    loop_count: 3
                },
                session: "c1".into()
            }
        );
        let aborted = parse(
            Host::Cursor,
            br#"{"hook_event_name":"stop","conversation_id":"c1","status":"aborted"}"#,
        )
        .unwrap();
        assert_eq!(
            aborted.kind,
            EventKind::CursorStop {
                completed: false,
                loop_count: 0
            }
        );
        assert!(matches!(
            parse(
                Host::Cursor,
                br#"{"hook_event_name":"beforeSubmitPrompt","conversation_id":"c"}"#
            ),
            Err(EventError::Unknown { .. })
        ));
        assert_eq!(
            parse(Host::Cursor, br#"{"hook_event_name":"stop"}"#),
            Err(EventError::NoSession("conversation_id"))
        );
    }
}
