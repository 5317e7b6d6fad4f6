//! Stores made by older builds upgrade, through the product: every committed upgrade fixture
//! (`conformance/fixtures/upgrade/<store>-<version>.{sql,json}`, made by
//! `scripts/make-upgrade-fixtures` with that build's adapters) is loaded into a fresh store that
//! has exactly the migrations up to `<version>` — Postgres: a fresh database on `DATABASE_URL`'s
//! server; SQLite: a store file in a temp directory — and then `crewbus serve` (the built binary)
//! starts on it, applies the remaining migrations itself, and serves it with a private
//! `nats-server` (`NATS_SERVER_BIN`) for the fixture's `jetstream` conversation (its streams
//! provisioned first with `crewbus stream provision`).
//!
//! Then, over HTTP only, as each of the fixture's agents with its token: every delivery the
//! manifest expects (`outcome: deliver`) is handed out and confirmed exactly once (`confirmed`,
//! never `already_confirmed` nor handed out again); a hand-out made before the upgrade still
//! confirms by its old delivery id — before the recipient fetches anything (`before_fetch`), or
//! after the message was handed out again once its hold lapsed (`after_redelivery`: the old id is
//! `confirmed`, the newer one `already_confirmed`); a message confirmed before the upgrade is
//! never handed out again, even to the recipient whose reference was never acknowledged; the
//! failed message stays failed; bodies are the ones sent; receipts keep their times; a last
//! fetch with a wait finds nothing; the server relayed each outbox slot once and published a
//! reference for exactly the pairs that had none in the inbox (its `/metrics` counters); and
//! last, each message's sender sending it again is answered that message, while another member
//! using its request id gets a message of its own. Nothing here names a port or a table of
//! today's schema beyond the migrations' bookkeeping, so it holds across a redesign of the write
//! path.
//!
//! A database or store directory is kept (and named) when the test fails, with the server's log
//! printed.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use crewbus_conformance::child::SpawnTied;
use crewbus_conformance::nats::NatsServer;
use crewbus_conformance::postgres::{TestDatabase, database_url_options};
use crewbus_conformance::sqlite::TempStore;
use serde_json::{Value, json};
use sqlx::migrate::Migrator;
use uuid::Uuid;

/// How long a store may take to complete every delivery after the server is up.
const DELIVERIES_DEADLINE: Duration = Duration::from_secs(120);

/// How long `crewbus serve` may take to say where it listens.
const START_DEADLINE: Duration = Duration::from_secs(60);

/// One committed fixture: its manifest and its SQL.
struct Fixture {
    name: String,
    manifest: Value,
    sql: String,
}

impl Fixture {
    /// The schema version the data is in.
    fn version(&self) -> i64 {
        self.manifest["schema_version"]
            .as_i64()
            .expect("schema_version")
    }
}

/// Every fixture of `store` (`postgres`, `sqlite`), oldest schema first. Panics when there is
/// none: a test that upgrades nothing must not pass.
fn fixtures(store: &str) -> Vec<Fixture> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../conformance/fixtures/upgrade");
    let mut names: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("no fixtures directory {}: {e}", dir.display()))
        .map(|e| e.expect("a directory entry").path())
        .filter(|p| {
            p.extension().is_some_and(|x| x == "json")
                && p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with(&format!("{store}-")))
        })
        .collect();
    names.sort();
    assert!(
        !names.is_empty(),
        "no {store} upgrade fixture in {} (scripts/make-upgrade-fixtures makes them)",
        dir.display()
    );
    names
        .into_iter()
        .map(|path| {
            let manifest: Value =
                serde_json::from_str(&std::fs::read_to_string(&path).expect("manifest"))
                    .expect("manifest JSON");
            assert_eq!(manifest["store"], store, "{}", path.display());
            let sql = std::fs::read_to_string(dir.join(manifest["sql"].as_str().expect("sql")))
                .expect("the fixture's SQL");
            Fixture {
                name: path.file_stem().unwrap().to_string_lossy().into_owned(),
                manifest,
                sql,
            }
        })
        .collect()
}

