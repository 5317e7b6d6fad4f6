//! The agent's token for `crewbus connect`: where it comes from (a given file, the dev tokens of
//! `crewbus serve`, a new agent made through the admin API or beside the store), where it may
//! be kept (never in a file git would track), and whether the server takes it.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crewbus_domain::{BusError, OperatorScope, Secret};
use serde_json::Value;

use uuid::Uuid;

use crate::config::Config;
use crate::usecases::bus::Bus;

/// How long asking the server (whoami, the admin API) may take.
const ASK_TIMEOUT: Duration = Duration::from_secs(5);

/// Whether `path` lies inside `dir` (both absolute; compared after resolving what exists).
pub fn inside(path: &Path, dir: &Path) -> bool {
    let resolve = |p: &Path| {
        // The deepest existing ancestor, resolved, plus the rest.
        let mut existing = p.to_path_buf();
        let mut rest = Vec::new();
        while !existing.exists() {
            match (
                existing.file_name().map(ToOwned::to_owned),
                existing.parent(),
            ) {
                (Some(name), Some(parent)) => {
                    rest.push(name);
                    existing = parent.to_path_buf();
                }
                _ => break,
            }
        }
        let mut out = existing.canonicalize().unwrap_or(existing);
        for name in rest.into_iter().rev() {
            out.push(name);
        }
        out
    };
    resolve(path).starts_with(resolve(dir))
}

/// The git work tree holding `dir`, if any (`git rev-parse --show-toplevel`).
pub fn work_tree(dir: &Path) -> Option<PathBuf> {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(["rev-parse", "--show-toplevel"])
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()))
}

/// Refuses a token file git could track: one inside `project` or its git work tree is allowed
/// only when `git check-ignore` confirms it is ignored. Errors: a message saying what to do.
pub fn check_location(project: &Path, token_file: &Path) -> Result<(), String> {
    let tree = work_tree(project);
    let within_project = inside(token_file, project);
    let within_tree = tree.as_deref().is_some_and(|t| inside(token_file, t));
    if !within_project && !within_tree {
        return Ok(());
    }
    let ignored = tree.is_some()
        && Command::new("git")
            .arg("-C")
            .arg(project)
            .args(["check-ignore", "-q", "--"])
            .arg(token_file)
            .status()
            .is_ok_and(|s| s.success());
    if ignored {
        Ok(())
    } else {
        Err(format!(
            "the token file {} is inside the project {}, and git does not confirm it is ignored: \
             keep it outside the work tree (the default, with --agent) or add it to .gitignore",
            token_file.display(),
            project.display()
        ))
    }
}

/// Reads a token file. Errors: unreadable or empty.
pub fn read(path: &Path) -> Result<Secret, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read the token file {}: {e}", path.display()))?;
    let token = Secret::new(text.trim());
    if token.is_empty() {
        return Err(format!("the token file {} is empty", path.display()));
    }
    Ok(token)
}

/// Who a token is, as the server says (`GET /v1/me`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Me {
    /// The agent's name.
    pub name: String,
    /// Its team's id.
    pub team: String,
}

fn client() -> Result<reqwest::Client, String> {
    reqwest::Client::builder()
        .timeout(ASK_TIMEOUT)
        .build()
        .map_err(|e| e.to_string())
}

/// Whether an HTTP server answers at `url` (`GET /health`, any status, within 5 s).
pub async fn answers(url: &str) -> bool {
    let Ok(client) = client() else { return false };
    client
        .get(format!("{}/health", url.trim_end_matches('/')))
        .send()
        .await
        .is_ok()
}

/// Who the server says the token is: `Ok(Some(me))`; `Ok(None)` when the server cannot be
/// reached (the configuration is written anyway; the hooks stay quiet until it runs). Errors:
/// the server refuses the token.
pub async fn whoami(url: &str, token: &Secret) -> Result<Option<Me>, String> {
    let client = client()?;
    let response = match client
        .get(format!("{}/v1/me", url.trim_end_matches('/')))
        .bearer_auth(token.expose())
        .send()
        .await
    {
        Ok(r) => r,
        Err(_) => return Ok(None),
    };
    match response.status().as_u16() {
        200 => {
            let v: Value = response.json().await.unwrap_or(Value::Null);
            Ok(Some(Me {
                name: v["name"].as_str().unwrap_or("?").to_owned(),
                team: v["team"].as_str().unwrap_or("?").to_owned(),
            }))
        }
        401 => Err(format!(
            "crewbus at {url} refuses the agent's token (HTTP 401: wrong or revoked)"
        )),
        other => Err(format!(
            "crewbus at {url} answered GET /v1/me with HTTP {other}"
        )),
    }
}

