//! Format-preserving edits of a host's JSON files (`.mcp.json`, `.claude/settings*.json`) on
//! dprint's concrete syntax tree (`jsonc-parser`): every byte outside what is changed — other
//! servers, hooks and keys, their order and whitespace — stays as it was.
//!
//! Only plain JSON is edited: Claude Code (2.1.328) reads these files with a strict JSON parser
//! and skips one holding a comment or a trailing comma entirely ("MCP config is not a valid
//! JSON", "Invalid or malformed JSON" in its debug log), so such a file is refused with a
//! message saying so rather than edited into a configuration the host would not load. Only
//! `--remove`, taking crewbus's entries out of a file edited since, reads it leniently.
//!
//! crewbus's entries are recognised by their content, never by position: the MCP server by its
//! name, a hook group by a command that runs `crewbus … hook claude-code`.

use jsonc_parser::ParseOptions;
use jsonc_parser::cst::{CstInputValue, CstNode, CstObject, CstRootNode};
use serde_json::Value;

/// A JSON document being edited.
pub struct JsonDoc {
    root: CstRootNode,
    created: bool,
}

/// Builds a [`CstInputValue`] object with keys in the given order.
pub fn object(entries: Vec<(&str, CstInputValue)>) -> CstInputValue {
    CstInputValue::Object(
        entries
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v))
            .collect(),
    )
}

/// A string value.
pub fn string(s: impl Into<String>) -> CstInputValue {
    CstInputValue::String(s.into())
}

/// The same value as `serde_json`, for comparisons (key order does not count).
pub fn to_serde(v: &CstInputValue) -> Value {
    match v {
        CstInputValue::Null => Value::Null,
        CstInputValue::Bool(b) => Value::Bool(*b),
        CstInputValue::Number(n) => serde_json::from_str(n).unwrap_or(Value::Null),
        CstInputValue::String(s) => Value::String(s.clone()),
        CstInputValue::Array(a) => Value::Array(a.iter().map(to_serde).collect()),
        CstInputValue::Object(o) => {
            Value::Object(o.iter().map(|(k, v)| (k.clone(), to_serde(v))).collect())
        }
    }
}

/// A node of a parsed document as a [`CstInputValue`], object keys in the document's order
/// (comments and layout are not kept). `None`: a node that is no JSON value.
fn input_of(node: &CstNode) -> Option<CstInputValue> {
    if let Some(o) = node.as_object() {
        let mut entries = Vec::new();
        for prop in o.properties() {
            let name = prop.name()?.decoded_value().ok()?;
            entries.push((name, input_of(&prop.value()?)?));
        }
        return Some(CstInputValue::Object(entries));
    }
    if let Some(a) = node.as_array() {
        let items = a.elements().iter().map(input_of).collect::<Option<_>>()?;
        return Some(CstInputValue::Array(items));
    }
    Some(match node.to_serde_value()? {
        Value::Null => CstInputValue::Null,
        Value::Bool(b) => CstInputValue::Bool(b),
        Value::Number(n) => CstInputValue::Number(n.to_string()),
        Value::String(s) => CstInputValue::String(s),
        _ => return None,
    })
}

impl JsonDoc {
    /// Parses `text` (`None`: a file that does not exist yet, started as `{}`; blank text is
    /// an empty document) as plain JSON, what Claude Code reads. Errors (a message naming
    /// `what`): comments, trailing commas or other JSON5 (Claude Code would skip the file), not
    /// JSON at all, or not an object at its root.
    pub fn parse(text: Option<&str>, what: &str) -> Result<JsonDoc, String> {
        if let Some(t) = text
            && !t.trim().is_empty()
            && let Err(e) = serde_json::from_str::<Value>(t)
        {
            return Err(match CstRootNode::parse(t, &ParseOptions::default()) {
                Ok(_) => format!(
                    "{what} holds comments, trailing commas or other JSON5 ({e}): Claude Code \
                     reads it only as plain JSON and skips the whole file otherwise; remove \
                     them, then run again"
                ),
                Err(_) => format!("{what} is not valid JSON ({e}); fix or move it, then run again"),
            });
        }
        Self::parse_lenient(text, what)
    }

