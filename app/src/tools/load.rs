//! `crewbus load`: drives running servers over their HTTP API with simulated agents, measures
//! throughput and latency, and ends with a **zero-loss check**.
//!
//! The run: every team's agents are put into `conversations` conversations of `members` agents
//! each; `messages` messages per team are sent (round-robin over conversations and their
//! members) at `rate` messages per second in total (0: as fast as `senders` concurrent senders
//! per team go), with bodies of `body_bytes..=body_bytes_max` bytes. Every agent fetches and
//! confirms what it receives while the senders run and until every recipient has confirmed every
//! accepted message (or the drain deadline passes).
//!
//! Transient failures (no answer, 429, 5xx) are retried with the same `request_id` — the API is
//! idempotent on it — until `retry_for` passes, so a server, broker or database restart mid-run
//! loses nothing the bus accepted. A send refused with another 4xx (e.g. 507 `quota_exceeded`) is
//! counted as *rejected* for its team and is not expected anywhere.
//!
//! The zero-loss check ([`ZeroLoss`]) passes when:
//! - every accepted message appears exactly once in its conversation's history (the ledger),
//!   `stored`, and no two history entries share a `request_id`;
//! - every recipient (the conversation's members but the sender) confirmed every accepted message,
//!   the `confirmed` outcome came back at most once per (recipient, message), and no agent was
//!   handed a message again after it learned the message was confirmed;
//! - the ledger's receipts agree: one receipt per recipient, each with `delivered_at` set, for
//!   exactly the recipients the agents say confirmed it.

use std::collections::{HashMap, HashSet};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::Args;
use crewbus_domain::{BusError, BusResult, Uuid};
use futures_util::StreamExt as _;
use futures_util::stream::FuturesUnordered;
use reqwest::Method;
use serde::Serialize;
use serde_json::{Value, json};

use crate::config::BackendChoice;
use crate::config::Config;
use crate::tools::client::{ApiClient, ApiFailure, retry, uuid_of};

/// `crewbus load` options.
#[derive(Debug, Clone, Args)]
pub struct LoadArgs {
    /// Base URL of the server (repeatable: agents are spread round-robin over the servers).
    #[arg(
        long = "url",
        value_name = "URL",
        default_value = "http://127.0.0.1:7700"
    )]
    pub urls: Vec<String>,
    /// Create this many teams through the ledger (needs [database]), named
    /// `<team-prefix>-<n>-<random>`. Ignored when tokens are given.
    #[arg(long, default_value_t = 1)]
    pub teams: usize,
    /// Name prefix of the created teams.
    #[arg(long, default_value = "load")]
    pub team_prefix: String,
    /// Body backend (and inbox) of the created teams. Default: the ledger's own. `jetstream`
    /// provisions the teams' streams (needs [nats] with the provisioning credential).
    #[arg(long, value_enum)]
    pub backend: Option<BackendChoice>,
    /// Agents per created team.
    #[arg(long, default_value_t = 4)]
    pub agents: usize,
    /// Use these agents' bearer tokens instead of creating teams (repeatable; teams are learned
    /// from `/v1/me`). Also read from `--tokens-file`, one per line.
    #[arg(long = "token", value_name = "TOKEN")]
    pub tokens: Vec<String>,
    /// A file with one bearer token per line.
    #[arg(long, value_name = "PATH")]
    pub tokens_file: Option<std::path::PathBuf>,
    /// Conversations per team.
    #[arg(long, default_value_t = 2)]
    pub conversations: usize,
    /// Members per conversation (the sender plus `members - 1` recipients), at most the team's
    /// agents.
    #[arg(long, default_value_t = 4)]
    pub members: usize,
    /// Messages per team.
    #[arg(long, default_value_t = 1000)]
    pub messages: u64,
    /// Target send rate in messages per second over all teams (0: as fast as possible).
    #[arg(long, default_value_t = 0.0)]
    pub rate: f64,
    /// Concurrent senders per team.
    #[arg(long, default_value_t = 16)]
    pub senders: usize,
    /// Smallest body in bytes.
    #[arg(long, default_value_t = 256)]
    pub body_bytes: usize,
    /// Largest body in bytes (default: `--body-bytes`).
    #[arg(long)]
    pub body_bytes_max: Option<usize>,
    /// Deliveries asked for per fetch.
    #[arg(long, default_value_t = 100)]
    pub fetch_limit: usize,
    /// Seconds to keep retrying a request that gets no answer, 429 or 5xx.
    #[arg(long, default_value_t = 120)]
    pub retry_for: u64,
    /// Seconds to wait, after the last send, for every delivery to be confirmed.
    #[arg(long, default_value_t = 120)]
    pub drain_timeout: u64,
    /// No progress line on stderr.
    #[arg(long)]
    pub quiet: bool,
    /// Agents start fetching only after every send was answered (a backlog builds up).
    #[arg(long)]
    pub receive_after_send: bool,
}

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

