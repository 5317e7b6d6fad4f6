//! `crewbus demo`: a server in-process and a scripted exchange between three agents through the
//! real HTTP API, with a transcript and a summary.
//!
//! The script: alice opens a conversation with bob and carol and asks a question; bob answers;
//! carol fetches but "crashes" before confirming, so after the hand-out grace the message comes
//! back to her marked `redelivered`; everyone then exchanges a burst of messages, each recipient
//! confirming what it receives; finally receipts and a page of history are shown. The summary
//! counts messages and deliveries and gives the p50/p99 latency from send to delivery.
//!
//! Each agent works in a run (admitted at the start, sealed at the end). The demo starts a small
//! webhook receiver on 127.0.0.1:0 in-process and configures it as the only push destination
//! (signed with a fresh Standard Webhooks key), so the runs' journals arrive there as CloudEvents:
//! the transcript shows the event types received, the summary counts them.
//!
//! Without `[database]` the demo runs on the memory store: everything lives in memory and is gone when the
//! demo ends. Against a configured database the demo refuses to start unless `--keep` is given:
//! what it creates there (a team, three agents, their runs, a conversation and its messages)
//! would stay, because crewbus has no command that deletes a team. With `--keep` it says up front
//! what it creates, revokes its three agents when it ends (their tokens stop working), and says
//! what it left. Its push destination carries no credential, so nothing secret is ever stored,
//! sealed or not.

use std::collections::HashMap;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::Engine as _;
use crewbus_domain::{BusError, BusResult, Secret, Uuid};
use serde_json::{Value, json};

use crate::compose::compose;
use crate::config::Config;
use crate::push::{DestinationSettings, SecretSource, Signer};
use crate::server::Server;
use crate::shutdown::Shutdown;
use crate::tools::client::{ApiClient, ApiFailure, uuid_of};
use crate::tools::demo_receiver::{DemoReceiver, Received};

/// Messages each agent sends in the burst.
const BURST_PER_AGENT: usize = 20;

/// Messages the script sends: alice's question, bob's answer, then the burst.
const MESSAGES: usize = 2 + 3 * BURST_PER_AGENT;

/// The demo's agents.
const AGENTS: [&str; 3] = ["alice", "bob", "carol"];

/// `crewbus demo` options.
#[derive(Debug, Clone, Copy, Default, clap::Args)]
pub struct DemoArgs {
    /// Run against the configured database although what the demo creates stays there: a team
    /// `demo-<8 hex>`, agents alice, bob and carol (revoked when the demo ends), their three
    /// runs, one conversation and its messages (crewbus cannot delete a team). Without a
    /// configured database nothing is kept and this flag changes nothing.
    #[arg(long)]
    pub keep: bool,
}

/// What the demo creates in `where_`, in words.
fn created_text(team: &str, where_: &str) -> String {
    format!(
        "team {team}, agents {} (with tokens), their {} runs, one conversation and its \
         {MESSAGES} messages in {where_}",
        AGENTS.join(", "),
        AGENTS.len()
    )
}

struct DemoAgent {
    name: &'static str,
    id: Uuid,
    client: ApiClient,
    /// The agent's run (its sends, confirms and acknowledgements are journaled there).
    run: Option<Uuid>,
}

/// Shared bookkeeping: when each request was sent, and the latencies and counts observed.
#[derive(Default)]
struct Stats {
    sent_at: HashMap<String, Instant>,
    latencies: Vec<Duration>,
    messages: usize,
    deliveries: usize,
    redeliveries: usize,
    confirmed: usize,
}

struct Transcript {
    start: Instant,
    json: bool,
    lines: Vec<Value>,
}

impl Transcript {
    fn say(&mut self, who: &str, what: impl Into<String>) {
        let what = what.into();
        let ms = self.start.elapsed().as_millis();
        if !self.json {
            println!("[{ms:>6} ms] {who:<6} {what}");
        }
        self.lines.push(json!({"ms": ms, "who": who, "what": what}));
    }
}

fn failure(e: ApiFailure) -> BusError {
    BusError::invalid(format!(
        "the API answered {} {}: {}",
        e.status, e.code, e.message
    ))
}