/// sqlx's migrator for Postgres's migrations up to `version` only, as the build that made a
/// fixture ran them.
fn postgres_migrations_to(version: i64) -> Migrator {
    Migrator {
        migrations: std::borrow::Cow::Owned(
            crewbus_postgres::MIGRATOR
                .iter()
                .filter(|m| m.version <= version)
                .cloned()
                .collect(),
        ),
        ..Migrator::DEFAULT
    }
}

/// Every Postgres fixture: a fresh database with the fixture's migrations and data, upgraded by
/// `crewbus serve` (all of this build's migrations applied at start), then every delivery
/// completed ([`deliver_everything`]).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_stores_of_older_builds_upgrade_and_complete_every_delivery_exactly_once() {
    let admin = database_url_options();
    for fixture in fixtures("postgres") {
        let version = fixture.version();
        let label = format!("upgrade_fixtures::{}", fixture.name);
        let db = TestDatabase::create_with(admin.clone(), &label, 2, |pool| async move {
            postgres_migrations_to(version).run(&pool).await
        })
        .await;
        sqlx::raw_sql(&fixture.sql)
            .execute(db.pool())
            .await
            .unwrap_or_else(|e| panic!("{}: the fixture does not load: {e}", fixture.name));
        let applied = |pool: sqlx::PgPool| async move {
            sqlx::query_scalar::<_, i64>("SELECT version FROM _sqlx_migrations ORDER BY 1")
                .fetch_all(&pool)
                .await
                .expect("applied migrations")
        };
        assert_eq!(
            applied(db.pool().clone()).await.last(),
            Some(&version),
            "the store starts at the fixture's schema"
        );
        let url = crewbus_benches::kit::postgres::url(&db);
        let store =
            format!("[database]\nurl = \"{url}\"\nmax_connections = 4\nmigrate_on_start = true\n");
        let dir = tempfile::tempdir().expect("a temp dir");
        let nats = provisioned_nats(dir.path(), &fixture);
        let server = Serve::start(dir.path(), &store, &nats, &[]).await;
        let all: Vec<i64> = crewbus_postgres::MIGRATOR
            .iter()
            .map(|m| m.version)
            .collect();
        assert_eq!(
            applied(db.pool().clone()).await,
            all,
            "serve applied the migrations after the fixture's"
        );
        deliver_everything(&server, &fixture).await;
        server.stop();
        db.passed().await;
    }
}

/// Every SQLite fixture: a fresh store file with the fixture's migrations (`migrate_to`) and
/// data, upgraded by `crewbus serve` on it as the embedded store, then every delivery completed
/// ([`deliver_everything`]); afterwards the file has this build's whole schema (`check_schema`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_stores_of_older_builds_upgrade_and_complete_every_delivery_exactly_once() {
    for fixture in fixtures("sqlite") {
        let version = fixture.version();
        let temp = TempStore::new(&format!("upgrade_fixtures::{}", fixture.name));
        let data_dir = temp.path().parent().expect("the store's dir").to_owned();
        let file = temp.sibling("crewbus.db");
        let pools = crewbus_sqlite::open(
            &file,
            &crewbus_sqlite::SqliteConfig {
                create_if_missing: true,
                ..crewbus_sqlite::SqliteConfig::default()
            },
        )
        .await
        .expect("a store file");
        crewbus_sqlite::migrate_to(&pools, version)
            .await
            .expect("the fixture's migrations");
        let mut conn = pools.side_connection().await.expect("a connection");
        sqlx::raw_sql(&fixture.sql)
            .execute(&mut conn)
            .await
            .unwrap_or_else(|e| panic!("{}: the fixture does not load: {e}", fixture.name));
        drop(conn);
        pools.close().await;
        // A store without its push master key is refused (a new key would open nothing).
        write_master_key(&data_dir);
        let store = format!(
            "[storage]\nkind = \"sqlite\"\ndata_dir = \"{}\"\n",
            data_dir.display()
        );
        let dir = tempfile::tempdir().expect("a temp dir");
        let nats = provisioned_nats(dir.path(), &fixture);
        // The embedded store always sets up a dev team: name the fixture's, so serve finds its
        // agents and adds none.
        let mut dev = vec!["--dev-team".to_owned(), team_name(&fixture)];
        for a in fixture.manifest["agents"].as_array().expect("agents") {
            dev.extend(["--dev-agent".to_owned(), a["name"].as_str().unwrap().into()]);
        }
        let server = Serve::start(dir.path(), &store, &nats, &dev).await;
        deliver_everything(&server, &fixture).await;
        server.stop();

        let pools = crewbus_sqlite::open(&file, &crewbus_sqlite::SqliteConfig::default())
            .await
            .expect("the store again");
        crewbus_sqlite::check_schema(&pools)
            .await
            .expect("serve applied the migrations after the fixture's");
        pools.close().await;
        drop(temp);
    }
}