/// The dev token `crewbus serve` keeps for `team`/`agent` in the data directory's
/// dev-tokens.json, if any.
pub fn dev_token(config: &Config, team: &str, agent: &str) -> Option<Secret> {
    let dir = config.storage.data_dir().ok()?;
    let tokens = crate::dev_team::DevTokens::open(Some(&dir));
    tokens.get(team, agent).map(Secret::new)
}

/// The id of `team` (name or id) as the admin API of `base` shows it to the operator, and
/// the names of its agents (revoked ones too: names are not reused). Read only. Errors: a
/// message (unreachable, the operator token refused, no such team).
async fn admin_team(
    client: &reqwest::Client,
    base: &str,
    operator_token: &Secret,
    team: &str,
) -> Result<(String, Vec<String>), String> {
    let unreachable = |e: reqwest::Error| format!("cannot reach crewbus at {base}: {e}");
    let teams = client
        .get(format!("{base}/v1/admin/teams"))
        .bearer_auth(operator_token.expose())
        .send()
        .await
        .map_err(unreachable)?;
    match teams.status().as_u16() {
        200 => {}
        401 => return Err("the admin API refuses the operator token (HTTP 401)".to_owned()),
        s => return Err(format!("GET /v1/admin/teams answered HTTP {s}")),
    }
    let teams: Value = teams.json().await.map_err(unreachable)?;
    let id = teams
        .as_array()
        .and_then(|ts| {
            ts.iter()
                .find(|t| t["name"].as_str() == Some(team) || t["id"].as_str() == Some(team))
        })
        .and_then(|t| t["id"].as_str())
        .ok_or_else(|| format!("the operator sees no team {team:?} (--team)"))?
        .to_owned();
    let agents = client
        .get(format!("{base}/v1/admin/teams/{id}/agents"))
        .bearer_auth(operator_token.expose())
        .send()
        .await
        .map_err(unreachable)?;
    if agents.status().as_u16() != 200 {
        return Err(format!(
            "GET /v1/admin/teams/{id}/agents answered HTTP {}",
            agents.status().as_u16()
        ));
    }
    let agents: Value = agents.json().await.map_err(unreachable)?;
    let names = agents
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|a| a["name"].as_str().map(str::to_owned))
        .collect();
    Ok((id, names))
}

/// Checks, reading only, that the admin API of `url` would create `agent` in `team` for the
/// operator (`--dry-run`). Errors: as [`create_via_admin_api`] would fail.
pub async fn check_via_admin_api(
    url: &str,
    operator_token: &Secret,
    team: &str,
    agent: &str,
) -> Result<(), String> {
    let base = url.trim_end_matches('/');
    let (_, names) = admin_team(&client()?, base, operator_token, team).await?;
    if names.iter().any(|n| n == agent) {
        return Err(exists(agent, team));
    }
    Ok(())
}

/// Creates `agent` in `team` through the admin API with an operator token. Errors: a message
/// (the team is not found, the agent exists, the operator token is refused, …).
pub async fn create_via_admin_api(
    url: &str,
    operator_token: &Secret,
    team: &str,
    agent: &str,
) -> Result<Secret, String> {
    let base = url.trim_end_matches('/');
    let client = client()?;
    let unreachable = |e: reqwest::Error| format!("cannot reach crewbus at {base}: {e}");
    let (id, _) = admin_team(&client, base, operator_token, team).await?;
    let created = client
        .post(format!("{base}/v1/admin/teams/{id}/agents"))
        .bearer_auth(operator_token.expose())
        .json(&serde_json::json!({ "name": agent }))
        .send()
        .await
        .map_err(unreachable)?;
    match created.status().as_u16() {
        201 => {
            let v: Value = created.json().await.map_err(unreachable)?;
            v["token"]
                .as_str()
                .map(Secret::new)
                .ok_or_else(|| "the admin API answered no token".to_owned())
        }
        409 => Err(exists(agent, team)),
        400 => Err(format!("the admin API refuses the agent name {agent:?}")),
        s => Err(format!(
            "POST /v1/admin/teams/{id}/agents answered HTTP {s}"
        )),
    }
}

/// An agent made beside the store.
pub struct Created {
    /// Its token.
    pub token: Secret,
    /// Its team's id.
    pub team: Uuid,
    /// Its id.
    pub agent: Uuid,
}

