//! Latency: send → the waiting fetch's answer (the baseline), send → the Stop hook's exit, send
//! → the channel event, the three alternating on one server.

use std::path::Path;
use std::time::{Duration, Instant};

use crewbus_domain::Uuid;
use serde_json::Value;

use crate::processes::{Bridge, HookSpec, stop_event, wait_hook};
use crate::scene::{Member, Scene, confirm_exactly, take_and_confirm};
use crate::support::latency::{Figures, Latencies};
use crate::support::rounds::{Order, rounds};
use crewbus_benches::kit::store::Store;

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

/// The three targets: sample `i` runs them in the `i % 6`th of the six orders
/// ([`Order::Turning`]: F H C, H C F, C F H, F C H, C H F, H F C), so each target runs first,
/// second and third equally often.
const TARGETS: [Target; 3] = [Target::Fetch, Target::Hook, Target::Channel];

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
/// the three changing every round ([`TARGETS`]).
pub async fn run(s: &Scene, bin: &Path, samples: usize, warm_up: usize) -> LatencyFigures {
    let mut l = Latency::new(s, bin).await;
    let (mut fetch, mut hook, mut channel) = (Latencies::new(), Latencies::new(), Latencies::new());
    for (i, target) in rounds(warm_up + samples, TARGETS, Order::Turning) {
        let took = l.sample(target).await;
        if i < warm_up {
            l.decided.clear();
            continue;
        }
        match target {
            Target::Fetch => fetch.record(took),
            Target::Hook => hook.record(took),
            Target::Channel => channel.record(took),
        }
    }
    let decided: Latencies = std::mem::take(&mut l.decided).into_iter().collect();
    l.bridge.close().await;
    LatencyFigures {
        store: s.store,
        fetch: fetch.figures(),
        hook: hook.figures(),
        channel: channel.figures(),
        hook_decided: decided.figures(),
    }
}
