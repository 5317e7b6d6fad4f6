//! `crewbus serve`'s first five minutes: a dev team with agents whose tokens survive a restart,
//! and the host configuration to paste.
//!
//! The tokens live in `dev-tokens.json` (mode 0600) in the data directory — `--data-dir`, else
//! `storage.data_dir`, else `$XDG_DATA_HOME/crewbus`, else `~/.local/share/crewbus`:
//!
//! ```json
//! {"about": "…", "teams": {"local": {"alice": {"token": "cbt_…"}, "bob": {"token": "cbt_…"}}}}
//! ```
//!
//! An agent that does not exist yet is created with the token the file holds for it (so on the
//! memory ledger, which forgets everything, the same tokens come back at every start), else with
//! a fresh one, which is then written to the file. An agent that exists is reused, never
//! re-created; since the ledger stores only a token's hash, its token is known only when the
//! file holds one that authenticates as that very agent.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use crewbus_domain::{Agent, BusError, BusResult, Operator, Team};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::usecases::admin::NewAgent;
use crate::usecases::bus::Bus;

/// The file's name in the data directory.
pub const TOKENS_FILE: &str = "dev-tokens.json";

/// The dev team's name when `--dev-team` is not given (embedded store only).
pub const DEFAULT_TEAM: &str = "local";

/// The dev agents when no `--dev-agent` is given.
pub const DEFAULT_AGENTS: [&str; 2] = ["alice", "bob"];

#[derive(Default, Serialize, Deserialize)]
struct TokensFile {
    #[serde(default)]
    about: String,
    /// Team name → agent name → entry.
    #[serde(default)]
    teams: BTreeMap<String, BTreeMap<String, TokenEntry>>,
}

#[derive(Serialize, Deserialize)]
struct TokenEntry {
    token: String,
}

const ABOUT: &str = "Bearer tokens of the dev agents `crewbus serve` created; reused at the next \
                     start. Anyone holding one acts as that agent: keep this file private.";

/// The dev tokens file, loaded. `Debug` never shows a token.
pub struct DevTokens {
    path: Option<PathBuf>,
    file: TokensFile,
    changed: bool,
}

impl std::fmt::Debug for DevTokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DevTokens")
            .field("path", &self.path)
            .field("tokens", &"[redacted]")
            .finish()
    }
}

impl DevTokens {
    /// Loads `dir/dev-tokens.json`; a missing file is empty. A file that is not valid is
    /// replaced at the next save (a warning is logged), and one readable by others is made 0600.
    /// With no `dir`, nothing is read or written.
    pub fn open(dir: Option<&Path>) -> DevTokens {
        let path = dir.map(|d| d.join(TOKENS_FILE));
        let file = path.as_deref().map(read).unwrap_or_default();
        DevTokens {
            path,
            file,
            changed: false,
        }
    }

    /// The file's path, when there is a data directory.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// The token the file holds for `agent` of `team`, if any (`crewbus connect` reuses it).
    pub fn get(&self, team: &str, agent: &str) -> Option<&str> {
        Some(&self.file.teams.get(team)?.get(agent)?.token)
    }

    fn set(&mut self, team: &str, agent: &str, token: &str) {
        if self.get(team, agent) == Some(token) {
            return;
        }
        self.file.teams.entry(team.to_owned()).or_default().insert(
            agent.to_owned(),
            TokenEntry {
                token: token.to_owned(),
            },
        );
        self.changed = true;
    }

    /// Writes the file when a token was added or changed: atomically (a temporary file renamed
    /// over it), mode 0600, its directory created 0700 when missing. Errors: the I/O error.
    pub fn save(&mut self) -> std::io::Result<()> {
        let Some(path) = self.path.as_deref().filter(|_| self.changed) else {
            return Ok(());
        };
        if let Some(dir) = path.parent() {
            let mut builder = std::fs::DirBuilder::new();
            builder.recursive(true);
            #[cfg(unix)]
            std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
            builder.create(dir)?;
        }
        self.file.about = ABOUT.to_owned();
        let text = serde_json::to_vec_pretty(&self.file).map_err(std::io::Error::other)?;
        let tmp = path.with_extension("json.tmp");
        let _ = std::fs::remove_file(&tmp);
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        let mut f = options.open(&tmp)?;
        f.write_all(&text)?;
        f.write_all(b"\n")?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)?;
        self.changed = false;
        Ok(())
    }
}

fn read(path: &Path) -> TokensFile {
    let text = match std::fs::read(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return TokensFile::default(),
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "cannot read the dev tokens file; starting without it");
            return TokensFile::default();
        }
    };
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        if let Ok(meta) = std::fs::metadata(path)
            && meta.permissions().mode() & 0o077 != 0
        {
            tracing::warn!(path = %path.display(), "the dev tokens file was readable by others; made it 0600");
            let _ = std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600));
        }
    }
    serde_json::from_slice(&text).unwrap_or_else(|_| {
        tracing::warn!(path = %path.display(), "the dev tokens file is not valid; it is replaced");
        TokensFile::default()
    })
}

