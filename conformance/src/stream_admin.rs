//! `StreamAdmin` behaviours (BUS.md §4): provisioning keeps existing limits, quota changes are
//! checked against the contents and the account, decreases never lose a body, the storage
//! account adds up, deprovision is idempotent.
//!
//! Each behaviour takes an [`AdminFixture`]: a **fresh deployment** (nothing provisioned, an
//! account budget of [`ADMIN_BUDGET`] bytes) whose admins ask for whatever quotas the behaviour
//! names — as operators with different provisioning configurations would. A fresh deployment
//! per test is what makes the account's arithmetic exact (memory: a new registry; JetStream: a
//! server of its own). [`admin_trials`] turns every behaviour into a trial.

use std::sync::Arc;

use async_trait::async_trait;
use crewbus_domain::{BusError, Published, Quotas, StreamKind};
use crewbus_ports::{MessagingBackend, StreamAdmin};
use libtest_mimic::Trial;
use tokio::runtime::Runtime;
use uuid::Uuid;

use crate::FixtureError;
use crate::samples::envelope;
use crate::trial::{Behaviour, Run, Suite, behaviours, factory_source};

const MIB: u64 = 1024 * 1024;

/// The account budget of every admin fixture's deployment, in bytes.
pub const ADMIN_BUDGET: u64 = 16 * MIB;

/// The body-stream quotas behaviours provision with: 10 bodies, 4 MiB.
pub const BODY_QUOTAS: Quotas = Quotas {
    max_messages: 10,
    max_bytes: 4 * MIB,
};

/// The inbox-stream quotas behaviours provision with: 20 references, 1 MiB.
pub const INBOX_QUOTAS: Quotas = Quotas {
    max_messages: 20,
    max_bytes: MIB,
};

/// One fresh deployment for one test.
#[async_trait]
pub trait AdminFixture: Send + Sync {
    /// An admin of this deployment whose configuration asks for `bodies` / `inbox` quotas.
    fn admin(&self, bodies: Quotas, inbox: Quotas) -> Arc<dyn StreamAdmin>;

    /// The body port of a provisioned `team` (runtime side), to fill its stream.
    async fn bodies(&self, team: Uuid) -> Arc<dyn MessagingBackend>;

    /// Replicas the admins create streams with (each reserved byte counts that many times).
    fn replicas(&self) -> u32;
}

/// Builds a fresh [`AdminFixture`] per test. A deployment that cannot be had is an error, which
/// fails the trial loudly.
#[async_trait]
pub trait AdminFixtureFactory: Send + Sync + 'static {
    /// A fresh deployment with a budget of [`ADMIN_BUDGET`] and nothing provisioned.
    async fn fixture(&self) -> Result<Box<dyn AdminFixture>, FixtureError>;
}

fn quotas(messages: u64) -> Quotas {
    Quotas {
        max_messages: messages,
        ..BODY_QUOTAS
    }
}

async fn provisioned_team(fx: &dyn AdminFixture) -> (Uuid, Arc<dyn StreamAdmin>) {
    let admin = fx.admin(BODY_QUOTAS, INBOX_QUOTAS);
    let team = Uuid::new_v4();
    admin.provision(team).await.expect("provision");
    admin.provision_inbox(team).await.expect("provision inbox");
    (team, admin)
}

/// The body stream of `team` as it stands, found by an admin asking for the provisioned quotas
/// (`provision` of an existing stream changes nothing).
async fn as_provisioned(fx: &dyn AdminFixture, team: Uuid) -> crewbus_domain::Provisioned {
    fx.admin(BODY_QUOTAS, INBOX_QUOTAS)
        .provision(team)
        .await
        .expect("find")
}

/// Publishes `n` bodies; all must be confirmed.
async fn fill(
    bodies: &dyn MessagingBackend,
    team: Uuid,
    n: u64,
) -> Vec<(crewbus_domain::Envelope, crewbus_domain::Locator)> {
    let mut stored = Vec::new();
    for i in 0..n {
        let env = envelope(team, format!("admin body {i}"));
        match bodies.publish(env.clone()).await {
            Published::Confirmed { locator, .. } => stored.push((env, locator)),
            other => panic!("body {i}: expected Confirmed, got {other:?}"),
        }
    }
    stored
}

