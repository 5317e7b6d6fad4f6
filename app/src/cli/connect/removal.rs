//! `crewbus connect claude-code --remove`: each file back to its text before the first
//! `connect` when it still holds what `connect` wrote (byte for byte, or deleted when `connect`
//! created it), else only crewbus's entries taken out of it — with the empty arrays and objects
//! `connect` had added to hold them, which the file did not have before — and the token files
//! `connect` made deleted.

use std::io::Write as _;
use std::path::Path;
use std::process::ExitCode;

use anyhow::{Context as _, anyhow};
use serde_json::json;

use super::instructions;
use super::json_edit::{JsonDoc, is_crewbus_hook_group};
use super::manifest::{self, Manifest, digest};
use super::plan::{ALLOW_RULE, BLOCK_CAP_ENV, Change, EVENTS, read_optional};
use super::report::{Said, report};

/// The containers `connect` may have added to a settings file to hold its entries, innermost
/// first: taken out again when empty and absent from the file before.
const SETTINGS_CONTAINERS: [(&[&str], &str); 9] = [
    (&["hooks"], "Stop"),
    (&["hooks"], "SessionStart"),
    (&["hooks"], "UserPromptSubmit"),
    (&["hooks"], "PostToolUse"),
    (&[], "hooks"),
    (&["permissions"], "allow"),
    (&[], "permissions"),
    (&[], "env"),
    (&[], "mcpServers"),
];

/// Takes out of `doc` the empty containers of [`SETTINGS_CONTAINERS`] that `original` (the
/// file's text before the first `connect`; `None`: `connect` created it) did not hold. Returns
/// their dotted names. Errors: a parent that is not an object.
pub fn prune(doc: &JsonDoc, original: Option<&str>) -> Result<Vec<String>, String> {
    let before = original.and_then(|t| JsonDoc::parse_lenient(Some(t), "the original").ok());
    let mut pruned = Vec::new();
    for (path, key) in SETTINGS_CONTAINERS {
        let had = before.as_ref().is_some_and(|b| b.get(path, key).is_some());
        if !had && doc.remove_if_empty(path, key)? {
            pruned.push([path, &[key]].concat().join("."));
        }
    }
    Ok(pruned)
}

/// A file's text without crewbus's entries.
struct Stripped {
    /// The text; `None`: nothing is left and `connect` created the file (delete it).
    text: Option<String>,
    /// The empty containers taken out with the entries.
    pruned: Vec<String>,
}

/// `text` of `path` without crewbus's entries; `original` is its text before the first
/// `connect`. An MCP server "crewbus" the original held (replaced with `--force`) is put back.
fn strip(
    path: &Path,
    text: &str,
    manifest: &Manifest,
    original: Option<&str>,
) -> Result<Stripped, String> {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    let shown = path.display().to_string();
    let doc = match name {
        ".mcp.json" => {
            let doc = JsonDoc::parse_lenient(Some(text), &shown)?;
            let theirs = original
                .and_then(|o| JsonDoc::parse_lenient(Some(o), &shown).ok())
                .and_then(|o| o.get_input(&["mcpServers"], "crewbus"));
            doc.set(&["mcpServers"], "crewbus", theirs)?;
            doc
        }
        "settings.json" | "settings.local.json" => {
            let doc = JsonDoc::parse_lenient(Some(text), &shown)?;
            for event in EVENTS {
                doc.set_hook_group(event, None, &is_crewbus_hook_group)?;
            }
            if manifest.allow_added(path) {
                doc.set_in_array(&["permissions"], "allow", ALLOW_RULE, false)?;
            }
            if manifest.block_cap_set {
                doc.set(&["env"], BLOCK_CAP_ENV, None)?;
            }
            doc
        }
        _ => {
            let left = instructions::remove(text);
            let gone = original.is_none() && left.trim().is_empty();
            return Ok(Stripped {
                text: (!gone).then_some(left),
                pruned: Vec::new(),
            });
        }
    };
    let pruned = prune(&doc, original)?;
    let gone = original.is_none() && doc.is_empty_object();
    Ok(Stripped {
        text: (!gone).then(|| doc.text()),
        pruned,
    })
}

