//! What `crewbus connect` wrote for a project, so `--remove` can restore each file exactly.
//!
//! Kept in the project's connect directory, `$XDG_CONFIG_HOME/crewbus/connect/<name>-<hash>`
//! (else `~/.config/…`; `<hash>`: 12 hex digits of the SHA-256 of the project's absolute path),
//! 0700, beside the agent's token file (0600): `manifest.json` (0600) records, per file, its
//! bytes before the first `connect` (or that `connect` created it), the SHA-256 of what
//! `connect` last wrote and, for a settings file, whether `connect` added the permission rule. A
//! file still holding what was written is restored byte for byte; one edited since loses only
//! crewbus's entries (the permission rule only when `connect` added it).

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

/// The manifest's file name in the connect directory.
pub const FILE: &str = "manifest.json";

/// One file `connect` changed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileRecord {
    /// Its text before the first `connect`; `None`: `connect` created it.
    pub original: Option<String>,
    /// SHA-256 (hex) of the text `connect` last wrote.
    pub written: String,
    /// Whether `connect` added its permission rule (`mcp__crewbus` in `permissions.allow`) to
    /// this settings file; one the file held before is the user's, and stays.
    #[serde(default)]
    pub allow_added: bool,
}

/// The manifest.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// The project directory.
    pub project: PathBuf,
    /// The agent's name, when known.
    pub agent: Option<String>,
    /// The agent's team (name or id), when known.
    #[serde(default)]
    pub team: Option<String>,
    /// The token file the configuration points at.
    pub token_file: Option<PathBuf>,
    /// Whether `connect` made that token file (then `--remove` deletes it).
    pub token_created: bool,
    /// Every token file `connect` made for the project, of the agent now and of those before
    /// (`--remove` deletes them all).
    #[serde(default)]
    pub created_tokens: Vec<PathBuf>,
    /// Directories `connect` created (removed again when empty).
    #[serde(default)]
    pub created_dirs: Vec<PathBuf>,
    /// Whether `connect` set `CLAUDE_CODE_STOP_HOOK_BLOCK_CAP` in a settings file.
    #[serde(default)]
    pub block_cap_set: bool,
    /// The files changed, by path.
    pub files: BTreeMap<PathBuf, FileRecord>,
}

/// SHA-256 of `text`, hex.
pub fn digest(text: &str) -> String {
    hex::encode(Sha256::digest(text.as_bytes()))
}

/// The name of `project` as connect's files use it: its last component, with every character
/// but ASCII letters, digits, `-` and `_` replaced by `_`, at most 40 characters.
pub fn project_name(project: &Path) -> String {
    project
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .take(40)
        .collect()
}

/// The connect directory of `project` (an absolute path). Errors: neither
/// `$XDG_CONFIG_HOME` nor `$HOME` is set.
pub fn connect_dir(project: &Path) -> Result<PathBuf, String> {
    let base = match std::env::var_os("XDG_CONFIG_HOME").map(PathBuf::from) {
        Some(x) if x.is_absolute() => x,
        _ => match std::env::var_os("HOME").map(PathBuf::from) {
            Some(h) if h.is_absolute() => h.join(".config"),
            _ => return Err("neither $XDG_CONFIG_HOME nor $HOME is set".to_owned()),
        },
    };
    let name = project_name(project);
    let hash = &digest(&project.to_string_lossy())[..12];
    Ok(base
        .join("crewbus")
        .join("connect")
        .join(format!("{name}-{hash}")))
}

