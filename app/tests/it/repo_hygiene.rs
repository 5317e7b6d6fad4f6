//! The repository keeps what holds secrets out of git.

/// `crewbus.toml` (the name the README and `--help` use for a local configuration) holds database
/// and NATS URLs and passwords: `.gitignore` must ignore it (in any directory).
#[test]
fn the_local_configuration_file_is_git_ignored() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("app/ lives in the workspace");
    let ignore = std::fs::read_to_string(root.join(".gitignore")).expect(".gitignore is readable");
    let ignored: Vec<&str> = ignore
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    assert!(
        ignored
            .iter()
            .any(|l| *l == "crewbus.toml" || *l == "/crewbus.toml"),
        "crewbus.toml is not in .gitignore: {ignored:?}"
    );
    // The example, which holds no secret, stays tracked.
    assert!(
        !ignored
            .iter()
            .any(|l| l.contains("example") || *l == "*.toml"),
        "{ignored:?}"
    );
}