/// The changes `--remove` makes (see the module docs). Errors: a file that cannot be read, or
/// no longer JSON.
pub fn removal(manifest: &Manifest) -> Result<Vec<Change>, String> {
    let mut changes = Vec::new();
    for (path, record) in &manifest.files {
        let Some(current) = read_optional(path)? else {
            continue;
        };
        let (after, state, what) = if digest(&current) == record.written {
            match &record.original {
                Some(o) => (
                    Some(o.clone()),
                    "restored",
                    "byte for byte as it was before `crewbus connect`".to_owned(),
                ),
                None => (None, "deleted", "`crewbus connect` created it".to_owned()),
            }
        } else {
            let s = strip(path, &current, manifest, record.original.as_deref())?;
            let mut what = match &s.text {
                None => "`crewbus connect` created it, and nothing else is left in it".to_owned(),
                Some(t) if *t == current => {
                    "edited since `crewbus connect`; nothing of crewbus's is left in it".to_owned()
                }
                Some(_) => {
                    "edited since `crewbus connect`: only crewbus's entries taken out, your edits \
                     stay (not restored byte for byte)"
                        .to_owned()
                }
            };
            if !s.pruned.is_empty() {
                what.push_str(&format!(
                    "; also taken out, empty: {} (added by connect)",
                    s.pruned.join(", ")
                ));
            }
            let state = if s.text.is_none() {
                "deleted"
            } else {
                "updated"
            };
            (s.text, state, what)
        };
        changes.push(Change {
            path: path.clone(),
            before: Some(current),
            after,
            what,
            allow_added: false,
            state: Some(state),
        });
    }
    Ok(changes)
}