    /// As [`JsonDoc::parse`], but also reading comments, trailing commas and the rest of
    /// JSONC/JSON5, which stay as they are: for taking crewbus's entries out of a file the user
    /// edited since. Errors: not even that, or not an object at its root.
    pub fn parse_lenient(text: Option<&str>, what: &str) -> Result<JsonDoc, String> {
        let created = text.is_none();
        let source = text.unwrap_or("{}\n");
        let root = CstRootNode::parse(source, &ParseOptions::default()).map_err(|e| {
            format!("{what} is not valid JSON ({e}); fix or move it, then run again")
        })?;
        if root.value().is_some() && root.object_value().is_none() {
            return Err(format!("{what} does not hold a JSON object"));
        }
        Ok(JsonDoc { root, created })
    }

    /// The document's text; a created one ends with a newline.
    pub fn text(&self) -> String {
        let text = self.root.to_string();
        if self.created && !text.ends_with('\n') {
            format!("{text}\n")
        } else {
            text
        }
    }

    fn object_at(&self, path: &[&str], create: bool) -> Result<Option<CstObject>, String> {
        let mut obj = if create {
            self.root.object_value_or_create()
        } else {
            self.root.object_value()
        };
        for (i, key) in path.iter().enumerate() {
            let Some(o) = obj else { return Ok(None) };
            obj =
                if create {
                    Some(o.object_value_or_create(key).ok_or_else(|| {
                        format!("\"{}\" is not a JSON object", path[..=i].join("."))
                    })?)
                } else {
                    o.object_value(key)
                };
        }
        Ok(obj)
    }

    /// `path.key` set to `value` (its parents created as objects), or removed with `None`.
    /// Returns whether anything changed (an equal value is left alone, byte for byte).
    /// Errors: a parent that is not an object.
    pub fn set(
        &self,
        path: &[&str],
        key: &str,
        value: Option<CstInputValue>,
    ) -> Result<bool, String> {
        match value {
            Some(value) => {
                let obj = self.object_at(path, true)?.expect("created objects exist");
                match obj.get(key) {
                    Some(prop) => {
                        let same = prop
                            .value()
                            .and_then(|v| v.to_serde_value())
                            .is_some_and(|v| v == to_serde(&value));
                        if !same {
                            prop.set_value(value);
                        }
                        Ok(!same)
                    }
                    None => {
                        obj.append(key, value);
                        Ok(true)
                    }
                }
            }
            None => match self.object_at(path, false)?.and_then(|o| o.get(key)) {
                Some(prop) => {
                    prop.remove();
                    Ok(true)
                }
                None => Ok(false),
            },
        }
    }

    /// The value at `path.key`, if any.
    pub fn get(&self, path: &[&str], key: &str) -> Option<Value> {
        self.object_at(path, false)
            .ok()
            .flatten()?
            .get(key)?
            .value()?
            .to_serde_value()
    }

    /// The value at `path.key` as an input value (keys in the document's order), to put back
    /// elsewhere with [`JsonDoc::set`].
    pub fn get_input(&self, path: &[&str], key: &str) -> Option<CstInputValue> {
        let value = self
            .object_at(path, false)
            .ok()
            .flatten()?
            .get(key)?
            .value()?;
        input_of(&value)
    }

    /// Removes `path.key` when it holds an empty array or object. Returns whether it did.
    pub fn remove_if_empty(&self, path: &[&str], key: &str) -> Result<bool, String> {
        let empty = match self.get(path, key) {
            Some(Value::Array(a)) => a.is_empty(),
            Some(Value::Object(o)) => o.is_empty(),
            _ => false,
        };
        if empty {
            self.set(path, key, None)?;
        }
        Ok(empty)
    }

    /// Whether the document is an empty object.
    pub fn is_empty_object(&self) -> bool {
        self.root
            .object_value()
            .is_some_and(|o| o.properties().is_empty())
    }

    /// Whether the array at `path.key` holds the string `item`.
    pub fn contains(&self, path: &[&str], key: &str, item: &str) -> bool {
        self.get(path, key)
            .and_then(|v| v.as_array().cloned())
            .is_some_and(|a| a.iter().any(|x| x.as_str() == Some(item)))
    }

