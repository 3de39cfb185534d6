//! Wiring: the upstream adapters (or the in-process simulator for endpoints set to `sim`), the media
//! store, signed links, egress and the asset control plane, turned into the use cases' ports.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use domain::SystemClock;
use service::{AdmissionSettings, Gateway, Ports, VideoPorts, VideoSettings};
use store::Store;

use crate::Exit;
use crate::config::{Config, MediaLinks, Secret, UpstreamEndpoint, UpstreamPool};

/// The use cases, and the simulator they may talk to (keep it alive as long as the server).
pub(crate) struct Wired {
    pub gateway: Gateway,
    pub simulator: Option<sim::SimHandle>,
}

/// A name for this process's worker leases, unique among replicas.
pub(crate) fn worker_name() -> String {
    format!("worker-{}-{}", std::process::id(), uuid::Uuid::new_v4().simple())
}

/// Builds the gateway on `store` for a server listening on `addr`.
pub(crate) async fn wire(config: &Config, store: Store, addr: SocketAddr) -> Result<Wired, Exit> {
    let connect_timeout = config.upstream_connect_timeout.0;
    let timeout = config.upstream_timeout.0;
    let urls = [&config.upstream_url, &config.speech_url, &config.messages_url, &config.assets_url];
    let sim = if urls.iter().any(|u| entries(u).contains(&"sim")) {
        Some(sim::spawn().await.map_err(|e| format!("simulator: {e}"))?)
    } else {
        None
    };
    let sim_addr = sim.as_ref().map(|(a, _)| *a);
    let upstream = Arc::new(upstream_client(config, sim_addr, connect_timeout, timeout)?);
    if entries(&config.assets_url).len() > 1 {
        return Err(Exit::config(
            "assets_url: one origin (the asset control plane is tied to the video tasks' account and is not routed)"
                .into(),
        ));
    }
    let assets = assets_client(config, sim_addr, connect_timeout)?;
    let media = media_store(config).await?;
    let secret = match config.media_link_secret.expose() {
        "" => {
            let candidate = service::generate_secret().map_err(|e| format!("randomness: {e}"))?.hash;
            store.shared_secret("media_links", &candidate).await.map_err(|e| format!("database: {e}"))?
        }
        configured => configured.to_owned(),
    };
    let public = if config.public_url.is_empty() { format!("http://{addr}") } else { config.public_url.clone() };
    let video = VideoPorts {
        upstream: upstream.clone(),
        assets: Arc::new(assets),
        media,
        outbound: Arc::new(egress(config)?),
        links: Arc::new(media::LinkSigner::new(secret, &public)),
        wire: Arc::new(api::wire::WireTasks),
    };
    let mut ports = Ports::from_store(store, Arc::new(SystemClock))
        .with_upstream(upstream.clone())
        .with_upstream_health(upstream)
        .with_video(video);
    if let Some(payments) = payments(config, &public)? {
        ports = ports.with_payments(payments.processor, payments.settings);
    }
    let settings = VideoSettings {
        poll_interval: config.task_poll_interval.0,
        deadline: config.task_deadline.0,
        webhook_retry_base: config.webhook_retry_base.0,
        lease: config.task_lease.0,
        task_slots: config.worker_task_slots,
        delivery_slots: config.worker_delivery_slots,
        user_slots: config.worker_user_slots,
        presigned_links: config.media_links == MediaLinks::Presigned,
        media_retention: config.media_retention.0,
        ..VideoSettings::default()
    };
    let admission = AdmissionSettings {
        enabled: config.caps,
        queue_wait: config.queue_wait.0,
        lease_ttl: config.cap_lease.0,
        ..AdmissionSettings::default()
    };
    let gateway =
        Gateway::new(ports).with_call_timeout(timeout).with_video_settings(settings).with_admission(admission);
    Ok(Wired { gateway, simulator: sim.map(|(_, handle)| handle) })
}

/// Self-serve top-ups through Stripe when both Stripe secrets are set; `None` when neither is.
fn payments(config: &Config, public: &str) -> Result<Option<service::PaymentPorts>, Exit> {
    let (key, hook) = (config.stripe_secret_key.expose(), config.stripe_webhook_secret.expose());
    match (key.is_empty(), hook.is_empty()) {
        (true, true) => return Ok(None),
        (false, false) => {}
        _ => return Err(Exit::config("stripe_secret_key and stripe_webhook_secret: set both, or neither".into())),
    }
    if config.topup_min_usd.micros() <= 0 || config.topup_min_usd > config.topup_max_usd {
        return Err(Exit::config("topup_min_usd must be above 0 and at most topup_max_usd".into()));
    }
    let processor = media::StripeCheckout::new(&config.stripe_api_base, key).map_err(|e| format!("stripe: {e}"))?;
    let billing = format!("{}/console/#/billing", public.trim_end_matches('/'));
    let or_console =
        |url: &str, back: &str| if url.is_empty() { format!("{billing}?{back}=1") } else { url.to_owned() };
    let settings = service::PaymentSettings {
        webhook_secret: hook.to_owned(),
        min: config.topup_min_usd,
        max: config.topup_max_usd,
        success_url: or_console(&config.topup_success_url, "paid"),
        cancel_url: or_console(&config.topup_cancel_url, "cancelled"),
    };
    Ok(Some(service::PaymentPorts { processor: Arc::new(processor), settings }))
}

