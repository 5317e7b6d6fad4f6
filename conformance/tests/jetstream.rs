//! The JetStream adapter against real nats-server (libtest-mimic, `harness = false`).
//!
//! One fixture server (from `NATS_SERVER_BIN`, else `PATH`) is shared by the tests that need
//! nothing special; each test uses a fresh team. Tests that need a server of their own
//! (restart, account budget, `max_payload`, cluster) spawn one; under `NATS_URL` they are
//! reported as ignored, and so are the tests needing the fixture's credentials.
//!
//! The JetStream-only tests stand in `jetstream/` by side ([`bodies`], [`inbox`], [`streams`],
//! [`registry`]) as `jetstream::adapter::<test>`; [`suite`] runs the shared behaviours
//! (`jetstream::<port>::<behaviour>`) on the same broker. A JetStream-only test stays only where
//! no shared behaviour covers it.

use std::sync::Arc;

use async_trait::async_trait;
use crewbus_conformance::FixtureError;
use crewbus_conformance::nats::{self, NatsServer, parse_version};
use crewbus_conformance::stream_admin;
use crewbus_conformance::trial::{Lack, Source, Suite};
use crewbus_jetstream::Config;
use libtest_mimic::Arguments;

/// `tests![Needs => f, …]`: JetStream-only tests, each `jetstream::adapter::<f>`.
macro_rules! tests {
    ($($needs:ident => $f:ident),* $(,)?) => {
        &[$(Behaviour {
            port: "adapter",
            name: stringify!($f),
            needs: &[Needs::$needs],
            run: |h: &Arc<Harness>| Box::pin($f(h)),
        }),*]
    };
}

#[path = "jetstream/bodies.rs"]
mod bodies;
#[path = "jetstream/fixture.rs"]
mod fixture;
#[path = "jetstream/inbox.rs"]
mod inbox;
#[path = "jetstream/registry.rs"]
mod registry;
#[path = "jetstream/streams.rs"]
mod streams;
#[path = "jetstream/suite.rs"]
mod suite;
#[path = "jetstream/support.rs"]
mod support;

use suite::{JetStreamAdminFactory, JetStreamFactory};
use support::{base_config, prov_for, rt_for};

/// Where the suite's shared broker is.
struct Harness {
    url: String,
    version: String,
    /// Whether the broker is this suite's fixture (with its users), not `NATS_URL`.
    fixture: bool,
    _server: Option<NatsServer>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Needs {
    /// Any broker, also `NATS_URL`.
    Any,
    /// The fixture's users (provisioning vs runtime credential).
    Credentials,
    /// A server of its own (restart, budget, max_payload).
    OwnServer,
    /// A 3-node cluster on a server line with the R3 per-subject-discard fix.
    Cluster,
}

/// The suite's own tests share the broker: each trial gets the [`Harness`]. Those needing the
/// fixture's users or servers of their own are ignored under `NATS_URL` (naming why), and those
/// spawning servers of their own (restart, cluster) run one at a time.
struct Adapter(Arc<Harness>);

#[async_trait]
impl Source for Adapter {
    type Fixture = Arc<Harness>;
    type Need = Needs;

    fn lacks(&self, needs: &[Needs]) -> Option<Lack> {
        needs
            .iter()
            .find_map(|need| self.0.lacks(*need))
            .map(|reason| Lack {
                kind: None,
                reason: reason.to_owned(),
            })
    }

    fn exclusive(&self, needs: &[Needs]) -> bool {
        needs
            .iter()
            .any(|need| matches!(need, Needs::OwnServer | Needs::Cluster))
    }

    async fn fixture(&self) -> Result<Box<Arc<Harness>>, FixtureError> {
        Ok(Box::new(Arc::clone(&self.0)))
    }
}

impl Harness {
    fn prov(&self) -> Config {
        if self.fixture {
            prov_for(&self.url)
        } else {
            base_config(&self.url)
        }
    }

    fn rt(&self) -> Config {
        if self.fixture {
            rt_for(&self.url)
        } else {
            base_config(&self.url)
        }
    }

    fn line(&self) -> (u32, u32, u32) {
        parse_version(&self.version)
    }

    /// nats-server before 2.10 evicts on a lowered limit and has the R3 per-subject bug.
    fn is_2_9(&self) -> bool {
        self.line() < (2, 10, 0)
    }

    /// Why a test needing `need` cannot run on this broker, or `None`.
    fn lacks(&self, need: Needs) -> Option<&'static str> {
        match need {
            Needs::Any => None,
            Needs::Credentials | Needs::OwnServer if !self.fixture => {
                Some("needs a server of its own (NATS_URL mode)")
            }
            Needs::Credentials | Needs::OwnServer => None,
            Needs::Cluster if !self.fixture => Some("needs a cluster of its own (NATS_URL mode)"),
            Needs::Cluster if self.is_2_9() => {
                Some("R3 with per-subject discard is buggy before late-2025 server releases")
            }
            Needs::Cluster => None,
        }
    }
}

fn main() {
    fixture::run_probe_if_asked();
    let args = Arguments::from_args();
    let harness = match nats::external_url() {
        Some(url) => Harness {
            url,
            version: "external".into(),
            fixture: false,
            _server: None,
        },
        None => {
            let server = NatsServer::start();
            Harness {
                url: server.url(),
                version: server.version(),
                fixture: true,
                _server: Some(server),
            }
        }
    };
    eprintln!(
        "jetstream suite: nats-server {} at {} ({})",
        harness.version,
        harness.url,
        if harness.fixture {
            "fixture"
        } else {
            "NATS_URL"
        }
    );
    let harness = Arc::new(harness);
    let list = [bodies::TESTS, inbox::TESTS, streams::TESTS, registry::TESTS].concat();
    // The adapter's own tests on a runtime of their own: some start servers synchronously.
    let own = Suite::new(
        Arc::new(Adapter(Arc::clone(&harness))),
        &crewbus_conformance::runtime(),
    );
    let mut trials = own.trials("jetstream", list);
    let suite_runtime = crewbus_conformance::runtime();
    let factory = Arc::new(suite_runtime.block_on(JetStreamFactory::start(&harness)));
    trials.extend(crewbus_conformance::trials(
        "jetstream",
        factory,
        &suite_runtime,
    ));
    let admin_trials =
        stream_admin::admin_trials("jetstream", Arc::new(JetStreamAdminFactory), &suite_runtime);
    // Each admin behaviour needs a server of its own: none under NATS_URL.
    trials.extend(
        admin_trials
            .into_iter()
            .map(|t| t.with_ignored_flag(!harness.fixture)),
    );
    trials.extend(fixture::trials(!harness.fixture));
    let conclusion = libtest_mimic::run(&args, trials);
    drop(harness);
    conclusion.exit();
}
