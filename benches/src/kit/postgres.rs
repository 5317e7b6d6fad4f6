//! Fresh migrated Postgres databases for a test or a bench: one per call, dropped when the
//! caller reports success ([`TestDatabase::passed`]), kept and named when it failed.

use crewbus_conformance::postgres::TestDatabase;
use sqlx::postgres::PgConnectOptions;

/// A fresh database on `DATABASE_URL`'s server with every migration of this build applied;
/// `label` names it on stderr if it is kept.
pub async fn database(label: &str) -> TestDatabase {
    TestDatabase::create(label, |pool| async move {
        crewbus_postgres::migrate(&pool).await
    })
    .await
}

/// A fresh migrated database on the server of `admin` (`DATABASE_URL`'s, or a private
/// cluster's), a pool of 2 for the test's own reads, and the URL a `crewbus serve` process
/// reaches it by ([`url`]).
pub async fn database_with_url(label: &str, admin: PgConnectOptions) -> (TestDatabase, String) {
    let db = TestDatabase::create_with(admin, label, 2, |pool| async move {
        crewbus_postgres::migrate(&pool).await
    })
    .await;
    let url = url(&db);
    (db, url)
}

/// `postgres://<user>@<host>:<port>/<database>` of `db` (trust auth: no password, as on the
/// developers' machines and in `scripts/test`), for a configuration file.
pub fn url(db: &TestDatabase) -> String {
    let options = db.pool().connect_options();
    format!(
        "postgres://{}@{}:{}/{}",
        options.get_username(),
        options.get_host(),
        options.get_port(),
        db.name()
    )
}