/// The fixture team's name.
fn team_name(fixture: &Fixture) -> String {
    fixture.manifest["team"]["name"]
        .as_str()
        .expect("team name")
        .to_owned()
}

/// A push master key (base64 of 32 bytes, mode 0600) in the embedded store's directory.
fn write_master_key(data_dir: &Path) {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(data_dir.join("master.key"))
        .expect("master.key");
    f.write_all(b"dXBncmFkZS1maXh0dXJlLW1hc3Rlci1rZXktMzJieXQ=")
        .expect("write master.key");
}

/// The `[nats]` section for `nats` (runtime and provisioning users of the fixture's
/// configuration; limits small enough for a test server).
fn nats_toml(nats: &NatsServer) -> String {
    format!(
        "[nats]\nservers = [\"{}\"]\nrequest_timeout_ms = 2000\nbody_max_bytes = 67108864\n\
         inbox_max_bytes = 16777216\ninbox_max_messages = 100000\n{}",
        nats.url(),
        crewbus_benches::kit::nats::credentials_toml()
    )
}

/// A private nats-server with the fixture team's streams, provisioned by `crewbus stream
/// provision --team <id>` on the memory store (which touches no store: the fixture's schema is
/// not this build's yet).
fn provisioned_nats(dir: &Path, fixture: &Fixture) -> NatsServer {
    let nats = NatsServer::start();
    let config = dir.join("provision.toml");
    std::fs::write(
        &config,
        format!("[storage]\nkind = \"memory\"\n{}", nats_toml(&nats)),
    )
    .expect("provision.toml");
    let team = fixture.manifest["team"]["id"].as_str().expect("team id");
    let out = crewbus(&config)
        .args(["stream", "provision", "--team", team])
        .output()
        .expect("crewbus runs");
    assert!(
        out.status.success(),
        "stream provision failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    nats
}

/// The built binary with `config` and nothing of the test's environment.
fn crewbus(config: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_crewbus"));
    c.arg("--config")
        .arg(config)
        .env_remove("CREWBUS_CONFIG")
        .env_remove("CREWBUS_DATABASE__URL")
        .env_remove("CREWBUS_LISTEN")
        .env_remove("CREWBUS_STORAGE__KIND")
        .env_remove("CREWBUS_STORAGE__DATA_DIR")
        .stdin(Stdio::null());
    c
}

/// A running `crewbus serve` on a free loopback port, killed on drop (its log printed when the
/// test fails).
struct Serve {
    child: Child,
    url: String,
    log: PathBuf,
}

impl Serve {
    /// Writes the configuration (`store`, `[nats]`, short relay backoff and polls) under `dir`,
    /// starts `crewbus --json serve --listen 127.0.0.1:0 ARGS` and waits (deadline
    /// [`START_DEADLINE`]) for its address and a healthy `/health`. Panics with the server's log
    /// when it exits or says nothing in time.
    async fn start(dir: &Path, store: &str, nats: &NatsServer, args: &[String]) -> Serve {
        let config = dir.join("serve.toml");
        std::fs::write(
            &config,
            format!(
                "{store}[bus]\nidle_poll_ms = 20\nbackoff_base_ms = 50\nbackoff_cap_ms = 500\n\
                 backoff_max_attempts = 100\nmax_wait_ms = 5000\n[log]\nlevel = \"info\"\n{}",
                nats_toml(nats)
            ),
        )
        .expect("serve.toml");
        let log = dir.join("serve.log");
        let child = crewbus(&config)
            .args(["--json", "serve", "--listen", "127.0.0.1:0"])
            .args(args)
            .current_dir(dir)
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).expect("serve.log"))
            .spawn_tied()
            .expect("crewbus serve starts");
        // Owned at once, so a failed start below still kills it (and prints its log).
        let mut serve = Serve {
            child,
            url: String::new(),
            log,
        };
        let stdout = serve.child.stdout.take().expect("stdout");
        let (tx, rx) = tokio::sync::oneshot::channel();
        // Reads every line (the server never blocks on a full pipe); sends the address once.
        std::thread::spawn(move || {
            let mut tx = Some(tx);
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Ok(v) = serde_json::from_str::<Value>(&line)
                    && let Some(url) = v["listening"].as_str()
                    && let Some(tx) = tx.take()
                {
                    let _ = tx.send(url.to_owned());
                }
            }
        });
        match tokio::time::timeout(START_DEADLINE, rx).await {
            Ok(Ok(url)) => serve.url = url,
            _ => panic!(
                "crewbus serve said no address within {START_DEADLINE:?}:\n{}",
                serve.log_text()
            ),
        }
        let client = reqwest::Client::new();
        let deadline = Instant::now() + START_DEADLINE;
        loop {
            if let Ok(r) = client.get(format!("{}/health", serve.url)).send().await
                && r.status().is_success()
            {
                return serve;
            }
            if let Ok(Some(status)) = serve.child.try_wait() {
                panic!("crewbus serve exited ({status}):\n{}", serve.log_text());
            }
            assert!(
                Instant::now() < deadline,
                "crewbus serve not healthy in time:\n{}",
                serve.log_text()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// What the server wrote to stderr so far.
    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// SIGTERM, then waits for the exit (deadline 30 s).
    fn stop(mut self) {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .expect("kill");
        assert!(status.success());
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.child.try_wait().expect("wait").is_none() {
            assert!(Instant::now() < deadline, "serve did not stop on SIGTERM");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            let log = self.log_text();
            let tail: String = log
                .chars()
                .skip(log.chars().count().saturating_sub(6000))
                .collect();
            eprintln!("--- crewbus serve (log tail) ---\n{tail}");
        }
    }
}

/// An agent of a fixture.
struct Agent {
    name: String,
    id: Uuid,
    token: String,
}

/// A (message, recipient name) pair.
type Pair = (Uuid, String);

/// The id a JSON string holds. Panics on anything else.
fn uuid(v: &Value) -> Uuid {
    v.as_str()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("not an id: {v}"))
}