/// Publishes until the quota refuses; returns how many were confirmed.
async fn publish_until_full(bodies: &dyn MessagingBackend, team: Uuid, most: u64) -> u64 {
    for i in 0..=most {
        match bodies.publish(envelope(team, format!("filler {i}"))).await {
            Published::Confirmed { .. } => {}
            Published::Retryable(BusError::QuotaExceeded { .. }) => return i,
            other => panic!("filler {i}: expected Confirmed or QuotaExceeded, got {other:?}"),
        }
    }
    panic!("{} bodies fit a quota of {most}", most + 1);
}

async fn all_fetchable(
    bodies: &dyn MessagingBackend,
    stored: &[(crewbus_domain::Envelope, crewbus_domain::Locator)],
) {
    for (env, loc) in stored {
        let got = bodies.fetch(loc, env.message_id).await.expect("fetch");
        assert_eq!(
            got.as_deref(),
            Some(env.body.as_str()),
            "a stored body was lost"
        );
    }
}

/// Provisioning creates the body stream with the asked limits; provisioning again with other
/// limits finds it and keeps its limits (`created: false`, `differs_from`).
pub async fn provision_creates_then_keeps_existing_limits(fx: &dyn AdminFixture) {
    let team = Uuid::new_v4();
    let first = fx
        .admin(BODY_QUOTAS, INBOX_QUOTAS)
        .provision(team)
        .await
        .expect("create");
    assert!(first.created);
    assert_eq!(first.kind, StreamKind::Bodies);
    assert_eq!(first.limits, BODY_QUOTAS);
    assert_eq!((first.messages, first.bytes), (0, 0));
    assert!(!first.differs_from(&BODY_QUOTAS));
    let other = quotas(7);
    let second = fx
        .admin(other, INBOX_QUOTAS)
        .provision(team)
        .await
        .expect("find");
    assert!(!second.created);
    assert_eq!(
        second.limits, BODY_QUOTAS,
        "an existing stream keeps its limits"
    );
    assert!(second.differs_from(&other));
}

/// The same for the inbox stream.
pub async fn provision_inbox_creates_then_keeps_existing_limits(fx: &dyn AdminFixture) {
    let team = Uuid::new_v4();
    let first = fx
        .admin(BODY_QUOTAS, INBOX_QUOTAS)
        .provision_inbox(team)
        .await
        .expect("create");
    assert!(first.created);
    assert_eq!(first.kind, StreamKind::Inbox);
    assert_eq!(first.limits, INBOX_QUOTAS);
    let other = Quotas {
        max_messages: 5,
        ..INBOX_QUOTAS
    };
    let second = fx
        .admin(BODY_QUOTAS, other)
        .provision_inbox(team)
        .await
        .expect("find");
    assert!(!second.created);
    assert_eq!(second.limits, INBOX_QUOTAS);
    assert!(second.differs_from(&other));
}

/// `check_update` / `update_quotas` of a stream never provisioned is `NotProvisioned`.
pub async fn update_of_an_unprovisioned_stream_is_not_provisioned(fx: &dyn AdminFixture) {
    let admin = fx.admin(BODY_QUOTAS, INBOX_QUOTAS);
    let team = Uuid::new_v4();
    for kind in [StreamKind::Bodies, StreamKind::Inbox] {
        assert!(matches!(
            admin.check_update(team, kind).await,
            Err(BusError::NotProvisioned { .. })
        ));
        assert!(matches!(
            admin.update_quotas(team, kind).await,
            Err(BusError::NotProvisioned { .. })
        ));
    }
}

