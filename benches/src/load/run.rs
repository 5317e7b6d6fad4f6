//! The run: conversations set up, the send loops, the receivers, the progress line.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crewbus::client::{ApiClient, ApiFailure, uuid_of};
use crewbus_domain::{BusError, BusResult, Uuid};
use reqwest::Method;
use serde_json::{Value, json};

use super::args::*;
use super::check::*;
use super::mcp::{McpAgent, Transport};
use super::report::*;
use super::retry::retry;
use super::team::*;

/// A message the API accepted.
#[derive(Debug, Clone)]
pub(super) struct Accepted {
    pub(super) message: Uuid,
    pub(super) team: usize,
    pub(super) conversation: usize,
    pub(super) sender: Uuid,
}

/// What one agent saw.
#[derive(Debug, Default)]
pub(super) struct AgentLog {
    /// message → number of `confirmed` outcomes.
    pub(super) confirmed: HashMap<Uuid, u32>,
    /// messages known confirmed (either outcome).
    pub(super) settled: HashSet<Uuid>,
    /// A message handed out again after the agent knew it was confirmed.
    pub(super) after_confirm: Vec<Uuid>,
}

#[derive(Debug)]
pub(super) struct Conv {
    pub(super) id: Uuid,
    pub(super) team: usize,
    pub(super) members: Vec<usize>, // agent indexes in the team
}

pub(super) struct Shared {
    pub(super) plan: LoadPlan,
    pub(super) teams: Vec<LoadTeam>,
    pub(super) convs: Vec<Conv>,
    pub(super) progress: Arc<LoadProgress>,
    pub(super) start: Instant,
    pub(super) sent_at: Mutex<HashMap<String, Instant>>,
    pub(super) accepted: Mutex<HashMap<String, Accepted>>,
    pub(super) rejected: Mutex<Vec<HashMap<String, u64>>>,
    /// (team, ms) of first hand-outs.
    pub(super) delivered_latency: Mutex<Vec<(usize, f64)>>,
    /// Per team: when its last send answered / its last delivery was confirmed.
    pub(super) team_send_end: Mutex<Vec<Duration>>,
    pub(super) team_delivered: Mutex<Vec<(u64, Duration)>>,
    pub(super) redeliveries: AtomicU64,
    /// Ledger `stored_at − sent_at` in ms, filled by the check.
    pub(super) stored_latency: Mutex<Vec<f64>>,
    pub(super) stop_receivers: AtomicBool,
    /// With `--transport mcp`: each agent's MCP session, by agent id.
    pub(super) mcp: HashMap<Uuid, Arc<McpAgent>>,
}

impl Shared {
    /// `agent`'s send of `body` with `request_id` into `conv`: `POST
    /// /v1/conversations/{id}/messages`, or MCP `send_message`; retried as [`Shared::call`].
    pub(super) async fn send_message(
        &self,
        agent: &LoadAgent,
        conv: Uuid,
        request_id: &str,
        body: String,
    ) -> Result<Value, ApiFailure> {
        let Some(m) = self.mcp.get(&agent.id) else {
            let path = format!("/v1/conversations/{conv}/messages");
            let body = json!({"request_id": request_id, "body": body});
            return self
                .call(&agent.client, Method::POST, &path, Some(body))
                .await;
        };
        let arguments = json!({"conversation_id": conv, "request_id": request_id, "body": body});
        let until = Instant::now() + self.plan.retry_for;
        retry(
            until,
            |_| {
                self.progress.retries.fetch_add(1, Ordering::Relaxed);
            },
            || m.call("send_message", arguments.clone()),
        )
        .await
    }

    /// One fetch of up to `limit` deliveries for `agent`: `POST /v1/inbox/fetch` or MCP
    /// `fetch_inbox` (not retried: the receive loop goes round again).
    async fn fetch(&self, agent: &LoadAgent, limit: usize) -> Result<Value, ApiFailure> {
        let body = json!({ "limit": limit });
        match self.mcp.get(&agent.id) {
            None => {
                agent
                    .client
                    .ok(Method::POST, "/v1/inbox/fetch", Some(body))
                    .await
            }
            Some(m) => m.call("fetch_inbox", body).await,
        }
    }

