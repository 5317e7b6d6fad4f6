//! What live console viewers cost the bus (issue 18, item 6), against no viewer in the same run:
//!
//! - **Throughput**: fully delivered messages per second with `VIEWERS` (20) live console
//!   viewers of the busy conversation ÷ with none (goal ≥ 0.95).
//! - **Idle cost**: CPU while `IDLE_VIEWERS` (50) live viewers are open and nothing happens,
//!   minus CPU with none, per second of the window (goal ≤ 0.02 of a core).
//!
//! Set-up (untimed), per store, one `crewbus` [`Server`] (HTTP API, console, workers; the
//! configuration's defaults) on 127.0.0.1 in this process, on the wall clock:
//! - **sqlite**: the embedded store in a fresh temporary directory (`compose::compose_as` as
//!   the server: created and migrated; in-process wake-ups and console feed);
//! - **postgres**: a fresh database on the server of `DATABASE_URL`
//!   (`crewbus_conformance::postgres::TestDatabase`, dropped at the end, kept and named if the
//!   run fails; unset or unreachable fails the run loudly), `compose::postgres_with_pool` over
//!   a pool of the production default size (10): the feed crosses servers by `LISTEN/NOTIFY`,
//!   so its NOTIFY per committed batch and its listener count here.
//!
//! One team, one conversation of `MEMBERS` (4) agents, an operator of every team.
//!
//! **A viewer** is what a browser tab on the conversation page does: it signs in with the
//! operator's token through the sign-in form (a session of its own), loads the conversation page
//! with its stylesheet and script, and opens the page's live stream (`GET /console/events?…`, the
//! page's `data-events`), reading every byte the server sends (the `swap` events: the messages
//! part rendered again, at most every 500 ms per viewer). Once a minute it loads the page again,
//! as a person moving between pages would, and reopens the stream; the viewers' reloads are
//! spread over the minute (viewer *i* first after *i* × 60 s / `VIEWERS`).
//!
//! **A phase** (timed): `SENDERS_PER_MEMBER` (4) tasks per member each send
//! `MESSAGES_PER_SENDER` messages one after the other (`POST /v1/conversations/{id}/messages`,
//! 16 concurrent senders), while each member's receiver fetches (`wait_ms` 2 000, limit 100) and
//! confirms what it got; the phase ends when every recipient has confirmed every message sent to
//! it (3 per message). Checked: every send is `201`, every confirm `confirmed`, no message is
//! received twice by one member. Rate = messages ÷ the phase's time. Targets `none` and
//! `viewers` alternate, the order flipping every round (`ROUNDS` rounds), so the neighbours'
//! load and the store's growth hit both alike; each target's rate is Σ messages ÷ Σ time. The
//! viewers of a `viewers` phase are signed in and their streams open before its clock starts;
//! after it, every viewer must have received at least one `swap` (it saw the conversation
//! change), within 10 s. Beside the rate, per target: CPU milliseconds per message of this
//! process (server, workers, the load's and the viewers' clients) and, on Postgres, of every
//! postgres process (utime + stime at the phase's start and end: a diagnostic of where the
//! viewers' cost goes).
//!
//! **Idle** (after the phases): CPU seconds over a window (`WINDOW`, 30 s) with no viewer, then
//! over a window with `IDLE_VIEWERS` viewers whose streams are open (no reloads: nobody is at
//! the keyboard). CPU seconds are utime + stime from `/proc/<pid>/stat` of this process (the
//! server, its workers, and the viewers' client tasks, which run here too) and, on Postgres,
//! every process whose `comm` is `postgres` (the whole shared server: other databases' sessions
//! count too).
//!
//! Test mode (`cargo test --bench console_viewers`; `scripts/test` runs every bench so): one
//! round of 2 messages per sender, 3 viewers, 1 s windows with 5 viewers — it checks that every
//! message is delivered and that every viewer saw the conversation change, never a speed.
//!
//! Reproduce: `DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres cargo bench -p
//! crewbus-benches --bench console_viewers`.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crewbus::bus::Bus;
use crewbus::client::ApiClient;
use crewbus::config::Config;
use crewbus::server::Server;
use crewbus::shutdown::Shutdown;
use crewbus_domain::{Team, Uuid};
use reqwest::StatusCode;
use tokio::task::JoinHandle;

