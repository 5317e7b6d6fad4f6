//! The app's `[nats]` settings for a nats-server of the conformance fixture
//! (`crewbus_conformance::nats`): its runtime user for the server's work, its provisioning user
//! for the streams.

use crewbus::config::{NatsConfig, NatsCredential};
use crewbus_conformance::nats::{self, NatsServer, UserPassword};
use crewbus_domain::Secret;

/// `[nats]` for `server`: the fixture's two users, every limit the default (a caller raises
/// what it needs with struct update syntax).
pub fn nats_config(server: &NatsServer) -> NatsConfig {
    nats_config_at(vec![server.url()])
}

/// [`nats_config`] for the servers at `urls` (a cluster's, or an external one).
pub fn nats_config_at(urls: Vec<String>) -> NatsConfig {
    let credential = |u: UserPassword| NatsCredential {
        user: Some(u.user),
        password: Some(Secret::new(u.password)),
        ..NatsCredential::default()
    };
    NatsConfig {
        servers: urls,
        runtime: credential(nats::runtime_user()),
        provisioning: credential(nats::provisioning_user()),
        ..NatsConfig::default()
    }
}

/// The `[nats.runtime]` and `[nats.provisioning]` tables of a configuration file for the
/// fixture's users, each line ending in a newline.
pub fn credentials_toml() -> String {
    let (r, p) = (nats::runtime_user(), nats::provisioning_user());
    format!(
        "[nats.runtime]\nuser = \"{}\"\npassword = \"{}\"\n\
         [nats.provisioning]\nuser = \"{}\"\npassword = \"{}\"\n",
        r.user, r.password, p.user, p.password
    )
}