/// The instant a JSON string holds (RFC 3339); `None` for null or absent.
fn instant(v: &Value) -> Option<DateTime<Utc>> {
    v.as_str().map(|s| {
        s.parse()
            .unwrap_or_else(|e| panic!("not an instant: {s}: {e}"))
    })
}

/// `method path` as `agent` with a JSON `body` (GET: none): the status and the JSON answer.
async fn call(
    client: &reqwest::Client,
    server: &Serve,
    agent: &Agent,
    method: &str,
    path: &str,
    body: Value,
) -> (u16, Value) {
    let url = format!("{}{path}", server.url);
    let request = match method {
        "GET" => client.get(url),
        _ => client.post(url).json(&body),
    };
    let r = request
        .bearer_auth(&agent.token)
        .send()
        .await
        .unwrap_or_else(|e| panic!("{method} {path} as {}: {e}", agent.name));
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

/// `POST /v1/inbox/fetch {limit: 100, wait_ms}` as `agent`: the deliveries.
async fn fetch(
    client: &reqwest::Client,
    server: &Serve,
    agent: &Agent,
    wait_ms: u64,
) -> Vec<Value> {
    let (status, page) = call(
        client,
        server,
        agent,
        "POST",
        "/v1/inbox/fetch",
        json!({"limit": 100, "wait_ms": wait_ms}),
    )
    .await;
    assert_eq!(status, 200, "fetch as {}: {page}", agent.name);
    page["deliveries"].as_array().expect("deliveries").clone()
}

/// `POST /v1/inbox/confirm` of `ids` as `agent`: per id, its outcome and message.
async fn confirm(
    client: &reqwest::Client,
    server: &Serve,
    agent: &Agent,
    ids: &[Uuid],
) -> Vec<(Uuid, String, Option<Uuid>)> {
    let (status, answer) = call(
        client,
        server,
        agent,
        "POST",
        "/v1/inbox/confirm",
        json!({"deliveries": ids}),
    )
    .await;
    assert_eq!(status, 200, "confirm as {}: {answer}", agent.name);
    answer["results"]
        .as_array()
        .expect("results")
        .iter()
        .map(|r| {
            (
                uuid(&r["delivery_id"]),
                r["outcome"].as_str().expect("outcome").to_owned(),
                r["message"].as_str().map(|_| uuid(&r["message"])),
            )
        })
        .collect()
}

/// The unlabelled samples of the server's `GET /metrics` (Prometheus text): name → value.
async fn metrics(client: &reqwest::Client, server: &Serve) -> BTreeMap<String, u64> {
    let r = client
        .get(format!("{}/metrics", server.url))
        .send()
        .await
        .expect("GET /metrics");
    assert_eq!(r.status().as_u16(), 200, "GET /metrics");
    let text = r.text().await.expect("the metrics text");
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (name, value) = l.split_once(' ')?;
            Some((name.to_owned(), value.trim().parse().ok()?))
        })
        .collect()
}