/// `check_update` describes the change (current, wanted, contents, replicas) and changes
/// nothing.
pub async fn check_update_describes_the_change_and_changes_nothing(fx: &dyn AdminFixture) {
    let (team, _) = provisioned_team(fx).await;
    let bodies = fx.bodies(team).await;
    fill(&*bodies, team, 2).await;
    let wanted = quotas(12);
    let change = fx
        .admin(wanted, INBOX_QUOTAS)
        .check_update(team, StreamKind::Bodies)
        .await
        .expect("check");
    assert_eq!(change.current, BODY_QUOTAS);
    assert_eq!(change.wanted, wanted);
    assert_eq!(change.kind, StreamKind::Bodies);
    assert_eq!(change.messages, 2);
    assert!(change.bytes > 0);
    assert_eq!(change.replicas, fx.replicas());
    assert!(!change.is_decrease() && !change.is_noop());
    let again = as_provisioned(fx, team).await;
    assert_eq!(again.limits, BODY_QUOTAS, "check_update applied nothing");
}

/// `stream_status` reads a stream's limits and contents back (`created: false`), whatever
/// the configured quotas say, changing nothing; a stream never provisioned is
/// `NotProvisioned`.
pub async fn stream_status_reads_limits_and_contents_and_changes_nothing(fx: &dyn AdminFixture) {
    let admin = fx.admin(quotas(99), INBOX_QUOTAS);
    for kind in [StreamKind::Bodies, StreamKind::Inbox] {
        assert!(matches!(
            admin.stream_status(Uuid::new_v4(), kind).await,
            Err(BusError::NotProvisioned { .. })
        ));
    }
    let (team, _) = provisioned_team(fx).await;
    let bodies = fx.bodies(team).await;
    fill(&*bodies, team, 3).await;
    let status = admin
        .stream_status(team, StreamKind::Bodies)
        .await
        .expect("status");
    assert_eq!(status.kind, StreamKind::Bodies);
    assert!(!status.created);
    assert_eq!(
        status.limits, BODY_QUOTAS,
        "the stream's, not the configured ones"
    );
    assert_eq!(status.messages, 3);
    assert!(status.bytes > 0);
    let inbox = admin
        .stream_status(team, StreamKind::Inbox)
        .await
        .expect("inbox status");
    assert_eq!(inbox.limits, INBOX_QUOTAS);
    assert_eq!(
        as_provisioned(fx, team).await.limits,
        BODY_QUOTAS,
        "nothing changed"
    );
}

/// A raise is applied and enforced: exactly the new count fits.
pub async fn raise_is_applied_and_enforced(fx: &dyn AdminFixture) {
    let (team, _) = provisioned_team(fx).await;
    let raised = quotas(12);
    let done = fx
        .admin(raised, INBOX_QUOTAS)
        .update_quotas(team, StreamKind::Bodies)
        .await
        .expect("raise");
    assert_eq!(done.limits, raised);
    assert!(!done.created);
    let bodies = fx.bodies(team).await;
    assert_eq!(publish_until_full(&*bodies, team, 12).await, 12);
}

/// A ceiling below the contents is refused (`Conflict`) by `check_update` and `update_quotas`;
/// the limits stay and every body stays readable.
pub async fn decrease_below_the_contents_is_refused_and_keeps_every_body(fx: &dyn AdminFixture) {
    let (team, _) = provisioned_team(fx).await;
    let bodies = fx.bodies(team).await;
    let stored = fill(&*bodies, team, 6).await;
    let lower = fx.admin(quotas(3), INBOX_QUOTAS);
    assert!(matches!(
        lower.check_update(team, StreamKind::Bodies).await,
        Err(BusError::Conflict { .. })
    ));
    assert!(matches!(
        lower.update_quotas(team, StreamKind::Bodies).await,
        Err(BusError::Conflict { .. })
    ));
    let now = as_provisioned(fx, team).await;
    assert_eq!(now.limits, BODY_QUOTAS);
    assert_eq!(now.messages, 6);
    all_fetchable(&*bodies, &stored).await;
    // Intake works after the refusal.
    fill(&*bodies, team, 1).await;
}

