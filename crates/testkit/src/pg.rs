//! PostgreSQL for tests: the server named by `TEST_DATABASE_URL`, a private schema per test (so
//! that tests never share tables with other tests or other agents), and the visible skip of a
//! test that runs on PostgreSQL alone.

use sea_orm::{ConnectionTrait, Database};

/// The variable naming the PostgreSQL server the tests may use.
pub const URL_VAR: &str = "TEST_DATABASE_URL";

/// The variable a deliberate PostgreSQL-less pass sets in CI (`.ci/run`'s SQLite pass), so that
/// [`required_url`] skips there instead of failing.
pub const SKIP_VAR: &str = "TEST_SKIP_POSTGRES";

/// `TEST_DATABASE_URL` when it is set and not blank.
pub fn base_url() -> Option<String> {
    std::env::var(URL_VAR).ok().filter(|u| !u.trim().is_empty())
}

/// True when the variable `name` is set to something other than blank, `0` or `false`.
fn flag(name: &str) -> bool {
    std::env::var(name).is_ok_and(|v| !matches!(v.trim(), "" | "0" | "false"))
}

/// What a test that runs on PostgreSQL alone does without `TEST_DATABASE_URL`: the line it
/// prints when it skips (`Ok`), or why it fails (`Err`: in CI, unless [`SKIP_VAR`] says the pass
/// has no PostgreSQL on purpose).
pub fn skip_verdict(test: &str, ci: bool, skip_allowed: bool) -> Result<String, String> {
    if ci && !skip_allowed {
        Err(format!(
            "{test}: {URL_VAR} unset in CI (CI is set), so this PostgreSQL test would pass without running; \
             set {URL_VAR}, or {SKIP_VAR}=1 for a pass without PostgreSQL"
        ))
    } else {
        Ok(format!("{test}: skipped: {URL_VAR} unset"))
    }
}

/// The server URL for a test that runs on PostgreSQL alone. Without one it prints
/// `skipped: TEST_DATABASE_URL unset` and returns `None`, except in CI (the env `CI` set) where it
/// fails the test, unless `TEST_SKIP_POSTGRES` is set too.
pub fn required_url(test: &str) -> Option<String> {
    if let Some(url) = base_url() {
        return Some(url);
    }
    match skip_verdict(test, flag("CI"), flag(SKIP_VAR)) {
        Ok(line) => {
            eprintln!("{line}");
            None
        }
        Err(why) => panic!("{why}"),
    }
}

/// `base` with `options=-c search_path=<schema>` added, so that every connection made from it
/// works in `schema`.
pub fn url_with_search_path(base: &str, schema: &str) -> String {
    let sep = if base.contains('?') { '&' } else { '?' };
    format!("{base}{sep}options=-c%20search_path%3D{schema}")
}

/// A fresh schema of a PostgreSQL database and the URL whose connections use it.
#[derive(Debug, Clone)]
pub struct Schema {
    /// The URL to open stores with (the server's, with the schema as `search_path`).
    pub url: String,
    /// The schema's name.
    pub name: String,
    /// The server's URL, for dropping the schema.
    base: String,
}

impl Schema {
    /// Creates `<prefix>_<random>` on the server `base` (such as [`base_url`]).
    pub async fn create(base: &str, prefix: &str) -> Schema {
        let name = format!("{prefix}_{}", uuid::Uuid::new_v4().simple());
        let admin = Database::connect(base).await.unwrap_or_else(|e| panic!("connect to {URL_VAR}: {e}"));
        admin.execute_unprepared(&format!("CREATE SCHEMA {name}")).await.expect("create a private schema");
        admin.close().await.ok();
        Schema { url: url_with_search_path(base, &name), name, base: base.to_owned() }
    }

    /// A private schema on the `TEST_DATABASE_URL` server, when it is set.
    pub async fn from_env(prefix: &str) -> Option<Schema> {
        Some(Schema::create(&base_url()?, prefix).await)
    }

    /// Drops the schema and everything in it (best effort: a failure leaves a schema behind).
    pub async fn drop_now(self) {
        if let Ok(admin) = Database::connect(self.base.as_str()).await {
            let _ = admin.execute_unprepared(&format!("DROP SCHEMA {} CASCADE", self.name)).await;
            let _ = admin.close().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_search_path_joins_the_url_with_the_right_separator() {
        assert_eq!(
            url_with_search_path("postgres://u@h:5432/db", "s1"),
            "postgres://u@h:5432/db?options=-c%20search_path%3Ds1"
        );
        assert_eq!(
            url_with_search_path("postgres://u@h/db?sslmode=disable", "s2"),
            "postgres://u@h/db?sslmode=disable&options=-c%20search_path%3Ds2"
        );
    }

    #[test]
    fn a_postgres_only_test_skips_visibly_and_fails_in_ci() {
        let skipped = skip_verdict("t", false, false).expect("skips outside CI");
        assert!(skipped.contains("skipped: TEST_DATABASE_URL unset"), "{skipped}");
        let failed = skip_verdict("t", true, false).expect_err("fails in CI");
        assert!(failed.contains("TEST_DATABASE_URL unset in CI"), "{failed}");
        assert!(skip_verdict("t", true, true).is_ok(), "a deliberate pass without PostgreSQL skips");
    }
}
