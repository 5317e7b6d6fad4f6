//! What the Postgres tests share: a database per test, a manual clock, envelopes.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, TimeZone, Utc};
use crewbus_conformance::postgres::TestDatabase;
use crewbus_domain::Envelope;
use crewbus_ports::Clock;
use uuid::Uuid;

/// A fresh migrated database named after the test.
pub(crate) async fn database(label: &str) -> TestDatabase {
    TestDatabase::create(label, |pool| async move {
        crewbus_postgres::migrate(&pool).await
    })
    .await
}

/// A clock the test moves by hand.
#[derive(Debug)]
pub(crate) struct ManualClock(Mutex<DateTime<Utc>>);

impl ManualClock {
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(ManualClock(Mutex::new(
            Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap(),
        )))
    }

    pub(crate) fn advance(&self, by: Duration) {
        let mut now = self.0.lock().unwrap();
        *now += chrono::Duration::from_std(by).unwrap();
    }
}

impl Clock for ManualClock {
    fn now(&self) -> DateTime<Utc> {
        *self.0.lock().unwrap()
    }
}

/// A new envelope of `team` with `body` and fresh ids.
pub(crate) fn envelope(team: Uuid, body: &str) -> Envelope {
    Envelope {
        message_id: Uuid::new_v4(),
        conversation_id: Uuid::new_v4(),
        team_id: team,
        body: body.to_owned(),
        publish_key: Uuid::new_v4(),
    }
}
