//! Which token the configuration uses and where it is kept: a given file, the file of an
//! earlier `connect`, the dev token `crewbus serve` keeps, or a new agent — created only once
//! the files' changes are known to be possible ([`create`]), and beside the store only when the
//! server at `--url` then takes its token.
//!
//! With `--shared` the token is kept at one path relative to the home directory,
//! `~/.config/crewbus/connect/shared/<project name>.token`, the same for every teammate, so the
//! shared files name it identically in every clone (see [`SharedToken`]).

use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail};
use crewbus_domain::Secret;

use super::manifest::{self, Manifest};
use super::token;
use super::{ClaudeCodeArgs, absolute};
use crate::config::Config;

/// Where the token comes from.
pub enum Source {
    /// A file that exists: the configuration points at it.
    File,
    /// A token to write to a new file (a dev token, or one copied for `--shared`).
    New(Secret),
    /// An agent to create (`--dry-run`: that would be created).
    Create,
}

/// The token the configuration uses.
pub struct TokenPlan {
    /// The file the configuration names (absolute).
    pub path: PathBuf,
    /// Where its token comes from.
    pub source: Source,
    /// How it was found, for the summary.
    pub how: String,
    /// The agent's team, by the name `--team` gave, when the token is that team's (a dev
    /// token, an agent to create).
    pub team: Option<String>,
}

/// `--shared`'s token file: `$HOME/REL`, named `${HOME}/REL` in the shared files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SharedToken {
    /// Its absolute path here.
    pub path: PathBuf,
    /// Its path relative to the home directory (`/`-separated, shell-safe characters only).
    pub rel: String,
}

/// The shared token file of `project`. Errors: `$HOME` unset or not absolute.
pub fn shared_token(project: &Path) -> anyhow::Result<SharedToken> {
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .filter(|h| h.is_absolute())
        .ok_or_else(|| {
            anyhow!("--shared names the token file relative to $HOME, which is not set")
        })?;
    let rel = format!(
        ".config/crewbus/connect/shared/{}.token",
        manifest::project_name(project)
    );
    Ok(SharedToken {
        path: home.join(&rel),
        rel,
    })
}

/// The program `name` as `PATH` finds it (an executable file), if any.
pub fn on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .filter(|d| d.is_absolute())
        .map(|d| d.join(name))
        .find(|p| {
            #[cfg(unix)]
            {
                use std::os::unix::fs::PermissionsExt as _;
                p.metadata()
                    .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
            }
            #[cfg(not(unix))]
            {
                p.is_file()
            }
        })
}

fn file(path: PathBuf, how: &str, team: Option<String>) -> TokenPlan {
    TokenPlan {
        path,
        source: Source::File,
        how: how.to_owned(),
        team,
    }
}

/// The message for a server that does not answer where an agent would be created beside the
/// store.
fn not_answering(url: &str) -> String {
    format!(
        "crewbus does not answer at {url}, and an agent created in the store here must be one \
         that server knows: start `crewbus serve` (or pass --url of the one running on this \
         store), or pass --token-file PATH (an existing agent's token) or --operator-token-file \
         PATH (create the agent through the admin API of --url)"
    )
}

/// The token for `a` (see the module docs); nothing is created or written. With `--dry-run`
/// an agent to create is checked, reading only: the operator token and the team through the
/// admin API, or the server answering and the team in the store beside it, and its name free.
/// Errors: no agent named, a bad name, a token file that cannot be read, `--shared`'s file
/// holding another agent's token, a check that fails.
pub async fn resolve(
    config: &Config,
    a: &ClaudeCodeArgs,
    url: &str,
    cdir: &Path,
    manifest: &Manifest,
    shared: Option<&SharedToken>,
) -> anyhow::Result<TokenPlan> {
    let Some(shared) = shared else {
        return resolve_here(config, a, url, cdir, manifest).await;
    };
    if shared.path.exists() {
        return shared_in_place(a, url, manifest, shared).await;
    }
    let plan = resolve_here(config, a, url, cdir, manifest).await?;
    Ok(match plan.source {
        Source::File => TokenPlan {
            source: Source::New(token::read(&plan.path).map_err(|e| anyhow!(e))?),
            how: format!("{} ({}), copied", plan.how, plan.path.display()),
            path: shared.path.clone(),
            team: plan.team,
        },
        _ => TokenPlan {
            path: shared.path.clone(),
            ..plan
        },
    })
}

/// `--shared` with its token file already there: used when it is the token asked for.
async fn shared_in_place(
    a: &ClaudeCodeArgs,
    url: &str,
    manifest: &Manifest,
    shared: &SharedToken,
) -> anyhow::Result<TokenPlan> {
    let path = &shared.path;
    let held = token::read(path).map_err(|e| anyhow!(e))?;
    let conflict = |whose: String| {
        anyhow!(
            "{} already holds {whose}, and the shared files of every clone of a project named \
             like this one read the token there: connect as that agent, or take it out first \
             (`crewbus connect claude-code --remove` in the project that wrote it, or delete the \
             file)",
            path.display()
        )
    };
    if let Some(given) = &a.token_file {
        let t = token::read(&absolute(given)?).map_err(|e| anyhow!(e))?;
        if t.expose() != held.expose() {
            return Err(conflict("another token than --token-file's".to_owned()));
        }
        return Ok(file(
            path.clone(),
            "the shared token file (--token-file's token)",
            None,
        ));
    }
    let Some(wanted) = &a.agent else {
        return Ok(file(path.clone(), "the shared token file", None));
    };
    let owner = if manifest.token_file.as_deref() == Some(path) && manifest.agent.is_some() {
        manifest.agent.clone()
    } else {
        token::whoami(url, &held)
            .await
            .ok()
            .flatten()
            .map(|me| me.name)
    };
    match owner {
        Some(o) if o == *wanted => Ok(file(path.clone(), "the shared token file", None)),
        Some(o) => Err(conflict(format!("the token of the agent {o}"))),
        None => Err(conflict(format!(
            "a token crewbus at {url} does not answer for"
        ))),
    }
}

