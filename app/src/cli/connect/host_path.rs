//! How the host's configuration names a file or a program — by absolute path, relative to the
//! home directory, or through `PATH` — in `.mcp.json` (no shell) and in a hook command (a POSIX
//! shell).

use std::path::PathBuf;

/// A file as the host's configuration names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostPath {
    /// By its absolute path on this machine (`.claude/settings.local.json`, and `.mcp.json`
    /// without `--shared`).
    Absolute(PathBuf),
    /// Relative to the home directory of whoever runs the host (`--shared`): `${HOME}/REL` in
    /// `.mcp.json` (Claude Code expands `${VAR}` in a server's `command` and `args`, not
    /// `$VAR`), `"${HOME}"/REL` in a hook command (which Claude Code runs through a shell).
    Home(String),
    /// A program found through `PATH` (`--shared`: `crewbus`).
    OnPath(&'static str),
}

impl HostPath {
    /// As `.mcp.json`'s `command` or `args` name it (not through a shell).
    pub fn for_mcp(&self) -> String {
        match self {
            HostPath::Absolute(p) => p.to_string_lossy().into_owned(),
            HostPath::Home(rel) => format!("${{HOME}}/{rel}"),
            HostPath::OnPath(name) => (*name).to_owned(),
        }
    }

    /// As a word of a POSIX shell command.
    pub fn for_shell(&self) -> String {
        match self {
            HostPath::Absolute(p) => shell_quote(&p.to_string_lossy()),
            HostPath::Home(rel) => format!("\"${{HOME}}\"/{}", shell_quote(rel)),
            HostPath::OnPath(name) => shell_quote(name),
        }
    }
}

/// Quotes `s` for a POSIX shell (as is when it holds only safe characters).
pub fn shell_quote(s: &str) -> String {
    let safe = !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-+:@%,=".contains(c));
    if safe {
        s.to_owned()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shell_quoting_is_posix() {
        assert_eq!(shell_quote("/usr/bin/crewbus"), "/usr/bin/crewbus");
        assert_eq!(shell_quote("/a b/c"), "'/a b/c'");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
        assert_eq!(shell_quote(""), "''");
        assert_eq!(shell_quote("$HOME"), "'$HOME'");
    }

    #[test]
    fn each_form_names_the_file_for_its_reader() {
        let abs = HostPath::Absolute(PathBuf::from("/a b/t"));
        assert_eq!(
            (abs.for_mcp(), abs.for_shell()),
            ("/a b/t".into(), "'/a b/t'".into())
        );
        let home = HostPath::Home(".config/x y.token".into());
        assert_eq!(home.for_mcp(), "${HOME}/.config/x y.token");
        assert_eq!(home.for_shell(), "\"${HOME}\"/'.config/x y.token'");
        let prog = HostPath::OnPath("crewbus");
        assert_eq!(
            (prog.for_mcp(), prog.for_shell()),
            ("crewbus".into(), "crewbus".into())
        );
    }
}