/// Runs the demo against the configured Postgres, or on the memory store when none. The hand-out
/// grace is shortened to one second so the redelivery shows quickly.
///
/// Errors: a configured database without `args.keep` → [`BusError::Invalid`] saying what would
/// be created and left there (nothing is contacted); then any failure of the script.
pub async fn run(mut config: Config, args: DemoArgs, json: bool) -> BusResult<ExitCode> {
    let persistent = config.database.is_some();
    if persistent && !args.keep {
        return Err(BusError::invalid(format!(
            "crewbus demo would create {} and leave them there: crewbus cannot delete a team. \
             Run it without [database] (then it runs on the memory store and keeps nothing), or pass --keep to \
             create them anyway (its agents are revoked when it ends)",
            created_text("demo-<8 hex>", "the configured database")
        )));
    }
    config.listen = "127.0.0.1:0".parse().expect("loopback parses");
    config.bus.handout_grace_ms = 1_000;
    config.bus.topup_after_ms = 500;
    config.bus.idle_poll_ms = config.bus.idle_poll_ms.min(20);

    // The push destination: a local receiver, signed with a fresh key handed over in a file
    // (secrets never come inline), removed again once the configuration has read it.
    let key = format!(
        "whsec_{}",
        base64::engine::general_purpose::STANDARD.encode(rand::random::<[u8; 24]>())
    );
    let signer = Signer::new(&[Secret::new(key.clone())])
        .map_err(|_| BusError::invalid("the demo's signing key"))?;
    let receiver = DemoReceiver::start(signer).await?;
    let key_file =
        std::env::temp_dir().join(format!("crewbus-demo-whsec-{}", Uuid::new_v4().simple()));
    std::fs::write(&key_file, &key)
        .map_err(|e| BusError::unavailable_from("the demo's signing key file", e))?;
    config.push.destinations = vec![DestinationSettings {
        name: "demo-receiver".to_owned(),
        url: receiver.url.clone(),
        authentication: None,
        signing_keys: vec![SecretSource {
            env: None,
            file: Some(key_file.clone()),
        }],
    }];
    config.push.poll_ms = 20;
    config.push.idle_ms = 50;
    if config.push.key_ring.is_none() {
        // The demo destination carries no credential (`authentication: None` above): nothing
        // secret is stored, so there is nothing to seal (and no warning about it).
        config.push.allow_unsealed = true;
    }
    let composed = compose(&config).await;
    let _ = std::fs::remove_file(&key_file);
    let composed = composed?;
    let bus = composed.bus.clone();
    let suffix = &Uuid::new_v4().simple().to_string()[..8];
    let team = bus.add_team(&format!("demo-{suffix}"), None, None).await?;
    let server = Server::start(bus.clone(), config.listen, Shutdown::new()).await?;
    let base = server.url();
    let kept = persistent.then(|| created_text(&team.name, "the configured database"));
    let mut agents = Vec::new();
    for name in AGENTS {
        let new = bus.add_agent(team.id, name).await?;
        agents.push(DemoAgent {
            name,
            id: new.agent.id,
            client: ApiClient::new(base.clone(), Some(new.token)),
            run: None,
        });
    }
    let mut t = Transcript {
        start: Instant::now(),
        json,
        lines: Vec::new(),
    };
    if !json {
        println!(
            "crewbus demo — server at {base} ({})\nteam {} with agents alice, bob, carol\n\
             push receiver at {} (every run's journal arrives there as signed CloudEvents)\n",
            composed.description, team.name, receiver.url
        );
        if let Some(kept) = &kept {
            println!(
                "--keep: creates {kept}; they stay there, and the agents are revoked when the \
                 demo ends\n"
            );
        }
    }
    let stats = Arc::new(Mutex::new(Stats::default()));
    let result = async {
        admit_runs(&mut agents, &mut t).await?;
        script(&agents, &stats, &mut t).await?;
        let expected = seal_runs(&agents, &mut t).await?;
        await_push(&receiver, expected, &agents, &mut t).await
    }
    .await;
    server.stop().await;
    // Against a database, the agents are revoked whatever happened: their tokens are the only
    // credentials the demo created, and they must not outlive it.
    let mut revoked = Vec::new();
    if persistent {
        for agent in &agents {
            bus.revoke_agent(team.id, agent.id).await?;
            revoked.push(agent.name);
        }
    }
    let push = result?;

    let s = stats.lock().expect("stats lock");
    let expected = 2 * s.messages; // two recipients per message
    let once = if s.confirmed == expected {
        "every recipient confirmed every message exactly once".to_owned()
    } else {
        format!("MISMATCH: {expected} receipts expected")
    };
    let mut lat = s.latencies.clone();
    lat.sort_unstable();
    let p50 = percentile(&lat, 0.50);
    let p99 = percentile(&lat, 0.99);
    let elapsed = t.start.elapsed();
    if json {
        println!(
            "{}",
            json!({
                "transcript": t.lines,
                "summary": {
                    "messages": s.messages,
                    "deliveries": s.deliveries,
                    "redeliveries": s.redeliveries,
                    "confirmed": s.confirmed,
                    "exactly_once": s.confirmed == expected,
                    "latency_p50_ms": p50.as_secs_f64() * 1e3,
                    "latency_p99_ms": p99.as_secs_f64() * 1e3,
                    "elapsed_ms": elapsed.as_millis(),
                    "adapters": composed.description,
                    "push_events": push.events,
                    "push_signatures_verified": push.verified,
                    "push_in_journal_order": push.in_order,
                    "push_event_types": push.by_type.iter().map(|(k, n)| json!({"type": k, "count": n})).collect::<Vec<_>>(),
                    "kept": kept.as_ref().map(|_| json!({
                        "team": team.name,
                        "team_id": team.id,
                        "agents_revoked": revoked,
                        "runs_sealed": agents.len(),
                        "conversations": 1,
                        "messages": s.messages,
                    })),
                }
            })
        );
    } else {
        println!("\nsummary");
        println!("  messages sent         {}", s.messages);
        println!(
            "  deliveries            {} ({} redelivered, {} confirmed: {once})",
            s.deliveries, s.redeliveries, s.confirmed
        );
        println!(
            "  send → delivery       p50 {:.1} ms, p99 {:.1} ms (over {} first deliveries)",
            p50.as_secs_f64() * 1e3,
            p99.as_secs_f64() * 1e3,
            lat.len()
        );
        println!(
            "  push events           {} received by the local receiver ({} signatures verified, {} runs, {})",
            push.events,
            push.verified,
            agents.len(),
            if push.in_order {
                "each run in journal order"
            } else {
                "OUT OF ORDER"
            }
        );
        println!("  wall time             {:.2} s", elapsed.as_secs_f64());
        if persistent {
            println!(
                "  left in the database  team {} ({}): agents {} (revoked), {} sealed runs, \
                 1 conversation, {} messages",
                team.name,
                team.id,
                revoked.join(", "),
                agents.len(),
                s.messages
            );
        }
    }
    // The demo doubles as a smoke test: a receipt count that does not add up fails the process.
    Ok(if s.confirmed == expected {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// What the push receiver got.
struct PushTally {
    events: usize,
    verified: usize,
    in_order: bool,
    /// Event type → count, in order of first arrival.
    by_type: Vec<(String, usize)>,
}

/// Every agent admits a run through the API; its events start flowing to the receiver.
async fn admit_runs(agents: &mut [DemoAgent], t: &mut Transcript) -> BusResult<()> {
    for agent in agents.iter_mut() {
        let run = agent.client.admit_run().await.map_err(failure)?;
        let id = uuid_of(&run["id"]);
        agent.run = Some(id);
        t.say(
            agent.name,
            format!(
                "admits run {} (the push receiver is registered for it)",
                &id.simple().to_string()[..8]
            ),
        );
    }
    Ok(())
}

/// Every agent seals its run; returns the number of journal records of all runs.
async fn seal_runs(agents: &[DemoAgent], t: &mut Transcript) -> BusResult<usize> {
    let mut records = 0;
    for agent in agents {
        let Some(run) = agent.run else { continue };
        let sealed = agent
            .client
            .seal_run(run, "succeeded", "demo finished")
            .await
            .map_err(failure)?;
        let last = sealed["last_seq"].as_u64().unwrap_or(0);
        records += usize::try_from(last).unwrap_or(usize::MAX);
        t.say(
            agent.name,
            format!("seals its run: succeeded after {last} journal records"),
        );
    }
    Ok(records)
}

/// Waits (at most 20 s) until the receiver holds every record of every run, then shows what
/// arrived.
async fn await_push(
    receiver: &DemoReceiver,
    expected: usize,
    agents: &[DemoAgent],
    t: &mut Transcript,
) -> BusResult<PushTally> {
    let deadline = Instant::now() + Duration::from_secs(20);
    let received = loop {
        let got = receiver.received();
        let distinct: std::collections::HashSet<(&str, u64)> =
            got.iter().map(|r| (r.source.as_str(), r.seq)).collect();
        if distinct.len() >= expected {
            break got;
        }
        if Instant::now() > deadline {
            return Err(BusError::timeout(format!(
                "the push receiver got {} of {expected} events",
                distinct.len()
            )));
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let mut by_type: Vec<(String, usize)> = Vec::new();
    for r in &received {
        match by_type.iter_mut().find(|(k, _)| *k == r.kind) {
            Some((_, n)) => *n += 1,
            None => by_type.push((r.kind.clone(), 1)),
        }
    }
    let mut last: HashMap<&str, u64> = HashMap::new();
    let mut in_order = true;
    for r in &received {
        let prev = last.insert(r.source.as_str(), r.seq).unwrap_or(0);
        in_order &= r.seq > prev;
    }
    let verified = received.iter().filter(|r| r.signature_ok).count();
    if let Some(run) = agents.first().and_then(|a| a.run) {
        let mine: Vec<&Received> = received
            .iter()
            .filter(|r| r.source.ends_with(&run.to_string()))
            .collect();
        let shown: Vec<&str> = mine.iter().take(6).map(|r| r.kind.as_str()).collect();
        t.say(
            "hook",
            format!(
                "alice's run arrives in order: {}{} … {}",
                shown.join(", "),
                if mine.len() > 6 { "," } else { "" },
                mine.last().map_or("", |r| r.kind.as_str())
            ),
        );
    }
    t.say(
        "hook",
        format!(
            "received {} CloudEvents ({verified} signatures verified): {}",
            received.len(),
            by_type
                .iter()
                .map(|(k, n)| format!("{k}×{n}"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    );
    Ok(PushTally {
        events: received.len(),
        verified,
        in_order,
        by_type,
    })
}

fn percentile(sorted: &[Duration], q: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let idx = ((sorted.len() as f64 * q).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[idx]
}

async fn send(
    agent: &DemoAgent,
    stats: &Mutex<Stats>,
    conversation: Uuid,
    request_id: &str,
    body: &str,
) -> BusResult<Value> {
    stats
        .lock()
        .expect("stats lock")
        .sent_at
        .insert(request_id.to_owned(), Instant::now());
    let v = agent
        .client
        .send_in(conversation, request_id, body, agent.run)
        .await
        .map_err(failure)?;
    stats.lock().expect("stats lock").messages += 1;
    Ok(v)
}

/// Fetches until `want` deliveries arrived (or 20 s passed), recording latency and counts.
async fn receive(agent: &DemoAgent, stats: &Mutex<Stats>, want: usize) -> BusResult<Vec<Value>> {
    receive_until(agent, stats, want, want).await
}

/// Fetches until at least one delivery arrived (at most `max`).
async fn receive_some(
    agent: &DemoAgent,
    stats: &Mutex<Stats>,
    max: usize,
) -> BusResult<Vec<Value>> {
    receive_until(agent, stats, 1, max).await
}

async fn receive_until(
    agent: &DemoAgent,
    stats: &Mutex<Stats>,
    want: usize,
    max: usize,
) -> BusResult<Vec<Value>> {
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut got: Vec<Value> = Vec::new();
    while got.len() < want {
        if Instant::now() > deadline {
            return Err(BusError::timeout(format!(
                "{} received {} of {want} messages",
                agent.name,
                got.len()
            )));
        }
        let batch = agent
            .client
            .fetch((max - got.len()).clamp(1, 100))
            .await
            .map_err(failure)?;
        if batch.is_empty() {
            tokio::time::sleep(Duration::from_millis(5)).await;
            continue;
        }
        let mut s = stats.lock().expect("stats lock");
        for d in &batch {
            s.deliveries += 1;
            if d["redelivered"].as_bool() == Some(true) {
                s.redeliveries += 1;
            } else if let Some(at) = d["message"]["request_id"]
                .as_str()
                .and_then(|r| s.sent_at.get(r).copied())
            {
                s.latencies.push(at.elapsed());
            }
        }
        got.extend(batch);
    }
    Ok(got)
}

async fn confirm(
    agent: &DemoAgent,
    stats: &Mutex<Stats>,
    deliveries: &[Value],
) -> BusResult<usize> {
    let ids: Vec<Uuid> = deliveries
        .iter()
        .map(|d| uuid_of(&d["delivery_id"]))
        .collect();
    let results = agent
        .client
        .confirm_in(&ids, agent.run)
        .await
        .map_err(failure)?;
    let confirmed = results
        .iter()
        .filter(|r| r["outcome"] == "confirmed")
        .count();
    stats.lock().expect("stats lock").confirmed += confirmed;
    Ok(confirmed)
}

fn preview(d: &Value) -> String {
    let body = d["body"].as_str().unwrap_or("");
    let seq = d["message"]["seq"].as_u64().unwrap_or(0);
    let mark = if d["redelivered"].as_bool() == Some(true) {
        " (redelivered)"
    } else {
        ""
    };
    format!("#{seq} \"{body}\"{mark}")
}

async fn script(
    agents: &[DemoAgent],
    stats: &Arc<Mutex<Stats>>,
    t: &mut Transcript,
) -> BusResult<()> {
    let [alice, bob, carol] = agents else {
        return Err(BusError::invalid("the demo needs three agents"));
    };
    let conv = alice
        .client
        .create_conversation("launch plan", &[bob.id, carol.id])
        .await
        .map_err(failure)?;
    let conv_id = uuid_of(&conv["id"]);
    t.say(
        "alice",
        format!(
            "opens conversation \"launch plan\" with bob and carol (bodies on {})",
            conv["backend"].as_str().unwrap_or("?")
        ),
    );

    let q = "Bob, Carol: is the launch checklist ready for Friday?";
    let sent = send(alice, stats, conv_id, "alice-1", q).await?;
    t.say(
        "alice",
        format!("sends #{}: \"{q}\"", sent["message"]["seq"]),
    );
    let again = alice
        .client
        .send(conv_id, "alice-1", q)
        .await
        .map_err(failure)?;
    t.say(
        "alice",
        format!(
            "retries the same request_id: created = {} (idempotent, same message #{})",
            again["created"], again["message"]["seq"]
        ),
    );

    let got = receive(bob, stats, 1).await?;
    t.say("bob", format!("fetches {}", preview(&got[0])));
    confirm(bob, stats, &got).await?;
    t.say(
        "bob",
        "confirms the delivery (receipt committed, then inbox ack)",
    );

    let got = receive(carol, stats, 1).await?;
    t.say("carol", format!("fetches {}", preview(&got[0])));
    t.say(
        "carol",
        "crashes before confirming — the message stays hers to receive",
    );

    let a = "Checklist is ready; waiting on the release notes.";
    let sent = send(bob, stats, conv_id, "bob-1", a).await?;
    t.say("bob", format!("sends #{}: \"{a}\"", sent["message"]["seq"]));
    let got = receive(alice, stats, 1).await?;
    t.say("alice", format!("fetches {}", preview(&got[0])));
    confirm(alice, stats, &got).await?;
    t.say("alice", "confirms");

    t.say(
        "carol",
        "restarts and fetches again after the 1 s hand-out grace",
    );
    let got = receive(carol, stats, 2).await?;
    for d in &got {
        t.say("carol", format!("fetches {}", preview(d)));
    }
    let n = confirm(carol, stats, &got).await?;
    t.say("carol", format!("confirms {n} deliveries"));
    let twice = carol
        .client
        .confirm(&[uuid_of(&got[0]["delivery_id"])])
        .await
        .map_err(failure)?;
    t.say(
        "carol",
        format!(
            "confirms the first one again: {} (nothing changes)",
            twice[0]["outcome"].as_str().unwrap_or("?")
        ),
    );
    let first = got
        .iter()
        .find(|d| d["message"]["seq"] == 1)
        .map(|d| uuid_of(&d["message"]["id"]))
        .ok_or_else(|| BusError::invalid("carol did not get message #1 again"))?;
    carol
        .client
        .acknowledge_in(first, carol.run)
        .await
        .map_err(failure)?;
    t.say("carol", "acknowledges reading alice's question (#1)");

    // The burst: everyone sends, everyone receives and confirms, concurrently.
    t.say(
        "all",
        format!(
            "burst: each agent sends {BURST_PER_AGENT} messages; each confirms the {} it receives",
            2 * BURST_PER_AGENT
        ),
    );
    let mut tasks = Vec::new();
    for (i, agent) in agents.iter().enumerate() {
        let client = agent.client.clone();
        let me = DemoAgent {
            name: agent.name,
            id: agent.id,
            client,
            run: agent.run,
        };
        let stats = stats.clone();
        tasks.push(tokio::spawn(async move {
            let sender = async {
                for k in 0..BURST_PER_AGENT {
                    let rid = format!("burst-{i}-{k}");
                    send(
                        &me,
                        &stats,
                        conv_id,
                        &rid,
                        &format!("status update {k} from {}", me.name),
                    )
                    .await?;
                }
                BusResult::Ok(())
            };
            let receiver = async {
                let mut seen = std::collections::HashSet::new();
                while seen.len() < 2 * BURST_PER_AGENT {
                    let got = receive_some(&me, &stats, 2 * BURST_PER_AGENT - seen.len()).await?;
                    confirm(&me, &stats, &got).await?;
                    for d in &got {
                        if !seen.insert(uuid_of(&d["message"]["id"])) {
                            return Err(BusError::conflict(format!(
                                "{} received a confirmed message twice",
                                me.name
                            )));
                        }
                    }
                }
                BusResult::Ok(seen.len())
            };
            let (s, r) = tokio::join!(sender, receiver);
            s?;
            r
        }));
    }
    for (task, agent) in tasks.into_iter().zip(agents) {
        let n = task
            .await
            .map_err(|_| BusError::invalid("a demo agent panicked"))??;
        t.say(
            agent.name,
            format!("received and confirmed {n} burst messages"),
        );
    }

    let receipts = alice.client.receipts(first).await.map_err(failure)?;
    for r in &receipts {
        let who = agents
            .iter()
            .find(|a| a.id == uuid_of(&r["recipient"]))
            .map_or("?", |a| a.name);
        t.say(
            "alice",
            format!(
                "receipt of #1 for {who}: delivered {}, acknowledged {}",
                if r["delivered_at"].is_null() {
                    "no"
                } else {
                    "yes"
                },
                if r["acknowledged_at"].is_null() {
                    "no"
                } else {
                    "yes"
                },
            ),
        );
    }
    let page = alice.client.history(conv_id, 0, 3).await.map_err(failure)?;
    let shown: Vec<String> = page["messages"]
        .as_array()
        .map(|ms| {
            ms.iter()
                .map(|m| format!("#{} {}", m["message"]["seq"], m["body"]))
                .collect()
        })
        .unwrap_or_default();
    t.say(
        "alice",
        format!(
            "reads history (first page of 3): {}; next after_seq = {}",
            shown.join(" | "),
            page["next_after_seq"]
        ),
    );
    Ok(())
}
