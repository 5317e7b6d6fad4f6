//! `Wakeups` behaviours: a notify reaches every listener started before it, on every handle of
//! one deployment (two handles stand for two servers sharing a ledger), whole.
//!
//! Each behaviour takes a [`WakeupsPair`] — two handles onto one fresh deployment — and polls
//! with a deadline, never a fixed sleep. [`wakeups_trials`] registers them for a test target.

use std::collections::HashSet;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use crewbus_domain::{Uuid, Wakeup, WakeupTarget};
use crewbus_ports::{WakeupListener, Wakeups};
use libtest_mimic::Trial;
use tokio::runtime::Runtime;

use crate::FixtureError;
use crate::trial::{Behaviour, Lack, Source, Suite, behaviours};
use crate::wait::Deadline;

/// How long a behaviour waits for a wake-up to arrive.
const ARRIVAL: Duration = Duration::from_secs(10);

/// Two handles onto one fresh deployment (as two servers of it would hold), and whatever keeps
/// it alive (a database) for the behaviour's life.
pub struct WakeupsPair {
    /// The first server's handle.
    pub a: Arc<dyn Wakeups>,
    /// The second server's handle.
    pub b: Arc<dyn Wakeups>,
    /// Dropped after the behaviour.
    pub keep: Box<dyn Send + Sync>,
}

/// Builds a fresh [`WakeupsPair`] per behaviour.
#[async_trait]
pub trait WakeupsFactory: Send + Sync {
    /// A fresh deployment. Errors: its server cannot be had (fails the trial loudly).
    async fn pair(&self) -> Result<WakeupsPair, FixtureError>;
}

#[async_trait]
impl Source for dyn WakeupsFactory {
    type Fixture = WakeupsPair;
    type Need = Infallible;

    fn lacks(&self, _needs: &[Infallible]) -> Option<Lack> {
        None
    }

    async fn fixture(&self) -> Result<Box<WakeupsPair>, FixtureError> {
        self.pair().await.map(Box::new)
    }
}

/// Every `Wakeups` behaviour, by name.
pub fn wakeups_behaviours() -> Vec<Behaviour<WakeupsPair>> {
    behaviours!["wakeups" =>
        a_notify_reaches_every_listener_on_every_handle,
        a_batch_arrives_whole_and_in_order_of_notify,
        lease_wakeups_arrive_beside_agents_wakeups,
    ]
}

/// Collects targets from `listener` until `want` are all seen (an `Everyone` counts as all),
/// failing after [`ARRIVAL`]. Returns the targets in arrival order.
async fn collect(
    listener: &mut Box<dyn WakeupListener>,
    want: &HashSet<WakeupTarget>,
) -> Vec<WakeupTarget> {
    let mut got = Vec::new();
    let deadline = Deadline::new(ARRIVAL, "wake-ups");
    while !want.iter().all(|t| got.contains(t)) {
        let next = deadline
            .within(listener.next())
            .await
            .unwrap_or_else(|| panic!("wake-ups never arrived: got {got:?}"))
            .expect("listener failed");
        match next {
            Wakeup::Agents(ts) => got.extend(ts),
            Wakeup::Everyone => got.extend(want.iter().copied()),
            Wakeup::Leases(_) => {}
        }
    }
    got
}

/// Collects lease wake-ups' teams from `listener` until `want` are all seen (an `Everyone`
/// counts as all; agents' wake-ups are skipped), failing after [`ARRIVAL`].
async fn collect_teams(listener: &mut Box<dyn WakeupListener>, want: &[Uuid]) -> Vec<Uuid> {
    let mut got = Vec::new();
    let deadline = Deadline::new(ARRIVAL, "lease wake-ups");
    while !want.iter().all(|t| got.contains(t)) {
        let next = deadline
            .within(listener.next())
            .await
            .unwrap_or_else(|| panic!("lease wake-ups never arrived: got {got:?}"))
            .expect("listener failed");
        match next {
            Wakeup::Leases(teams) => got.extend(teams),
            Wakeup::Everyone => got.extend(want.iter().copied()),
            Wakeup::Agents(_) => {}
        }
    }
    got
}

fn targets(n: usize) -> Vec<WakeupTarget> {
    let team = Uuid::new_v4();
    (0..n)
        .map(|_| WakeupTarget::new(team, Uuid::new_v4()))
        .collect()
}

