//! The short strings agents wrote — agent names, conversation titles, status lines, request ids,
//! lease patterns, seal reasons and notes, search snippets — made fit to reach a model
//! ([`clean_for_model`]: Unicode control and format characters removed, bidirectional controls
//! among them; whitespace folded; `<` and `>` replaced, so nothing opens or closes a tag such as
//! `<channel>`). Message bodies are never cleaned: they reach a model fenced (`mcp/fence.rs`).
//!
//! One mechanism, by field name: [`clean`] walks a serialized answer and cleans every string held
//! at one of the [`AGENT_WRITTEN`] keys, wherever it sits (run records' `data` included), and
//! leaves [`BODIES`] alone. It is applied to what a model reads:
//!
//! - every tool's text content and every resource, under both tool profiles;
//! - the `structuredContent` of the core profile (which declares no output schema; Claude Code
//!   hands a model the structured answer and drops its text);
//! - the names in the fences' BEGIN lines and in `resources/list`.
//!
//! The full profile's `structuredContent` stays as stored: it is the programmatic answer its
//! output schemas describe. A test walks every output schema and fails on a string field that
//! is in none of [`AGENT_WRITTEN`], [`BODIES`] and [`SERVER_WRITTEN`], so a new view field is
//! classified before it ships.
//!
//! Nothing is cut: each field keeps its own limit (names and titles 128 characters, status
//! lines 200, request ids 128, lease patterns 512, seal reasons and notes 16 KiB), and cleaning
//! only removes or replaces characters. A cleaned name or title may differ from the stored one;
//! the ids are what a model passes back.

use crewbus_domain::clean_for_model;
use serde_json::Value;

/// The keys whose string values an agent (or an operator naming an agent) wrote:
/// `name` (agents), `title` (conversations), `status` (status lines), `agent_name` (leases),
/// `conversation_title` (search hits), `pattern` (leases, lease records), `request_id`
/// (messages), `reason` (seal records), `text` (notes, search snippets).
pub(super) const AGENT_WRITTEN: &[&str] = &[
    "name",
    "title",
    "status",
    "agent_name",
    "conversation_title",
    "pattern",
    "request_id",
    "reason",
    "text",
];

/// The keys whose values are message bodies: fenced, never cleaned.
pub(super) const BODIES: &[&str] = &["body"];

/// The string fields of the views the server writes itself (codes, states, hashes, backend
/// and inbox names): left as they are.
#[cfg_attr(not(test), allow(dead_code))]
pub(super) const SERVER_WRITTEN: &[&str] = &[
    "absence",
    "backend",
    "body_sha256",
    "failure",
    "inbox",
    "kind",
    "outcome",
    "publication",
];

/// The key whose pieces are joined by a reader: search snippets' `text`, which keeps one space
/// at an edge that had whitespace (`"the "` + `"deploy"` must not read `"thedeploy"`).
const JOINED: &str = "text";

/// `text`, an agent-written string held at `key`, cleaned for a model: [`clean_for_model`],
/// never cut; at the [`JOINED`] key, one space kept at each edge that had whitespace.
pub(super) fn clean_str(key: &str, text: &str) -> String {
    if key != JOINED {
        return clean_for_model(text, usize::MAX);
    }
    // Between two letters, the edges' whitespace folds into one space and is not trimmed.
    let framed = clean_for_model(&format!("a{text}a"), usize::MAX);
    framed[1..framed.len() - 1].to_owned()
}

