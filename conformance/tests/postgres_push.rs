//! The `PushStore` conformance behaviours on `PostgresPushStore` against a real server, every
//! behaviour its own test.
//!
//! Each test gets a fresh migrated database (`DATABASE_URL`; kept and named when the behaviour
//! panics) with two tenants over it, as tenants share one database in production.

use std::sync::Arc;

use async_trait::async_trait;
use crewbus_conformance::postgres::TestDatabase;
use crewbus_conformance::{FixtureError, PushStoreFactory, PushStoreFixture, push_store_trials};
use crewbus_domain::TenantId;
use crewbus_ports::PushStore;
use crewbus_postgres::PostgresPushStore;

struct Fixture {
    mine: PostgresPushStore,
    theirs: PostgresPushStore,
    _db: TestDatabase,
}

impl PushStoreFixture for Fixture {
    fn store(&self) -> Arc<dyn PushStore> {
        Arc::new(self.mine.clone())
    }
    fn other_tenant(&self) -> Arc<dyn PushStore> {
        Arc::new(self.theirs.clone())
    }
}

struct Factory;

#[async_trait]
impl PushStoreFactory for Factory {
    async fn fixture(&self) -> Result<Box<dyn PushStoreFixture>, FixtureError> {
        let db = TestDatabase::create("postgres_push", |pool| async move {
            crewbus_postgres::migrate(&pool).await
        })
        .await
        .drop_unless_panicking();
        let mine = PostgresPushStore::new(db.pool().clone(), TenantId::new("acme")?);
        let theirs = PostgresPushStore::new(db.pool().clone(), TenantId::new("globex")?);
        Ok(Box::new(Fixture {
            mine,
            theirs,
            _db: db,
        }))
    }
}

fn main() {
    let args = libtest_mimic::Arguments::from_args();
    let runtime = crewbus_conformance::runtime();
    let trials = push_store_trials("postgres", Arc::new(Factory), &runtime);
    libtest_mimic::run(&args, trials).exit();
}