/// What to run (see the module docs).
#[derive(Debug, Clone)]
pub struct LoadPlan {
    /// Conversations per team (≥ 1).
    pub conversations: usize,
    /// Members per conversation (≥ 2).
    pub members: usize,
    /// Messages per team.
    pub messages: u64,
    /// Messages per second over all teams; 0 = unpaced.
    pub rate: f64,
    /// Concurrent senders per team (≥ 1).
    pub senders: usize,
    /// Body size range in bytes.
    pub body_bytes: (usize, usize),
    /// Deliveries per fetch.
    pub fetch_limit: usize,
    /// How long a transient failure is retried.
    pub retry_for: Duration,
    /// How long to wait after the last send for every delivery.
    pub drain_timeout: Duration,
    /// Print a progress line on stderr about once a second.
    pub progress: bool,
    /// Agents start fetching only once every send was answered (builds a backlog, e.g. to
    /// overflow inboxes).
    pub receive_after_send: bool,
}

impl LoadPlan {
    /// The plan of the command-line options.
    pub fn from_args(a: &LoadArgs) -> Self {
        LoadPlan {
            conversations: a.conversations.max(1),
            members: a.members.max(2),
            messages: a.messages,
            rate: a.rate.max(0.0),
            senders: a.senders.max(1),
            body_bytes: (
                a.body_bytes,
                a.body_bytes_max.unwrap_or(a.body_bytes).max(a.body_bytes),
            ),
            fetch_limit: a.fetch_limit.clamp(1, 1000),
            retry_for: Duration::from_secs(a.retry_for),
            drain_timeout: Duration::from_secs(a.drain_timeout),
            progress: !a.quiet,
            receive_after_send: a.receive_after_send,
        }
    }
}

/// Counters of a running load, readable while it runs (e.g. to inject a fault mid-load).
#[derive(Debug, Default)]
pub struct LoadProgress {
    /// Messages accepted by the API (2xx) so far.
    pub accepted: AtomicU64,
    /// Sends refused with a non-retryable 4xx so far.
    pub rejected: AtomicU64,
    /// Deliveries confirmed by the agents so far (`confirmed` or `already_confirmed`, once per
    /// recipient and message).
    pub delivered: AtomicU64,
    /// Requests that failed transiently and were retried.
    pub retries: AtomicU64,
    /// Set when every sender finished.
    pub sending_done: AtomicBool,
}

/// Latency percentiles in milliseconds.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Percentiles {
    /// Samples.
    pub count: usize,
    /// Median, ms.
    pub p50_ms: f64,
    /// 95th percentile, ms.
    pub p95_ms: f64,
    /// 99th percentile, ms.
    pub p99_ms: f64,
    /// Largest, ms.
    pub max_ms: f64,
}

impl Percentiles {
    fn of(mut v: Vec<f64>) -> Self {
        if v.is_empty() {
            return Percentiles::default();
        }
        v.sort_by(f64::total_cmp);
        let at = |q: f64| v[((v.len() as f64 * q) as usize).min(v.len() - 1)];
        let r = |x: f64| (x * 10.0).round() / 10.0;
        Percentiles {
            count: v.len(),
            p50_ms: r(at(0.50)),
            p95_ms: r(at(0.95)),
            p99_ms: r(at(0.99)),
            max_ms: r(v[v.len() - 1]),
        }
    }
}

/// One team's figures.
#[derive(Debug, Clone, Serialize)]
pub struct TeamReport {
    /// The team's label.
    pub team: String,
    /// Messages accepted.
    pub accepted: u64,
    /// Sends refused (non-retryable 4xx), by error code.
    pub rejected: HashMap<String, u64>,
    /// Deliveries confirmed by its agents.
    pub delivered: u64,
    /// Accepted messages per second over the send phase of this team.
    pub messages_per_second: f64,
    /// Confirmed deliveries per second from the start to this team's last confirmation.
    pub deliveries_per_second: f64,
    /// Send (request start) → delivered (the fetch that returned it), first hand-outs only.
    pub send_to_delivered: Percentiles,
}

/// The outcome of the zero-loss check.
#[derive(Debug, Clone, Serialize)]
pub struct ZeroLoss {
    /// `true` when nothing accepted was lost or delivered twice.
    pub passed: bool,
    /// Messages checked in the ledger's history.
    pub messages_checked: u64,
    /// Receipts checked.
    pub receipts_checked: u64,
    /// Accepted messages the ledger marks `failed` (an explained loss: the send was accepted,
    /// the body backend refused it for good, e.g. a stream at its quota), by failure code.
    pub failed: HashMap<String, u64>,
    /// Accepted messages still `pending_publication` when the check ran (not stored yet, e.g.
    /// the relay retrying a full stream): the check fails, but nothing is lost yet.
    pub pending: u64,
    /// Accepted messages missing from history, or stored but not confirmed by every recipient
    /// (failed ones excepted): silent losses.
    pub lost: u64,
    /// Messages stored twice, `confirmed` twice for one recipient, or handed to an agent again
    /// after it knew the message was confirmed.
    pub duplicated: u64,
    /// Messages where the ledger's receipts and the agents' confirmations disagree (failed ones
    /// excepted).
    pub disagreements: u64,
    /// The first problems found (at most 20), each a sentence.
    pub problems: Vec<String>,
    /// How many problems there were in all.
    pub problem_count: u64,
}

