//! In-process servers for a test or a bench: `crewbus serve`'s HTTP server started on buses
//! already composed (one store, one server per bus, each on `config.listen`: `127.0.0.1:0`, a
//! port the system picks), a team with its agents, driven through the real HTTP API.

use crewbus::bus::Bus;
use crewbus::client::ApiClient;
use crewbus::config::Config;
use crewbus::server::Server;
use crewbus::shutdown::Shutdown;
use crewbus_domain::{Team, Uuid};

/// One agent: its name, id, recipient key and token, and a client presenting the token.
pub struct Agent {
    /// The agent's name in its team.
    pub name: String,
    /// The agent's id.
    pub id: Uuid,
    /// The key other agents address it by.
    pub recipient_key: String,
    /// Its bearer token (a test secret).
    pub token: String,
    /// A client on the server it was added for, presenting [`Agent::token`].
    pub client: ApiClient,
}

impl Agent {
    /// Adds agent `name` to `team` through `bus`; its client talks to the server at `url`.
    /// Panics when the bus refuses.
    pub async fn add(bus: &Bus, team: Uuid, name: &str, url: &str) -> Agent {
        let new = bus.add_agent(team, name).await.unwrap();
        Agent {
            name: name.to_owned(),
            id: new.agent.id,
            recipient_key: new.agent.recipient_key.clone(),
            token: new.token.clone(),
            client: ApiClient::new(url, Some(new.token)),
        }
    }

    /// A client of this agent on the server at `url` (another server of the same store).
    pub fn client_on(&self, url: &str) -> ApiClient {
        ApiClient::new(url, Some(self.token.clone()))
    }
}

/// Servers started in process on one store's buses, with one team and its agents.
pub struct Servers {
    /// One server per bus, in the order of the buses.
    pub servers: Vec<Server>,
    /// The team, added through the first bus.
    pub team: Team,
    /// The team's agents, each with a client on the first server.
    pub agents: Vec<Agent>,
}

impl Servers {
    /// Adds team `team` through the first of `buses` with the body and inbox backend `backend`
    /// (`Some("jetstream")`: its streams provisioned with `config`'s `[nats]` provisioning
    /// user), starts one server per bus on `config.listen`, and adds `agents`. Panics on a
    /// failure.
    pub async fn start(
        config: &Config,
        buses: &[Bus],
        team: &str,
        backend: Option<&str>,
        agents: &[&str],
    ) -> Servers {
        let bus = &buses[0];
        let team = bus.add_team(team, backend, backend).await.unwrap();
        if backend == Some("jetstream") {
            let admin = crewbus::compose::stream_admin(config).unwrap();
            admin.provision(team.id).await.unwrap();
            admin.provision_inbox(team.id).await.unwrap();
        }
        let mut servers = Vec::new();
        for b in buses {
            let server = Server::start(b.clone(), config.listen, Shutdown::new());
            servers.push(server.await.unwrap());
        }
        let mut list = Vec::new();
        for name in agents {
            list.push(Agent::add(bus, team.id, name, &servers[0].url()).await);
        }
        Servers {
            servers,
            team,
            agents: list,
        }
    }

    /// Stops every server, then removes the team's JetStream streams (when it has them) with
    /// `config`'s provisioning user.
    pub async fn stop(self, config: &Config) {
        for server in self.servers {
            server.stop().await;
        }
        remove_streams(config, &self.team).await;
    }
}

/// Removes `team`'s JetStream streams with `config`'s provisioning user, when it has them.
pub async fn remove_streams(config: &Config, team: &Team) {
    if team.body_backend == "jetstream" {
        let admin = crewbus::compose::stream_admin(config).unwrap();
        admin.deprovision(team.id).await.unwrap();
    }
}
