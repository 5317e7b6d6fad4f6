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
#[path = "postgres/restart.rs"]
mod restart;
#[path = "postgres/support.rs"]
mod support;

pub(crate) type TestFn = fn() -> Pin<Box<dyn Future<Output = Result<(), Failed>> + Send>>;

fn main() {
    let args = Arguments::from_args();
    let trials = [body::TESTS, inbox::TESTS, errors::TESTS, restart::TESTS]
        .concat()
        .into_iter()
        .map(|(name, f)| {
            Trial::test(name, move || {
                tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .enable_all()
                    .build()
                    .expect("tokio runtime")
                    .block_on(f())
            })
        })
        .collect();
    libtest_mimic::run(&args, trials).exit();
}