/// A notify through either handle reaches every listener started before it, on both handles
/// (the notifier's own included).
pub async fn a_notify_reaches_every_listener_on_every_handle(p: &WakeupsPair) {
    let mut on_a = p.a.listen().await.expect("listen on a");
    let mut on_b = p.b.listen().await.expect("listen on b");
    let mut also_on_b = p.b.listen().await.expect("listen on b again");
    let first = targets(1);
    p.a.notify(&first).await.expect("notify through a");
    let want: HashSet<_> = first.iter().copied().collect();
    for l in [&mut on_a, &mut on_b, &mut also_on_b] {
        assert!(collect(l, &want).await.contains(&first[0]));
    }
    let second = targets(1);
    p.b.notify(&second).await.expect("notify through b");
    let want: HashSet<_> = second.iter().copied().collect();
    assert!(collect(&mut on_a, &want).await.contains(&second[0]));
    p.a.notify(&[]).await.expect("an empty batch is fine");
}

/// Every target of one notify arrives (possibly over several `next` calls), and two notifies
/// arrive in the order they were made.
pub async fn a_batch_arrives_whole_and_in_order_of_notify(p: &WakeupsPair) {
    let mut listener = p.b.listen().await.expect("listen");
    let batch = targets(200);
    let last = targets(1);
    p.a.notify(&batch).await.expect("notify the batch");
    p.a.notify(&last).await.expect("notify the last");
    let mut want: HashSet<_> = batch.iter().copied().collect();
    want.insert(last[0]);
    let got = collect(&mut listener, &want).await;
    let at = |t: &WakeupTarget| got.iter().position(|g| g == t).expect("arrived");
    assert!(
        batch.iter().all(|t| at(t) < at(&last[0])),
        "the second notify overtook the first"
    );
}

/// Every `Wakeups` behaviour as its own trial, named `<target>::wakeups::<behaviour>`, each on a
/// fresh pair from `factory`, failing on a panic, a fixture error or after
/// [`TRIAL_TIMEOUT`](crate::trial::TRIAL_TIMEOUT).
pub fn wakeups_trials(
    target: &str,
    factory: Arc<dyn WakeupsFactory>,
    runtime: &Arc<Runtime>,
) -> Vec<Trial> {
    Suite::new(factory, runtime).trials(target, wakeups_behaviours())
}

/// A lease wake-up (`notify_leases`) through either handle reaches every listener on both, as
/// its own kind, whether it was sent alone or between agents' wake-ups; neither kind is taken for
/// the other.
pub async fn lease_wakeups_arrive_beside_agents_wakeups(p: &WakeupsPair) {
    let mut on_a = p.a.listen().await.expect("listen on a");
    let mut on_b = p.b.listen().await.expect("listen on b");
    let (team, other) = (Uuid::new_v4(), Uuid::new_v4());
    let agents = targets(2);
    p.a.notify(&agents[..1]).await.expect("notify");
    p.b.notify_leases(&[team]).await.expect("notify leases");
    p.a.notify(&agents[1..]).await.expect("notify");
    p.a.notify_leases(&[other]).await.expect("notify leases");
    p.a.notify_leases(&[]).await.expect("an empty batch");
    for listener in [&mut on_a, &mut on_b] {
        let mut agents_seen = Vec::new();
        let mut teams_seen = Vec::new();
        let deadline = Deadline::new(ARRIVAL, "both kinds");
        while !(agents.iter().all(|t| agents_seen.contains(t))
            && [team, other].iter().all(|t| teams_seen.contains(t)))
        {
            match deadline
                .within(listener.next())
                .await
                .unwrap_or_else(|| panic!("got {agents_seen:?} and {teams_seen:?}"))
                .expect("listener failed")
            {
                Wakeup::Agents(ts) => {
                    assert!(ts.iter().all(|t| agents.contains(t)), "{ts:?}");
                    agents_seen.extend(ts);
                }
                Wakeup::Leases(teams) => {
                    assert!(teams.iter().all(|t| *t == team || *t == other), "{teams:?}");
                    teams_seen.extend(teams);
                }
                Wakeup::Everyone => {
                    agents_seen.extend(agents.iter().copied());
                    teams_seen.extend([team, other]);
                }
            }
        }
    }
    // The helper that waits for teams alone sees a later one too.
    p.b.notify_leases(&[team]).await.expect("notify leases");
    assert!(collect_teams(&mut on_a, &[team]).await.contains(&team));
}