/// The report of a run (`--json` prints it as is).
#[derive(Debug, Clone, Serialize)]
pub struct LoadReport {
    /// Teams.
    pub teams: usize,
    /// Agents over all teams.
    pub agents: usize,
    /// Conversations over all teams.
    pub conversations: usize,
    /// Recipients per message (`members - 1`).
    pub recipients_per_message: usize,
    /// Target rate, messages/s (0: unpaced).
    pub target_rate: f64,
    /// Body size range, bytes.
    pub body_bytes: (usize, usize),
    /// Messages accepted over all teams.
    pub accepted: u64,
    /// Sends refused (non-retryable 4xx).
    pub rejected: u64,
    /// Deliveries expected (accepted × recipients).
    pub deliveries_expected: u64,
    /// Deliveries confirmed.
    pub delivered: u64,
    /// Hand-outs marked `redelivered`.
    pub redeliveries: u64,
    /// Transient failures retried.
    pub retries: u64,
    /// Seconds from the first send to the last send's answer.
    pub send_seconds: f64,
    /// Seconds from the first send to the last confirmed delivery.
    pub total_seconds: f64,
    /// Accepted messages per second over the send phase.
    pub messages_per_second: f64,
    /// Confirmed deliveries per second over the whole run.
    pub deliveries_per_second: f64,
    /// Ledger `stored_at − sent_at` (the server's clock) of the accepted messages.
    pub send_to_stored: Percentiles,
    /// Send request start → the fetch that handed it out, first hand-outs only (the client's
    /// clock).
    pub send_to_delivered: Percentiles,
    /// Per team.
    pub per_team: Vec<TeamReport>,
    /// The zero-loss check.
    pub zero_loss: ZeroLoss,
}

/// A message the API accepted.
#[derive(Debug, Clone)]
struct Accepted {
    message: Uuid,
    team: usize,
    conversation: usize,
    sender: Uuid,
}

/// What one agent saw.
#[derive(Debug, Default)]
struct AgentLog {
    /// message → number of `confirmed` outcomes.
    confirmed: HashMap<Uuid, u32>,
    /// messages known confirmed (either outcome).
    settled: HashSet<Uuid>,
    /// A message handed out again after the agent knew it was confirmed.
    after_confirm: Vec<Uuid>,
}

#[derive(Debug)]
struct Conv {
    id: Uuid,
    team: usize,
    members: Vec<usize>, // agent indexes in the team
}

struct Shared {
    plan: LoadPlan,
    teams: Vec<LoadTeam>,
    convs: Vec<Conv>,
    progress: Arc<LoadProgress>,
    start: Instant,
    sent_at: Mutex<HashMap<String, Instant>>,
    accepted: Mutex<HashMap<String, Accepted>>,
    rejected: Mutex<Vec<HashMap<String, u64>>>,
    /// (team, ms) of first hand-outs.
    delivered_latency: Mutex<Vec<(usize, f64)>>,
    /// Per team: when its last send answered / its last delivery was confirmed.
    team_send_end: Mutex<Vec<Duration>>,
    team_delivered: Mutex<Vec<(u64, Duration)>>,
    redeliveries: AtomicU64,
    /// Ledger `stored_at − sent_at` in ms, filled by the check.
    stored_latency: Mutex<Vec<f64>>,
    stop_receivers: AtomicBool,
}

