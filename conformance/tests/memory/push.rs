//! The `PushStore` conformance behaviours on the memory push store, every behaviour its own test
//! (`memory::push_store::…`; a module of the `memory` target).
//!
//! Each test gets a fresh backing state with two tenants over it, as two tenants share one
//! database in production.

use std::sync::Arc;

use async_trait::async_trait;
use crewbus_conformance::{
    FixtureError, PushStoreFactory, PushStoreFixture, PushStores, push_store_trials,
};
use crewbus_domain::TenantId;
use crewbus_memory::MemoryPushStore;

struct Factory;

#[async_trait]
impl PushStoreFactory for Factory {
    async fn fixture(&self) -> Result<Box<dyn PushStoreFixture>, FixtureError> {
        let mine = MemoryPushStore::new(TenantId::new("acme")?);
        let theirs = mine.for_tenant(TenantId::new("globex")?);
        Ok(Box::new(PushStores {
            store: Arc::new(mine),
            other_tenant: Arc::new(theirs),
            keep: Box::new(()),
        }))
    }
}

/// The push store's trials, on `runtime`.
pub fn trials(runtime: &Arc<tokio::runtime::Runtime>) -> Vec<libtest_mimic::Trial> {
    push_store_trials("memory", Arc::new(Factory), runtime)
}