impl Manifest {
    /// Loads `dir/manifest.json`; `None` when there is none. Errors: unreadable or malformed.
    pub fn load(dir: &Path) -> Result<Option<Manifest>, String> {
        let path = dir.join(FILE);
        match std::fs::read(&path) {
            Ok(bytes) => {
                let mut m: Manifest = serde_json::from_slice(&bytes)
                    .map_err(|e| format!("{} is not a connect manifest: {e}", path.display()))?;
                // Written before `created_tokens`: the one token file it knew of.
                if m.token_created
                    && let Some(t) = m.token_file.clone()
                {
                    m.token_made(&t);
                }
                Ok(Some(m))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(format!("cannot read {}: {e}", path.display())),
        }
    }

    /// Writes `dir/manifest.json` (0600, atomically). Errors: the I/O error, as a message.
    pub fn save(&self, dir: &Path) -> Result<(), String> {
        let text = serde_json::to_string_pretty(self).map_err(|e| e.to_string())?;
        write_private(&dir.join(FILE), &format!("{text}\n"))
    }

    /// Records that `path` now holds `written`, `original` being its text before (kept from the
    /// first time only), and whether it holds the permission rule `connect` added.
    pub fn record(
        &mut self,
        path: &Path,
        original: Option<&str>,
        written: &str,
        allow_added: bool,
    ) {
        let entry = self
            .files
            .entry(path.to_owned())
            .or_insert_with(|| FileRecord {
                original: original.map(str::to_owned),
                written: String::new(),
                allow_added: false,
            });
        entry.written = digest(written);
        entry.allow_added = allow_added;
    }

    /// The token files `--remove` deletes: those `connect` made ([`Manifest::created_tokens`]).
    pub fn created_token_files(&self) -> Vec<PathBuf> {
        self.created_tokens.clone()
    }

    /// Records that `connect` made the token file `path`.
    pub fn token_made(&mut self, path: &Path) {
        if !self.created_tokens.iter().any(|t| t == path) {
            self.created_tokens.push(path.to_owned());
        }
    }

    /// Points the configuration at `path`: [`Manifest::token_created`] then tells whether
    /// `connect` made that file (a file the user gave is never deleted).
    pub fn use_token(&mut self, path: &Path) {
        self.token_file = Some(path.to_owned());
        self.token_created = self.created_tokens.iter().any(|t| t == path);
    }

    /// Whether `connect` added its permission rule to `path`.
    pub fn allow_added(&self, path: &Path) -> bool {
        self.files.get(path).is_some_and(|r| r.allow_added)
    }
}

/// Creates `dir` and its parents, the last one 0700. Errors: the I/O error, as a message.
pub fn create_private_dir(dir: &Path) -> Result<(), String> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder
        .create(dir)
        .map_err(|e| format!("cannot create {}: {e}", dir.display()))
}

/// Writes `text` to `path` atomically (a temporary file in the same directory renamed over
/// it), mode 0600. Errors: the I/O error, as a message.
pub fn write_private(path: &Path, text: &str) -> Result<(), String> {
    write_atomically(path, text, Some(0o600))
}

/// Writes `text` to `path` atomically; the file keeps its permissions, or gets `mode` (else
/// 0644) when new. Errors: the I/O error, as a message.
pub fn write_atomically(path: &Path, text: &str, mode: Option<u32>) -> Result<(), String> {
    let fail = |e: &dyn std::fmt::Display| format!("cannot write {}: {e}", path.display());
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let mut tmp = tempfile::Builder::new()
        .prefix(".crewbus-")
        .tempfile_in(dir)
        .map_err(|e| fail(&e))?;
    tmp.write_all(text.as_bytes()).map_err(|e| fail(&e))?;
    tmp.as_file().sync_all().map_err(|e| fail(&e))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        let perms = match (mode, std::fs::metadata(path)) {
            (Some(m), _) => std::fs::Permissions::from_mode(m),
            (None, Ok(meta)) => meta.permissions(),
            (None, Err(_)) => std::fs::Permissions::from_mode(0o644),
        };
        std::fs::set_permissions(tmp.path(), perms).map_err(|e| fail(&e))?;
    }
    let _ = mode;
    tmp.persist(path).map_err(|e| fail(&e.error))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_original_is_kept_and_the_last_write_recorded() {
        let mut m = Manifest::default();
        let p = Path::new("/p/.mcp.json");
        m.record(p, Some("before"), "one", false);
        m.record(p, Some("one"), "two", false);
        assert_eq!(m.files[p].original.as_deref(), Some("before"));
        assert_eq!(m.files[p].written, digest("two"));
        let s = Path::new("/p/.claude/settings.local.json");
        m.record(s, None, "{}", true);
        assert!(m.allow_added(s) && !m.allow_added(p));
        m.record(s, Some("{}"), "{ }", false);
        assert!(!m.allow_added(s), "the last write decides");
        let c = Path::new("/p/CLAUDE.md");
        m.record(c, None, "x", false);
        assert_eq!(m.files[c].original, None);
        let dir = tempfile::tempdir().unwrap();
        m.save(dir.path()).unwrap();
        assert_eq!(Manifest::load(dir.path()).unwrap(), Some(m));
        assert_eq!(Manifest::load(&dir.path().join("none")).unwrap(), None);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = std::fs::metadata(dir.path().join(FILE))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600);
        }
    }

    #[test]
    fn an_atomic_write_keeps_the_files_mode() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("s.json");
        std::fs::write(&f, "a").unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o640)).unwrap();
            write_atomically(&f, "b", None).unwrap();
            assert_eq!(std::fs::read_to_string(&f).unwrap(), "b");
            let mode = std::fs::metadata(&f).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o640);
        }
    }

    #[test]
    fn connect_dirs_are_per_project_and_named_safely() {
        let a = connect_dir(Path::new("/work/my proj")).unwrap();
        let b = connect_dir(Path::new("/other/my proj")).unwrap();
        assert_ne!(a, b);
        let name = a.file_name().unwrap().to_str().unwrap();
        assert!(name.starts_with("my_proj-"), "{name}");
    }
}