/// The media store `media_store` names (the media directory when it is not set). An object store
/// is probed first (a small object written, read back and deleted): one that cannot be used is a
/// configuration error, so `serve` exits 64 with one line rather than failing its first upload.
async fn media_store(config: &Config) -> Result<Arc<dyn domain::ports::MediaStore>, Exit> {
    let location = config.media_store.clone().unwrap_or_else(|| media::MediaLocation::File(config.media_dir.clone()));
    Ok(match location {
        media::MediaLocation::File(dir) => {
            Arc::new(media::LocalMediaStore::new(&dir).await.map_err(|e| Exit::config(format!("media_store: {e}")))?)
        }
        media::MediaLocation::S3 { bucket, prefix } => {
            let endpoint = (!config.s3_endpoint.trim().is_empty()).then(|| config.s3_endpoint.trim().to_owned());
            let location = media::S3Location {
                bucket: bucket.clone(),
                prefix,
                endpoint,
                region: config.s3_region.clone(),
                allow_http: config.s3_allow_http,
                credentials: None,
            };
            let store =
                media::ObjectMediaStore::s3(&location).map_err(|e| Exit::config(format!("media_store: {e}")))?;
            store.probe().await.map_err(|e| {
                let line = e.to_string().replace('\n', " ");
                Exit::config(format!("media_store: the bucket {bucket:?} cannot be used: {line}"))
            })?;
            Arc::new(store)
        }
    })
}

/// The synchronous and task endpoints: each kind's base URLs from its setting (comma-separated;
/// `sim` is the built-in simulator), with one key for all of them or one per URL in the same order.
/// A key list of another length is a configuration error (exit 64).
fn upstream_client(
    config: &Config,
    sim: Option<SocketAddr>,
    connect_timeout: Duration,
    timeout: Duration,
) -> Result<upstream::RoutedUpstream, Exit> {
    let simulated = sim.map(|a| upstream::UpstreamConfig::for_simulator(a, connect_timeout, timeout));
    let from_sim = |get: fn(&upstream::UpstreamConfig) -> (String, String)| simulated.as_ref().map(get);
    let platform_keys = config.upstream_api_key.expose();
    let platform = members(
        ("upstream_url", &config.upstream_url),
        ("upstream_api_key", platform_keys),
        "platform",
        from_sim(|s| (s.platform_base.clone(), s.platform_key.clone())),
    )?;
    let speech = members(
        ("speech_url", &config.speech_url),
        ("speech_api_key", config.speech_api_key.expose()),
        "speech",
        from_sim(|s| (s.speech_origin.clone(), s.speech_key.clone())),
    )?;
    // The message-compatible bases take the platform's keys: one per base when the counts match,
    // else every key on every base (the keys are the platform account's, valid on each base).
    let message_bases = entries(&config.messages_url);
    let keys: Vec<&str> = platform_keys.split(',').map(str::trim).collect();
    let messages = if keys.len() == message_bases.len() || keys.len() == 1 {
        members(
            ("messages_url", &config.messages_url),
            ("upstream_api_key", platform_keys),
            "messages",
            from_sim(|s| (s.messages_base.clone(), s.platform_key.clone())),
        )?
    } else {
        let mut all = Vec::new();
        for key in &keys {
            all.extend(members(
                ("messages_url", &config.messages_url),
                ("upstream_api_key", key),
                "messages",
                from_sim(|s| (s.messages_base.clone(), s.platform_key.clone())),
            )?);
        }
        for (i, member) in all.iter_mut().enumerate() {
            member.name = format!("messages-{}", i + 1);
        }
        all
    };
    let full = |pool: UpstreamPool, quick: Vec<upstream::Member>| {
        full_form(&config.upstream_endpoints, pool).map(|members| members.unwrap_or(quick))
    };
    upstream::RoutedUpstream::new(upstream::RoutedConfig {
        platform: full(UpstreamPool::Platform, platform)?,
        speech: full(UpstreamPool::Speech, speech)?,
        messages: full(UpstreamPool::Messages, messages)?,
        connect_timeout,
        timeout,
        breaker: upstream::route::BreakerSettings::default(),
        max_attempts: upstream::routed::DEFAULT_MAX_ATTEMPTS,
    })
    .map_err(|e| Exit::config(format!("upstream: {e}")))
}