mod support;
use crewbus_benches::kit::store::{STORES, Store, StoreBus};
use support::cpu::{PostgresWindow, cpu_ticks, load_average, postgres_ticks, tick_seconds};
use support::measuring;
use support::rounds::{Order, Tally, rounds};

/// Live viewers of the throughput phases, and of the idle window.
const VIEWERS: usize = 20;
const IDLE_VIEWERS: usize = 50;
const TEST_VIEWERS: usize = 3;
const TEST_IDLE_VIEWERS: usize = 5;
/// Members of the conversation; sending tasks per member; messages per sending task.
const MEMBERS: usize = 4;
const SENDERS_PER_MEMBER: usize = 4;
const MESSAGES_PER_SENDER: usize = 120;
const TEST_MESSAGES_PER_SENDER: usize = 2;
/// Rounds of (none, viewers), the order flipping every round.
const ROUNDS: usize = 3;
/// How often a viewer loads its page again.
const RELOAD_EVERY: Duration = Duration::from_secs(60);
/// The idle windows.
const WINDOW: Duration = Duration::from_secs(30);
const TEST_WINDOW: Duration = Duration::from_secs(1);
/// `wait_ms` and limit of a receiver's fetch.
const FETCH_WAIT_MS: u64 = 2_000;
const FETCH_LIMIT: usize = 100;
/// How long a phase, a viewer's sign-in or its first swap may take before the run fails.
const PHASE_DEADLINE: Duration = Duration::from_secs(300);
const VIEWER_DEADLINE: Duration = Duration::from_secs(10);
/// The goals.
const RATIO_GOAL: f64 = 0.95;
const IDLE_CORES: f64 = 0.02;

/// One server on one store, its team, conversation and members.
struct Scene {
    server: Server,
    bus: Bus,
    conversation: Uuid,
    team: Team,
    members: Vec<(Uuid, ApiClient)>,
    operator_token: String,
    store: StoreBus,
}

impl Scene {
    async fn start(store: Store) -> Scene {
        let mut config = Config {
            listen: "127.0.0.1:0".parse().expect("loopback address"),
            ..Config::default()
        };
        let store = StoreBus::open(store, &mut config, "console_viewers bench: postgres").await;
        let bus = store.bus.clone();
        let team = bus
            .add_team("console-bench", None, None)
            .await
            .expect("create team");
        let server = Server::start(bus.clone(), config.listen, Shutdown::new())
            .await
            .expect("start server");
        let mut members = Vec::new();
        for i in 0..MEMBERS {
            let new = bus
                .add_agent(team.id, &format!("agent-{i}"))
                .await
                .expect("create agent");
            members.push((new.agent.id, ApiClient::new(server.url(), Some(new.token))));
        }
        let creator = bus
            .ports()
            .ledger
            .agent(team.id, members[0].0)
            .await
            .expect("creator");
        let others: Vec<String> = members[1..].iter().map(|(id, _)| id.to_string()).collect();
        let conversation = bus
            .create_conversation(&creator, "busy", &others)
            .await
            .expect("create conversation")
            .id;
        let operator_token = bus
            .add_operator("viewer", &[])
            .await
            .expect("create operator")
            .token;
        Scene {
            server,
            bus,
            conversation,
            team,
            members,
            operator_token,
            store,
        }
    }

    fn conversation_page(&self) -> String {
        format!(
            "/console/teams/{}/conversations/{}",
            self.team.id, self.conversation
        )
    }

    async fn stop(self) {
        self.server.stop().await;
        drop(self.bus);
        self.store.close().await;
    }
}

// --- a viewer ---------------------------------------------------------------------------------

/// A signed-in browser tab without a browser: a session cookie, redirects not followed.
struct Tab {
    base: String,
    http: reqwest::Client,
    cookies: HashMap<String, String>,
}