/// A decrease the contents fit is applied, enforced, and loses nothing.
pub async fn decrease_above_the_contents_is_applied_and_enforced(fx: &dyn AdminFixture) {
    let (team, _) = provisioned_team(fx).await;
    let bodies = fx.bodies(team).await;
    let stored = fill(&*bodies, team, 3).await;
    let done = fx
        .admin(quotas(5), INBOX_QUOTAS)
        .update_quotas(team, StreamKind::Bodies)
        .await
        .expect("decrease");
    assert_eq!(done.limits, quotas(5));
    assert_eq!(done.messages, 3);
    assert!(!done.over_ceiling());
    all_fetchable(&*bodies, &stored).await;
    assert_eq!(publish_until_full(&*bodies, team, 5).await, 2);
    all_fetchable(&*bodies, &stored).await;
}

/// `apply_update` re-checks the contents: a change vetted before the stream filled up is
/// refused, and nothing changes.
pub async fn apply_update_rechecks_the_contents(fx: &dyn AdminFixture) {
    let (team, _) = provisioned_team(fx).await;
    let bodies = fx.bodies(team).await;
    fill(&*bodies, team, 2).await;
    let lower = fx.admin(quotas(4), INBOX_QUOTAS);
    let change = lower
        .check_update(team, StreamKind::Bodies)
        .await
        .expect("vetted");
    let stored = fill(&*bodies, team, 3).await;
    assert!(matches!(
        lower.apply_update(team, StreamKind::Bodies, &change).await,
        Err(BusError::Conflict { .. })
    ));
    let now = as_provisioned(fx, team).await;
    assert_eq!(now.limits, BODY_QUOTAS);
    assert_eq!(now.messages, 5);
    all_fetchable(&*bodies, &stored).await;
}

/// The account reserves Σ max_bytes × replicas over the streams, reports the budget, and
/// counts stored bytes as used.
pub async fn storage_account_adds_up(fx: &dyn AdminFixture) {
    let admin = fx.admin(BODY_QUOTAS, INBOX_QUOTAS);
    let empty = admin.storage_account().await.expect("account");
    assert_eq!(empty.reserved, 0, "a fresh deployment reserves nothing");
    assert_eq!(empty.budget, Some(ADMIN_BUDGET));
    let (team, _) = provisioned_team(fx).await;
    let replicas = u64::from(fx.replicas());
    let account = admin.storage_account().await.expect("account");
    assert_eq!(
        account.reserved,
        (BODY_QUOTAS.max_bytes + INBOX_QUOTAS.max_bytes) * replicas
    );
    let before = account.used;
    let bodies = fx.bodies(team).await;
    fill(&*bodies, team, 2).await;
    let after = admin.storage_account().await.expect("account").used;
    assert!(
        after > before,
        "stored bytes count as used ({before} → {after})"
    );
}

/// A create the account cannot reserve is refused before anything is created, with the
/// arithmetic (`InsufficientStorage`: extra, reserved, budget).
pub async fn create_beyond_the_budget_is_refused_with_the_arithmetic(fx: &dyn AdminFixture) {
    let admin = fx.admin(BODY_QUOTAS, INBOX_QUOTAS);
    let extra = BODY_QUOTAS.max_bytes * u64::from(fx.replicas());
    let most = ADMIN_BUDGET / extra + 1;
    for _ in 0..=most {
        let team = Uuid::new_v4();
        match admin.provision(team).await {
            Ok(p) => assert!(p.created),
            Err(BusError::InsufficientStorage {
                extra: asked,
                per_replica,
                replicas,
                reserved,
                budget,
                ..
            }) => {
                assert_eq!(asked, extra);
                // The factor of the total: max_bytes on each replica.
                assert_eq!(
                    (per_replica, replicas),
                    (BODY_QUOTAS.max_bytes, fx.replicas())
                );
                assert_eq!(budget, Some(ADMIN_BUDGET));
                assert!(reserved + asked > ADMIN_BUDGET);
                let account = admin.storage_account().await.expect("account");
                assert_eq!(
                    account.reserved, reserved,
                    "nothing was reserved by the refusal"
                );
                assert!(matches!(
                    admin.check_update(team, StreamKind::Bodies).await,
                    Err(BusError::NotProvisioned { .. })
                ));
                return;
            }
            Err(other) => panic!("expected Ok or InsufficientStorage, got {other:?}"),
        }
    }
    panic!("{most} body streams fit a budget of {ADMIN_BUDGET} bytes");
}