/// Runs `--remove` for `project` (its connect directory `cdir`, the manifest found there):
/// prints what it did (or, `dry_run`, would do). Errors: a file that cannot be read or written.
pub fn run(
    project: &Path,
    cdir: &Path,
    manifest: Option<Manifest>,
    dry_run: bool,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let Some(manifest) = manifest else {
        let mut out = std::io::stdout().lock();
        if json {
            let _ = writeln!(
                out,
                "{}",
                json!({"project": project, "removed": false, "files": []})
            );
        } else {
            let _ = writeln!(
                out,
                "crewbus connect: nothing to remove: no earlier `crewbus connect` for {}",
                project.display()
            );
        }
        return Ok(ExitCode::SUCCESS);
    };
    let changes = removal(&manifest).map_err(|e| anyhow!(e))?;
    let mut notes = Vec::new();
    if let Some(agent) = &manifest.agent {
        notes.push(match &manifest.team {
            Some(team) => format!(
                "the agent {agent} still exists (`crewbus agent revoke --team {team} {agent}` \
                 revokes it)"
            ),
            None => format!(
                "the agent {agent} still exists (`crewbus agent revoke --team TEAM {agent}`, TEAM \
                 its team, revokes it)"
            ),
        });
    }
    let tokens = manifest.created_token_files();
    let exact = changes.iter().all(|c| c.state != Some("updated"));
    let done = if exact {
        "removed: each file is back as it was before `crewbus connect`"
    } else {
        "removed crewbus's entries; a file edited since keeps your edits (see above)"
    };
    if dry_run {
        for t in tokens.iter().filter(|t| t.exists()) {
            notes.push(format!("would delete the token file {}", t.display()));
        }
        let said = Said {
            notes: &notes,
            done,
            next: &[],
            removing: true,
        };
        return Ok(report(project, &changes, &said, json, true));
    }
    for change in changes.iter().filter(|c| c.changes()) {
        match &change.after {
            Some(text) => {
                manifest::write_atomically(&change.path, text, None).map_err(|e| anyhow!(e))?
            }
            None => std::fs::remove_file(&change.path)
                .with_context(|| format!("cannot delete {}", change.path.display()))?,
        }
    }
    for dir in manifest.created_dirs.iter().rev() {
        // Only when empty: whatever else is in it stays.
        let _ = std::fs::remove_dir(dir);
    }
    for t in &tokens {
        if std::fs::remove_file(t).is_ok() {
            notes.push(format!("deleted the token file {}", t.display()));
        }
    }
    let _ = std::fs::remove_file(cdir.join(manifest::FILE));
    let _ = std::fs::remove_dir(cdir);
    let said = Said {
        notes: &notes,
        done,
        next: &[],
        removing: true,
    };
    Ok(report(project, &changes, &said, json, false))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    fn strip_json(path: &Path, text: &str, m: &Manifest, original: Option<&str>) -> Value {
        let s = strip(path, text, m, original).unwrap();
        serde_json::from_str(&s.text.expect("a text")).unwrap()
    }

    #[test]
    fn a_file_edited_since_loses_crewbuss_entries_and_only_the_containers_connect_added() {
        let path = Path::new("/p/.claude/settings.local.json");
        let users = format!("{{\"permissions\": {{\"allow\": [\"{ALLOW_RULE}\"]}}}}\n");
        // What connect wrote, then the user's edit: a rule of theirs.
        let edited = format!(
            "{{\"permissions\": {{\"allow\": [\"{ALLOW_RULE}\", \"Read\"]}}, \"hooks\": \
             {{\"Stop\": [{{\"hooks\": [{{\"type\": \"command\", \"command\": \"/b/crewbus hook \
             claude-code\"}}]}}]}}}}\n"
        );
        // The rule was the user's: it stays; the hooks connect added go, and so does the
        // `hooks` object it made for them.
        let mut m = Manifest::default();
        m.record(path, Some(&users), "x", false);
        let kept = strip_json(path, &edited, &m, Some(&users));
        assert_eq!(
            kept,
            serde_json::json!({"permissions": {"allow": [ALLOW_RULE, "Read"]}})
        );
        // connect's own rule leaves with it.
        m.record(path, Some(&users), "x", true);
        let gone = strip_json(path, &edited, &m, Some(&users));
        assert_eq!(
            gone,
            serde_json::json!({"permissions": {"allow": ["Read"]}})
        );
        // A container the file held before stays, even empty.
        let had = "{\"hooks\": {\"Stop\": []}}\n";
        let s = strip(path, &edited.replace(", \"Read\"", ""), &m, Some(had)).unwrap();
        assert_eq!(s.pruned, ["permissions.allow", "permissions"]);
        let v: Value = serde_json::from_str(s.text.as_deref().unwrap()).unwrap();
        assert_eq!(v, serde_json::json!({"hooks": {"Stop": []}}));
        // A file connect created that holds nothing else once its entries are out is deleted.
        let s = strip(path, &edited.replace(", \"Read\"", ""), &m, None).unwrap();
        assert_eq!(s.text, None);
    }

    #[test]
    fn a_users_own_server_replaced_with_force_comes_back() {
        let path = Path::new("/p/.mcp.json");
        let original = "{\"mcpServers\": {\"crewbus\": {\"url\": \"http://x/mcp\", \"type\": \
                        \"http\"}}}\n";
        let edited = "{\"mcpServers\": {\"crewbus\": {\"command\": \"/b/crewbus\"}, \"mine\": \
                      {\"command\": \"m\"}}}\n";
        let s = strip(path, edited, &Manifest::default(), Some(original)).unwrap();
        let text = s.text.unwrap();
        let (url, kind) = (
            text.find("\"url\"").unwrap(),
            text.find("\"type\"").unwrap(),
        );
        assert!(url < kind, "the user's entry, keys in their order: {text}");
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["mcpServers"]["mine"]["command"], "m");
        assert_eq!(v["mcpServers"]["crewbus"]["url"], "http://x/mcp");
    }

    #[test]
    fn remove_says_restored_deleted_or_edited_and_never_twice() {
        let d = tempfile::tempdir().unwrap();
        let mut m = Manifest::default();
        let restored = d.path().join("CLAUDE.md");
        std::fs::write(&restored, "mine\n\nconnect's\n").unwrap();
        m.record(&restored, Some("mine\n"), "mine\n\nconnect's\n", false);
        let created = d.path().join(".mcp.json");
        std::fs::write(&created, "{}\n").unwrap();
        m.record(&created, None, "{}\n", false);
        let edited = d.path().join("settings.local.json");
        std::fs::write(&edited, "{\"env\": {\"A\": \"1\"}}\n").unwrap();
        m.record(&edited, None, "{}\n", false);
        let changes = removal(&m).unwrap();
        let by = |p: &Path| changes.iter().find(|c| c.path == p).unwrap();
        assert_eq!(by(&restored).state, Some("restored"));
        assert_eq!(by(&restored).after.as_deref(), Some("mine\n"));
        assert_eq!(by(&created).state, Some("deleted"));
        assert_eq!(by(&created).after, None);
        assert!(
            !by(&created).what.contains("deleted"),
            "no \"deleted — deleted\""
        );
        assert_eq!(by(&edited).state, Some("updated"));
        assert!(by(&edited).what.contains("edited since"));
    }
}
