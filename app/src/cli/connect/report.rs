//! What `crewbus connect claude-code` prints: its notes, then one line per file (with
//! `--dry-run` the change as a unified diff), then one closing line; `--json`: one JSON
//! document `{project, dry_run, notes, files: [{path, change, what, diff?}]}`.

use std::io::Write as _;
use std::path::Path;
use std::process::ExitCode;

use serde_json::json;

use super::plan::{self, Change};

/// What happens to the file, in one word: `unchanged`, `created`, `deleted`, `updated`, or the
/// change's own word (`restored`).
fn state(c: &Change) -> &'static str {
    match (&c.before, &c.after, c.changes()) {
        (_, _, false) => "unchanged",
        _ if c.state.is_some() => c.state.unwrap_or_default(),
        (None, Some(_), true) => "created",
        (Some(_), None, true) => "deleted",
        _ => "updated",
    }
}

/// What to say besides the files' changes.
#[derive(Debug, Default)]
pub struct Said<'a> {
    /// Lines before the files'.
    pub notes: &'a [String],
    /// The closing line when something changed (for `--remove`, always).
    pub done: &'a str,
    /// Lines after it, whatever changed (what to do next: `--channel`'s launch command).
    pub next: &'a [String],
    /// `--remove`'s report.
    pub removing: bool,
}

/// Prints what was (or, `dry_run`, would be) done.
pub fn report(
    project: &Path,
    changes: &[Change],
    said: &Said<'_>,
    json: bool,
    dry_run: bool,
) -> ExitCode {
    let notes = said.notes;
    let mut out = std::io::stdout().lock();
    if json {
        let files: Vec<_> = changes
            .iter()
            .map(|c| {
                let mut v = json!({"path": c.path, "change": state(c), "what": c.what});
                if dry_run && c.changes() {
                    v["diff"] = plan::diff(project, c).into();
                }
                v
            })
            .collect();
        let doc = json!({"project": project, "dry_run": dry_run, "notes": notes, "files": files,
                         "next": said.next});
        let _ = writeln!(out, "{doc}");
        return ExitCode::SUCCESS;
    }
    for note in notes {
        let _ = writeln!(out, "crewbus connect: {note}");
    }
    for c in changes {
        let name = plan::rel(project, &c.path);
        let s = state(c);
        let s = if dry_run && c.changes() {
            format!("would be {s}")
        } else {
            s.to_owned()
        };
        let _ = writeln!(out, "crewbus connect: {name}: {s} — {}", c.what);
        if dry_run && c.changes() {
            let _ = write!(out, "{}", plan::diff(project, c));
        }
    }
    if dry_run {
        let _ = writeln!(out, "crewbus connect: dry run: nothing was written");
    } else if changes.iter().all(|c| !c.changes()) && !said.removing {
        let _ = writeln!(
            out,
            "crewbus connect: nothing to change: {} is set up",
            project.display()
        );
    } else {
        let _ = writeln!(out, "crewbus connect: {}", said.done);
    }
    for line in said.next {
        let _ = writeln!(out, "crewbus connect: {line}");
    }
    ExitCode::SUCCESS
}
