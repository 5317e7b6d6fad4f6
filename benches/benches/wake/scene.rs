//! One crewbus server per store in the bench's process, its agents (each with a token file the
//! hook and bridge processes read) and the bench's temporary home (token files, the hooks'
//! state directory).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use crewbus::bus::Bus;
use crewbus::client::ApiClient;
use crewbus::config::Config;
use crewbus::server::Server;
use crewbus::shutdown::Shutdown;
use crewbus_conformance::postgres::TestDatabase;
use crewbus_domain::{Team, Uuid};
use serde_json::Value;

pub use crewbus_benches::kit::store::Store;
use crewbus_benches::kit::store::StoreBus;

/// One agent: its id, a client of its own presenting its token, and its token in a 0600 file.
pub struct Member {
    pub id: Uuid,
    pub client: ApiClient,
    pub token_file: PathBuf,
}

/// One server on one store.
pub struct Scene {
    pub store: Store,
    pub server: Server,
    pub bus: Bus,
    pub team: Team,
    /// Token files, and the hooks' `$XDG_STATE_HOME`.
    pub home: tempfile::TempDir,
    /// The store under the bus (its database dropped at the end; kept and named if the run
    /// fails).
    backing: StoreBus,
}

impl Scene {
    /// The defaults of `crewbus serve` (`bus.max_wait_ms` 50 000, `bus.topup_after_ms` 2 000,
    /// `bus.idle_poll_ms` 50), listening on a free loopback port.
    pub async fn start(store: Store) -> Scene {
        let mut config = Config {
            listen: "127.0.0.1:0".parse().expect("loopback address"),
            ..Config::default()
        };
        let backing = StoreBus::open(store, &mut config, "wake bench: postgres").await;
        let bus = backing.bus.clone();
        let team = bus
            .add_team("wake-bench", None, None)
            .await
            .expect("create team");
        let server = Server::start(bus.clone(), config.listen, Shutdown::new())
            .await
            .expect("start server");
        Scene {
            store,
            server,
            bus,
            team,
            home: tempfile::tempdir().expect("temporary home"),
            backing,
        }
    }

    /// The Postgres store's database.
    pub fn db(&self) -> Option<&TestDatabase> {
        self.backing.db.as_ref()
    }

    /// A new agent of the team, its token written to a 0600 file in the home.
    pub async fn member(&self, name: &str) -> Member {
        use std::io::Write as _;
        use std::os::unix::fs::OpenOptionsExt as _;
        let new = self
            .bus
            .add_agent(self.team.id, name)
            .await
            .expect("create agent");
        let token_file = self.home.path().join(format!("{name}.token"));
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&token_file)
            .expect("token file");
        writeln!(file, "{}", new.token).expect("write token file");
        Member {
            id: new.agent.id,
            client: ApiClient::new(self.server.url(), Some(new.token)),
            token_file,
        }
    }

    /// A conversation `creator` opens with `members`.
    pub async fn conversation(&self, creator: &Member, title: &str, members: &[Uuid]) -> Uuid {
        let creator = self
            .bus
            .ports()
            .ledger
            .agent(self.team.id, creator.id)
            .await
            .expect("creator");
        self.bus
            .create_conversation(
                &creator,
                title,
                &members.iter().map(Uuid::to_string).collect::<Vec<_>>(),
            )
            .await
            .expect("create conversation")
            .id
    }

    /// Waits until `ready` holds, checking every millisecond; panics naming `what` after
    /// `within`.
    pub async fn until(&self, what: &str, within: Duration, mut ready: impl FnMut() -> bool) {
        let deadline = Instant::now() + within;
        while !ready() {
            assert!(
                Instant::now() < deadline,
                "{}: {what} not within {within:?} (waiting fetches {}, waiting watches {})",
                self.store.name(),
                self.bus.waiting_fetches(),
                self.bus.waiting_watches()
            );
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    pub async fn stop(self) {
        self.server.stop().await;
        drop(self.bus);
        self.backing.close().await;
    }
}

/// The deliveries of `member`'s fetch, waiting up to 10 s: exactly the one message `sent` (a
/// send's answer), which is then confirmed. Panics otherwise. The fetch waits because the watch
/// reads the ledger: it reports a message once its receipt is committed, which can be a moment
/// before the inbox reference a fetch hands out is published (the reference worker's next
/// pass) — a fetch without a wait right after a channel event may find nothing yet.
pub async fn take_and_confirm(who: &str, member: &Member, sent: &Value) {
    let (status, answer) = member
        .client
        .fetch_waiting(10, 10_000)
        .await
        .expect("fetch");
    assert_eq!(status, 200, "{who}: fetch answered {status}: {answer}");
    let got = answer["deliveries"].as_array().cloned().unwrap_or_default();
    confirm_exactly(who, member, &got, sent).await;
}

/// Checks that `got` is exactly the message `sent` (a send's answer) and confirms it.
pub async fn confirm_exactly(who: &str, member: &Member, got: &[Value], sent: &Value) {
    assert_eq!(
        got.len(),
        1,
        "{who}: expected the one message sent: {got:?}"
    );
    assert_eq!(
        got[0]["message"]["id"], sent["message"]["id"],
        "{who}: another message"
    );
    let delivery: Uuid = got[0]["delivery_id"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("{who}: no delivery id: {}", got[0]));
    let results = member.client.confirm(&[delivery]).await.expect("confirm");
    assert_eq!(results.len(), 1, "{results:?}");
    assert_eq!(results[0]["outcome"], "confirmed", "{who}: {results:?}");
}