    /// Makes the array at `path.key` hold the string `item` once (`present`: appended when
    /// missing, the array and its parents created as needed) or not at all (every copy
    /// removed; the array stays, even empty). Every other element stays byte for byte. Returns
    /// whether anything changed. Errors: a parent that is not an object, or `key` not an array.
    pub fn set_in_array(
        &self,
        path: &[&str],
        key: &str,
        item: &str,
        present: bool,
    ) -> Result<bool, String> {
        let shown = || [path, &[key]].concat().join(".");
        let Some(obj) = self.object_at(path, present)? else {
            return Ok(false);
        };
        let array = match obj.get(key) {
            Some(prop) => prop
                .array_value()
                .ok_or_else(|| format!("\"{}\" is not a JSON array", shown()))?,
            None if present => obj
                .array_value_or_create(key)
                .ok_or_else(|| format!("\"{}\" is not a JSON array", shown()))?,
            None => return Ok(false),
        };
        let mut found = false;
        let mut changed = false;
        for element in array.elements() {
            if element.to_serde_value().as_ref().and_then(Value::as_str) != Some(item) {
                continue;
            }
            if present && !found {
                found = true;
            } else {
                element.remove();
                changed = true;
            }
        }
        if present && !found {
            array.append(string(item));
            changed = true;
        }
        Ok(changed)
    }

    /// In the array `hooks.<event>` (Claude Code's matcher groups), makes crewbus's group
    /// (the groups `ours` recognises) `wanted`: replaced when different, appended when
    /// missing, every other of crewbus's groups removed; with `None`, crewbus's groups
    /// removed. Other groups are untouched. Returns whether anything changed. Errors:
    /// `hooks` or `hooks.<event>` of another type.
    pub fn set_hook_group(
        &self,
        event: &str,
        wanted: Option<CstInputValue>,
        ours: &dyn Fn(&Value) -> bool,
    ) -> Result<bool, String> {
        let hooks = if wanted.is_some() {
            self.object_at(&["hooks"], true)?
        } else {
            self.object_at(&["hooks"], false)?
        };
        let Some(hooks) = hooks else {
            return Ok(false);
        };
        let array = match (&wanted, hooks.get(event)) {
            (_, Some(prop)) => prop
                .array_value()
                .ok_or_else(|| format!("\"hooks.{event}\" is not a JSON array"))?,
            (Some(_), None) => hooks
                .array_value_or_create(event)
                .ok_or_else(|| format!("\"hooks.{event}\" is not a JSON array"))?,
            (None, None) => return Ok(false),
        };
        let mut changed = false;
        let mut wanted = wanted;
        for (index, element) in array.elements().into_iter().enumerate() {
            let value = element.to_serde_value();
            if !value.as_ref().is_some_and(ours) {
                continue;
            }
            match wanted.take() {
                Some(w) if value.as_ref() == Some(&to_serde(&w)) => {}
                Some(w) => {
                    // Removed and inserted at its place, not `replace_with`: that keeps the old
                    // element's indentation for the new one's first line only, so a re-run
                    // shifted the group's other lines.
                    element.remove();
                    array.insert(index, w);
                    changed = true;
                }
                None => {
                    element.remove();
                    changed = true;
                }
            }
        }
        if let Some(w) = wanted {
            array.append(w);
            changed = true;
        }
        Ok(changed)
    }
}