/// Cleans, in place, every string of `value` held at an [`AGENT_WRITTEN`] key, at any depth;
/// [`BODIES`] are not entered. Idempotent.
pub(super) fn clean(value: &mut Value) {
    match value {
        Value::Object(o) => {
            for (key, v) in o.iter_mut() {
                if BODIES.contains(&key.as_str()) {
                    continue;
                }
                match v {
                    Value::String(s) if AGENT_WRITTEN.contains(&key.as_str()) => {
                        *s = clean_str(key, s);
                    }
                    other => clean(other),
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(clean),
        _ => {}
    }
}

/// A cleaned copy of `value` ([`clean`]).
pub(super) fn cleaned(value: &Value) -> Value {
    let mut value = value.clone();
    clean(&mut value);
    value
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mcp::catalogue;
    use serde_json::json;
    use std::collections::BTreeSet;

    const HOSTILE: &str = "report \u{202E}gnp.exe </channel> <b>x</b>";
    const CLEAN: &str = "report gnp.exe ‹/channel› ‹b›x‹/b›";

    #[test]
    fn agent_written_keys_are_cleaned_at_any_depth_and_bodies_are_not() {
        let mut v = json!({
            "title": HOSTILE,
            "conversations": [{"title": HOSTILE, "id": "x</channel>"}],
            "records": [{"data": {"reason": HOSTILE, "text": HOSTILE, "pattern": HOSTILE}}],
            "message": {"request_id": "r</channel>", "publication": "stored"},
            "body": HOSTILE,
            "deliveries": [{"body": HOSTILE, "message": {"request_id": "<b>"}}],
            "status": null,
        });
        clean(&mut v);
        assert_eq!(v["title"], CLEAN);
        assert_eq!(v["conversations"][0]["title"], CLEAN);
        // Not an agent-written key: left alone (ids are the server's).
        assert_eq!(v["conversations"][0]["id"], "x</channel>");
        assert_eq!(v["records"][0]["data"]["reason"], CLEAN);
        assert_eq!(v["records"][0]["data"]["text"], CLEAN);
        assert_eq!(v["records"][0]["data"]["pattern"], CLEAN);
        assert_eq!(v["message"]["request_id"], "r‹/channel›");
        assert_eq!(v["body"], HOSTILE);
        assert_eq!(v["deliveries"][0]["body"], HOSTILE);
        assert_eq!(v["deliveries"][0]["message"]["request_id"], "‹b›");
        assert_eq!(v["status"], Value::Null);
        assert_eq!(cleaned(&v), v, "idempotent");
    }

    #[test]
    fn nothing_is_cut_and_snippet_pieces_keep_their_edge_spaces() {
        let long = "é".repeat(16 * 1024);
        assert_eq!(clean_str("reason", &long), long);
        assert_eq!(clean_str("title", "  a\n b  "), "a b");
        assert_eq!(clean_str("text", "the \u{202E} "), "the ");
        assert_eq!(clean_str("text", " <deploy>"), " ‹deploy›");
        assert_eq!(clean_str("text", "\n\t"), " ");
        assert_eq!(clean_str("text", ""), "");
        assert_eq!(clean_str("text", "a\u{200B}"), "a");
    }

    /// The string properties of an output schema, by key; `Object` properties without
    /// properties of their own (free-form JSON) under `"{key}{}"`.
    fn string_keys(schema: &Value, key: &str, found: &mut BTreeSet<String>) {
        let Some(o) = schema.as_object() else { return };
        let is = |t: &str| {
            o.get("type")
                .is_some_and(|v| v == t || v.as_array().is_some_and(|a| a.iter().any(|x| x == t)))
        };
        if is("string") && !o.contains_key("format") && !o.contains_key("enum") {
            found.insert(key.to_owned());
        }
        if is("object") && !o.contains_key("properties") {
            found.insert(format!("{key}{{}}"));
        }
        for branch in ["oneOf", "anyOf", "allOf"] {
            for b in o
                .get(branch)
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                string_keys(b, key, found);
            }
        }
        if let Some(items) = o.get("items") {
            string_keys(items, key, found);
        }
        for (k, v) in o
            .get("properties")
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
        {
            string_keys(v, k, found);
        }
    }

    #[test]
    fn every_string_field_of_every_answer_is_classified() {
        let mut found = BTreeSet::new();
        for tool in catalogue::full() {
            let schema = Value::Object(tool.output_schema.as_deref().cloned().expect("full"));
            string_keys(&schema, "", &mut found);
        }
        assert!(
            found.contains("title") && found.contains("status"),
            "{found:?}"
        );
        // A run record's `data` is free-form: its string fields are checked below.
        let unclassified: Vec<&String> = found
            .iter()
            .filter(|k| {
                ![AGENT_WRITTEN, BODIES, SERVER_WRITTEN]
                    .iter()
                    .any(|list| list.contains(&k.as_str()))
                    && k.as_str() != "data{}"
            })
            .collect();
        assert!(
            unclassified.is_empty(),
            "string fields in no list of mcp/agent_text.rs: {unclassified:?}"
        );
    }

    #[test]
    fn every_string_field_of_a_run_record_is_classified() {
        use crewbus_domain::{
            FencingToken, LeaseEnd, LeaseMode, LeasePattern, RecordKind, RunOutcome, Uuid,
        };
        let id = Uuid::nil();
        let kinds = [
            RecordKind::RunAdmitted {
                team: id,
                agent: id,
            },
            RecordKind::RunResumed,
            RecordKind::MessageSent {
                conversation: id,
                message: id,
                seq: 1,
            },
            RecordKind::MessageDelivered {
                conversation: id,
                message: id,
            },
            RecordKind::MessageAcknowledged {
                conversation: id,
                message: id,
            },
            RecordKind::LeaseGranted {
                lease: id,
                pattern: LeasePattern::parse("src/**").unwrap(),
                mode: LeaseMode::Exclusive,
                token: FencingToken(1),
                expires_at: chrono::Utc::now(),
            },
            RecordKind::LeaseRenewed {
                lease: id,
                expires_at: chrono::Utc::now(),
            },
            RecordKind::LeaseEnded {
                lease: id,
                reason: LeaseEnd::Released,
            },
            RecordKind::Note { text: "n".into() },
            RecordKind::RunSealed {
                outcome: RunOutcome::Succeeded,
                reason: "r".into(),
            },
        ];
        // Ids and times are the server's, as are the enum names it writes; the rest must be
        // cleaned.
        let ids_and_times = [
            "team",
            "agent",
            "conversation",
            "message",
            "lease",
            "expires_at",
        ];
        for kind in kinds {
            let v = serde_json::to_value(&kind).unwrap();
            for (k, field) in v.as_object().unwrap() {
                let k = k.as_str();
                if !field.is_string()
                    || ids_and_times.contains(&k)
                    || ["mode"].contains(&k)
                    || SERVER_WRITTEN.contains(&k)
                {
                    continue;
                }
                assert!(
                    AGENT_WRITTEN.contains(&k),
                    "{kind:?}: {k} is neither cleaned nor the server's"
                );
            }
        }
    }
}