impl Tab {
    fn cookie(&self) -> String {
        self.cookies
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join("; ")
    }

    fn keep(&mut self, r: &reqwest::Response) {
        for set in r.headers().get_all(reqwest::header::SET_COOKIE) {
            let set = set.to_str().expect("a cookie in ASCII");
            let pair = set.split(';').next().unwrap_or("");
            if let Some((name, value)) = pair.split_once('=') {
                self.cookies.insert(name.to_owned(), value.to_owned());
            }
        }
    }

    async fn get(&mut self, path: &str) -> reqwest::Response {
        let r = self
            .http
            .get(format!("{}{path}", self.base))
            .header("cookie", self.cookie())
            .send()
            .await
            .unwrap_or_else(|e| panic!("GET {path}: {e}"));
        self.keep(&r);
        r
    }

    async fn text(&mut self, path: &str) -> String {
        let r = self.get(path).await;
        assert_eq!(r.status(), StatusCode::OK, "GET {path}");
        r.text().await.expect("a page")
    }

    /// Signs in through the form with an operator token.
    async fn sign_in(base: &str, token: &str) -> Tab {
        let mut tab = Tab {
            base: base.to_owned(),
            http: reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .expect("client"),
            cookies: HashMap::new(),
        };
        let form = tab.text("/console/sign-in").await;
        let csrf = attribute_after(&form, "name=\"_csrf\"", "value=\"");
        let r = tab
            .http
            .post(format!("{base}/console/sign-in"))
            .header("cookie", tab.cookie())
            .header("origin", base)
            .form(&[("_csrf", csrf.as_str()), ("token", token)])
            .send()
            .await
            .expect("sign in");
        assert_eq!(r.status(), StatusCode::SEE_OTHER, "signed in");
        tab.keep(&r);
        tab
    }

    /// Loads `page` as a browser does (the page, its stylesheet and script) and answers the
    /// URL of its live stream.
    async fn load(&mut self, page: &str) -> String {
        let html = self.text(page).await;
        for asset in ["/console/static/console.css", "/console/static/console.js"] {
            let body = self.get(asset).await;
            assert_eq!(body.status(), StatusCode::OK, "{asset}");
            body.bytes().await.expect("an asset");
        }
        attribute_after(&html, "<main id=\"main\"", "data-events=\"").replace("&#38;", "&")
    }
}

/// The value of the attribute that starts with `prefix` (up to its closing `"`), the first
/// after `anchor` in `html`.
fn attribute_after(html: &str, anchor: &str, prefix: &str) -> String {
    let at = html
        .find(anchor)
        .unwrap_or_else(|| panic!("no {anchor} in:\n{html}"));
    let rest = &html[at..];
    let start = rest.find(prefix).expect("the attribute") + prefix.len();
    let end = rest[start..].find('"').expect("its end");
    rest[start..start + end].to_owned()
}

/// A live viewer: its task and what it saw.
struct Viewer {
    task: JoinHandle<()>,
    /// `swap` events received.
    swaps: Arc<AtomicU64>,
    /// Whether its stream is open (answered `200`).
    open: Arc<AtomicBool>,
}

/// The `swap` events in `chunk`, given the bytes that ended the previous chunk (`carry`, kept
/// short: a marker split across two chunks is counted once).
fn count_swaps(carry: &mut Vec<u8>, chunk: &[u8]) -> u64 {
    const MARKER: &[u8] = b"event: swap";
    carry.extend_from_slice(chunk);
    let n = carry.windows(MARKER.len()).filter(|w| *w == MARKER).count() as u64;
    let keep = carry.len().min(MARKER.len() - 1);
    carry.drain(..carry.len() - keep);
    n
}