/// Whether a Claude Code hook group runs `crewbus hook claude-code` (one of its commands does).
pub fn is_crewbus_hook_group(group: &Value) -> bool {
    group["hooks"].as_array().is_some_and(|hooks| {
        hooks.iter().any(|h| {
            h["command"]
                .as_str()
                .is_some_and(|c| c.contains("crewbus") && c.contains(" hook claude-code"))
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn group(command: &str) -> CstInputValue {
        object(vec![(
            "hooks",
            CstInputValue::Array(vec![object(vec![
                ("type", string("command")),
                ("command", string(command)),
                ("timeout", CstInputValue::Number("60".into())),
            ])]),
        )])
    }

    /// Hand-formatted: tabs, a space before colons, keys out of the usual order, a one-line
    /// object, CRLF-free but with a blank line, no final newline.
    const MCP: &str = "{\n\t\"zeta\" : 1,\n\t\"mcpServers\" : {\n\t\t\"other\":{\"command\":\"x\",   \"args\":[ ]},\n\n\t\t\"last\" : { \"url\" : \"http://e\" }\n\t},\n\t\"alpha\":[1,2 ,3]\n}";

    #[test]
    fn adding_a_server_leaves_every_other_byte_alone_and_is_idempotent() {
        let doc = JsonDoc::parse(Some(MCP), ".mcp.json").unwrap();
        let server = object(vec![
            ("type", string("http")),
            ("url", string("http://127.0.0.1:7700/mcp")),
        ]);
        assert!(
            doc.set(&["mcpServers"], "crewbus", Some(server.clone()))
                .unwrap()
        );
        let once = doc.text();
        // Everything before the insertion point is unchanged, and so is every other entry.
        for kept in [
            "\t\"zeta\" : 1,",
            "\t\t\"other\":{\"command\":\"x\",   \"args\":[ ]},\n\n",
            "\t\t\"last\" : { \"url\" : \"http://e\" }",
            "\t\"alpha\":[1,2 ,3]\n}",
        ] {
            assert!(once.contains(kept), "{kept:?} lost in {once}");
        }
        let v: Value = serde_json::from_str(&once).unwrap();
        assert_eq!(
            v["mcpServers"]["crewbus"]["url"],
            "http://127.0.0.1:7700/mcp"
        );
        assert_eq!(v["mcpServers"]["other"]["command"], "x");
        // A second run changes nothing.
        let again = JsonDoc::parse(Some(&once), ".mcp.json").unwrap();
        assert!(!again.set(&["mcpServers"], "crewbus", Some(server)).unwrap());
        assert_eq!(again.text(), once);
        // Removing it gives back the original's entries and layout around them.
        let removed = JsonDoc::parse(Some(&once), ".mcp.json").unwrap();
        assert!(removed.set(&["mcpServers"], "crewbus", None).unwrap());
        let back: Value = serde_json::from_str(&removed.text()).unwrap();
        assert_eq!(back, serde_json::from_str::<Value>(MCP).unwrap());
    }

    #[test]
    fn a_changed_server_is_replaced_in_place() {
        let doc = JsonDoc::parse(Some(MCP), ".mcp.json").unwrap();
        doc.set(
            &["mcpServers"],
            "last",
            Some(object(vec![("url", string("http://f"))])),
        )
        .unwrap();
        let text = doc.text();
        assert!(
            text.contains("\t\t\"other\":{\"command\":\"x\",   \"args\":[ ]},"),
            "{text}"
        );
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["mcpServers"]["last"]["url"], "http://f");
        let keys: Vec<_> = v["mcpServers"]
            .as_object()
            .unwrap()
            .keys()
            .cloned()
            .collect();
        assert_eq!(keys.len(), 2);
    }

    #[test]
    fn a_new_file_is_pretty_json_ending_with_a_newline() {
        let doc = JsonDoc::parse(None, ".mcp.json").unwrap();
        doc.set(
            &["mcpServers"],
            "crewbus",
            Some(object(vec![("type", string("http"))])),
        )
        .unwrap();
        let text = doc.text();
        assert!(text.ends_with("}\n"), "{text:?}");
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"mcpServers": {"crewbus": {"type": "http"}}})
        );
    }

    #[test]
    fn comments_and_trailing_commas_are_refused_as_claude_code_would_skip_the_file() {
        for text in [
            "{\n  // mine\n  \"a\": 1\n}",
            "{\"a\": [1, 2,],}",
            "{/* x */ \"a\": 1}",
            "{'a': 1}",
        ] {
            let e = JsonDoc::parse(Some(text), "settings.json").err();
            assert!(
                e.as_deref().is_some_and(|e| e.contains("comments")
                    && e.contains("Claude Code")
                    && e.starts_with("settings.json")),
                "{text}: {e:?}"
            );
            // --remove still reads it, and what it does not change stays.
            let doc = JsonDoc::parse_lenient(Some(text), "settings.json").unwrap();
            assert!(!doc.set(&["x"], "y", None).unwrap());
            assert_eq!(doc.text(), text);
        }
        assert!(
            JsonDoc::parse(Some("  \n"), "f").is_ok(),
            "blank is an empty document"
        );
        let e = JsonDoc::parse(Some("{\"a\": "), "f").err().unwrap();
        assert!(e.contains("not valid JSON"), "{e}");
    }

    #[test]
    fn a_value_is_read_back_in_its_documents_key_order() {
        let doc = JsonDoc::parse(
            Some(r#"{"s": {"z": 1, "a": [true, null, "x"], "m": {}}}"#),
            "f",
        )
        .unwrap();
        let v = doc.get_input(&[], "s").unwrap();
        let other = JsonDoc::parse(None, "g").unwrap();
        other.set(&[], "s", Some(v)).unwrap();
        let text = other.text();
        let (z, a, m) = (
            text.find("\"z\"").unwrap(),
            text.find("\"a\"").unwrap(),
            text.find("\"m\"").unwrap(),
        );
        assert!(z < a && a < m, "{text}");
        let back: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            back["s"],
            serde_json::json!({"z": 1, "a": [true, null, "x"], "m": {}})
        );
        assert!(doc.remove_if_empty(&["s"], "m").unwrap());
        assert!(!doc.remove_if_empty(&["s"], "a").unwrap());
        assert!(!doc.is_empty_object());
        assert!(JsonDoc::parse(Some("{}"), "f").unwrap().is_empty_object());
    }

    #[test]
    fn what_is_not_json_or_not_an_object_is_refused() {
        assert!(JsonDoc::parse(Some("{\"a\": "), "f").is_err());
        assert!(JsonDoc::parse(Some("[1]"), "f").is_err());
        let doc = JsonDoc::parse(Some("{\"mcpServers\": 3}"), "f").unwrap();
        assert!(
            doc.set(&["mcpServers"], "crewbus", Some(string("x")))
                .is_err()
        );
    }

    const SETTINGS: &str = r#"{
    "permissions": {"allow": ["Bash(ls)"]},
    "hooks": {
        "Stop": [
            { "hooks": [ { "type": "command", "command": "./mine.sh" } ] }
        ],
        "PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": "guard"}]}]
    }
}
"#;

    #[test]
    fn hook_groups_are_added_replaced_and_removed_beside_others() {
        let ours = "/bin/crewbus hook claude-code --headless";
        let doc = JsonDoc::parse(Some(SETTINGS), "settings").unwrap();
        assert!(
            doc.set_hook_group("Stop", Some(group(ours)), &is_crewbus_hook_group)
                .unwrap()
        );
        assert!(
            doc.set_hook_group("SessionStart", Some(group(ours)), &is_crewbus_hook_group)
                .unwrap()
        );
        let text = doc.text();
        assert!(
            text.contains(
                "{ \"hooks\": [ { \"type\": \"command\", \"command\": \"./mine.sh\" } ] }"
            ),
            "{text}"
        );
        assert!(text.contains(r#""PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": "guard"}]}]"#));
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["hooks"]["Stop"].as_array().unwrap().len(), 2);
        assert_eq!(v["hooks"]["SessionStart"].as_array().unwrap().len(), 1);
        // Idempotent.
        let again = JsonDoc::parse(Some(&text), "settings").unwrap();
        assert!(
            !again
                .set_hook_group("Stop", Some(group(ours)), &is_crewbus_hook_group)
                .unwrap()
        );
        assert_eq!(again.text(), text);
        // Changed options replace crewbus's group, not the user's.
        let other = "/bin/crewbus hook claude-code --wait 100";
        assert!(
            again
                .set_hook_group("Stop", Some(group(other)), &is_crewbus_hook_group)
                .unwrap()
        );
        let v: Value = serde_json::from_str(&again.text()).unwrap();
        let stop = v["hooks"]["Stop"].as_array().unwrap();
        // Laid out as the same group written afresh.
        let afresh = JsonDoc::parse(Some(SETTINGS), "settings").unwrap();
        for (event, command) in [("Stop", other), ("SessionStart", ours)] {
            afresh
                .set_hook_group(event, Some(group(command)), &is_crewbus_hook_group)
                .unwrap();
        }
        assert_eq!(again.text(), afresh.text());
        assert_eq!(stop.len(), 2);
        assert_eq!(stop[0]["hooks"][0]["command"], "./mine.sh");
        assert_eq!(stop[1]["hooks"][0]["command"], other);
        // Removal leaves the user's groups.
        assert!(
            again
                .set_hook_group("Stop", None, &is_crewbus_hook_group)
                .unwrap()
        );
        let v: Value = serde_json::from_str(&again.text()).unwrap();
        assert_eq!(v["hooks"]["Stop"].as_array().unwrap().len(), 1);
        assert!(
            !again
                .set_hook_group("UserPromptSubmit", None, &is_crewbus_hook_group)
                .unwrap()
        );
    }

    #[test]
    fn a_string_joins_an_array_once_beside_the_others_and_leaves_again() {
        let doc = JsonDoc::parse(Some(SETTINGS), "settings").unwrap();
        assert!(!doc.contains(&["permissions"], "allow", "mcp__crewbus"));
        assert!(
            doc.set_in_array(&["permissions"], "allow", "mcp__crewbus", true)
                .unwrap()
        );
        let text = doc.text();
        assert!(
            text.contains(r#""permissions": {"allow": ["Bash(ls)", "mcp__crewbus"]},"#),
            "{text}"
        );
        assert!(
            text.contains(r#""PreToolUse": [{"matcher": "Bash""#),
            "{text}"
        );
        let again = JsonDoc::parse(Some(&text), "settings").unwrap();
        assert!(again.contains(&["permissions"], "allow", "mcp__crewbus"));
        assert!(
            !again
                .set_in_array(&["permissions"], "allow", "mcp__crewbus", true)
                .unwrap(),
            "a second time changes nothing"
        );
        assert_eq!(again.text(), text);
        assert!(
            again
                .set_in_array(&["permissions"], "allow", "mcp__crewbus", false)
                .unwrap()
        );
        let back: Value = serde_json::from_str(&again.text()).unwrap();
        assert_eq!(back, serde_json::from_str::<Value>(SETTINGS).unwrap());
        assert!(
            !again
                .set_in_array(&["permissions"], "allow", "mcp__crewbus", false)
                .unwrap()
        );
        // Created with its parents in an empty document; refused where it is not an array.
        let new = JsonDoc::parse(None, "settings").unwrap();
        assert!(
            new.set_in_array(&["permissions"], "allow", "x", true)
                .unwrap()
        );
        let v: Value = serde_json::from_str(&new.text()).unwrap();
        assert_eq!(v, serde_json::json!({"permissions": {"allow": ["x"]}}));
        let bad = JsonDoc::parse(Some(r#"{"permissions": {"allow": "all"}}"#), "s").unwrap();
        assert!(
            bad.set_in_array(&["permissions"], "allow", "x", true)
                .is_err()
        );
        let bad = JsonDoc::parse(Some(r#"{"permissions": []}"#), "s").unwrap();
        assert!(
            bad.set_in_array(&["permissions"], "allow", "x", true)
                .is_err()
        );
        // Duplicates collapse to one.
        let dup = JsonDoc::parse(Some(r#"{"a": ["x", "y", "x"]}"#), "s").unwrap();
        assert!(dup.set_in_array(&[], "a", "x", true).unwrap());
        let v: Value = serde_json::from_str(&dup.text()).unwrap();
        assert_eq!(v["a"], serde_json::json!(["x", "y"]));
    }

    #[test]
    fn only_crewbus_hook_commands_are_ours() {
        assert!(is_crewbus_hook_group(&to_serde(&group(
            "'/a b/crewbus' hook claude-code"
        ))));
        assert!(!is_crewbus_hook_group(&to_serde(&group("crewbus mcp"))));
        assert!(!is_crewbus_hook_group(&to_serde(&group(
            "other hook claude-code"
        ))));
        assert!(!is_crewbus_hook_group(&serde_json::json!({"hooks": 1})));
    }
}
