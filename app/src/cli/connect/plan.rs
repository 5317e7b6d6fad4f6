//! What `crewbus connect claude-code` writes, computed before anything is written: each file's
//! text before and after, so `--dry-run` prints the change as a unified diff and a second run
//! finds nothing to change.

use std::path::{Path, PathBuf};

use jsonc_parser::cst::CstInputValue;
use serde_json::Value;

use super::host_path::{HostPath, shell_quote};
use super::instructions;
use super::json_edit::{JsonDoc, is_crewbus_hook_group, object, string, to_serde};
use super::manifest::Manifest;

/// Claude Code's cap on consecutive Stop-hook blocks, raised with `--max-wakes`.
pub const BLOCK_CAP_ENV: &str = "CLAUDE_CODE_STOP_HOOK_BLOCK_CAP";

/// The events whose hook runs `crewbus hook claude-code`.
pub const EVENTS: [&str; 4] = ["Stop", "SessionStart", "UserPromptSubmit", "PostToolUse"];

/// The timeout of a check hook (it takes at most 300 ms), in seconds.
const CHECK_TIMEOUT_S: u64 = 10;

/// The longest Stop-hook wait `--wait` takes, in seconds (24 h; the background default is
/// 8 h). The hook's `timeout` is written above it (+10 s blocking, +60 s in the background).
pub const MAX_WAIT_S: u64 = 86_400;

/// The permission rule `connect` adds to `permissions.allow`: every tool of the MCP server named
/// `crewbus` (Claude Code's rule syntax: `mcp__<server>` for all of a server's tools,
/// `mcp__<server>__<tool>` for one). Print mode asks nobody, so without it each crewbus tool
/// call is denied; interactive sessions would ask at every call.
pub const ALLOW_RULE: &str = "mcp__crewbus";

/// The settings the plan is made of.
#[derive(Debug, Clone)]
pub struct Setup {
    /// The project directory (absolute).
    pub project: PathBuf,
    /// The `crewbus` binary.
    pub exe: HostPath,
    /// The server's base URL.
    pub url: String,
    /// The token file.
    pub token_file: HostPath,
    /// The agent's name, for the instructions.
    pub agent: String,
    /// Print mode: a blocking Stop hook.
    pub headless: bool,
    /// The stdio bridge with channel notifications, and no hooks.
    pub channel: bool,
    /// The server over HTTP (`URL/mcp`) with a `headersHelper`, instead of the stdio bridge.
    pub http: bool,
    /// `.claude/settings.json` instead of `.claude/settings.local.json`.
    pub shared: bool,
    /// Write the CLAUDE.md / AGENTS.md section.
    pub instructions: bool,
    /// `core` or `full`.
    pub tools: &'static str,
    /// The Stop hook's wait, seconds.
    pub wait: u64,
    /// Consecutive wakes before the Stop hook lets the session stop.
    pub max_wakes: u32,
    /// Replace an MCP server named `crewbus` that `connect` did not write.
    pub force: bool,
}

/// One file's change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// The file.
    pub path: PathBuf,
    /// Its text now (`None`: it does not exist).
    pub before: Option<String>,
    /// Its text to be (`None`: delete it).
    pub after: Option<String>,
    /// What is in it for crewbus, for the summary.
    pub what: String,
    /// A settings file: whether it then holds [`ALLOW_RULE`] because `connect` added it (now or
    /// earlier), for the manifest.
    pub allow_added: bool,
    /// What the summary calls the change, when not what the texts tell (`created`,
    /// `updated`, `deleted`, `unchanged`): `--remove`'s `restored`.
    pub state: Option<&'static str>,
}

impl Change {
    /// Whether anything changes.
    pub fn changes(&self) -> bool {
        self.before != self.after
    }
}

fn number(n: u64) -> CstInputValue {
    CstInputValue::Number(n.to_string())
}