    /// One confirm of `ids` for `agent`: `POST /v1/inbox/confirm` or MCP `confirm_deliveries`.
    async fn confirm(&self, agent: &LoadAgent, body: &Value) -> Result<Value, ApiFailure> {
        match self.mcp.get(&agent.id) {
            None => {
                agent
                    .client
                    .ok(Method::POST, "/v1/inbox/confirm", Some(body.clone()))
                    .await
            }
            Some(m) => m.call("confirm_deliveries", body.clone()).await,
        }
    }

    /// Calls until a non-transient answer or `retry_for` passes ([`retry`]), counting retries.
    pub(super) async fn call(
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
    let mcp = match plan.transport {
        Transport::Http => HashMap::new(),
        Transport::Mcp => connect_mcp(&plan, &teams).await?,
    };
    let shared = Arc::new(Shared {
        mcp,
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

/// Every agent's MCP session (initialized; retried as a request is, up to `retry_for`).
/// Errors: an agent without a token, or a server that never initializes → `Unavailable`.
async fn connect_mcp(
    plan: &LoadPlan,
    teams: &[LoadTeam],
) -> BusResult<HashMap<Uuid, Arc<McpAgent>>> {
    let mut sessions = HashMap::new();
    for agent in teams.iter().flat_map(|t| &t.agents) {
        let token = agent
            .client
            .token()
            .ok_or_else(|| BusError::invalid("--transport mcp needs every agent's token"))?;
        let until = Instant::now() + plan.retry_for;
        let session = loop {
            match McpAgent::connect(agent.client.base(), token).await {
                Ok(s) => break s,
                Err(f) if Instant::now() < until => {
                    tracing::debug!(message = %f.message, "MCP initialize failed; retrying");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Err(f) => return Err(BusError::unavailable(f.message)),
            }
        };
        sessions.insert(agent.id, session);
    }
    Ok(sessions)
}

pub(super) async fn create_conversations(
    plan: &LoadPlan,
    teams: &[LoadTeam],
) -> BusResult<Vec<Conv>> {
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

pub(super) fn expected_deliveries(shared: &Shared) -> u64 {
    let recipients = (shared.plan.members - 1) as u64;
    shared.accepted.lock().unwrap().len() as u64 * recipients
}

pub(super) fn body_for(k: u64, range: (usize, usize)) -> String {
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

pub(super) async fn send_loop(shared: Arc<Shared>, ti: usize, next: Arc<AtomicU64>) {
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
        let answer = shared.send_message(agent, conv.id, &request_id, body).await;
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

pub(super) async fn receive(shared: Arc<Shared>, ti: usize, ai: usize, log: Arc<Mutex<AgentLog>>) {
    let agent = &shared.teams[ti].agents[ai];
    while shared.plan.receive_after_send
        && !shared.progress.sending_done.load(Ordering::SeqCst)
        && !shared.stop_receivers.load(Ordering::SeqCst)
    {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let mut idle = Duration::from_millis(2);
    while !shared.stop_receivers.load(Ordering::SeqCst) {
        let got = match shared.fetch(agent, shared.plan.fetch_limit).await {
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
pub(super) async fn confirm_with_retry(
    shared: &Shared,
    agent: &LoadAgent,
    ids: &[Uuid],
) -> Option<Value> {
    let body = json!({ "deliveries": ids });
    let until = Instant::now() + shared.plan.drain_timeout;
    let answer = retry(
        until,
        |_| {
            shared.progress.retries.fetch_add(1, Ordering::Relaxed);
        },
        || shared.confirm(agent, &body),
    )
    .await;
    answer.ok()
}

pub(super) async fn print_progress(shared: Arc<Shared>) {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_stay_within_the_range() {
        for k in 0..50 {
            let b = body_for(k, (200, 2000));
            assert!((200..=2000).contains(&b.len()), "{}", b.len());
        }
        assert_eq!(body_for(3, (10, 10)).len(), "load message 3 ".len().max(10));
    }
}
