//! The teams and agents taking part: created through the ledger, or found from tokens.

use crewbus::client::{ApiClient, uuid_of};
use crewbus::config::{BackendChoice, Config};
use crewbus_domain::{BusError, BusResult, Uuid};
use reqwest::Method;

use super::args::*;

/// One simulated agent: where it talks and with what token.
#[derive(Clone)]
pub struct LoadAgent {
    /// Agent id.
    pub id: Uuid,
    /// Its client (server URL and token).
    pub client: ApiClient,
}

impl std::fmt::Debug for LoadAgent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoadAgent")
            .field("id", &self.id)
            .field("client", &self.client)
            .finish()
    }
}

/// A team taking part in the run.
#[derive(Debug, Clone)]
pub struct LoadTeam {
    /// A label for the report (the team's name or id).
    pub name: String,
    /// Its agents (at least `members` of them).
    pub agents: Vec<LoadAgent>,
}

/// Creates `args.teams` teams with `args.agents` agents each through the ledger of `config`
/// (provisioning JetStream streams when the backend is `jetstream`), spreading agents over the
/// URLs. Errors: no database configured → `Invalid`; ledger or broker failures as returned.
pub async fn create_teams(config: &Config, args: &LoadArgs) -> BusResult<Vec<LoadTeam>> {
    if config.store()? == crewbus::config::StorageKind::Memory {
        return Err(BusError::invalid(
            "load needs agents: on the memory store it cannot create teams beside the server; \
             use the embedded store (the default) or [database] (CREWBUS_DATABASE__URL), or \
             pass --token/--tokens-file",
        ));
    }
    // The teams are created in this command's store and used through the servers' HTTP API:
    // the store must be the servers'. On the embedded store, one no server holds is another
    // data directory than the server's (its agents' tokens would be refused with a bare 401,
    // the teams left behind): refused before anything is created.
    if !crewbus::embedded::served(config)? {
        return Err(BusError::invalid(format!(
            "no `crewbus serve` runs on the data directory {}: load creates its teams and agents in \
             that store and sends through {} — pass the server's own --data-dir (or \
             storage.data_dir), or --token/--tokens-file",
            config
                .storage
                .data_dir()
                .map(|d| d.display().to_string())
                .unwrap_or_default(),
            args.urls.join(", ")
        )));
    }
    let bus = crewbus::compose::compose(config).await?.bus;
    let backend = args.backend.map(BackendChoice::name);
    let tag: u32 = rand::random();
    let mut teams = Vec::new();
    let mut spread = 0usize;
    for t in 0..args.teams.max(1) {
        let name = format!("{}-{t}-{tag:08x}", args.team_prefix);
        let team = bus.add_team(&name, backend, backend).await?;
        if backend == Some("jetstream") {
            let admin = crewbus::compose::stream_admin(config)?;
            admin.provision(team.id).await?;
            admin.provision_inbox(team.id).await?;
        }
        let mut agents = Vec::new();
        for i in 0..args.agents.max(2) {
            let new = bus.add_agent(team.id, &format!("agent{i}")).await?;
            let url = &args.urls[spread % args.urls.len()];
            spread += 1;
            agents.push(LoadAgent {
                id: new.agent.id,
                client: ApiClient::new(url.trim_end_matches('/'), Some(new.token)),
            });
        }
        teams.push(LoadTeam { name, agents });
    }
    Ok(teams)
}

/// The agents of the given tokens, grouped by team through `/v1/me`. Errors: a token refused →
/// `Unauthenticated`; no answer → `Unavailable`.
pub async fn teams_of_tokens(urls: &[String], tokens: &[String]) -> BusResult<Vec<LoadTeam>> {
    let mut by_team: Vec<(Uuid, LoadTeam)> = Vec::new();
    for (i, token) in tokens.iter().enumerate() {
        let url = urls[i % urls.len()].trim_end_matches('/');
        let client = ApiClient::new(url, Some(token.clone()));
        let me = client
            .ok(Method::GET, "/v1/me", None)
            .await
            .map_err(|f| match f.status {
                401 | 403 => BusError::Unauthenticated,
                _ => BusError::unavailable(format!("{url}/v1/me answered {}", f.status)),
            })?;
        let team = uuid_of(&me["team"]);
        let agent = LoadAgent {
            id: uuid_of(&me["id"]),
            client,
        };
        match by_team.iter_mut().find(|(t, _)| *t == team) {
            Some((_, t)) => t.agents.push(agent),
            None => by_team.push((
                team,
                LoadTeam {
                    name: team.to_string(),
                    agents: vec![agent],
                },
            )),
        }
    }
    Ok(by_team.into_iter().map(|(_, t)| t).collect())
}