/// The endpoints of `pool` in the full form (`[[upstream_endpoints]]`), or `None` when it names
/// none. An endpoint with several keys is a key pool: one member per key, sharing the endpoint's
/// weight (every weight is scaled by the least common multiple of the key counts, so the shares
/// stay exact). Limits (`max_in_flight`, `rpm`) hold for each key. An endpoint whose `models`
/// list is empty would never be picked: a start-up error, as is a name used twice.
fn full_form(endpoints: &[UpstreamEndpoint], pool: UpstreamPool) -> Result<Option<Vec<upstream::Member>>, Exit> {
    let of_pool: Vec<&UpstreamEndpoint> = endpoints.iter().filter(|e| e.pool == pool).collect();
    if of_pool.is_empty() {
        return Ok(None);
    }
    for (i, e) in of_pool.iter().enumerate() {
        if e.models.as_ref().is_some_and(Vec::is_empty) {
            return Err(Exit::config(format!(
                "upstream_endpoints: {} lists no models (leave models out for all)",
                e.name
            )));
        }
        if of_pool[..i].iter().any(|earlier| earlier.name == e.name) {
            return Err(Exit::config(format!("upstream_endpoints: the name {} is used twice in one pool", e.name)));
        }
    }
    let gcd = |mut a: u32, mut b: u32| {
        while b != 0 {
            (a, b) = (b, a % b);
        }
        a
    };
    let counts = of_pool.iter().map(|e| u32::try_from(e.keys.len().max(1)).unwrap_or(1));
    let scale = counts.fold(1, |l, n| l / gcd(l, n) * n);
    let mut members = Vec::new();
    for e in of_pool {
        // No keys: one member that sends no credential.
        let list: Vec<&str> = if e.keys.is_empty() { vec![""] } else { e.keys.iter().map(Secret::expose).collect() };
        let keys = u32::try_from(list.len()).unwrap_or(1);
        for (i, key) in list.into_iter().enumerate() {
            let name = if keys == 1 { e.name.clone() } else { format!("{}#{}", e.name, i + 1) };
            members.push(upstream::Member {
                name,
                url: e.url.clone(),
                key: key.to_owned(),
                weight: e.weight.max(1).saturating_mul(scale) / keys,
                priority: e.priority,
                max_in_flight: e.max_in_flight,
                rpm: e.rpm,
                models: e.models.clone(),
            });
        }
    }
    Ok(Some(members))
}

/// The comma-separated entries of a list setting, blanks left out.
fn entries(list: &str) -> Vec<&str> {
    list.split(',').map(str::trim).filter(|e| !e.is_empty()).collect()
}

/// The endpoints of one kind: the URLs of the setting `urls` (`sim`: the simulator's base and key,
/// `sim_base`), each with the one key of `keys` or the key at its position. Named `<name>-<n>`.
fn members(
    (url_setting, urls): (&str, &str),
    (key_setting, keys): (&str, &str),
    name: &str,
    sim_base: Option<(String, String)>,
) -> Result<Vec<upstream::Member>, Exit> {
    let urls = entries(urls);
    let keys: Vec<&str> = keys.split(',').map(str::trim).collect();
    if !urls.is_empty() && keys.len() != 1 && keys.len() != urls.len() {
        return Err(Exit::config(format!(
            "{key_setting}: {} keys for the {} URLs of {url_setting}; give one key for all, or one per URL in the same order",
            keys.len(),
            urls.len()
        )));
    }
    urls.iter()
        .enumerate()
        .map(|(i, url)| {
            let key = if keys.len() == urls.len() { keys[i] } else { keys[0] };
            let (url, key) = match (*url, &sim_base) {
                ("sim", Some((base, sim_key))) => (base.clone(), sim_key.clone()),
                ("sim", None) => return Err(Exit::config(format!("{url_setting}: sim without the simulator"))),
                (url, _) => (url.to_owned(), key.to_owned()),
            };
            Ok(upstream::Member::plain(format!("{name}-{}", i + 1), url, key))
        })
        .collect()
}