/// The operator `crewbus serve --dev-operator-token-file` sets up (every team in scope).
pub const DEV_API_OPERATOR: &str = "dev-api";

/// `crewbus serve --dev-operator-token-file FILE`: the operator [`DEV_API_OPERATOR`] holding
/// the token in `path` — found when the token authenticates, created with it when no operator
/// holds it (a memory store after a restart); when `path` does not exist, created with a fresh
/// token written there (mode 0600, a new file). The token is never printed.
///
/// Errors: the file unreadable or not an operator token, or not writable → `Invalid` naming
/// the file; `dev-api` already holding another token (or revoked) → `Conflict` saying what to
/// do; the store's.
pub async fn ensure_api_operator(bus: &Bus, path: &Path) -> BusResult<Operator> {
    let shown = path.display();
    let token = match std::fs::read_to_string(path) {
        Ok(text) => Some(text.trim().to_owned()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => {
            return Err(BusError::invalid(format!(
                "--dev-operator-token-file {shown}: cannot read it ({e})"
            )));
        }
    };
    let conflict = |e: BusError| match e {
        BusError::Conflict { .. } => BusError::conflict(format!(
            "--dev-operator-token-file {shown}: the operator `{DEV_API_OPERATOR}` exists with \
             another token (or was revoked): give the file that holds its token, or use a store \
             without it (a revoked operator's name is not reused)"
        )),
        other => other,
    };
    if let Some(token) = token {
        return match bus.authenticate_operator(&token).await {
            Ok(operator) => Ok(operator),
            Err(BusError::Unauthenticated) => bus
                .add_operator_with_token(DEV_API_OPERATOR, &[], token)
                .await
                .map(|new| new.operator)
                .map_err(|e| match e {
                    BusError::Invalid { .. } => BusError::invalid(format!(
                        "--dev-operator-token-file {shown}: it does not hold an operator token \
                         (`cbo_` and 64 hex digits); remove it to have a new one written"
                    )),
                    other => conflict(other),
                }),
            Err(e) => Err(e),
        };
    }
    // The file first: an operator is created only once its token is kept, so a file that cannot
    // be written never leaves an operator nobody holds the token of.
    let token = crate::usecases::token::new_operator_token();
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    options
        .open(path)
        .and_then(|mut f| {
            f.write_all(token.as_bytes())?;
            f.write_all(b"\n")?;
            f.sync_all()
        })
        .map_err(|e| {
            BusError::invalid(format!(
                "--dev-operator-token-file {shown}: cannot write it ({e})"
            ))
        })?;
    match bus
        .add_operator_with_token(DEV_API_OPERATOR, &[], token)
        .await
    {
        Ok(new) => Ok(new.operator),
        Err(e) => {
            // Nothing holds this token: the file goes with the failed creation.
            let _ = std::fs::remove_file(path);
            Err(conflict(e))
        }
    }
}

/// One dev agent after [`ensure`].
#[derive(Debug)]
pub enum DevAgent {
    /// Usable: created now (`created`), or found and the file's token authenticates as it.
    Ready {
        /// The agent and its token.
        new: NewAgent,
        /// Whether it was created by this start.
        created: bool,
    },
    /// It exists (from an earlier start on a persistent ledger, or `crewbus agent add`) and no
    /// token in the file authenticates as it, or it is revoked: its token cannot be recovered.
    TokenUnknown {
        /// The agent as recorded.
        agent: Agent,
    },
}

impl DevAgent {
    /// The agent.
    pub fn agent(&self) -> &Agent {
        match self {
            DevAgent::Ready { new, .. } => &new.agent,
            DevAgent::TokenUnknown { agent } => agent,
        }
    }

    /// Its token, when known.
    pub fn token(&self) -> Option<&str> {
        match self {
            DevAgent::Ready { new, .. } => Some(&new.token),
            DevAgent::TokenUnknown { .. } => None,
        }
    }
}

/// Finds or creates team `team_name` and each of `agents` in it, with tokens from (and new
/// tokens into) `tokens` (not saved: call [`DevTokens::save`]). Errors: as [`Bus::add_team`]
/// and [`Bus::add_agent`] (`Invalid` for a bad name), a ledger failure.
pub async fn ensure(
    bus: &Bus,
    team_name: &str,
    agents: &[String],
    tokens: &mut DevTokens,
) -> BusResult<(Team, Vec<DevAgent>)> {
    let team = match bus.find_team(team_name).await {
        Ok(t) => t,
        Err(BusError::NotFound { .. }) => bus.add_team(team_name, None, None).await?,
        Err(e) => return Err(e),
    };
    let mut out = Vec::with_capacity(agents.len());
    for name in agents {
        let kept = tokens.get(&team.name, name).map(str::to_owned);
        let dev = match bus.find_agent(team.id, name).await {
            Ok(agent) => match kept {
                Some(token) if !agent.revoked() && authenticates_as(bus, &token, &agent).await => {
                    DevAgent::Ready {
                        new: NewAgent { agent, token },
                        created: false,
                    }
                }
                _ => DevAgent::TokenUnknown { agent },
            },
            Err(BusError::NotFound { .. }) => {
                let new = match kept {
                    Some(token) => match bus.add_agent_with_token(team.id, name, token).await {
                        Ok(new) => new,
                        // Not a token, or one another agent holds: a fresh one replaces it.
                        Err(BusError::Invalid { .. } | BusError::Conflict { .. }) => {
                            bus.add_agent(team.id, name).await?
                        }
                        Err(e) => return Err(e),
                    },
                    None => bus.add_agent(team.id, name).await?,
                };
                tokens.set(&team.name, name, &new.token);
                DevAgent::Ready { new, created: true }
            }
            Err(e) => return Err(e),
        };
        out.push(dev);
    }
    Ok((team, out))
}

async fn authenticates_as(bus: &Bus, token: &str, agent: &Agent) -> bool {
    bus.authenticate(token)
        .await
        .is_ok_and(|a| a.id == agent.id && a.team == agent.team)
}

/// The base URL a local host reaches `addr` at: an unspecified address (`0.0.0.0`, `[::]`)
/// becomes the loopback address of its family.
pub fn local_url(addr: SocketAddr) -> String {
    let mut addr = addr;
    if addr.ip().is_unspecified() {
        addr.set_ip(match addr {
            SocketAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
            SocketAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
        });
    }
    format!("http://{addr}")
}

/// A JSON string literal.
fn quoted(text: &str) -> String {
    Value::from(text).to_string()
}

/// The `mcpServers` block for Streamable HTTP, as text in the order a reader expects:
/// `{"mcpServers": {"crewbus": {"type": "http", "url": MCP_URL, "headers": {"Authorization":
/// "Bearer TOKEN"}}}}`.
pub fn http_host_config(mcp_url: &str, token: &str) -> String {
    format!(
        "{{\n  \"mcpServers\": {{\n    \"crewbus\": {{\n      \"type\": \"http\",\n      \"url\": {},\n      \
         \"headers\": {{ \"Authorization\": {} }}\n    }}\n  }}\n}}",
        quoted(mcp_url),
        quoted(&format!("Bearer {token}")),
    )
}

/// The `mcpServers` block for the stdio bridge, as text: `{"mcpServers": {"crewbus":
/// {"command": EXE, "args": ["mcp", "--url", BASE_URL], "env": {"CREWBUS_MCP_TOKEN": TOKEN}}}}`.
pub fn stdio_host_config(exe: &Path, base_url: &str, token: &str) -> String {
    format!(
        "{{\n  \"mcpServers\": {{\n    \"crewbus\": {{\n      \"command\": {},\n      \
         \"args\": [\"mcp\", \"--url\", {}],\n      \"env\": {{ {}: {} }}\n    }}\n  }}\n}}",
        quoted(&exe.display().to_string()),
        quoted(base_url),
        quoted(crate::cli::mcp_bridge::TOKEN_ENV),
        quoted(token),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_round_trip_through_a_private_file() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("state");
        let mut tokens = DevTokens::open(Some(&state));
        assert_eq!(tokens.get("local", "alice"), None);
        tokens.set("local", "alice", "cbt_a");
        tokens.save().unwrap();
        let path = state.join(TOKENS_FILE);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
            let dir_mode = std::fs::metadata(&state).unwrap().permissions().mode();
            assert_eq!(dir_mode & 0o777, 0o700);
        }
        let again = DevTokens::open(Some(&state));
        assert_eq!(again.get("local", "alice"), Some("cbt_a"));
        assert!(!format!("{again:?}").contains("cbt_a"));
        // A broken file starts empty.
        std::fs::write(&path, "{not json").unwrap();
        assert_eq!(DevTokens::open(Some(&state)).get("local", "alice"), None);
    }

    #[test]
    fn an_unspecified_address_is_shown_as_loopback() {
        assert_eq!(
            local_url("0.0.0.0:7700".parse().unwrap()),
            "http://127.0.0.1:7700"
        );
        assert_eq!(local_url("[::]:7700".parse().unwrap()), "http://[::1]:7700");
        assert_eq!(
            local_url("127.0.0.1:9".parse().unwrap()),
            "http://127.0.0.1:9"
        );
    }

    #[test]
    fn host_configurations_are_json_to_paste() {
        let http: Value =
            serde_json::from_str(&http_host_config("http://127.0.0.1:7700/mcp", "cbt_x")).unwrap();
        let server = &http["mcpServers"]["crewbus"];
        assert_eq!(server["type"], "http");
        assert_eq!(server["url"], "http://127.0.0.1:7700/mcp");
        assert_eq!(server["headers"]["Authorization"], "Bearer cbt_x");
        let stdio: Value = serde_json::from_str(&stdio_host_config(
            Path::new("/opt/crew \"bus\"/crewbus"),
            "http://127.0.0.1:7700",
            "cbt_x",
        ))
        .unwrap();
        let server = &stdio["mcpServers"]["crewbus"];
        assert_eq!(server["command"], "/opt/crew \"bus\"/crewbus");
        assert_eq!(
            server["args"],
            serde_json::json!(["mcp", "--url", "http://127.0.0.1:7700"])
        );
        assert_eq!(server["env"]["CREWBUS_MCP_TOKEN"], "cbt_x");
    }

    async fn embedded_bus() -> Bus {
        let config = crate::config::Config::from_toml("[storage]\nkind = \"memory\"").unwrap();
        crate::compose::compose(&config).await.unwrap().bus
    }

    fn names(n: &[&str]) -> Vec<String> {
        n.iter().map(|s| s.to_string()).collect()
    }

    #[tokio::test]
    async fn dev_agents_come_back_with_their_tokens_and_are_never_re_created() {
        let dir = tempfile::tempdir().unwrap();
        let mut tokens = DevTokens::open(Some(dir.path()));
        let bus = embedded_bus().await;
        let (team, first) = ensure(&bus, "local", &names(&["alice", "bob"]), &mut tokens)
            .await
            .unwrap();
        assert_eq!(team.name, "local");
        assert!(matches!(first[0], DevAgent::Ready { created: true, .. }));
        tokens.save().unwrap();

        // The same bus: team and agents reused, same tokens.
        let (again_team, again) = ensure(&bus, "local", &names(&["alice", "bob"]), &mut tokens)
            .await
            .unwrap();
        assert_eq!(again_team.id, team.id);
        for (a, b) in first.iter().zip(&again) {
            assert!(matches!(b, DevAgent::Ready { created: false, .. }));
            assert_eq!(a.agent().id, b.agent().id);
            assert_eq!(a.token(), b.token());
        }
        assert_eq!(bus.ports().ledger.agents(team.id).await.unwrap().len(), 2);

        // A fresh memory store (a restart): re-created with the kept tokens, which authenticate.
        let restarted = embedded_bus().await;
        let mut reopened = DevTokens::open(Some(dir.path()));
        let (_, back) = ensure(&restarted, "local", &names(&["alice"]), &mut reopened)
            .await
            .unwrap();
        assert!(matches!(back[0], DevAgent::Ready { created: true, .. }));
        assert_eq!(back[0].token(), first[0].token());
        let me = restarted
            .authenticate(back[0].token().unwrap())
            .await
            .unwrap();
        assert_eq!(me.name, "alice");

        // An agent that exists without a kept token: reused, its token unknown.
        let other = restarted.find_team("local").await.unwrap();
        restarted.add_agent(other.id, "carol").await.unwrap();
        let (_, carol) = ensure(&restarted, "local", &names(&["carol"]), &mut reopened)
            .await
            .unwrap();
        assert!(matches!(carol[0], DevAgent::TokenUnknown { .. }));
        assert_eq!(
            restarted
                .ports()
                .ledger
                .agents(other.id)
                .await
                .unwrap()
                .len(),
            2
        );
    }

    #[tokio::test]
    async fn a_kept_token_held_by_another_agent_is_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let mut tokens = DevTokens::open(Some(dir.path()));
        let bus = embedded_bus().await;
        let (_, alice) = ensure(&bus, "local", &names(&["alice"]), &mut tokens)
            .await
            .unwrap();
        let alice_token = alice[0].token().unwrap().to_owned();
        // The file claims bob's token is alice's (hand-edited): bob gets a fresh one.
        tokens.set("local", "bob", &alice_token);
        tokens.set("local", "dave", "not-a-token");
        let (_, more) = ensure(&bus, "local", &names(&["bob", "dave"]), &mut tokens)
            .await
            .unwrap();
        for dev in &more {
            assert!(matches!(dev, DevAgent::Ready { created: true, .. }));
            assert_ne!(dev.token(), Some(alice_token.as_str()));
            assert_eq!(tokens.get("local", &dev.agent().name), dev.token());
        }
        assert!(matches!(
            bus.add_agent_with_token(more[0].agent().team, "eve", "cbt_short".into())
                .await,
            Err(BusError::Invalid { .. })
        ));
    }
}