/// Starts a viewer of `page`: signs in, loads the page and reads its stream; with `reload`, it
/// loads the page again every [`RELOAD_EVERY`], the first time after `first_reload`.
async fn viewer(base: &str, token: &str, page: String, reload: Option<Duration>) -> Viewer {
    let mut tab = Tab::sign_in(base, token).await;
    let swaps = Arc::new(AtomicU64::new(0));
    let open = Arc::new(AtomicBool::new(false));
    let (seen, opened) = (Arc::clone(&swaps), Arc::clone(&open));
    let task = tokio::spawn(async move {
        let mut next_reload = reload.map(|first| tokio::time::Instant::now() + first);
        loop {
            let events = tab.load(&page).await;
            let mut stream = tab.get(&events).await;
            assert_eq!(stream.status(), StatusCode::OK, "the live stream");
            opened.store(true, Ordering::SeqCst);
            let mut carry = Vec::new();
            loop {
                let chunk = match next_reload {
                    Some(at) => match tokio::time::timeout_at(at, stream.chunk()).await {
                        Ok(chunk) => chunk,
                        Err(_) => break,
                    },
                    None => stream.chunk().await,
                };
                match chunk.expect("the live stream") {
                    Some(bytes) => {
                        seen.fetch_add(count_swaps(&mut carry, &bytes), Ordering::SeqCst);
                    }
                    None => panic!("the server ended a live stream"),
                }
            }
            next_reload = next_reload.map(|at| at + RELOAD_EVERY);
        }
    });
    Viewer { task, swaps, open }
}