/// The asset control plane: configured, or the simulator for `sim`.
fn assets_client(
    config: &Config,
    sim: Option<SocketAddr>,
    connect_timeout: Duration,
) -> Result<upstream::HttpAssetUpstream, String> {
    let timeout = Duration::from_secs(60);
    let assets = match (config.assets_url.as_str(), sim) {
        ("sim", Some(addr)) => upstream::AssetsConfig::for_simulator(addr, connect_timeout, timeout),
        (origin, _) => upstream::AssetsConfig {
            origin: origin.to_owned(),
            access_key: config.assets_access_key.expose().to_owned(),
            secret_key: config.assets_secret_key.expose().to_owned(),
            region: config.assets_region.clone(),
            project_name: upstream::config::DEFAULT_ASSETS_PROJECT.to_owned(),
            connect_timeout,
            timeout,
        },
    };
    upstream::HttpAssetUpstream::new(assets).map_err(|e| format!("assets: {e}"))
}

/// The egress client for media imports and webhooks, with its timeouts and the imports' minimum rate.
fn egress(config: &Config) -> Result<media::Egress, String> {
    let allow = media::AllowList::parse(&config.egress_allow.join(",")).map_err(|e| format!("egress_allow: {e}"))?;
    let extra_ca_pem = match config.extra_ca_file.as_str() {
        "" => None,
        path => Some(std::fs::read(path).map_err(|e| format!("extra_ca_file {path}: {e}"))?),
    };
    let min_rate = (config.media_import_min_rate_bytes > 0).then_some(media::MinRate {
        bytes_per_sec: config.media_import_min_rate_bytes,
        window: config.media_import_rate_window.0,
        grace: config.media_import_rate_grace.0,
    });
    media::Egress::new(media::EgressConfig {
        allow,
        extra_ca_pem,
        connect_timeout: config.egress_connect_timeout.0,
        timeout: config.media_import_timeout.0,
        webhook_timeout: Some(config.webhook_timeout.0),
        min_rate,
    })
    .map_err(|e| format!("egress: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn endpoints(text: &str) -> Vec<UpstreamEndpoint> {
        #[derive(serde::Deserialize)]
        struct File {
            upstream_endpoints: Vec<UpstreamEndpoint>,
        }
        toml::from_str::<File>(text).map(|f| f.upstream_endpoints).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn the_full_form_makes_one_member_per_key_with_the_endpoints_limits_and_models() {
        let file = endpoints(
            "[[upstream_endpoints]]\nname = \"a\"\npool = \"platform\"\nurl = \"http://a\"\nkeys = [\"k1\", \"k2\"]\n\
             weight = 3\nrpm = 60\nmax_in_flight = 5\nmodels = [\"m\"]\n\n\
             [[upstream_endpoints]]\nname = \"b\"\npool = \"platform\"\nurl = \"http://b\"\nkeys = [\"k3\"]\npriority = 1\n\n\
             [[upstream_endpoints]]\nname = \"s\"\npool = \"speech\"\nurl = \"http://s\"\nkeys = [\"k4\"]\n",
        );
        let members = full_form(&file, UpstreamPool::Platform).ok().flatten().unwrap_or_default();
        let shape: Vec<_> = members
            .iter()
            .map(|m| (m.name.as_str(), m.weight, m.priority, m.rpm, m.max_in_flight, m.models.clone()))
            .collect();
        let m = Some(vec!["m".to_owned()]);
        assert_eq!(
            shape,
            [
                ("a#1", 3, 0, Some(60), Some(5), m.clone()),
                ("a#2", 3, 0, Some(60), Some(5), m),
                ("b", 2, 1, None, None, None),
            ],
            "a's two keys share its weight 3 (of 6 after scaling by 2), each key with a's limits"
        );
        assert!(matches!(full_form(&file, UpstreamPool::Messages), Ok(None)), "no messages endpoint: the quick form");
    }

    #[test]
    fn an_empty_model_list_and_a_name_used_twice_are_start_up_errors() {
        for (text, named) in [
            (
                "[[upstream_endpoints]]\nname = \"a\"\npool = \"platform\"\nurl = \"http://a\"\nkeys = [\"k\"]\nmodels = []\n",
                "lists no models",
            ),
            (
                "[[upstream_endpoints]]\nname = \"a\"\npool = \"platform\"\nurl = \"http://a\"\nkeys = [\"k\"]\n\n\
                 [[upstream_endpoints]]\nname = \"a\"\npool = \"platform\"\nurl = \"http://b\"\nkeys = [\"k\"]\n",
                "used twice",
            ),
        ] {
            match full_form(&endpoints(text), UpstreamPool::Platform) {
                Err(exit) => {
                    assert!(exit.code == crate::EXIT_CONFIG && exit.message.contains(named), "{}", exit.message)
                }
                Ok(members) => panic!("{text}: accepted as {members:?}"),
            }
        }
    }
}