/// A raise the account cannot reserve is `InsufficientStorage` from `check_update` and
/// `update_quotas`; the limits stay.
pub async fn raise_beyond_the_budget_is_insufficient_storage(fx: &dyn AdminFixture) {
    let (team, _) = provisioned_team(fx).await;
    let huge = Quotas {
        max_messages: BODY_QUOTAS.max_messages,
        max_bytes: ADMIN_BUDGET,
    };
    let raise = fx.admin(huge, INBOX_QUOTAS);
    assert!(matches!(
        raise.check_update(team, StreamKind::Bodies).await,
        Err(BusError::InsufficientStorage { .. })
    ));
    assert!(matches!(
        raise.update_quotas(team, StreamKind::Bodies).await,
        Err(BusError::InsufficientStorage { .. })
    ));
    let now = as_provisioned(fx, team).await;
    assert_eq!(now.limits, BODY_QUOTAS);
}

/// Deprovision deletes both streams and releases their reservation; again is success.
pub async fn deprovision_releases_the_reservation_and_is_idempotent(fx: &dyn AdminFixture) {
    let (team, admin) = provisioned_team(fx).await;
    admin.deprovision(team).await.expect("deprovision");
    admin
        .deprovision(team)
        .await
        .expect("again: gone is success");
    for kind in [StreamKind::Bodies, StreamKind::Inbox] {
        assert!(matches!(
            admin.check_update(team, kind).await,
            Err(BusError::NotProvisioned { .. })
        ));
    }
    assert_eq!(admin.storage_account().await.expect("account").reserved, 0);
    let again = admin.provision(team).await.expect("provision anew");
    assert!(again.created);
    assert_eq!(again.messages, 0);
}

/// `reachable` is true for a working deployment.
pub async fn reachable_answers_for_a_working_deployment(fx: &dyn AdminFixture) {
    assert!(fx.admin(BODY_QUOTAS, INBOX_QUOTAS).reachable().await);
}

/// One admin behaviour, type-erased.
pub type AdminFn = Run<dyn AdminFixture>;

factory_source!(AdminFixtureFactory => dyn AdminFixture);

/// Every admin behaviour, in a stable order.
pub fn admin_behaviours() -> Vec<Behaviour<dyn AdminFixture>> {
    behaviours!["stream_admin" =>
        provision_creates_then_keeps_existing_limits,
        provision_inbox_creates_then_keeps_existing_limits,
        update_of_an_unprovisioned_stream_is_not_provisioned,
        check_update_describes_the_change_and_changes_nothing,
        stream_status_reads_limits_and_contents_and_changes_nothing,
        raise_is_applied_and_enforced,
        decrease_below_the_contents_is_refused_and_keeps_every_body,
        decrease_above_the_contents_is_applied_and_enforced,
        apply_update_rechecks_the_contents,
        storage_account_adds_up,
        create_beyond_the_budget_is_refused_with_the_arithmetic,
        raise_beyond_the_budget_is_insufficient_storage,
        deprovision_releases_the_reservation_and_is_idempotent,
        reachable_answers_for_a_working_deployment,
    ]
}

/// Every admin behaviour as its own trial `<target>::stream_admin::<behaviour>`, each on a fresh
/// fixture from `factory`, run on `runtime`, bounded by
/// [`TRIAL_TIMEOUT`](crate::trial::TRIAL_TIMEOUT).
pub fn admin_trials(
    target: &str,
    factory: Arc<dyn AdminFixtureFactory>,
    runtime: &Arc<Runtime>,
) -> Vec<Trial> {
    Suite::new(factory, runtime).trials(target, admin_behaviours())
}