/// `n` viewers of the scene's conversation page, every stream open when this returns.
async fn open_viewers(s: &Scene, n: usize, reloads: bool) -> Vec<Viewer> {
    let mut viewers = Vec::new();
    for i in 0..n {
        let first = reloads.then(|| RELOAD_EVERY.mul_f64((i + 1) as f64 / n as f64));
        viewers.push(
            viewer(
                &s.server.url(),
                &s.operator_token,
                s.conversation_page(),
                first,
            )
            .await,
        );
    }
    let deadline = Instant::now() + VIEWER_DEADLINE;
    while !viewers.iter().all(|v| v.open.load(Ordering::SeqCst)) {
        assert!(Instant::now() < deadline, "every viewer's stream opens");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    viewers
}

fn close(viewers: Vec<Viewer>) {
    for v in viewers {
        v.task.abort();
    }
}

// --- the load ---------------------------------------------------------------------------------

/// One timed phase: every member's senders send `per_sender` messages each while its receiver
/// fetches and confirms; answers the messages sent and the time until every recipient had
/// confirmed every one.
async fn phase(s: &Scene, per_sender: usize, round: usize, target: &str) -> (usize, Duration) {
    let sent_total = MEMBERS * SENDERS_PER_MEMBER * per_sender;
    let expected_per_member = (MEMBERS - 1) * SENDERS_PER_MEMBER * per_sender;
    let conversation = s.conversation;
    let start = Instant::now();
    let mut tasks: Vec<JoinHandle<usize>> = Vec::new();
    for (m, (_, client)) in s.members.iter().enumerate() {
        for k in 0..SENDERS_PER_MEMBER {
            let client = client.clone();
            let tag = format!("{target}-{round}-{m}-{k}");
            tasks.push(tokio::spawn(async move {
                for i in 0..per_sender {
                    let body = format!("message {i} of {tag}: the build is green, moving on");
                    client
                        .send(conversation, &format!("{tag}-{i}"), &body)
                        .await
                        .unwrap_or_else(|f| panic!("send {tag}-{i}: {f:?}"));
                }
                0
            }));
        }
        let client = client.clone();
        tasks.push(tokio::spawn(async move {
            let mut got = HashSet::new();
            let deadline = Instant::now() + PHASE_DEADLINE;
            while got.len() < expected_per_member {
                assert!(
                    Instant::now() < deadline,
                    "member {m}: {} of {expected_per_member} messages",
                    got.len()
                );
                let (status, answer) = client
                    .fetch_waiting(FETCH_LIMIT, FETCH_WAIT_MS)
                    .await
                    .expect("fetch");
                assert_eq!(status, 200, "fetch: {answer}");
                let deliveries = answer["deliveries"].as_array().cloned().unwrap_or_default();
                let mut ids = Vec::new();
                for d in &deliveries {
                    let message: Uuid = d["message"]["id"]
                        .as_str()
                        .and_then(|v| v.parse().ok())
                        .expect("a message id");
                    assert!(got.insert(message), "member {m} received {message} twice");
                    ids.push(
                        d["delivery_id"]
                            .as_str()
                            .and_then(|v| v.parse().ok())
                            .expect("a delivery id"),
                    );
                }
                if !ids.is_empty() {
                    let results = client.confirm(&ids).await.expect("confirm");
                    assert!(
                        results.iter().all(|r| r["outcome"] == "confirmed"),
                        "{results:?}"
                    );
                }
            }
            got.len()
        }));
    }
    let mut received = 0;
    for t in tasks {
        received += t.await.expect("a load task");
    }
    let took = start.elapsed();
    assert_eq!(received, MEMBERS * expected_per_member);
    (sent_total, took)
}

// --- idle ---------------------------------------------------------------------------------------

/// CPU seconds so far of this process and (Postgres store) of every postgres process alive now.
fn phase_cpu(store: Store) -> (f64, f64) {
    let tick = tick_seconds();
    let ours = cpu_ticks("self").expect("/proc/self/stat") as f64 * tick;
    let pg = if store == Store::Postgres {
        postgres_ticks().values().sum::<u64>() as f64 * tick
    } else {
        0.0
    };
    (ours, pg)
}

/// CPU seconds of one window: this process, and every postgres process (Postgres store only,
/// sampled every 500 ms so sessions that start or end inside the window count up to their
/// last sample).
async fn cpu_window(store: Store, length: Duration) -> (f64, f64, f64) {
    let mut postgres = if store == Store::Postgres {
        PostgresWindow::open()
    } else {
        PostgresWindow::default()
    };
    let start = Instant::now();
    let ours = cpu_ticks("self").expect("/proc/self/stat");
    let end = start + length;
    loop {
        let now = Instant::now();
        if now >= end {
            break;
        }
        tokio::time::sleep((end - now).min(Duration::from_millis(500))).await;
        if store == Store::Postgres {
            postgres.sample();
        }
    }
    let ours = cpu_ticks("self").expect("/proc/self/stat") - ours;
    let seconds = start.elapsed().as_secs_f64();
    let spent = postgres.spent(|_| true);
    let tick = tick_seconds();
    (seconds, ours as f64 * tick, spent as f64 * tick)
}

// --- the run ------------------------------------------------------------------------------------

struct Figures {
    store: Store,
    viewers_n: usize,
    idle_n: usize,
    none: f64,
    viewers: f64,
    swaps: u64,
    /// CPU milliseconds per message (this process, postgres), without and with viewers.
    cpu: ((f64, f64), (f64, f64)),
    idle: ((f64, f64, f64), (f64, f64, f64)),
}

fn met(ok: bool) -> &'static str {
    if ok { "met" } else { "NOT met" }
}

