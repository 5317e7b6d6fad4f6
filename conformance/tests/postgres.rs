//! The Postgres adapter against a real server: every test gets its own database (DATABASE_URL)
//! with the migrations applied; restart tests get a private cluster.
use std::future::Future;
use std::pin::Pin;

use libtest_mimic::{Arguments, Failed, Trial};

/// `tests![f, g]`: each async fn registered under its own name.
macro_rules! tests {
    ($($f:ident),* $(,)?) => {
        &[$((stringify!($f), || Box::pin($f()) as _)),*]
    };
}

#[path = "postgres/body.rs"]
mod body;
#[path = "postgres/errors.rs"]
mod errors;
#[path = "postgres/inbox.rs"]
mod inbox;
#[path = "postgres/ledger.rs"]
mod ledger;
#[path = "postgres/restart.rs"]
mod restart;
#[path = "postgres/support.rs"]
mod support;

pub(crate) type TestFn = fn() -> Pin<Box<dyn Future<Output = Result<(), Failed>> + Send>>;

/// The ledger and journal under test: one fresh database per behaviour.
struct PgLedger(crewbus_postgres::PostgresLedger);

impl crewbus_conformance::LedgerFixture for PgLedger {
    fn ledger(&self) -> std::sync::Arc<dyn crewbus_ports::Ledger> {
        std::sync::Arc::new(self.0.clone())
    }
    fn journal(&self) -> std::sync::Arc<dyn crewbus_ports::Journal> {
        std::sync::Arc::new(self.0.journal())
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime")
}

fn main() {
    let args = Arguments::from_args();
    let own = [
        body::TESTS,
        inbox::TESTS,
        errors::TESTS,
        restart::TESTS,
        ledger::TESTS,
    ]
    .concat()
    .into_iter()
    .map(|(name, f)| Trial::test(name, move || runtime().block_on(f())));
    let behaviours = crewbus_conformance::ledger_behaviours()
        .into_iter()
        .map(|(n, f)| (format!("ledger::{n}"), f))
        .chain(
            crewbus_conformance::journal_behaviours()
                .into_iter()
                .map(|(n, f)| (format!("journal::{n}"), f)),
        )
        .map(|(name, behaviour)| {
            Trial::test(name.clone(), move || {
                runtime().block_on(async {
                    let db = support::database(&name).await;
                    let fx = PgLedger(crewbus_postgres::PostgresLedger::new(
                        db.pool().clone(),
                        crewbus_domain::TenantId::default(),
                    ));
                    behaviour(&fx).await;
                    db.passed().await;
                });
                Ok(())
            })
        });
    libtest_mimic::run(&args, own.chain(behaviours).collect()).exit();
}