impl Shared {
    /// Calls until a non-transient answer or `retry_for` passes ([`retry`]), counting retries.
    async fn call(
        &self,
        client: &ApiClient,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> Result<Value, ApiFailure> {
        let until = Instant::now() + self.plan.retry_for;
        retry(
            until,
            |_| {
                self.progress.retries.fetch_add(1, Ordering::Relaxed);
            },
            || client.ok(method.clone(), path, body.clone()),
        )
        .await
    }
}

/// Creates `args.teams` teams with `args.agents` agents each through the ledger of `config`
/// (provisioning JetStream streams when the backend is `jetstream`), spreading agents over the
/// URLs. Errors: no database configured → `Invalid`; ledger or broker failures as returned.
pub async fn create_teams(config: &Config, args: &LoadArgs) -> BusResult<Vec<LoadTeam>> {
    if config.database.is_none() {
        return Err(BusError::invalid(
            "load needs agents: configure [database] (CREWBUS_DATABASE__URL) so it can create \
             teams, or pass --token/--tokens-file",
        ));
    }
    let bus = crate::compose::compose(config).await?.bus;
    let backend = args.backend.map(BackendChoice::name);
    let tag: u32 = rand::random();
    let mut teams = Vec::new();
    let mut spread = 0usize;
    for t in 0..args.teams.max(1) {
        let name = format!("{}-{t}-{tag:08x}", args.team_prefix);
        let team = bus.add_team(&name, backend, backend).await?;
        if backend == Some("jetstream") {
            let admin = crate::compose::stream_admin(config)?;
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

/// `crewbus load`: prints the report (text or `--json`); exit code 1 when the zero-loss check
/// fails.
pub async fn command(config: Config, args: LoadArgs, json: bool) -> BusResult<ExitCode> {
    let mut tokens = args.tokens.clone();
    if let Some(path) = &args.tokens_file {
        let text = std::fs::read_to_string(path)
            .map_err(|e| BusError::invalid(format!("cannot read {}: {e}", path.display())))?;
        tokens.extend(
            text.lines()
                .map(str::trim)
                .filter(|l| !l.is_empty())
                .map(str::to_owned),
        );
    }
    let teams = if tokens.is_empty() {
        create_teams(&config, &args).await?
    } else {
        teams_of_tokens(&args.urls, &tokens).await?
    };
    let report = run(LoadPlan::from_args(&args), teams).await?;
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report).unwrap_or_default()
        );
    } else {
        print_report(&report);
    }
    Ok(if report.zero_loss.passed {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn print_report(r: &LoadReport) {
    println!(
        "crewbus load: {} team(s), {} agents, {} conversations, {} recipient(s) per message, bodies {}..={} bytes, rate {}",
        r.teams,
        r.agents,
        r.conversations,
        r.recipients_per_message,
        r.body_bytes.0,
        r.body_bytes.1,
        if r.target_rate > 0.0 {
            format!("{} msg/s", r.target_rate)
        } else {
            "unpaced".into()
        }
    );
    println!(
        "  messages  accepted {} (rejected {}) in {:.2} s: {:.1} msg/s",
        r.accepted, r.rejected, r.send_seconds, r.messages_per_second
    );
    println!(
        "  delivered {} of {} in {:.2} s: {:.1} deliveries/s ({} redelivered hand-outs, {} retried requests)",
        r.delivered,
        r.deliveries_expected,
        r.total_seconds,
        r.deliveries_per_second,
        r.redeliveries,
        r.retries
    );
    let p = |x: &Percentiles| {
        format!(
            "p50 {:.1} ms, p95 {:.1} ms, p99 {:.1} ms, max {:.1} ms ({} samples)",
            x.p50_ms, x.p95_ms, x.p99_ms, x.max_ms, x.count
        )
    };
    println!("  send→stored    {}", p(&r.send_to_stored));
    println!("  send→delivered {}", p(&r.send_to_delivered));
    for t in &r.per_team {
        println!(
            "  team {}: {} accepted ({:.1} msg/s), {} delivered ({:.1}/s), rejected {:?}, send→delivered p99 {:.1} ms",
            t.team,
            t.accepted,
            t.messages_per_second,
            t.delivered,
            t.deliveries_per_second,
            t.rejected,
            t.send_to_delivered.p99_ms
        );
    }
    let z = &r.zero_loss;
    println!(
        "  zero-loss check: {} ({} messages, {} receipts checked; lost {}, duplicated {}, disagreements {}, pending {}, failed {:?})",
        if z.passed { "PASSED" } else { "FAILED" },
        z.messages_checked,
        z.receipts_checked,
        z.lost,
        z.duplicated,
        z.disagreements,
        z.pending,
        z.failed
    );
    for problem in &z.problems {
        println!("    - {problem}");
    }
    if z.problem_count > z.problems.len() as u64 {
        println!(
            "    … and {} more",
            z.problem_count - z.problems.len() as u64
        );
    }
}

/// Runs `plan` with `teams` and returns the report. Errors: a conversation cannot be created →
/// `Unavailable` (or `Invalid` when a team has fewer agents than `members`).
pub async fn run(plan: LoadPlan, teams: Vec<LoadTeam>) -> BusResult<LoadReport> {
    run_with(plan, teams, Arc::new(LoadProgress::default())).await
}

/// [`run`] updating `progress` as it goes.
pub async fn run_with(
    plan: LoadPlan,
    teams: Vec<LoadTeam>,
    progress: Arc<LoadProgress>,
) -> BusResult<LoadReport> {
    let mut plan = plan;
    let smallest = teams.iter().map(|t| t.agents.len()).min().unwrap_or(0);
    if teams.is_empty() || smallest < 2 {
        return Err(BusError::invalid("load needs teams of at least 2 agents"));
    }
    plan.members = plan.members.min(smallest).max(2);
    let convs = create_conversations(&plan, &teams).await?;
    let shared = Arc::new(Shared {
        rejected: Mutex::new(vec![HashMap::new(); teams.len()]),
        team_send_end: Mutex::new(vec![Duration::ZERO; teams.len()]),
        team_delivered: Mutex::new(vec![(0, Duration::ZERO); teams.len()]),
        plan,
        teams,
        convs,
        progress,
        start: Instant::now(),
        sent_at: Mutex::default(),
        accepted: Mutex::default(),
        delivered_latency: Mutex::default(),
        redeliveries: AtomicU64::new(0),
        stored_latency: Mutex::default(),
        stop_receivers: AtomicBool::new(false),
    });
    let logs: Vec<Vec<Arc<Mutex<AgentLog>>>> = shared
        .teams
        .iter()
        .map(|t| t.agents.iter().map(|_| Arc::default()).collect())
        .collect();

    let mut receivers = Vec::new();
    for (ti, team) in shared.teams.iter().enumerate() {
        for (ai, _) in team.agents.iter().enumerate() {
            receivers.push(tokio::spawn(receive(
                shared.clone(),
                ti,
                ai,
                logs[ti][ai].clone(),
            )));
        }
    }
    let ticker = if shared.plan.progress {
        Some(tokio::spawn(print_progress(shared.clone())))
    } else {
        None
    };

    let mut senders = Vec::new();
    for ti in 0..shared.teams.len() {
        let next = Arc::new(AtomicU64::new(0));
        for _ in 0..shared.plan.senders {
            senders.push(tokio::spawn(send_loop(shared.clone(), ti, next.clone())));
        }
    }
    for s in senders {
        let _ = s.await;
    }
    let send_end = shared.start.elapsed();
    shared.progress.sending_done.store(true, Ordering::SeqCst);

    // Drain: until every expected delivery is confirmed or the deadline passes.
    let expected = expected_deliveries(&shared);
    let drain_deadline = Instant::now() + shared.plan.drain_timeout;
    while shared.progress.delivered.load(Ordering::SeqCst) < expected
        && Instant::now() < drain_deadline
    {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let total = shared.start.elapsed();
    // Give receivers a moment to see (and report) any duplicate hand-out.
    let linger = Instant::now() + Duration::from_millis(300);
    while Instant::now() < linger {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    shared.stop_receivers.store(true, Ordering::SeqCst);
    for r in receivers {
        let _ = r.await;
    }
    if let Some(t) = ticker {
        t.abort();
        if shared.plan.progress {
            eprintln!();
        }
    }
    let zero_loss = check(&shared, &logs).await;
    Ok(report(&shared, send_end, total, expected, zero_loss))
}

async fn create_conversations(plan: &LoadPlan, teams: &[LoadTeam]) -> BusResult<Vec<Conv>> {
    let mut convs = Vec::new();
    for (ti, team) in teams.iter().enumerate() {
        let n = team.agents.len();
        for c in 0..plan.conversations {
            let members: Vec<usize> = (0..plan.members).map(|i| (c + i) % n).collect();
            let owner = &team.agents[members[0]];
            let others: Vec<Uuid> = members[1..].iter().map(|&i| team.agents[i].id).collect();
            let until = Instant::now() + Duration::from_secs(60);
            let title = format!("load {c}");
            let v = retry(
                until,
                |_| {},
                || owner.client.create_conversation(&title, &others),
            )
            .await
            .map_err(|f| {
                BusError::unavailable(format!(
                    "cannot create a conversation: {} {}",
                    f.status, f.code
                ))
            })?;
            convs.push(Conv {
                id: uuid_of(&v["id"]),
                team: ti,
                members,
            });
        }
    }
    Ok(convs)
}

fn expected_deliveries(shared: &Shared) -> u64 {
    let recipients = (shared.plan.members - 1) as u64;
    shared.accepted.lock().unwrap().len() as u64 * recipients
}

fn body_for(k: u64, range: (usize, usize)) -> String {
    let (lo, hi) = range;
    let len = if hi > lo {
        lo + (k as usize * 7919) % (hi - lo + 1)
    } else {
        lo
    };
    let head = format!("load message {k} ");
    let mut s = String::with_capacity(len.max(head.len()));
    s.push_str(&head);
    while s.len() < len {
        s.push((b'a' + (s.len() % 26) as u8) as char);
    }
    s
}

async fn send_loop(shared: Arc<Shared>, ti: usize, next: Arc<AtomicU64>) {
    let team_convs: Vec<usize> = (0..shared.convs.len())
        .filter(|&c| shared.convs[c].team == ti)
        .collect();
    let per_team_rate = if shared.plan.rate > 0.0 {
        shared.plan.rate / shared.teams.len() as f64
    } else {
        0.0
    };
    loop {
        let k = next.fetch_add(1, Ordering::SeqCst);
        if k >= shared.plan.messages {
            break;
        }
        if per_team_rate > 0.0 {
            let due = shared.start + Duration::from_secs_f64(k as f64 / per_team_rate);
            tokio::time::sleep_until(due.into()).await;
        }
        let ci = team_convs[(k as usize) % team_convs.len()];
        let conv = &shared.convs[ci];
        let sender_slot = (k as usize / team_convs.len()) % conv.members.len();
        let agent = &shared.teams[ti].agents[conv.members[sender_slot]];
        let request_id = format!("load-{ti}-{k}");
        shared
            .sent_at
            .lock()
            .unwrap()
            .insert(request_id.clone(), Instant::now());
        let body = body_for(k, shared.plan.body_bytes);
        let path = format!("/v1/conversations/{}/messages", conv.id);
        let answer = shared
            .call(
                &agent.client,
                Method::POST,
                &path,
                Some(json!({"request_id": request_id, "body": body})),
            )
            .await;
        match answer {
            Ok(v) => {
                shared.accepted.lock().unwrap().insert(
                    request_id,
                    Accepted {
                        message: uuid_of(&v["message"]["id"]),
                        team: ti,
                        conversation: ci,
                        sender: agent.id,
                    },
                );
                shared.progress.accepted.fetch_add(1, Ordering::SeqCst);
            }
            Err(f) => {
                let code = if f.code.is_empty() {
                    format!("http_{}", f.status)
                } else {
                    f.code
                };
                *shared.rejected.lock().unwrap()[ti].entry(code).or_default() += 1;
                shared.progress.rejected.fetch_add(1, Ordering::SeqCst);
            }
        }
        let mut ends = shared.team_send_end.lock().unwrap();
        ends[ti] = ends[ti].max(shared.start.elapsed());
    }
}

async fn receive(shared: Arc<Shared>, ti: usize, ai: usize, log: Arc<Mutex<AgentLog>>) {
    let agent = &shared.teams[ti].agents[ai];
    while shared.plan.receive_after_send
        && !shared.progress.sending_done.load(Ordering::SeqCst)
        && !shared.stop_receivers.load(Ordering::SeqCst)
    {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let mut idle = Duration::from_millis(2);
    let fetch = json!({"limit": shared.plan.fetch_limit});
    while !shared.stop_receivers.load(Ordering::SeqCst) {
        let got = match agent
            .client
            .ok(Method::POST, "/v1/inbox/fetch", Some(fetch.clone()))
            .await
        {
            Ok(v) => v["deliveries"].as_array().cloned().unwrap_or_default(),
            Err(_) => {
                shared.progress.retries.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        if got.is_empty() {
            tokio::time::sleep(idle).await;
            idle = (idle * 2).min(Duration::from_millis(25));
            continue;
        }
        idle = Duration::from_millis(2);
        let now = Instant::now();
        {
            let sent_at = shared.sent_at.lock().unwrap();
            let mut lat = shared.delivered_latency.lock().unwrap();
            let mut log = log.lock().unwrap();
            for d in &got {
                let m = uuid_of(&d["message"]["id"]);
                if log.settled.contains(&m) {
                    log.after_confirm.push(m);
                }
                if d["redelivered"] == true {
                    shared.redeliveries.fetch_add(1, Ordering::Relaxed);
                } else if let Some(t) = d["message"]["request_id"]
                    .as_str()
                    .and_then(|r| sent_at.get(r))
                {
                    lat.push((ti, now.duration_since(*t).as_secs_f64() * 1e3));
                }
            }
        }
        let ids: Vec<Uuid> = got.iter().map(|d| uuid_of(&d["delivery_id"])).collect();
        // A confirm that got no answer (or a retryable one) may have been committed: like any
        // agent, retry the same delivery ids (confirm is idempotent and answers
        // `already_confirmed`), or the agent would never learn that its receipt exists — the
        // bus hands a confirmed message out again to nobody. A refusal (4xx) is left to
        // redelivery after the hand-out grace.
        let Some(v) = confirm_with_retry(&shared, agent, &ids).await else {
            continue;
        };
        let mut newly = 0;
        {
            let mut log = log.lock().unwrap();
            for r in v["results"].as_array().into_iter().flatten() {
                let m = uuid_of(&r["message"]);
                match r["outcome"].as_str() {
                    Some("confirmed") => *log.confirmed.entry(m).or_default() += 1,
                    Some("already_confirmed") => {}
                    _ => continue,
                }
                if log.settled.insert(m) {
                    newly += 1;
                }
            }
        }
        if newly > 0 {
            shared.progress.delivered.fetch_add(newly, Ordering::SeqCst);
            let mut d = shared.team_delivered.lock().unwrap();
            d[ti].0 += newly;
            d[ti].1 = shared.start.elapsed();
        }
    }
}

/// `POST /v1/inbox/confirm` for `ids`, retried by the tools' one rule ([`retry`]) until the
/// plan's drain timeout. `None` after a refusal or when the time is up.
async fn confirm_with_retry(shared: &Shared, agent: &LoadAgent, ids: &[Uuid]) -> Option<Value> {
    let body = json!({ "deliveries": ids });
    let until = Instant::now() + shared.plan.drain_timeout;
    let answer = retry(
        until,
        |_| {
            shared.progress.retries.fetch_add(1, Ordering::Relaxed);
        },
        || {
            agent
                .client
                .ok(Method::POST, "/v1/inbox/confirm", Some(body.clone()))
        },
    )
    .await;
    answer.ok()
}

async fn print_progress(shared: Arc<Shared>) {
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let p = &shared.progress;
        let accepted = p.accepted.load(Ordering::Relaxed);
        let total = shared.plan.messages * shared.teams.len() as u64;
        let delivered = p.delivered.load(Ordering::Relaxed);
        let expected = accepted * (shared.plan.members as u64 - 1);
        eprint!(
            "\r[{:>6.1} s] sent {accepted}/{total} (rejected {}), delivered {delivered}/{expected}, retries {}   ",
            shared.start.elapsed().as_secs_f64(),
            p.rejected.load(Ordering::Relaxed),
            p.retries.load(Ordering::Relaxed),
        );
    }
}

/// The zero-loss check (see the module docs).
async fn check(shared: &Shared, logs: &[Vec<Arc<Mutex<AgentLog>>>]) -> ZeroLoss {
    let mut problems: Vec<String> = Vec::new();
    let (mut lost, mut duplicated, mut disagreements) = (0u64, 0u64, 0u64);
    let mut failed: HashMap<String, u64> = HashMap::new();
    let mut failed_ids: HashSet<Uuid> = HashSet::new();
    let mut pending = 0u64;
    let mut pending_ids: HashSet<Uuid> = HashSet::new();
    let accepted: Vec<(String, Accepted)> = shared
        .accepted
        .lock()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let by_message: HashMap<Uuid, &Accepted> =
        accepted.iter().map(|(_, a)| (a.message, a)).collect();
    if by_message.len() != accepted.len() {
        duplicated += 1;
        problems.push("two accepted request ids were answered with the same message".into());
    }

    // 1. The ledger's history of every conversation.
    let mut messages_checked = 0u64;
    let mut stored_latency = Vec::new();
    let mut in_history: HashSet<Uuid> = HashSet::new();
    for (ci, conv) in shared.convs.iter().enumerate() {
        let reader = &shared.teams[conv.team].agents[conv.members[0]];
        let mut after = 0u64;
        let mut seen_seq = 0u64;
        let mut request_ids = HashSet::new();
        loop {
            let path = format!(
                "/v1/conversations/{}/messages?after_seq={after}&limit=1000",
                conv.id
            );
            let page = match shared.call(&reader.client, Method::GET, &path, None).await {
                Ok(p) => p,
                Err(f) => {
                    problems.push(format!(
                        "history of conversation {} could not be read: {} {}",
                        conv.id, f.status, f.code
                    ));
                    break;
                }
            };
            let items = page["messages"].as_array().cloned().unwrap_or_default();
            for item in &items {
                let m = &item["message"];
                let id = uuid_of(&m["id"]);
                // Pages overlap where a pending message stopped the previous one.
                let seq = m["seq"].as_u64().unwrap_or(0);
                if seq <= seen_seq {
                    continue;
                }
                seen_seq = seq;
                messages_checked += 1;
                if !in_history.insert(id) {
                    duplicated += 1;
                    problems.push(format!("message {id} appears twice in history"));
                }
                let rid = m["request_id"].as_str().unwrap_or("").to_owned();
                if !request_ids.insert(rid.clone()) {
                    duplicated += 1;
                    problems.push(format!("request id {rid} was stored twice"));
                }
                match by_message.get(&id) {
                    Some(a) if a.conversation == ci => {}
                    Some(_) => problems.push(format!("message {id} is in the wrong conversation")),
                    None => problems.push(format!(
                        "message {id} ({rid}) is in history but was never accepted"
                    )),
                }
                if m["publication"] == "failed" {
                    failed_ids.insert(id);
                    *failed
                        .entry(m["failure"].as_str().unwrap_or("unknown").to_owned())
                        .or_default() += 1;
                }
                if m["publication"] == "pending_publication" {
                    pending += 1;
                    pending_ids.insert(id);
                }
                if m["publication"] != "stored" {
                    problems.push(format!(
                        "message {id} is `{}` in the ledger, not stored",
                        m["publication"].as_str().unwrap_or("?")
                    ));
                }
                if let (Some(sent), Some(stored)) = (
                    m["sent_at"]
                        .as_str()
                        .and_then(|s| s.parse::<chrono::DateTime<chrono::Utc>>().ok()),
                    m["stored_at"]
                        .as_str()
                        .and_then(|s| s.parse::<chrono::DateTime<chrono::Utc>>().ok()),
                ) {
                    stored_latency
                        .push((stored - sent).num_microseconds().unwrap_or(0) as f64 / 1e3);
                }
            }
            // A pending message stops a page (counted above as not stored): read on past it.
            let next = match items.last() {
                Some(last) if last["absence"] == "pending" => {
                    last["message"]["seq"].as_u64().unwrap_or(after)
                }
                _ => page["next_after_seq"].as_u64().unwrap_or(after),
            };
            if next <= after {
                break;
            }
            after = next;
        }
    }
    for (rid, a) in &accepted {
        if !in_history.contains(&a.message) {
            lost += 1;
            problems.push(format!(
                "accepted message {} ({rid}) is not in history",
                a.message
            ));
        }
    }

    // 2. What the agents confirmed.
    let mut confirmed_by: HashMap<Uuid, HashSet<Uuid>> = HashMap::new(); // message → agents
    for (ti, team) in logs.iter().enumerate() {
        for (ai, log) in team.iter().enumerate() {
            let log = log.lock().unwrap();
            let agent = shared.teams[ti].agents[ai].id;
            for (m, n) in &log.confirmed {
                if *n > 1 {
                    duplicated += 1;
                    problems.push(format!("agent {agent} got `confirmed` {n} times for {m}"));
                }
            }
            for m in &log.after_confirm {
                duplicated += 1;
                problems.push(format!(
                    "agent {agent} was handed message {m} again after confirming it"
                ));
            }
            for m in &log.settled {
                confirmed_by.entry(*m).or_default().insert(agent);
            }
        }
    }
    for (rid, a) in &accepted {
        let conv = &shared.convs[a.conversation];
        let team = &shared.teams[conv.team];
        let want: HashSet<Uuid> = conv
            .members
            .iter()
            .map(|&i| team.agents[i].id)
            .filter(|id| *id != a.sender)
            .collect();
        let got = confirmed_by.remove(&a.message).unwrap_or_default();
        if got != want && !failed_ids.contains(&a.message) && !pending_ids.contains(&a.message) {
            lost += u64::from(!want.is_subset(&got));
            duplicated += u64::from(!got.is_subset(&want));
            let missing = want.difference(&got).count();
            let extra = got.difference(&want).count();
            problems.push(format!(
                "message {} ({rid}): {missing} recipient(s) never confirmed it, {extra} unexpected agent(s) did",
                a.message
            ));
        }
    }
    for (m, agents) in confirmed_by {
        duplicated += 1;
        problems.push(format!(
            "{} agent(s) confirmed message {m} that was never accepted",
            agents.len()
        ));
    }

    // 3. The ledger's receipts agree.
    let mut receipts_checked = 0u64;
    let mut in_flight = FuturesUnordered::new();
    let mut queue = accepted.iter();
    loop {
        while in_flight.len() < 16 {
            let Some((rid, a)) = queue.next() else { break };
            let conv = &shared.convs[a.conversation];
            let team = &shared.teams[conv.team];
            let reader = &team.agents[conv.members[0]];
            let want: HashSet<Uuid> = conv
                .members
                .iter()
                .map(|&i| team.agents[i].id)
                .filter(|id| *id != a.sender)
                .collect();
            let path = format!("/v1/messages/{}/receipts", a.message);
            in_flight.push(async move {
                let r = shared.call(&reader.client, Method::GET, &path, None).await;
                (rid, a.message, want, r)
            });
        }
        let Some((rid, m, want, r)) = in_flight.next().await else {
            break;
        };
        match r {
            Ok(v) => {
                let receipts = v.as_array().cloned().unwrap_or_default();
                receipts_checked += receipts.len() as u64;
                let delivered: HashSet<Uuid> = receipts
                    .iter()
                    .filter(|r| !r["delivered_at"].is_null())
                    .map(|r| uuid_of(&r["recipient"]))
                    .collect();
                if (receipts.len() != want.len() || delivered != want)
                    && !failed_ids.contains(&m)
                    && !pending_ids.contains(&m)
                {
                    disagreements += 1;
                    problems.push(format!(
                        "message {m} ({rid}): the ledger has {} receipt(s), {} delivered, for {} recipient(s)",
                        receipts.len(),
                        delivered.len(),
                        want.len()
                    ));
                }
            }
            Err(f) => {
                disagreements += 1;
                problems.push(format!(
                    "receipts of {m} could not be read: {} {}",
                    f.status, f.code
                ))
            }
        }
    }
    let problem_count = problems.len() as u64;
    problems.truncate(20);
    let zl = ZeroLoss {
        passed: problem_count == 0,
        messages_checked,
        receipts_checked,
        failed,
        pending,
        lost,
        duplicated,
        disagreements,
        problems,
        problem_count,
    };
    *shared.stored_latency.lock().unwrap() = stored_latency;
    zl
}

fn report(
    shared: &Shared,
    send_end: Duration,
    total: Duration,
    expected: u64,
    zero_loss: ZeroLoss,
) -> LoadReport {
    let accepted = shared.accepted.lock().unwrap();
    let rejected = shared.rejected.lock().unwrap();
    let lat = shared.delivered_latency.lock().unwrap();
    let ends = shared.team_send_end.lock().unwrap();
    let delivered = shared.team_delivered.lock().unwrap();
    let per_sec = |n: u64, d: Duration| {
        if d.is_zero() {
            0.0
        } else {
            ((n as f64 / d.as_secs_f64()) * 10.0).round() / 10.0
        }
    };
    let per_team = shared
        .teams
        .iter()
        .enumerate()
        .map(|(ti, t)| {
            let n = accepted.values().filter(|a| a.team == ti).count() as u64;
            TeamReport {
                team: t.name.clone(),
                accepted: n,
                rejected: rejected[ti].clone(),
                delivered: delivered[ti].0,
                messages_per_second: per_sec(n, ends[ti]),
                deliveries_per_second: per_sec(delivered[ti].0, delivered[ti].1),
                send_to_delivered: Percentiles::of(
                    lat.iter()
                        .filter(|(t, _)| *t == ti)
                        .map(|(_, l)| *l)
                        .collect(),
                ),
            }
        })
        .collect();
    let n = accepted.len() as u64;
    // The whole run ends with the last confirmed delivery (not the drain poll that saw it).
    let total = delivered
        .iter()
        .map(|(_, at)| *at)
        .max()
        .filter(|at| !at.is_zero())
        .unwrap_or(total);
    let delivered_all = shared.progress.delivered.load(Ordering::SeqCst);
    LoadReport {
        teams: shared.teams.len(),
        agents: shared.teams.iter().map(|t| t.agents.len()).sum(),
        conversations: shared.convs.len(),
        recipients_per_message: shared.plan.members - 1,
        target_rate: shared.plan.rate,
        body_bytes: shared.plan.body_bytes,
        accepted: n,
        rejected: shared.progress.rejected.load(Ordering::SeqCst),
        deliveries_expected: expected,
        delivered: delivered_all,
        redeliveries: shared.redeliveries.load(Ordering::SeqCst),
        retries: shared.progress.retries.load(Ordering::SeqCst),
        send_seconds: (send_end.as_secs_f64() * 100.0).round() / 100.0,
        total_seconds: (total.as_secs_f64() * 100.0).round() / 100.0,
        messages_per_second: per_sec(n, send_end),
        deliveries_per_second: per_sec(delivered_all, total),
        send_to_stored: Percentiles::of(shared.stored_latency.lock().unwrap().clone()),
        send_to_delivered: Percentiles::of(lat.iter().map(|(_, l)| *l).collect()),
        per_team,
        zero_loss,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_pick_by_rank() {
        let p = Percentiles::of((1..=100).map(f64::from).collect());
        assert_eq!(
            (p.count, p.p50_ms, p.p95_ms, p.p99_ms, p.max_ms),
            (100, 51.0, 96.0, 100.0, 100.0)
        );
        assert_eq!(Percentiles::of(vec![]).count, 0);
    }

    #[test]
    fn bodies_stay_within_the_range() {
        for k in 0..50 {
            let b = body_for(k, (200, 2000));
            assert!((200..=2000).contains(&b.len()), "{}", b.len());
        }
        assert_eq!(body_for(3, (10, 10)).len(), "load message 3 ".len().max(10));
    }
}