/// Reads a file that may not exist. Errors: another I/O error, as a message.
pub fn read_optional(path: &Path) -> Result<Option<String>, String> {
    match std::fs::read_to_string(path) {
        Ok(t) => Ok(Some(t)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(format!("cannot read {}: {e}", path.display())),
    }
}

impl Setup {
    /// `.mcp.json`.
    pub fn mcp_path(&self) -> PathBuf {
        self.project.join(".mcp.json")
    }

    /// The settings file written to.
    pub fn settings_path(&self) -> PathBuf {
        settings_path(&self.project, self.shared)
    }

    /// The MCP server entry: the stdio bridge (`crewbus mcp --url … --token-file … [--channel]
    /// --tools …`, which Claude Code starts itself), or with `http` the HTTP endpoint and a
    /// `headersHelper` printing the token's header.
    pub fn server(&self) -> CstInputValue {
        let exe = self.exe.for_mcp();
        let token = self.token_file.for_mcp();
        if !self.http {
            let mut args = vec!["mcp", "--url", &self.url, "--token-file", &token];
            if self.channel {
                args.push("--channel");
            }
            args.extend(["--tools", self.tools]);
            object(vec![
                ("type", string("stdio")),
                ("command", string(exe)),
                (
                    "args",
                    CstInputValue::Array(args.iter().map(|a| string(*a)).collect()),
                ),
            ])
        } else {
            let query = if self.tools == "core" {
                "?tools=core"
            } else {
                ""
            };
            object(vec![
                ("type", string("http")),
                ("url", string(format!("{}/mcp{query}", self.url))),
                (
                    "headersHelper",
                    string(format!(
                        "{} connect headers --token-file {}",
                        self.exe.for_shell(),
                        self.token_file.for_shell()
                    )),
                ),
            ])
        }
    }

    /// The hook command of the check events.
    pub fn check_command(&self) -> String {
        format!(
            "{} hook claude-code --url {} --token-file {}",
            self.exe.for_shell(),
            shell_quote(&self.url),
            self.token_file.for_shell()
        )
    }

    /// The Stop hook's command.
    pub fn stop_command(&self) -> String {
        let mut c = format!(
            "{} --wait {} --max-wakes {}",
            self.check_command(),
            self.wait,
            self.max_wakes
        );
        if self.headless {
            c.push_str(" --headless");
        }
        c
    }

    /// Crewbus's matcher group for `event`; `None` with `--channel` (the channel brings the
    /// news, the hooks would bring it twice).
    pub fn hook_group(&self, event: &str) -> Option<CstInputValue> {
        if self.channel {
            return None;
        }
        let hook = if event == "Stop" {
            let mut h = vec![
                ("type", string("command")),
                ("command", string(self.stop_command())),
            ];
            if self.headless {
                h.push(("timeout", number(self.wait.saturating_add(10))));
            } else {
                h.push(("asyncRewake", CstInputValue::Bool(true)));
                h.push(("timeout", number(self.wait.saturating_add(60))));
            }
            object(h)
        } else {
            object(vec![
                ("type", string("command")),
                ("command", string(self.check_command())),
                ("timeout", number(CHECK_TIMEOUT_S)),
            ])
        };
        Some(object(vec![("hooks", CstInputValue::Array(vec![hook]))]))
    }

    /// The value of [`BLOCK_CAP_ENV`] to set: one above `--max-wakes` when that is above
    /// Claude Code's default cap.
    pub fn block_cap(&self) -> Option<String> {
        let cap = self.max_wakes.saturating_add(1);
        (!self.channel && cap > crate::cli::hook::HOST_BLOCK_CAP).then(|| cap.to_string())
    }

    /// The instructions file: CLAUDE.md, or AGENTS.md when only that one exists.
    pub fn instructions_path(&self) -> PathBuf {
        let claude = self.project.join("CLAUDE.md");
        let agents = self.project.join("AGENTS.md");
        if !claude.exists() && agents.exists() {
            agents
        } else {
            claude
        }
    }
}

/// A user's MCP server entry in a few words: its command or its URL without the query, never
/// its arguments, environment or headers (they may hold a token).
fn describe_server(server: &Value) -> String {
    if let Some(c) = server["command"].as_str() {
        format!("command {c:?}")
    } else if let Some(u) = server["url"].as_str() {
        let u = u.split(['?', '#']).next().unwrap_or(u);
        // No user information (`user:secret@`) either.
        let u = match u.split_once("://") {
            Some((scheme, rest)) => {
                let end = rest.find('/').unwrap_or(rest.len());
                let (authority, path) = rest.split_at(end);
                let host = authority.rsplit('@').next().unwrap_or(authority);
                format!("{scheme}://{host}{path}")
            }
            None => u.to_owned(),
        };
        format!("URL {u:?}")
    } else {
        "no command or URL".to_owned()
    }
}

/// `.claude/settings.json` (`shared`) or `.claude/settings.local.json`.
pub fn settings_path(project: &Path, shared: bool) -> PathBuf {
    let name = if shared {
        "settings.json"
    } else {
        "settings.local.json"
    };
    project.join(".claude").join(name)
}

/// `path` relative to `project` when inside it, for messages.
pub fn rel(project: &Path, path: &Path) -> String {
    path.strip_prefix(project)
        .unwrap_or(path)
        .display()
        .to_string()
}

/// Every file's change for `setup`; `manifest` tells which settings file an earlier run used.
/// Errors: a file that cannot be read or is not the JSON it should be.
pub fn plan(setup: &Setup, manifest: &Manifest) -> Result<Vec<Change>, String> {
    let mut changes = Vec::new();
    // .mcp.json
    let path = setup.mcp_path();
    let before = read_optional(&path)?;
    let shown = rel(&setup.project, &path);
    let doc = JsonDoc::parse(before.as_deref(), &shown)?;
    let server = setup.server();
    if let Some(theirs) = doc.get(&["mcpServers"], "crewbus")
        && theirs != to_serde(&server)
        && !manifest.files.contains_key(&path)
        && !setup.force
    {
        return Err(format!(
            "{shown} already holds an MCP server named \"crewbus\" that `crewbus connect` did \
             not write ({}): pass --force to replace it (`crewbus connect claude-code --remove` \
             puts it back), or rename or remove it yourself",
            describe_server(&theirs)
        ));
    }
    doc.set(&["mcpServers"], "crewbus", Some(server))?;
    let what = if setup.http {
        format!(
            "MCP server \"crewbus\": HTTP {}/mcp ({} tools), the token through headersHelper",
            setup.url, setup.tools
        )
    } else {
        format!(
            "MCP server \"crewbus\": the stdio bridge `crewbus mcp{}` to {} ({} tools), the token read from its file",
            if setup.channel { " --channel" } else { "" },
            setup.url,
            setup.tools
        )
    };
    changes.push(Change {
        after: Some(doc.text()),
        path,
        before,
        what,
        allow_added: false,
        state: None,
    });
    // The settings file, and the other one when an earlier run wrote it.
    let target = setup.settings_path();
    let other = settings_path(&setup.project, !setup.shared);
    for (path, ours) in [(target.clone(), true), (other.clone(), false)] {
        let before = read_optional(&path)?;
        if !ours && (before.is_none() || !manifest.files.contains_key(&path)) {
            continue;
        }
        let doc = JsonDoc::parse(before.as_deref(), &rel(&setup.project, &path))?;
        // The rule: added when missing (then it is connect's); one the file held before
        // connect first wrote it is the user's. Taken out of the file left behind only when
        // connect added it there.
        let had_rule = doc.contains(&["permissions"], "allow", ALLOW_RULE);
        let allow_added = if ours {
            doc.set_in_array(&["permissions"], "allow", ALLOW_RULE, true)?;
            !had_rule || manifest.allow_added(&path)
        } else {
            if manifest.allow_added(&path) {
                doc.set_in_array(&["permissions"], "allow", ALLOW_RULE, false)?;
            }
            false
        };
        for event in EVENTS {
            let wanted = if ours { setup.hook_group(event) } else { None };
            doc.set_hook_group(event, wanted, &is_crewbus_hook_group)?;
        }
        let cap = if ours { setup.block_cap() } else { None };
        match cap {
            Some(v) => {
                doc.set(&["env"], BLOCK_CAP_ENV, Some(string(v)))?;
            }
            None if manifest.block_cap_set => {
                doc.set(&["env"], BLOCK_CAP_ENV, None)?;
            }
            None => {}
        }
        // What connect made to hold entries it no longer writes goes with them.
        let original = match manifest.files.get(&path) {
            Some(record) => record.original.as_deref(),
            None => before.as_deref(),
        };
        super::removal::prune(&doc, original)?;
        let allow = format!("permission: {ALLOW_RULE} (every crewbus tool) allowed");
        let what = if !ours {
            "crewbus's hooks and permission moved to ".to_owned() + &rel(&setup.project, &target)
        } else if setup.channel {
            format!("{allow}; no crewbus hooks (the channel brings the news)")
        } else if setup.headless {
            format!(
                "{allow}; hooks: Stop (blocking, waits up to {} s), SessionStart, UserPromptSubmit, PostToolUse",
                setup.wait
            )
        } else {
            format!(
                "{allow}; hooks: Stop (background wake, asyncRewake, waits up to {}), SessionStart, UserPromptSubmit, PostToolUse",
                human_duration(setup.wait)
            )
        };
        changes.push(Change {
            after: Some(doc.text()),
            path,
            before,
            what,
            allow_added,
            state: None,
        });
    }
    if setup.instructions {
        let path = setup.instructions_path();
        let before = read_optional(&path)?;
        let after = instructions::set(before.as_deref(), &instructions::body(&setup.agent));
        changes.push(Change {
            after: Some(after),
            path,
            before,
            what: "a marked section teaching the loop (fetch, confirm, request ids, leases)"
                .to_owned(),
            allow_added: false,
            state: None,
        });
    }
    Ok(changes)
}

/// The unified diff of `change`, paths shown relative to `project`.
pub fn diff(project: &Path, change: &Change) -> String {
    let name = rel(project, &change.path);
    let old = change.before.as_deref().unwrap_or("");
    let new = change.after.as_deref().unwrap_or("");
    let a = if change.before.is_some() {
        format!("a/{name}")
    } else {
        "/dev/null".to_owned()
    };
    let b = if change.after.is_some() {
        format!("b/{name}")
    } else {
        "/dev/null".to_owned()
    };
    similar::TextDiff::from_lines(old, new)
        .unified_diff()
        .context_radius(3)
        .header(&a, &b)
        .to_string()
}

/// `8 h`, `90 min`, `45 s`.
pub fn human_duration(seconds: u64) -> String {
    if seconds >= 3600 && seconds.is_multiple_of(3600) {
        format!("{} h", seconds / 3600)
    } else if seconds >= 60 && seconds.is_multiple_of(60) {
        format!("{} min", seconds / 60)
    } else {
        format!("{seconds} s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    fn setup(dir: &Path) -> Setup {
        Setup {
            project: dir.to_owned(),
            exe: HostPath::Absolute(PathBuf::from("/opt/crew bus/crewbus")),
            url: "http://127.0.0.1:7700".into(),
            token_file: HostPath::Absolute(PathBuf::from("/home/u/.config/crewbus/alice.token")),
            agent: "alice".into(),
            headless: true,
            channel: false,
            http: false,
            shared: false,
            instructions: false,
            tools: "core",
            wait: 50,
            max_wakes: 7,
            force: false,
        }
    }

    fn json(text: &Option<String>) -> Value {
        serde_json::from_str(text.as_deref().unwrap()).unwrap()
    }

    fn args(server: &Value) -> Vec<&str> {
        server["args"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap())
            .collect()
    }

    #[test]
    fn headless_plan_writes_the_stdio_bridge_the_permission_and_blocking_hooks() {
        let d = tempfile::tempdir().unwrap();
        let s = setup(d.path());
        let changes = plan(&s, &Manifest::default()).unwrap();
        assert_eq!(changes.len(), 2);
        let mcp = json(&changes[0].after);
        let server = &mcp["mcpServers"]["crewbus"];
        assert_eq!(server["type"], "stdio");
        assert_eq!(server["command"], "/opt/crew bus/crewbus");
        assert_eq!(
            args(server),
            [
                "mcp",
                "--url",
                "http://127.0.0.1:7700",
                "--token-file",
                "/home/u/.config/crewbus/alice.token",
                "--tools",
                "core"
            ]
        );
        assert!(server.get("headersHelper").is_none() && server.get("url").is_none());
        let settings = json(&changes[1].after);
        assert_eq!(
            changes[1].path,
            d.path().join(".claude/settings.local.json")
        );
        assert_eq!(
            settings["permissions"]["allow"],
            serde_json::json!([ALLOW_RULE])
        );
        assert!(changes[1].allow_added);
        let stop = &settings["hooks"]["Stop"][0]["hooks"][0];
        assert_eq!(stop["timeout"], 60);
        assert!(stop.get("asyncRewake").is_none());
        let c = stop["command"].as_str().unwrap();
        assert_eq!(
            c,
            "'/opt/crew bus/crewbus' hook claude-code --url http://127.0.0.1:7700 --token-file \
             /home/u/.config/crewbus/alice.token --wait 50 --max-wakes 7 --headless"
        );
        for e in ["SessionStart", "UserPromptSubmit", "PostToolUse"] {
            assert_eq!(settings["hooks"][e][0]["hooks"][0]["timeout"], 10, "{e}");
        }
        assert!(settings.get("env").is_none());
    }

    #[test]
    fn http_plan_writes_the_endpoint_and_a_headers_helper() {
        let d = tempfile::tempdir().unwrap();
        let s = Setup {
            http: true,
            ..setup(d.path())
        };
        let changes = plan(&s, &Manifest::default()).unwrap();
        let server = &json(&changes[0].after)["mcpServers"]["crewbus"];
        assert_eq!(server["type"], "http");
        assert_eq!(server["url"], "http://127.0.0.1:7700/mcp?tools=core");
        assert_eq!(
            server["headersHelper"],
            "'/opt/crew bus/crewbus' connect headers --token-file /home/u/.config/crewbus/alice.token"
        );
        let settings = json(&changes[1].after);
        assert_eq!(
            settings["permissions"]["allow"],
            serde_json::json!([ALLOW_RULE])
        );
    }

    #[test]
    fn interactive_plan_waits_in_the_background_for_hours() {
        let d = tempfile::tempdir().unwrap();
        let s = Setup {
            headless: false,
            wait: 28_800,
            max_wakes: 20,
            shared: true,
            tools: "full",
            ..setup(d.path())
        };
        let changes = plan(&s, &Manifest::default()).unwrap();
        let server = &json(&changes[0].after)["mcpServers"]["crewbus"];
        assert_eq!(args(server)[5..], ["--tools", "full"]);
        assert_eq!(changes[1].path, d.path().join(".claude/settings.json"));
        let settings = json(&changes[1].after);
        let stop = &settings["hooks"]["Stop"][0]["hooks"][0];
        assert_eq!(stop["asyncRewake"], true);
        assert_eq!(stop["timeout"], 28_860);
        assert_eq!(settings["env"][BLOCK_CAP_ENV], "21");
        assert_eq!(
            settings["permissions"]["allow"],
            serde_json::json!([ALLOW_RULE])
        );
    }

    #[test]
    fn channel_plan_uses_the_stdio_bridge_with_channel_and_no_hooks() {
        let d = tempfile::tempdir().unwrap();
        let s = Setup {
            channel: true,
            headless: false,
            ..setup(d.path())
        };
        let changes = plan(&s, &Manifest::default()).unwrap();
        assert_eq!(changes.len(), 2);
        let server = &json(&changes[0].after)["mcpServers"]["crewbus"];
        assert_eq!(server["type"], "stdio");
        assert_eq!(
            args(server),
            [
                "mcp",
                "--url",
                "http://127.0.0.1:7700",
                "--token-file",
                "/home/u/.config/crewbus/alice.token",
                "--channel",
                "--tools",
                "core"
            ]
        );
        assert_eq!(
            json(&changes[1].after),
            serde_json::json!({"permissions": {"allow": [ALLOW_RULE]}}),
            "the permission, and no hooks"
        );
    }

    #[test]
    fn a_rule_the_user_had_stays_theirs_and_connects_own_leaves_with_it() {
        let d = tempfile::tempdir().unwrap();
        let s = setup(d.path());
        let path = s.settings_path();
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        let users = format!("{{\"permissions\": {{\"allow\": [\"{ALLOW_RULE}\"]}}}}\n");
        std::fs::write(&path, &users).unwrap();
        let changes = plan(&s, &Manifest::default()).unwrap();
        assert!(!changes[1].allow_added, "the user's rule is not connect's");
        let v = json(&changes[1].after);
        assert_eq!(v["permissions"]["allow"], serde_json::json!([ALLOW_RULE]));
        // Moving to settings.json takes connect's rule out of the local file only when it
        // added it there, and the hooks object connect made goes with its hooks.
        let shared = Setup {
            shared: true,
            ..setup(d.path())
        };
        std::fs::write(&path, changes[1].after.as_deref().unwrap()).unwrap();
        let mut m = Manifest::default();
        m.record(
            &path,
            Some(&users),
            changes[1].after.as_deref().unwrap(),
            false,
        );
        let moved = plan(&shared, &m).unwrap();
        assert_eq!(moved.len(), 3);
        assert_eq!(
            json(&moved[2].after),
            serde_json::json!({"permissions": {"allow": [ALLOW_RULE]}})
        );
        m.record(
            &path,
            Some(&users),
            changes[1].after.as_deref().unwrap(),
            true,
        );
        let moved = plan(&shared, &m).unwrap();
        assert_eq!(
            json(&moved[2].after)["permissions"]["allow"],
            serde_json::json!([])
        );
        assert!(moved[1].allow_added);
    }

    #[test]
    fn a_huge_wait_saturates_instead_of_wrapping() {
        let d = tempfile::tempdir().unwrap();
        for (headless, wait, timeout) in [
            (true, MAX_WAIT_S, MAX_WAIT_S + 10),
            (false, MAX_WAIT_S, MAX_WAIT_S + 60),
            (true, u64::MAX, u64::MAX),
            (false, u64::MAX - 1, u64::MAX),
        ] {
            let s = Setup {
                headless,
                wait,
                ..setup(d.path())
            };
            let changes = plan(&s, &Manifest::default()).unwrap();
            let stop = &json(&changes[1].after)["hooks"]["Stop"][0]["hooks"][0];
            assert_eq!(stop["timeout"], timeout, "--wait {wait}");
        }
    }

    #[test]
    fn shared_files_name_crewbus_through_path_and_the_token_under_home() {
        let d = tempfile::tempdir().unwrap();
        let s = Setup {
            shared: true,
            exe: HostPath::OnPath("crewbus"),
            token_file: HostPath::Home(".config/crewbus/connect/shared/p.token".into()),
            ..setup(d.path())
        };
        let changes = plan(&s, &Manifest::default()).unwrap();
        let server = &json(&changes[0].after)["mcpServers"]["crewbus"];
        assert_eq!(server["command"], "crewbus");
        assert_eq!(
            args(server)[4],
            "${HOME}/.config/crewbus/connect/shared/p.token"
        );
        assert_eq!(changes[1].path, d.path().join(".claude/settings.json"));
        let stop = &json(&changes[1].after)["hooks"]["Stop"][0]["hooks"][0];
        assert_eq!(
            stop["command"],
            "crewbus hook claude-code --url http://127.0.0.1:7700 --token-file \
             \"${HOME}\"/.config/crewbus/connect/shared/p.token --wait 50 --max-wakes 7 --headless"
        );
        let http = Setup { http: true, ..s };
        let server =
            &json(&plan(&http, &Manifest::default()).unwrap()[0].after)["mcpServers"]["crewbus"];
        assert_eq!(
            server["headersHelper"],
            "crewbus connect headers --token-file \"${HOME}\"/.config/crewbus/connect/shared/p.token"
        );
    }

    #[test]
    fn a_users_own_crewbus_server_is_replaced_only_with_force_or_when_connect_wrote_it() {
        let d = tempfile::tempdir().unwrap();
        let s = setup(d.path());
        let users = "{\"mcpServers\": {\"crewbus\": {\"type\": \"http\", \"url\": \
                     \"http://u:pw@h/mcp?k=v\", \"headers\": {\"Authorization\": \"Bearer cbt_x\"}}}}\n";
        std::fs::write(s.mcp_path(), users).unwrap();
        let e = plan(&s, &Manifest::default()).unwrap_err();
        assert!(e.contains("--force") && e.contains("http://h/mcp"), "{e}");
        assert!(
            !e.contains("cbt_x") && !e.contains("k=v"),
            "no headers or query: {e}"
        );
        let forced = Setup {
            force: true,
            ..setup(d.path())
        };
        let changes = plan(&forced, &Manifest::default()).unwrap();
        assert_eq!(
            json(&changes[0].after)["mcpServers"]["crewbus"]["type"],
            "stdio"
        );
        // Once connect wrote the file, its entry is connect's to change.
        let mut m = Manifest::default();
        m.record(&s.mcp_path(), Some(users), users, false);
        assert!(plan(&s, &m).is_ok());
        // The entry connect would write anyway is no conflict.
        std::fs::write(s.mcp_path(), changes[0].after.as_deref().unwrap()).unwrap();
        assert!(plan(&s, &Manifest::default()).is_ok());
    }

    #[test]
    fn a_diff_shows_the_change() {
        let d = tempfile::tempdir().unwrap();
        let changes = plan(&setup(d.path()), &Manifest::default()).unwrap();
        let text = diff(d.path(), &changes[0]);
        assert!(
            text.starts_with("--- /dev/null\n+++ b/.mcp.json\n"),
            "{text}"
        );
        assert!(text.contains("+    \"crewbus\""), "{text}");
    }

    #[test]
    fn durations_read_naturally() {
        assert_eq!(human_duration(28_800), "8 h");
        assert_eq!(human_duration(120), "2 min");
        assert_eq!(human_duration(50), "50 s");
    }
}
