//! crewbus conformance suite: one async function per behaviour of the bus ports, generic over
//! the adapter, the one trial builder that turns them into tests ([`trial`]), the one poll
//! helper ([`wait`]), and the real-server fixtures
//! ([`nats`]: a spawned `nats-server`, restartable, with a 3-node cluster variant).
//!
//! # The behaviours
//!
//! Every public `async fn` in [`bodies`], [`inbox`], [`idempotency`] and [`ack_after_commit`]
//! is one behaviour, named after it (`publish_is_idempotent_on_publish_key`,
//! `reference_is_redelivered_until_acked`, …). Each takes a fixture (`&F` where `F:
//! BodyFixture`, `InboxFixture` or `TeamFixture`, `?Sized` so `dyn` works) that hands out the
//! ports as `Arc<dyn MessagingBackend>` / `Arc<dyn Inbox>`, starts from a fresh namespace, and
//! panics on a failed assertion. Assertions compare error *variants* (`matches!`), never
//! message text. Nothing sleeps a fixed time: time moves through [`Namespace::advance`], and
//! anything that may take a moment to show up is polled against a deadline
//! ([`wait::Deadline`], [`wait::fetch_at_least`]).
//!
//! [`behaviours`] lists them all with the [`Capability`]s they need. The `StreamAdmin`
//! behaviours live in [`stream_admin`] with their own fixture (a fresh deployment per test) and
//! [`stream_admin::admin_trials`].
//!
//! # Plugging an adapter in
//!
//! 1. Implement [`FixtureFactory`]: declare [`Capabilities`] (exactly the limits the adapters
//!    are configured with) and build one fixture per call as the plain struct [`TeamPorts`]
//!    ([`TeamPorts::from_registry`]): a **fresh** random team id (and a second team for the
//!    forbidden cases), both teams' ports from the adapter's `Backends` registry, its [`Time`]
//!    (a manual clock, or the server's), how to delete a consumer, and the per-test resources
//!    to keep (a temporary database, a store file); they drop with it. Shared resources (a
//!    spawned `nats-server`, a pool) live in the factory. A server that cannot be had is an
//!    error from `fixture()`, which fails the trial loudly — never a skip.
//! 2. The ledger and push store behaviours take [`LedgerPorts`] and [`PushStores`] the same way:
//!    plain structs of the ports, built by the target, never a per-target type of getters.
//! 3. In `tests/<adapter>.rs` (`harness = false` in `Cargo.toml`):
//!
//! ```text
//! fn main() {
//!     let args = libtest_mimic::Arguments::from_args();
//!     let runtime = crewbus_conformance::runtime();
//!     let factory = Arc::new(runtime.block_on(MyFactory::start()));
//!     let trials = crewbus_conformance::trials("myadapter", factory, &runtime);
//!     libtest_mimic::run(&args, trials).exit();
//! }
//! ```
//!
//! Every behaviour becomes its own trial, `<target>::<port>::<behaviour>`, so `cargo test`'s
//! `N passed; M ignored` counts behaviours. A behaviour needing a capability the factory does not
//! declare is ignored at run time and the output names it:
//! `test [missing:inbox_dedup_for_life] jetstream::inbox::reference_dedup_outlives_… ... ignored
//! (missing capability: inbox_dedup_for_life)`. Each trial runs as a task on the shared
//! multi-thread [`runtime`], bounded by [`trial::TRIAL_TIMEOUT`]. Every trial of every target, shared or
//! the target's own, is built by [`trial::Suite`].
//!
//! # The ledger, journal, operators and oversight behaviours
//!
//! [`ledger`], [`journal`], [`operators`] and [`oversight`] hold the `Ledger`, `Journal`,
//! `Operators` and `Oversight` behaviours (BUS.md §5, PUSH.md §1, the operator console), listed
//! by [`ledger_behaviours`], [`journal_behaviours`], [`operators_behaviours`] and
//! [`oversight_behaviours`]. They take a [`LedgerFixture`] (a fresh, empty ledger with the
//! journal, operators and oversight sharing its store) and pass their own instants
//! ([`ledger::time`]) since these ports take the time from the caller. A test target implements
//! [`LedgerFixtureFactory`] and adds `ledger_trials("<target>", factory, &runtime)` to its
//! trials: `<target>::ledger::<behaviour>`, `<target>::journal::<behaviour>`,
//! `<target>::operators::<behaviour>` and `<target>::oversight::<behaviour>`.
//!
//! [`wakeups`] and [`feed`] hold the `Wakeups` and `Feed` behaviours, each on two handles of one
//! fresh deployment ([`wakeups::wakeups_trials`], [`feed::feed_trials`]).
//!
//! # Time
//!
//! Memory and Postgres read time from an injected clock: their fixtures hold a manual clock per
//! namespace and `advance` moves it at once (`instant_advance: true`). JetStream's ack wait and
//! duplicate window run on the server: its fixture configures short windows (ack wait ≈ 1 s,
//! duplicate window ≈ 2 s) and `advance` waits the real duration; behaviours call `advance` only
//! where such a window is the behaviour under test.
//!
//! # Real servers
//!
//! [`postgres`] holds the Postgres fixtures: a fresh migrated database per test
//! (`DATABASE_URL`), kept for inspection when the test fails, and a private throwaway cluster for
//! restart tests.
#![warn(missing_docs)]

pub mod ack_after_commit;
pub mod bodies;
mod capabilities;
pub mod child;
pub mod feed;
mod fixture;
pub mod harness;
pub mod idempotency;
pub mod inbox;
pub mod journal;
pub mod leases;
pub mod ledger;
pub mod nats;
pub mod operators;
pub mod oversight;
pub mod postgres;
pub mod push_store;
pub mod samples;
pub mod search;
pub mod send_allowance;
pub mod sqlite;
pub mod stream_admin;
pub mod trial;
pub mod wait;
pub mod wakeups;

pub use capabilities::{Capabilities, Capability};
pub use fixture::{
    BodyFixture, ConsumerDeleted, DeleteConsumer, FixtureError, FixtureFactory, InboxFixture,
    LedgerPorts, Namespace, PushStores, TeamFixture, TeamPorts, Time,
};
pub use harness::{Behaviour, BehaviourFn, Port, behaviours, trials};
pub use journal::journal_behaviours;
pub use leases::leases_behaviours;
pub use ledger::fixture::{LedgerBehaviour, LedgerFixture, LedgerFixtureFactory};
pub use ledger::harness::ledger_trials;
pub use ledger::ledger_behaviours;
pub use operators::operators_behaviours;
pub use oversight::oversight_behaviours;
pub use push_store::{
    PushStoreFactory, PushStoreFixture, push_store_behaviours, push_store_trials,
};
pub use search::search_behaviours;
pub use send_allowance::send_allowance_behaviours;
pub use trial::runtime;
