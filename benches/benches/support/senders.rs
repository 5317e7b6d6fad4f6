//! The send loops of the benches that compare sends/s with a feature on and off
//! (`rate_limit`, `search`): 32 agents, each with a conversation of its own (with one reader),
//! sending 16-byte messages through `Bus::send` as fast as the store answers.

use std::time::{Duration, Instant};

use crewbus::bus::Bus;
use crewbus_domain::{Agent, Uuid};

/// Agents sending at once.
pub const SENDING_AGENTS: usize = 32;

/// A bus, its 32 agents and each agent's conversation.
pub struct Sender {
    pub bus: Bus,
    pub agents: Vec<(Agent, Uuid)>,
}

pub async fn sender(bus: Bus, name: &str) -> Sender {
    let team = bus.add_team(name, None, None).await.expect("team");
    let mut added = Vec::new();
    for i in 0..SENDING_AGENTS + 1 {
        added.push(
            bus.add_agent(team.id, &format!("agent-{i}"))
                .await
                .expect("agent")
                .agent,
        );
    }
    let reader = added.pop().expect("the reader");
    let mut agents = Vec::new();
    for agent in added {
        let conv = bus
            .create_conversation(&agent, "bench", &[reader.id.to_string()])
            .await
            .expect("conversation");
        agents.push((agent, conv.id));
    }
    Sender { bus, agents }
}

/// Messages sent by the 32 agents of `s` in `window`, and the time taken.
pub async fn burst(s: &Sender, window: Duration, round: usize) -> (u64, Duration) {
    let start = Instant::now();
    let mut tasks = Vec::new();
    for (i, (agent, conv)) in s.agents.iter().enumerate() {
        let (bus, agent, conv) = (s.bus.clone(), agent.clone(), *conv);
        tasks.push(tokio::spawn(async move {
            let mut sent = 0u64;
            while start.elapsed() < window {
                bus.send(
                    &agent,
                    conv,
                    format!("w{round}-a{i}-{sent}"),
                    "sixteen bytes!!!".into(),
                    None,
                )
                .await
                .expect("send");
                sent += 1;
            }
            sent
        }));
    }
    let mut sent = 0;
    for t in tasks {
        sent += t.await.expect("task");
    }
    (sent, start.elapsed())
}
