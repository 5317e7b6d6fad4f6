//! Latency: send → the waiting fetch's answer (the baseline), send → the Stop hook's exit, send
//! → the channel event, the three alternating on one server.

use std::path::Path;
use std::time::{Duration, Instant};

use crewbus_domain::Uuid;
use serde_json::Value;

use crate::processes::{Bridge, HookSpec, stop_event, wait_hook};
use crate::scene::{Member, Scene, Store, confirm_exactly, take_and_confirm};

/// `wait_ms` of a sample's waiting fetch, and `--wait` of a sample's hook (far above any
/// latency: neither ends before its message comes).
const SAMPLE_WAIT_MS: u64 = 20_000;
const HOOK_WAIT_SECONDS: u64 = 20;
/// How long a sample's waiter may take to park, and its answer to come.
const WITHIN: Duration = Duration::from_secs(10);

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Target {
    /// `POST /v1/inbox/fetch {wait_ms}` already parked when the send starts (the baseline).
    Fetch,
    /// `crewbus hook claude-code --headless`, fed a Stop event, its watch parked when the send
    /// starts; timed to the process's exit.
    Hook,
    /// `crewbus mcp --channel`, its watch parked when the send starts; timed to the
    /// `notifications/claude/channel` line.
    Channel,
}

/// Every order of the three targets: sample `i` runs them in `ORDERS[i % 6]`, so each target
/// runs first, second and third equally often.
const ORDERS: [[Target; 3]; 6] = {
    use Target::{Channel as C, Fetch as F, Hook as H};
    [
        [F, H, C],
        [H, C, F],
        [C, F, H],
        [F, C, H],
        [C, H, F],
        [H, F, C],
    ]
};

/// p50 / p99 / max of one target on one store.
#[derive(Clone, Copy, Debug)]
pub struct Figures {
    pub samples: usize,
    pub p50: Duration,
    pub p99: Duration,
    pub max: Duration,
}

/// The nearest-rank percentile `p` (0–1] of sorted `xs`.
fn percentile(xs: &[Duration], p: f64) -> Duration {
    let rank = ((p * xs.len() as f64).ceil() as usize).clamp(1, xs.len());
    xs[rank - 1]
}

pub fn figures(mut xs: Vec<Duration>) -> Figures {
    xs.sort_unstable();
    Figures {
        samples: xs.len(),
        p50: percentile(&xs, 0.50),
        p99: percentile(&xs, 0.99),
        max: *xs.last().expect("samples"),
    }
}

/// One store's latency figures.
pub struct LatencyFigures {
    pub store: Store,
    pub fetch: Figures,
    pub hook: Figures,
    pub channel: Figures,
    /// Diagnostic: send → the hook's decision line on its stdout (before the process exits).
    pub hook_decided: Figures,
}

/// The latency phase's agents: one sender, and per target a receiver in a conversation of its
/// own with the sender.
struct Latency<'a> {
    s: &'a Scene,
    bin: &'a Path,
    sender: Member,
    fetcher: Member,
    fetch_conversation: Uuid,
    hooked: Member,
    hook_conversation: Uuid,
    listener: Member,
    channel_conversation: Uuid,
    bridge: Bridge,
    sent: usize,
    decided: Vec<Duration>,
}