/// The server's (slots relayed, references published) counters from `/metrics` (0 when a
/// counter is not there yet).
async fn published(client: &reqwest::Client, server: &Serve) -> (u64, u64) {
    let counters = metrics(client, server).await;
    let get = |n: &str| counters.get(n).copied().unwrap_or(0);
    (
        get("crewbus_relay_published_total"),
        get("crewbus_references_published_total"),
    )
}

/// Drives the upgraded store over HTTP until every delivery of the fixture is completed, and
/// checks what the module docs say.
async fn deliver_everything(server: &Serve, fixture: &Fixture) {
    let m = &fixture.manifest;
    let name = &fixture.name;
    let client = reqwest::Client::new();
    let agents: Vec<Agent> = m["agents"]
        .as_array()
        .expect("agents")
        .iter()
        .map(|a| Agent {
            name: a["name"].as_str().expect("name").to_owned(),
            id: uuid(&a["id"]),
            token: a["token"].as_str().expect("token").to_owned(),
        })
        .collect();
    let agent = |n: &str| {
        agents
            .iter()
            .find(|a| a.name == n)
            .expect("a fixture agent")
    };
    let messages = m["messages"].as_array().expect("messages");
    let bodies: BTreeMap<Uuid, &str> = messages
        .iter()
        .map(|x| (uuid(&x["id"]), x["body"].as_str().expect("body")))
        .collect();

    let mut expected: BTreeSet<Pair> = BTreeSet::new();
    let mut never: BTreeSet<Pair> = BTreeSet::new();
    let mut before_fetch: Vec<(Pair, Uuid)> = Vec::new();
    let mut after_redelivery: BTreeMap<Pair, Uuid> = BTreeMap::new();
    for d in m["deliveries"].as_array().expect("deliveries") {
        let pair = (
            uuid(&d["message"]),
            d["recipient"].as_str().expect("recipient").to_owned(),
        );
        match d["outcome"].as_str() {
            Some("deliver") => expected.insert(pair.clone()),
            Some("delivered" | "failed") => never.insert(pair.clone()),
            other => panic!("{name}: unknown outcome {other:?}"),
        };
        if !d["delivery_id"].is_null() {
            let old = uuid(&d["delivery_id"]);
            match d["confirm_old"].as_str() {
                Some("before_fetch") => before_fetch.push((pair, old)),
                Some("after_redelivery") => {
                    after_redelivery.insert(pair, old);
                }
                other => panic!("{name}: unknown confirm_old {other:?}"),
            }
        }
    }
    assert!(!expected.is_empty(), "{name}: nothing to deliver");

    // What this server publishes, from its /metrics counters, before any fetch (the ledger's
    // top-up would otherwise deliver a message whose reference is owed, and the reference of a
    // delivered pair is never sent): each slot of the fixture once (its message
    // `pending_publication`), and a reference for exactly the pairs whose reference was not in
    // the inbox before the upgrade — those the stored message's inbox events still owed
    // (`reference_pending`: the migrations carry them over, not lost) and those of the slots'
    // messages. Waited for with a deadline: the relay and the reference worker run on their own.
    let mut owed = 0;
    for d in m["deliveries"].as_array().expect("deliveries") {
        match d["state"].as_str().expect("state") {
            "reference_pending" | "slot_pending" | "slot_retried" | "slot_uncertain" => owed += 1,
            "confirmed"
            | "confirmed_reference_unacked"
            | "handed_out"
            | "handed_out_by_top_up"
            | "reference_published"
            | "reference_lost"
            | "failed" => {}
            other => panic!("{name}: unknown state {other}"),
        }
    }
    let slots = messages
        .iter()
        .filter(|x| x["publication"] == "pending_publication")
        .count() as u64;
    assert!(owed > 0 && slots > 0, "{name}: nothing to publish");
    let deadline = Instant::now() + DELIVERIES_DEADLINE;
    loop {
        let now = published(&client, server).await;
        if now == (slots, owed) {
            break;
        }
        assert!(
            now.0 <= slots && now.1 <= owed && Instant::now() < deadline,
            "{name}: slots relayed and references published by the upgraded server: {now:?}, \
             wanted ({slots}, {owed})"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // Every token is still its agent's.
    for a in &agents {
        let (status, me) = call(&client, server, a, "GET", "/v1/me", Value::Null).await;
        assert_eq!(status, 200, "{name}: {}'s token: {me}", a.name);
        assert_eq!((uuid(&me["id"]), &me["name"]), (a.id, &json!(a.name)));
    }

    // A hand-out from before the upgrade confirms by its id, before anything is fetched.
    let mut confirmed: BTreeSet<Pair> = BTreeSet::new();
    for (pair, old) in &before_fetch {
        assert_eq!(
            confirm(&client, server, agent(&pair.1), &[*old]).await,
            [(*old, "confirmed".to_owned(), Some(pair.0))],
            "{name}: {pair:?}'s delivery id from before the upgrade"
        );
        confirmed.insert(pair.clone());
    }

    // Fetch and confirm as every agent until every expected delivery is confirmed, once.
    let started = Instant::now();
    while confirmed != expected {
        let missing: Vec<&Pair> = expected.difference(&confirmed).collect();
        assert!(
            started.elapsed() < DELIVERIES_DEADLINE,
            "{name}: not delivered within {DELIVERIES_DEADLINE:?}: {missing:?}"
        );
        for a in &agents {
            let mut fresh: Vec<(Pair, Uuid)> = Vec::new();
            for d in fetch(&client, server, a, 200).await {
                let message = uuid(&d["message"]["id"]);
                let pair = (message, a.name.clone());
                let id = uuid(&d["delivery_id"]);
                assert!(
                    !never.contains(&pair),
                    "{name}: {pair:?} was delivered or failed before the upgrade, and is handed \
                     out: {d}"
                );
                assert!(
                    expected.contains(&pair),
                    "{name}: {pair:?} is no delivery: {d}"
                );
                assert!(
                    !confirmed.contains(&pair),
                    "{name}: {pair:?} is handed out again after it was confirmed: {d}"
                );
                assert_eq!(d["body"], bodies[&message], "{name}: {pair:?}'s body");
                match after_redelivery.get(&pair) {
                    Some(&old) => {
                        assert_eq!(d["redelivered"], true, "{name}: {pair:?} again: {d}");
                        assert_ne!(id, old, "{name}: a new hand-out has a new id");
                        assert_eq!(
                            confirm(&client, server, a, &[old]).await,
                            [(old, "confirmed".to_owned(), Some(message))],
                            "{name}: {pair:?}'s delivery id from before the upgrade"
                        );
                        assert_eq!(
                            confirm(&client, server, a, &[id]).await,
                            [(id, "already_confirmed".to_owned(), Some(message))],
                            "{name}: {pair:?}'s newer delivery id"
                        );
                        confirmed.insert(pair);
                    }
                    None => fresh.push((pair, id)),
                }
            }
            if fresh.is_empty() {
                continue;
            }
            let ids: Vec<Uuid> = fresh.iter().map(|(_, id)| *id).collect();
            let results = confirm(&client, server, a, &ids).await;
            for ((pair, id), result) in fresh.into_iter().zip(results) {
                assert_eq!(
                    result,
                    (id, "confirmed".to_owned(), Some(pair.0)),
                    "{name}: {pair:?}"
                );
                confirmed.insert(pair);
            }
        }
    }

    // Nothing is left for anyone.
    let last =
        futures_util::future::join_all(agents.iter().map(|a| fetch(&client, server, a, 1000)))
            .await;
    for (a, left) in agents.iter().zip(last) {
        assert!(
            left.is_empty(),
            "{name}: {} is handed out more: {left:?}",
            a.name
        );
    }

    // Nothing more published while the deliveries were completed: no reference again for a
    // pair whose reference went out before, no slot relayed twice.
    assert_eq!(
        published(&client, server).await,
        (slots, owed),
        "{name}: slots relayed and references published once the deliveries were completed"
    );

    // Receipts, as each message's sender: delivered exactly for the deliveries, at the times
    // recorded before the upgrade where there were; the failed message's never.
    let by_id = |id: Uuid| &agents.iter().find(|a| a.id == id).expect("an agent").name;
    let deliveries = m["deliveries"].as_array().expect("deliveries");
    for x in messages {
        let id = uuid(&x["id"]);
        let sender = agent(x["sender"].as_str().expect("sender"));
        let (status, receipts) = call(
            &client,
            server,
            sender,
            "GET",
            &format!("/v1/messages/{id}/receipts"),
            Value::Null,
        )
        .await;
        assert_eq!(status, 200, "{name}: receipts of {id}: {receipts}");
        let mut recipients = BTreeSet::new();
        for r in receipts.as_array().expect("receipts") {
            let recipient = by_id(uuid(&r["recipient"]));
            let d = deliveries
                .iter()
                .find(|d| uuid(&d["message"]) == id && d["recipient"] == json!(recipient))
                .unwrap_or_else(|| panic!("{name}: a receipt of no delivery: {r}"));
            let delivered = instant(&r["delivered_at"]);
            match d["outcome"].as_str() {
                Some("failed") => assert_eq!(delivered, None, "{name}: {r}"),
                _ => assert!(delivered.is_some(), "{name}: {r}"),
            }
            if let Some(at) = instant(&d["delivered_at"]) {
                assert_eq!(
                    delivered,
                    Some(at),
                    "{name}: kept from before the upgrade: {r}"
                );
            }
            assert_eq!(
                instant(&r["acknowledged_at"]),
                instant(&d["acknowledged_at"]),
                "{name}: {r}"
            );
            recipients.insert(recipient.clone());
        }
        let wanted: BTreeSet<String> = deliveries
            .iter()
            .filter(|d| uuid(&d["message"]) == id)
            .map(|d| d["recipient"].as_str().expect("recipient").to_owned())
            .collect();
        assert_eq!(recipients, wanted, "{name}: the recipients of {id}");
    }

    // History: every message at its seq with its body and a request id; the failed one an
    // explained absence.
    let mut request_ids: BTreeMap<Uuid, String> = BTreeMap::new();
    for c in m["conversations"].as_array().expect("conversations") {
        let conversation = uuid(&c["id"]);
        let (status, page) = call(
            &client,
            server,
            &agents[0],
            "GET",
            &format!("/v1/conversations/{conversation}/messages?after_seq=0&limit=100"),
            Value::Null,
        )
        .await;
        assert_eq!(status, 200, "{name}: history: {page}");
        let items = page["messages"].as_array().expect("messages");
        let wanted: Vec<&Value> = messages
            .iter()
            .filter(|x| uuid(&x["conversation"]) == conversation)
            .collect();
        assert_eq!(items.len(), wanted.len(), "{name}: {page}");
        for (item, x) in items.iter().zip(wanted) {
            assert_eq!(
                (&item["message"]["id"], &item["message"]["seq"]),
                (&x["id"], &x["seq"]),
                "{name}: {item}"
            );
            let request_id = item["message"]["request_id"].as_str().unwrap_or_default();
            assert!(!request_id.is_empty(), "{name}: a request id: {item}");
            request_ids.insert(uuid(&x["id"]), request_id.to_owned());
            if x["publication"] == "failed" {
                assert_eq!(
                    (&item["absence"], &item["message"]["publication"]),
                    (&json!("failed"), &json!("failed")),
                    "{name}: the failed message stays failed: {item}"
                );
            } else {
                assert_eq!(item["body"], x["body"], "{name}: {item}");
            }
        }
    }

    // Request ids, last (these sends add messages): each message's sender sending it again
    // (its request id, its body) is answered that message (`200`, `created: false`), as before
    // the upgrade; another member sending the same request id and body in the conversation
    // gets a message of its own (`201`, the conversation's next seq): the idempotency key is
    // (conversation, sender, request id) once the store is upgraded.
    let mut next_seq: BTreeMap<Uuid, u64> = BTreeMap::new();
    for x in messages {
        let id = uuid(&x["id"]);
        let conversation = uuid(&x["conversation"]);
        let seq = x["seq"].as_u64().expect("seq");
        let next = next_seq.entry(conversation).or_insert(0);
        *next = (*next).max(seq + 1);
        let sender = agent(x["sender"].as_str().expect("sender"));
        let (status, sent) = call(
            &client,
            server,
            sender,
            "POST",
            &format!("/v1/conversations/{conversation}/messages"),
            json!({"request_id": request_ids[&id], "body": bodies[&id]}),
        )
        .await;
        assert_eq!(
            (status, &sent["created"], &sent["message"]["id"]),
            (200, &json!(false), &x["id"]),
            "{name}: {} sending {id} again: {sent}",
            sender.name
        );
    }
    for c in m["conversations"].as_array().expect("conversations") {
        let conversation = uuid(&c["id"]);
        let x = messages
            .iter()
            .find(|x| uuid(&x["conversation"]) == conversation && x["publication"] != "failed")
            .unwrap_or_else(|| panic!("{name}: no message to send again in {conversation}"));
        let id = uuid(&x["id"]);
        let other = agents
            .iter()
            .find(|a| a.name != x["sender"].as_str().expect("sender"))
            .expect("another member");
        let (status, sent) = call(
            &client,
            server,
            other,
            "POST",
            &format!("/v1/conversations/{conversation}/messages"),
            json!({"request_id": request_ids[&id], "body": bodies[&id]}),
        )
        .await;
        assert_eq!(
            (status, &sent["created"], &sent["message"]["seq"]),
            (201, &json!(true), &json!(next_seq[&conversation])),
            "{name}: {} sending {id}'s request id: {sent}",
            other.name
        );
        assert_ne!(sent["message"]["id"], x["id"], "{name}: {sent}");
    }
}
