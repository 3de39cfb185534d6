//! The settings: defaults, the file under the environment, and every kind of bad value refused with
//! the setting named.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use super::values::parse_duration;
use super::*;

fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
}

/// A configuration file holding `text`, in a directory of its own.
fn file(text: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("gw-config-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join("gateway.toml");
    std::fs::write(&path, text).expect("write");
    path
}

/// The error loading `env` (and `file`) gives; fails the test when it loads.
fn refused(file: Option<&Path>, env: &BTreeMap<String, String>) -> String {
    match Config::load(file, env) {
        Ok(c) => panic!("{env:?} was accepted: {c:?}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn defaults_need_no_file() {
    let c = Config::load(None, &env(&[])).expect("defaults are valid");
    assert_eq!(c.listen.to_string(), "127.0.0.1:8080");
    assert!(c.database_url.starts_with("sqlite://data/"));
    assert_eq!(c.upstream_url, "sim");
    assert_eq!(c.demo_balance, UsdAmount::parse_decimal("100").expect("usd"));
    assert_eq!((c.log_format, c.log.to_string()), (LogFormat::Text, "info".to_owned()));
    assert_eq!(c.task_deadline.0, Duration::from_secs(48 * 3600));
    assert_eq!(c.max_connections, 8192);
}

#[test]
fn environment_wins_over_file() {
    let file = file("listen = \"127.0.0.1:9000\"\nupstream_timeout = \"5s\"\nqueue_wait = 7\n");
    let c = Config::load(
        Some(&file),
        &env(&[
            ("GATEWAY_LISTEN", "127.0.0.1:9001"),
            ("GATEWAY_EGRESS_ALLOW", "127.0.0.1, ::1"),
            ("GATEWAY_QUEUE_WAIT", "8ms"),
        ]),
    )
    .expect("valid");
    assert_eq!(c.listen.to_string(), "127.0.0.1:9001");
    assert_eq!(c.upstream_timeout.0, Duration::from_secs(5));
    assert_eq!(c.queue_wait.0, Duration::from_millis(8), "the environment wins");
    assert_eq!(c.egress_allow, vec!["127.0.0.1".to_owned(), "::1".to_owned()]);
    let bad = self::file("lisen = \"x\"\n");
    let error = refused(Some(&bad), &env(&[]));
    assert!(error.contains("lisen") && error.contains(&bad.display().to_string()), "{error}");
}

#[test]
fn bad_values_are_refused() {
    for (k, v) in [
        ("GATEWAY_LISTEN", "nowhere"),
        ("GATEWAY_UPSTREAM_TIMEOUT", "-1"),
        ("GATEWAY_IDLE_TIMEOUT", "75 s"),
        ("GATEWAY_TASK_DEADLINE", "2w"),
        ("GATEWAY_DATABASE_URL", "mysql://x"),
        ("GATEWAY_LOG_FORMAT", "xml"),
        ("GATEWAY_DEMO_BALANCE", "lots"),
        ("GATEWAY_CAPS", "maybe"),
        ("GATEWAY_BODY_BUDGET_BYTES", "1.5"),
    ] {
        let error = refused(None, &env(&[(k, v)]));
        assert!(error.contains(k), "{k}={v}: the error names the variable: {error}");
    }
    let json = Config::load(None, &env(&[("GATEWAY_LOG_FORMAT", "json")])).expect("json logs");
    assert_eq!(json.log_format, LogFormat::Json);
    let off = Config::load(None, &env(&[("GATEWAY_CAPS", "off")])).expect("caps off");
    assert!(!off.caps);
}

#[test]
fn an_unknown_variable_is_an_error_that_names_it() {
    let error = refused(None, &env(&[("GATEWAY_LISTN", "127.0.0.1:9000")]));
    assert!(error.contains("GATEWAY_LISTN") && error.contains("no such setting"), "{error}");
    let error = refused(None, &env(&[("GATEWAY_LISTEN", "127.0.0.1:9000"), ("GATEWAY_PRUNE_BATCHES", "5")]));
    assert!(error.contains("GATEWAY_PRUNE_BATCHES"), "{error}");
}

#[test]
fn a_log_filter_that_does_not_parse_is_an_error() {
    let error = refused(None, &env(&[("GATEWAY_LOG", "store=loud")]));
    assert!(error.contains("GATEWAY_LOG"), "{error}");
    let c = Config::load(None, &env(&[("GATEWAY_LOG", "info,store=debug")])).expect("a valid filter");
    assert_eq!(c.log.to_string(), "store=debug,info");
}

#[test]
fn values_below_their_least_are_errors_not_clamped() {
    // Each was silently raised to its least value before (issue 20, item 7).
    for (k, below, least) in [
        ("GATEWAY_WORKER_TASK_SLOTS", "0", "1"),
        ("GATEWAY_WORKER_DELIVERY_SLOTS", "0", "1"),
        ("GATEWAY_WORKER_USER_SLOTS", "0", "1"),
        ("GATEWAY_MAX_CONNECTIONS", "0", "1"),
    ] {
        let error = refused(None, &env(&[(k, below)]));
        assert!(error.contains(k) && error.contains(&format!("less than {least}")), "{k}={below}: {error}");
        Config::load(None, &env(&[(k, least)])).unwrap_or_else(|e| panic!("{k}={least}: {e}"));
    }
    // Durations: one type, with a least of their own.
    for (k, below, least) in [
        ("GATEWAY_TASK_POLL_INTERVAL", "0", "1ms"),
        ("GATEWAY_WEBHOOK_RETRY_BASE", "0s", "1ms"),
        ("GATEWAY_TASK_LEASE", "999ms", "1s"),
        ("GATEWAY_CAP_LEASE", "999ms", "1000ms"),
        ("GATEWAY_REPLICA_LEASE", "999ms", "1s"),
        ("GATEWAY_MEDIA_IMPORT_RATE_WINDOW", "99ms", "100ms"),
        ("GATEWAY_EGRESS_CONNECT_TIMEOUT", "0", "1ms"),
        ("GATEWAY_MEDIA_IMPORT_TIMEOUT", "0", "1ms"),
        ("GATEWAY_WEBHOOK_TIMEOUT", "0", "1ms"),
        ("GATEWAY_UPSTREAM_TIMEOUT", "0", "1ms"),
        ("GATEWAY_UPSTREAM_CONNECT_TIMEOUT", "0", "1ms"),
        ("GATEWAY_HEADER_READ_TIMEOUT", "0", "1ms"),
        ("GATEWAY_IDLE_TIMEOUT", "0", "1ms"),
        ("GATEWAY_HTTP2_KEEPALIVE", "0", "1ms"),
        ("GATEWAY_TASK_DEADLINE", "0", "1s"),
    ] {
        let error = refused(None, &env(&[(k, below)]));
        assert!(error.contains(k) && error.contains("below the least"), "{k}={below}: {error}");
        Config::load(None, &env(&[(k, least)])).unwrap_or_else(|e| panic!("{k}={least}: {e}"));
    }
    // Where 0 means "none", it is allowed.
    for k in ["GATEWAY_BODY_STALL", "GATEWAY_BODY_GRACE", "GATEWAY_QUEUE_WAIT", "GATEWAY_MEDIA_IMPORT_RATE_GRACE"] {
        Config::load(None, &env(&[(k, "0")])).unwrap_or_else(|e| panic!("{k}=0: {e}"));
    }
    // A name from before durations were one type says what it is called now.
    let error = refused(None, &env(&[("GATEWAY_IDLE_TIMEOUT_MS", "2000")]));
    assert!(error.contains("GATEWAY_IDLE_TIMEOUT_MS") && error.contains("GATEWAY_IDLE_TIMEOUT "), "{error}");
    let file = file("prune_batch = 0\n");
    let error = refused(Some(&file), &env(&[]));
    assert!(error.contains("prune_batch (in ") && error.contains("between 1 and 10000"), "{error}");
}

#[test]
fn durations() {
    assert_eq!(parse_duration("90"), Some(Duration::from_secs(90)));
    assert_eq!(parse_duration("90s"), Some(Duration::from_secs(90)));
    assert_eq!(parse_duration("48h"), Some(Duration::from_secs(172_800)));
    assert_eq!(parse_duration("2d"), Some(Duration::from_secs(172_800)));
    assert_eq!(parse_duration("250ms"), Some(Duration::from_millis(250)));
    assert_eq!(parse_duration("0"), Some(Duration::ZERO), "each setting says whether zero is allowed");
    for bad in ["", "h", "1.5h", "-1s", "10w", "ms", "5 s"] {
        assert_eq!(parse_duration(bad), None, "{bad}");
    }
}

#[test]
fn a_duration_setting_from_the_file_and_the_environment() {
    let file = file("task_deadline = \"30m\"\nprune_interval = \"90\"\n");
    let c = Config::load(Some(&file), &env(&[("GATEWAY_PRUNE_INTERVAL", "2h")])).expect("valid");
    assert_eq!(c.task_deadline.0, Duration::from_secs(1800));
    assert_eq!(c.prune_interval.0, Duration::from_secs(7200), "the environment wins");
    let error = refused(None, &env(&[("GATEWAY_TASK_DEADLINE", "0")]));
    assert!(error.contains("GATEWAY_TASK_DEADLINE") && error.contains("below the least"), "{error}");
}

#[test]
fn a_list_setting_from_the_file_and_the_environment() {
    let file = file("egress_allow = [\"10.0.0.0/8\", \"files.internal\"]\n");
    let c = Config::load(Some(&file), &env(&[])).expect("valid");
    assert_eq!(c.egress_allow, vec!["10.0.0.0/8".to_owned(), "files.internal".to_owned()]);
    let c = Config::load(Some(&file), &env(&[("GATEWAY_EGRESS_ALLOW", " a.internal,,b.internal ")])).expect("valid");
    assert_eq!(c.egress_allow, vec!["a.internal".to_owned(), "b.internal".to_owned()], "blanks are dropped");
    let c = Config::load(Some(&file), &env(&[("GATEWAY_EGRESS_ALLOW", "")])).expect("valid");
    assert!(c.egress_allow.is_empty(), "an empty variable empties the list");
}

#[test]
fn worker_and_egress_settings_come_from_the_environment() {
    let c = Config::load(
        None,
        &env(&[
            ("GATEWAY_WORKER_USER_SLOTS", "2"),
            ("GATEWAY_WEBHOOK_TIMEOUT", "3s"),
            ("GATEWAY_MEDIA_IMPORT_MIN_RATE_BYTES", "0"),
        ]),
    )
    .expect("valid");
    assert_eq!(
        (c.worker_user_slots, c.webhook_timeout.0, c.media_import_min_rate_bytes),
        (2, Duration::from_secs(3), 0)
    );
    assert_eq!((c.worker_task_slots, c.worker_delivery_slots), (64, 64));
    assert!(Config::load(None, &env(&[("GATEWAY_WORKER_TASK_SLOTS", "many")])).is_err());
}

#[test]
fn retention_settings() {
    let c = Config::load(None, &env(&[])).expect("defaults are valid");
    assert_eq!(c.idempotency_ttl.0, Duration::from_secs(86_400));
    assert_eq!(c.webhook_retention.0, Duration::from_secs(30 * 86_400));
    assert_eq!(c.response_retention.0, Duration::from_secs(30 * 86_400));
    assert_eq!(c.prune_interval.0, Duration::from_secs(600));
    assert_eq!(c.prune_batch, 500);
    let c =
        Config::load(None, &env(&[("GATEWAY_IDEMPOTENCY_TTL", "2d"), ("GATEWAY_PRUNE_BATCH", "50")])).expect("valid");
    assert_eq!((c.idempotency_ttl.0, c.prune_batch), (Duration::from_secs(172_800), 50));
    for (k, v) in [
        ("GATEWAY_IDEMPOTENCY_TTL", "10m"),
        ("GATEWAY_WEBHOOK_RETENTION", "1w"),
        ("GATEWAY_PRUNE_INTERVAL", "0"),
        ("GATEWAY_PRUNE_BATCH", "0"),
        ("GATEWAY_PRUNE_BATCH", "10001"),
    ] {
        let error = refused(None, &env(&[(k, v)]));
        let named = k.strip_prefix("GATEWAY_").map(str::to_ascii_lowercase).unwrap_or_default();
        assert!(error.contains(k) || error.contains(&named), "{k}={v}: {error}");
    }
    let c = Config::load(None, &env(&[("GATEWAY_METRICS_TOKEN", "scrape-me")])).expect("valid");
    assert_eq!(c.metrics_token.expose(), "scrape-me");
    assert!(!format!("{c:?}").contains("scrape-me"), "the token never prints");
}

#[test]
fn secrets_do_not_print() {
    let c = Config::load(None, &env(&[("GATEWAY_UPSTREAM_API_KEY", "topsecret")])).expect("valid");
    assert!(!format!("{c:?}").contains("topsecret"));
    assert_eq!(c.upstream_api_key.expose(), "topsecret");
    // A secret that looks like a number or a flag stays the text it is.
    let c = Config::load(None, &env(&[("GATEWAY_METRICS_TOKEN", "12345"), ("GATEWAY_ASSETS_SECRET_KEY", "true")]))
        .expect("valid");
    assert_eq!((c.metrics_token.expose(), c.assets_secret_key.expose()), ("12345", "true"));
}

#[test]
fn media_store_settings() {
    let c = Config::load(None, &env(&[])).expect("defaults");
    assert_eq!((c.media_store.clone(), c.media_links), (None, MediaLinks::Gateway), "the media directory by default");
    assert_eq!((c.s3_region.as_str(), c.s3_allow_http), ("us-east-1", false));
    assert_eq!((c.media_retention.0.as_secs(), c.media_sweep_interval.0.as_secs()), (86_400, 300));
    let c = Config::load(
        None,
        &env(&[
            ("GATEWAY_MEDIA_STORE", "s3://media-bucket/gw/prod"),
            ("GATEWAY_S3_ENDPOINT", "http://127.0.0.1:9000"),
            ("GATEWAY_S3_REGION", "eu-west-1"),
            ("GATEWAY_S3_ALLOW_HTTP", "true"),
            ("GATEWAY_MEDIA_LINKS", "presigned"),
            ("GATEWAY_MEDIA_RETENTION", "7d"),
            ("GATEWAY_MEDIA_SWEEP_INTERVAL", "30s"),
        ]),
    )
    .expect("S3 settings");
    assert_eq!(
        c.media_store,
        Some(media::MediaLocation::S3 { bucket: "media-bucket".into(), prefix: "gw/prod".into() })
    );
    assert_eq!(
        (c.s3_endpoint.as_str(), c.s3_region.as_str(), c.s3_allow_http),
        ("http://127.0.0.1:9000", "eu-west-1", true)
    );
    assert_eq!(
        (c.media_links, c.media_retention.0.as_secs(), c.media_sweep_interval.0.as_secs()),
        (MediaLinks::Presigned, 604_800, 30)
    );
    let c = Config::load(None, &env(&[("GATEWAY_MEDIA_STORE", "file:/srv/media")])).expect("a directory");
    assert_eq!(c.media_store, Some(media::MediaLocation::File("/srv/media".into())));
    for (k, bad) in [
        ("GATEWAY_MEDIA_STORE", "gs://bucket"),
        ("GATEWAY_MEDIA_STORE", "s3://UPPER"),
        ("GATEWAY_MEDIA_STORE", "s3://bucket/../up"),
        ("GATEWAY_MEDIA_STORE", "file:"),
        ("GATEWAY_MEDIA_LINKS", "direct"),
        ("GATEWAY_MEDIA_RETENTION", "0"),
        ("GATEWAY_S3_ALLOW_HTTP", "maybe"),
    ] {
        let error = refused(None, &env(&[(k, bad)]));
        assert!(error.contains(k), "{k}={bad}: {error}");
    }
}

#[test]
fn model_aliases_from_the_file() {
    let file = file("[[model_aliases]]\nname = \"fast\"\nmodels = [\"LangA-V4-pro\", \"LangA-V4-flash\"]\n");
    let c = Config::load(Some(&file), &env(&[])).expect("aliases");
    assert_eq!(c.model_aliases.len(), 1);
    assert_eq!((c.model_aliases[0].name.as_str(), c.model_aliases[0].models.len()), ("fast", 2));
    for (bad, named) in [
        ("[[model_aliases]]\nname = \"x\"\nmodels = \"m\"\n", "models"),
        ("[[model_aliases]]\nname = \"x\"\nmodels = [\"m\"]\nmodel = \"m\"\n", "model"),
        ("[[model_aliases]]\nmodels = [\"m\"]\n", "name"),
    ] {
        let error = refused(Some(&self::file(bad)), &env(&[]));
        assert!(error.contains(named), "{bad}: {error}");
    }
}

#[test]
fn upstream_endpoints_in_full_from_the_file() {
    let file = file(
        "[[upstream_endpoints]]\nname = \"main\"\npool = \"platform\"\nurl = \"https://a.example/api/v3\"\nkeys = [\"k1\", \"k2\"]\nweight = 3\nmax_in_flight = 50\n\n\
         [[upstream_endpoints]]\nname = \"backup\"\npool = \"platform\"\nurl = \"https://b.example/api/v3\"\nkeys = [\"k3\"]\npriority = 1\nrpm = 600\nmodels = [\"m-1\", \"m-2\"]\n",
    );
    let c = Config::load(Some(&file), &env(&[])).expect("full form");
    assert_eq!(c.upstream_endpoints.len(), 2);
    let main = &c.upstream_endpoints[0];
    assert_eq!(
        (main.pool, main.weight, main.priority, main.max_in_flight, main.keys.len()),
        (UpstreamPool::Platform, 3, 0, Some(50), 2)
    );
    let backup = &c.upstream_endpoints[1];
    assert_eq!((backup.weight, backup.priority, backup.max_in_flight), (1, 1, None), "defaults");
    assert_eq!((main.rpm, main.models.as_ref()), (None, None), "no limit, every model");
    assert_eq!(backup.rpm, Some(600));
    assert_eq!(backup.models.as_deref(), Some(&["m-1".to_owned(), "m-2".to_owned()][..]));
    assert!(!format!("{c:?}").contains("k1"), "keys never print");
    for (bad, named) in [
        ("[[upstream_endpoints]]\nname = \"x\"\npool = \"video\"\nurl = \"u\"\nkeys = []\n", "video"),
        ("[[upstream_endpoints]]\nname = \"x\"\npool = \"platform\"\nurl = \"u\"\nkeys = []\nweihgt = 2\n", "weihgt"),
        ("[[upstream_endpoints]]\npool = \"platform\"\nurl = \"u\"\nkeys = []\n", "name"),
        ("[[upstream_endpoints]]\nname = \"x\"\npool = \"platform\"\nurl = \"u\"\nkeys = []\nrpm = -1\n", "rpm"),
        (
            "[[upstream_endpoints]]\nname = \"x\"\npool = \"platform\"\nurl = \"u\"\nkeys = []\nmodels = \"m\"\n",
            "models",
        ),
    ] {
        let error = refused(Some(&self::file(bad)), &env(&[]));
        assert!(error.contains(named), "{bad}: {error}");
    }
    let error = refused(None, &env(&[("GATEWAY_UPSTREAM_ENDPOINTS", "a")]));
    assert!(error.contains("GATEWAY_UPSTREAM_ENDPOINTS"), "{error}");
}