impl<'a> Latency<'a> {
    async fn new(s: &'a Scene, bin: &'a Path) -> Latency<'a> {
        let sender = s.member("sender").await;
        let fetcher = s.member("fetcher").await;
        let hooked = s.member("hooked").await;
        let listener = s.member("listener").await;
        let fetch_conversation = s.conversation(&sender, "fetch", &[fetcher.id]).await;
        let hook_conversation = s.conversation(&sender, "hook", &[hooked.id]).await;
        let channel_conversation = s.conversation(&sender, "channel", &[listener.id]).await;
        let bridge = Bridge::start(bin, s.home.path(), &s.server.url(), &listener.token_file).await;
        Latency {
            s,
            bin,
            sender,
            fetcher,
            fetch_conversation,
            hooked,
            hook_conversation,
            listener,
            channel_conversation,
            bridge,
            sent: 0,
            decided: Vec::new(),
        }
    }

    async fn send(&mut self, conversation: Uuid) -> Value {
        self.sent += 1;
        self.sender
            .client
            .send(conversation, &format!("r{}", self.sent), "ping")
            .await
            .expect("send")
    }

    /// One sample of `target`: send → its receiver has the news (checked: that message), then
    /// the receiver takes and confirms it (untimed).
    async fn sample(&mut self, target: Target) -> Duration {
        let s = self.s;
        match target {
            Target::Fetch => {
                let client = self.fetcher.client.clone();
                let wait = tokio::spawn(async move {
                    let answer = client.fetch_waiting(10, SAMPLE_WAIT_MS).await;
                    (answer, Instant::now())
                });
                s.until("the waiting fetch parked", WITHIN, || {
                    s.bus.waiting_fetches() >= 1
                })
                .await;
                let start = Instant::now();
                let sent = self.send(self.fetch_conversation).await;
                let (answer, arrived) = wait.await.expect("waiting fetch task");
                let (status, body) = answer.expect("waiting fetch");
                assert_eq!(status, 200, "{body}");
                let got = body["deliveries"].as_array().cloned().unwrap_or_default();
                confirm_exactly("fetch", &self.fetcher, &got, &sent).await;
                arrived - start
            }
            Target::Hook => {
                let url = s.server.url();
                let spec = HookSpec {
                    bin: self.bin,
                    home: s.home.path(),
                    url: &url,
                    token_file: &self.hooked.token_file,
                };
                let child = spec.spawn(HOOK_WAIT_SECONDS, &stop_event("latency"));
                let ended = tokio::task::spawn_blocking(move || wait_hook(child));
                // The bridge's watch and the hook's.
                s.until("the hook's watch parked", WITHIN, || {
                    ended.is_finished() || s.bus.waiting_watches() >= 2
                })
                .await;
                if ended.is_finished() {
                    let end = ended.await.expect("hook task");
                    panic!("the hook ended before its watch waited: {end:?}");
                }
                let start = Instant::now();
                let sent = self.send(self.hook_conversation).await;
                let end = tokio::time::timeout(WITHIN, ended)
                    .await
                    .expect("the hook returns")
                    .expect("hook task");
                let reason = end.reason("hook");
                assert!(
                    reason.starts_with("crewbus: 1 new message from «sender» in «hook»"),
                    "{reason}"
                );
                self.decided
                    .push(end.decided.expect("a decision line") - start);
                take_and_confirm("hook", &self.hooked, &sent).await;
                end.exited - start
            }
            Target::Channel => {
                // No hook runs now: the one watch is the bridge's.
                s.until("the bridge's watch parked", WITHIN, || {
                    s.bus.waiting_watches() >= 1
                })
                .await;
                let start = Instant::now();
                let sent = self.send(self.channel_conversation).await;
                let (at, event) = self.bridge.event(WITHIN).await;
                assert_eq!(
                    event["meta"]["message"], sent["message"]["id"],
                    "the event names the message sent: {event}"
                );
                assert_eq!(event["meta"]["new"], "1", "{event}");
                take_and_confirm("channel", &self.listener, &sent).await;
                at - start
            }
        }
    }
}

/// The latency phase on one store: `warm_up` rounds, then `samples` per target, the order of
/// the three changing every round ([`ORDERS`]).
pub async fn run(s: &Scene, bin: &Path, samples: usize, warm_up: usize) -> LatencyFigures {
    let mut l = Latency::new(s, bin).await;
    let (mut fetch, mut hook, mut channel) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..warm_up + samples {
        for target in ORDERS[i % ORDERS.len()] {
            let took = l.sample(target).await;
            if i < warm_up {
                continue;
            }
            match target {
                Target::Fetch => fetch.push(took),
                Target::Hook => hook.push(took),
                Target::Channel => channel.push(took),
            }
        }
        if i + 1 == warm_up {
            l.decided.clear();
        }
    }
    let decided = std::mem::take(&mut l.decided);
    l.bridge.close().await;
    LatencyFigures {
        store: s.store,
        fetch: figures(fetch),
        hook: figures(hook),
        channel: figures(channel),
        hook_decided: figures(decided),
    }
}