async fn resolve_here(
    config: &Config,
    a: &ClaudeCodeArgs,
    url: &str,
    cdir: &Path,
    manifest: &Manifest,
) -> anyhow::Result<TokenPlan> {
    if let Some(p) = &a.token_file {
        return Ok(file(absolute(p)?, "the given token file", None));
    }
    if let Some(p) = &manifest.token_file
        && p.exists()
        && (a.agent.is_none() || a.agent == manifest.agent)
    {
        return Ok(file(
            p.clone(),
            "the token file of an earlier connect",
            manifest.team.clone(),
        ));
    }
    let Some(agent) = &a.agent else {
        bail!(
            "name the agent (--agent NAME: a dev agent of `crewbus serve`, or a new one) or give \
             an existing agent's token (--token-file PATH)"
        );
    };
    // The name also names the token file: connect takes the names made of the characters a
    // file name keeps as they are (an agent named otherwise connects by --token-file).
    crewbus_domain::validate_recipient_key(agent).map_err(|_| {
        anyhow!(
            "--agent {agent:?}: connect takes an agent name of 1 to {} ASCII letters, digits, `_` \
             and `-` (it names the token file); for another agent give its token with \
             --token-file PATH",
            crewbus_domain::MAX_RECIPIENT_KEY_LEN
        )
    })?;
    let path = cdir.join(format!("{agent}.token"));
    if path.exists() {
        return Ok(file(path, "the token file of an earlier connect", None));
    }
    let team = Some(a.team.clone());
    if let Some(t) = token::dev_token(config, &a.team, agent) {
        return Ok(TokenPlan {
            path,
            source: Source::New(t),
            how: format!(
                "the dev token `crewbus serve` keeps for {agent} (team {})",
                a.team
            ),
            team,
        });
    }
    let how = if a.dry_run {
        // Read-only checks: what the real run would refuse, the dry run refuses.
        match &a.operator_token_file {
            Some(op) => {
                let op = token::read(op).map_err(|e| anyhow!(e))?;
                token::check_via_admin_api(url, &op, &a.team, agent)
                    .await
                    .map_err(|e| anyhow!(e))?;
                format!(
                    "would create the agent {agent} in team {} through the admin API (checked: \
                     the operator token, the team, the name is free)",
                    a.team
                )
            }
            None => {
                if !token::answers(url).await {
                    bail!(not_answering(url));
                }
                token::check_beside_store(config.clone(), &a.team, agent)
                    .await
                    .map_err(|e| anyhow!(e))?;
                format!(
                    "would create the agent {agent} in team {} beside the store (checked: {url} \
                     answers, the team, the name is free)",
                    a.team
                )
            }
        }
    } else {
        format!("a new agent {agent} in team {}", a.team)
    };
    Ok(TokenPlan {
        path,
        source: Source::Create,
        how,
        team,
    })
}

/// Creates the agent `a.agent` in `a.team`: through the admin API of `url` with
/// `--operator-token-file`, else beside the store — only when the server at `url` answers,
/// and kept only when it then takes the new token (`GET /v1/me`); otherwise the agent is
/// revoked again. Returns its token and how it was made. Errors: a message saying what to do.
pub async fn create(
    config: &Config,
    a: &ClaudeCodeArgs,
    url: &str,
) -> anyhow::Result<(Secret, String)> {
    let agent = a.agent.as_deref().unwrap_or_default();
    if let Some(op) = &a.operator_token_file {
        let op = token::read(op).map_err(|e| anyhow!(e))?;
        let t = token::create_via_admin_api(url, &op, &a.team, agent)
            .await
            .map_err(|e| anyhow!(e))?;
        return Ok((
            t,
            format!(
                "agent {agent} created through the admin API in team {}",
                a.team
            ),
        ));
    }
    if !token::answers(url).await {
        bail!(not_answering(url));
    }
    let created = token::create_beside_store(config.clone(), &a.team, agent)
        .await
        .map_err(|e| anyhow!(e))?;
    let why = match token::whoami(url, &created.token).await {
        Ok(Some(me)) if me.name == agent => {
            return Ok((
                created.token,
                format!("agent {agent} created beside the store in team {}", a.team),
            ));
        }
        Ok(Some(me)) => format!("it answers as {}", me.name),
        Ok(None) => "it stopped answering".to_owned(),
        Err(e) => e,
    };
    let revoked = match token::revoke_beside_store(config.clone(), &created).await {
        Ok(()) => {
            "it was revoked again (names are not reused: pick another --agent name)".to_owned()
        }
        Err(e) => format!(
            "revoking it again failed ({e}): `crewbus agent revoke --team {} {agent}`",
            a.team
        ),
    };
    bail!(
        "the agent {agent} was created in the store here, but crewbus at {url} does not take its \
         token ({why}): that server runs on another store. {revoked}. Pass the --url of the \
         server on this store, or --operator-token-file PATH to create the agent through the \
         admin API of {url}, or --token-file PATH"
    )
}
