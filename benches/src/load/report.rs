//! The progress counters, the report of a run and its printing.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use serde::Serialize;

use super::run::*;

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

pub(super) fn print_report(r: &LoadReport) {
    println!(
        "crewbus-load: {} team(s), {} agents, {} conversations, {} recipient(s) per message, bodies {}..={} bytes, rate {}",
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

pub(super) fn report(
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
}
