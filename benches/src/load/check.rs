//! The zero-loss check (see the module docs of [`super`]).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use crewbus::client::uuid_of;
use crewbus_domain::Uuid;
use futures_util::StreamExt as _;
use futures_util::stream::FuturesUnordered;
use reqwest::Method;

use super::report::*;
use super::run::*;

/// The zero-loss check (see the module docs).
pub(super) async fn check(shared: &Shared, logs: &[Vec<Arc<Mutex<AgentLog>>>]) -> ZeroLoss {
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
        let want = recipients(shared, a);
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
            let want = recipients(shared, a);
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

/// The agents an accepted message was meant for: its conversation's members but the sender.
fn recipients(shared: &Shared, a: &Accepted) -> HashSet<Uuid> {
    let conv = &shared.convs[a.conversation];
    let team = &shared.teams[conv.team];
    conv.members
        .iter()
        .map(|&i| team.agents[i].id)
        .filter(|id| *id != a.sender)
        .collect()
}