async fn run(store: Store, bench: bool) -> Figures {
    let (per_sender, count, viewers_n, idle_n, window) = if bench {
        (MESSAGES_PER_SENDER, ROUNDS, VIEWERS, IDLE_VIEWERS, WINDOW)
    } else {
        (
            TEST_MESSAGES_PER_SENDER,
            1,
            TEST_VIEWERS,
            TEST_IDLE_VIEWERS,
            TEST_WINDOW,
        )
    };
    let s = Scene::start(store).await;
    // Warm-up (untimed): connections, caches, plans.
    phase(&s, per_sender.min(5), 0, "warm-up").await;
    // Per target: messages and time, and CPU seconds of this process and of postgres.
    let sent = Tally::new();
    let mut cpu: HashMap<&str, (f64, f64)> = HashMap::new();
    let mut swaps = 0;
    for (round, target) in rounds(count, ["none", "viewers"], Order::Turning) {
        let viewers = if target == "viewers" {
            open_viewers(&s, viewers_n, true).await
        } else {
            Vec::new()
        };
        let cpu_before = phase_cpu(store);
        let (n, took) = phase(&s, per_sender, round + 1, target).await;
        let (ours, pg) = phase_cpu(store);
        let (ours, pg) = (ours - cpu_before.0, pg - cpu_before.1);
        eprintln!(
            "{}: round {} {target}: {n} messages in {:.2} s = {:.0}/s; CPU per message: \
             this process {:.2} ms, postgres {:.2} ms (load average {})",
            store.name(),
            round + 1,
            took.as_secs_f64(),
            n as f64 / took.as_secs_f64(),
            ours * 1e3 / n as f64,
            pg * 1e3 / n as f64,
            load_average()
        );
        sent.add(target, n as u64, took);
        let c = cpu.entry(target).or_default();
        c.0 += ours;
        c.1 += pg;
        let deadline = Instant::now() + VIEWER_DEADLINE;
        while !viewers.iter().all(|v| v.swaps.load(Ordering::SeqCst) > 0) {
            assert!(
                Instant::now() < deadline,
                "every viewer saw the conversation change"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        swaps += viewers
            .iter()
            .map(|v| v.swaps.load(Ordering::SeqCst))
            .sum::<u64>();
        close(viewers);
    }
    let rate = |t: &'static str| sent.rate(&t).expect("messages sent");
    let (none, with) = (rate("none"), rate("viewers"));
    let per_message = |t: &'static str| {
        let (n, (ours, pg)) = (sent.items(&t) as f64, cpu[t]);
        (ours * 1e3 / n, pg * 1e3 / n)
    };
    let cpu = (per_message("none"), per_message("viewers"));
    let without = cpu_window(store, window).await;
    let idle = open_viewers(&s, idle_n, false).await;
    let with_idle = cpu_window(store, window).await;
    assert!(
        idle.iter().all(|v| !v.task.is_finished()),
        "every idle viewer's stream stayed open"
    );
    close(idle);
    s.stop().await;
    Figures {
        store,
        viewers_n,
        idle_n,
        none,
        viewers: with,
        swaps,
        cpu,
        idle: (without, with_idle),
    }
}

fn main() {
    let bench = measuring();
    eprintln!(
        "console_viewers bench ({}): load average {}",
        if bench { "bench mode" } else { "test mode" },
        load_average()
    );
    let runtime = support::runtime();
    runtime.block_on(async {
        let mut all = Vec::new();
        for store in STORES {
            all.push(run(store, bench).await);
        }
        eprintln!();
        eprintln!(
            "| store | none (msg/s) | viewers (msg/s) | ratio (goal ≥ {RATIO_GOAL}) | \
             swaps received | idle: cores without | idle: cores with viewers | \
             idle cost (goal ≤ {IDLE_CORES}) |"
        );
        eprintln!("|---|---:|---:|---:|---:|---:|---:|---:|");
        for f in &all {
            let ratio = f.viewers / f.none;
            let per = |(secs, ours, pg): (f64, f64, f64)| (ours + pg) / secs;
            let (without, with) = (per(f.idle.0), per(f.idle.1));
            let cost = with - without;
            eprintln!(
                "| {} | {:.0} | {:.0} ({}) | {ratio:.3} ({}) | {} | {without:.4} | {with:.4} ({}) | \
                 {cost:.4} ({}) |",
                f.store.name(),
                f.none,
                f.viewers,
                f.viewers_n,
                met(ratio >= RATIO_GOAL),
                f.swaps,
                f.idle_n,
                met(cost <= IDLE_CORES)
            );
        }
        eprintln!();
        eprintln!(
            "| store | CPU ms per message, none: this process / postgres | with viewers | \
             extra per message |"
        );
        eprintln!("|---|---:|---:|---:|");
        for f in &all {
            let ((a, b), (c, d)) = f.cpu;
            eprintln!(
                "| {} | {a:.2} / {b:.2} | {c:.2} / {d:.2} | {:+.2} ms |",
                f.store.name(),
                (c + d) - (a + b)
            );
        }
        if !bench {
            eprintln!(
                "\ntest mode: every message was delivered and every viewer saw the conversation \
                 change; the figures above are not speed measurements"
            );
        }
    });
}