/// The bus beside the store the configuration names (the embedded store of a running
/// `crewbus serve`, or `[database]`), as `crewbus agent …` opens it.
async fn bus_beside(mut config: Config) -> Result<Bus, String> {
    crate::embedded::prepare_beside(&mut config).map_err(|e| e.to_string())?;
    crate::compose::check_configuration(&config).map_err(|e| e.to_string())?;
    crate::commands::operator_bus(&config)
        .await
        .map_err(|e| e.to_string())
}

/// `team` (name or id) in the store beside. Errors: not there, as a message naming --team.
async fn team_beside(bus: &Bus, team: &str) -> Result<Uuid, String> {
    match bus.find_team(team).await {
        Ok(t) => Ok(t.id),
        Err(BusError::NotFound { .. }) => Err(format!(
            "there is no team {team:?} (--team) in crewbus's store here (`crewbus team list` \
             shows the teams)"
        )),
        Err(e) => Err(e.to_string()),
    }
}

/// Checks, reading only, that `agent` could be created in `team` beside the store
/// (`--dry-run`). Errors: as [`create_beside_store`] would fail.
pub async fn check_beside_store(config: Config, team: &str, agent: &str) -> Result<(), String> {
    let bus = bus_beside(config).await?;
    let team_id = team_beside(&bus, team).await?;
    match bus.find_agent(team_id, agent).await {
        Ok(_) => Err(exists(agent, team)),
        Err(BusError::NotFound { .. }) => Ok(()),
        Err(e) => Err(e.to_string()),
    }
}

/// Creates `agent` in `team` beside the store, as `crewbus agent add` does. Errors: a message
/// (no such team, the name taken, the store unreachable).
pub async fn create_beside_store(
    config: Config,
    team: &str,
    agent: &str,
) -> Result<Created, String> {
    let bus = bus_beside(config).await?;
    let team_id = team_beside(&bus, team).await?;
    match bus
        .admin_add_agent(&OperatorScope::Everything, team_id, agent)
        .await
    {
        Ok(new) => Ok(Created {
            token: Secret::new(new.token),
            team: team_id,
            agent: new.agent.id,
        }),
        Err(BusError::Conflict { .. }) => Err(exists(agent, team)),
        Err(e) => Err(e.to_string()),
    }
}

/// Revokes an agent [`create_beside_store`] made. Errors: the store's, as a message.
pub async fn revoke_beside_store(config: Config, created: &Created) -> Result<(), String> {
    let bus = bus_beside(config).await?;
    bus.admin_revoke_agent(&OperatorScope::Everything, created.team, created.agent)
        .await
        .map(|_| ())
        .map_err(|e| e.to_string())
}

fn exists(agent: &str, team: &str) -> String {
    format!(
        "the agent {agent} already exists in team {team} and its token is shown only once: pass \
         it with --token-file PATH, or pick another --agent name"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inside_resolves_what_exists() {
        let d = tempfile::tempdir().unwrap();
        let project = d.path().join("p");
        std::fs::create_dir(&project).unwrap();
        assert!(inside(&project.join("a/b.token"), &project));
        assert!(!inside(&d.path().join("q/t"), &project));
        #[cfg(unix)]
        {
            let link = d.path().join("link");
            std::os::unix::fs::symlink(&project, &link).unwrap();
            assert!(
                inside(&link.join("t"), &project),
                "a path through a link into the project"
            );
        }
    }

    #[test]
    fn a_token_inside_a_work_tree_needs_gitignore() {
        let d = tempfile::tempdir().unwrap();
        let project = d.path().join("p");
        std::fs::create_dir(&project).unwrap();
        // Not a git repository: a file inside is refused, one outside accepted.
        assert!(check_location(&project, &project.join("t.token")).is_err());
        assert!(check_location(&project, &d.path().join("t.token")).is_ok());
        let git = |args: &[&str]| {
            Command::new("git")
                .arg("-C")
                .arg(&project)
                .args(args)
                .output()
                .map(|o| o.status.success())
        };
        if git(&["init", "-q"]).unwrap_or(false) {
            assert!(check_location(&project, &project.join("t.token")).is_err());
            std::fs::write(project.join(".gitignore"), "*.token\n").unwrap();
            assert!(check_location(&project, &project.join("t.token")).is_ok());
            assert!(check_location(&project, &project.join("t.other")).is_err());
        } else {
            panic!("git is needed for this test (apt-get install git)");
        }
    }
}
