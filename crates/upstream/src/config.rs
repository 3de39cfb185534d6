//! Where the upstream endpoints live and which keys they take: [`UpstreamConfig`] (the platform
//! and the speech service) and [`AssetsConfig`] (the asset control plane).

use std::fmt;
use std::net::SocketAddr;
use std::time::Duration;

/// Where the platform and the speech service are: base URLs, keys and timeouts.
///
/// An empty base leaves its endpoints unconfigured: calls to them answer
/// [`domain::ports::UpstreamError::NotConfigured`] without sending anything. An empty key sends
/// no credential header (the upstream then answers 401). `Debug` never shows the keys.
#[derive(Clone, PartialEq, Eq)]
pub struct UpstreamConfig {
    /// The platform's base, e.g. `https://host/api/v3`: chat = `<base>/chat/completions`,
    /// images = `<base>/images/generations`, responses = `<base>/responses`.
    pub platform_base: String,
    /// The platform key, sent as `Authorization: Bearer <key>` (also to the messages base).
    pub platform_key: String,
    /// The speech service's origin, e.g. `https://host`: speech = `<origin>/api/v3/tts/create`.
    pub speech_origin: String,
    /// The speech service's own key, sent as `X-Api-Key: <key>`.
    pub speech_key: String,
    /// The platform's message-compatible base, e.g. `https://host/api/compatible`:
    /// messages = `<base>/v1/messages`, with the platform key as bearer token and
    /// `anthropic-version: 2023-06-01`.
    pub messages_base: String,
    /// Bound on connection set-up.
    pub connect_timeout: Duration,
    /// Bound on a whole non-stream call, on the wait for a stream's response head, and on each
    /// wait for a stream's next chunk.
    pub timeout: Duration,
}

/// The platform key [`UpstreamConfig::for_simulator`] uses (the simulator accepts any non-empty key).
pub const SIM_PLATFORM_KEY: &str = "sim-platform-key";
/// The speech key [`UpstreamConfig::for_simulator`] uses.
pub const SIM_SPEECH_KEY: &str = "sim-speech-key";

impl UpstreamConfig {
    /// Every endpoint pointing at one simulator listening on `addr` (the `sim` crate), with
    /// the keys [`SIM_PLATFORM_KEY`] and [`SIM_SPEECH_KEY`].
    pub fn for_simulator(addr: SocketAddr, connect_timeout: Duration, timeout: Duration) -> UpstreamConfig {
        UpstreamConfig {
            platform_base: format!("http://{addr}/api/v3"),
            platform_key: SIM_PLATFORM_KEY.to_owned(),
            speech_origin: format!("http://{addr}"),
            speech_key: SIM_SPEECH_KEY.to_owned(),
            messages_base: format!("http://{addr}/api/compatible"),
            connect_timeout,
            timeout,
        }
    }
}

impl fmt::Debug for UpstreamConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UpstreamConfig")
            .field("platform_base", &self.platform_base)
            .field("platform_key", &"*****")
            .field("speech_origin", &self.speech_origin)
            .field("speech_key", &"*****")
            .field("messages_base", &self.messages_base)
            .field("connect_timeout", &self.connect_timeout)
            .field("timeout", &self.timeout)
            .finish()
    }
}

/// Where the asset control plane is: its origin, its access key pair, region and timeouts (upstream-wire §5; configured as `GATEWAY_ASSETS_URL`,
/// `GATEWAY_ASSETS_ACCESS_KEY`, `GATEWAY_ASSETS_SECRET_KEY`).
///
/// An empty `origin` leaves the control plane unconfigured: calls answer
/// [`domain::ports::UpstreamError::NotConfigured`] without sending anything. `Debug` never shows
/// the secret key.
#[derive(Clone, PartialEq, Eq)]
pub struct AssetsConfig {
    /// The origin, e.g. `https://ark.cn-beijing.volcengineapi.com`; requests go to
    /// `POST <origin>/?Action=<A>&Version=2024-01-01`.
    pub origin: String,
    /// The access key id (named in every signature).
    pub access_key: String,
    /// The secret key the signatures are made with.
    pub secret_key: String,
    /// The region in the signature's scope, e.g. [`DEFAULT_ASSETS_REGION`].
    pub region: String,
    /// The `ProjectName` sent with every action ([`DEFAULT_ASSETS_PROJECT`]).
    pub project_name: String,
    /// Bound on connection set-up.
    pub connect_timeout: Duration,
    /// Bound on a whole call.
    pub timeout: Duration,
}

/// The region used when none is configured.
pub const DEFAULT_ASSETS_REGION: &str = "cn-beijing";
/// The project every asset group is created in.
pub const DEFAULT_ASSETS_PROJECT: &str = "default";
/// The access key the simulator accepts (and [`AssetsConfig::for_simulator`] uses).
pub const SIM_ASSETS_ACCESS_KEY: &str = "AKLTsimulatoraccesskey";
/// The secret key the simulator checks signatures with.
pub const SIM_ASSETS_SECRET_KEY: &str = "sim-assets-secret-key";

impl AssetsConfig {
    /// The control plane of a simulator listening on `addr` (origin `http://<addr>`), with
    /// [`SIM_ASSETS_ACCESS_KEY`] / [`SIM_ASSETS_SECRET_KEY`] and the default region and project.
    pub fn for_simulator(addr: SocketAddr, connect_timeout: Duration, timeout: Duration) -> AssetsConfig {
        AssetsConfig {
            origin: format!("http://{addr}"),
            access_key: SIM_ASSETS_ACCESS_KEY.to_owned(),
            secret_key: SIM_ASSETS_SECRET_KEY.to_owned(),
            region: DEFAULT_ASSETS_REGION.to_owned(),
            project_name: DEFAULT_ASSETS_PROJECT.to_owned(),
            connect_timeout,
            timeout,
        }
    }
}

impl fmt::Debug for AssetsConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AssetsConfig")
            .field("origin", &self.origin)
            .field("access_key", &self.access_key)
            .field("secret_key", &"*****")
            .field("region", &self.region)
            .field("project_name", &self.project_name)
            .field("connect_timeout", &self.connect_timeout)
            .field("timeout", &self.timeout)
            .finish()
    }
}

/// The adapters' unit tests' configuration: the platform at `base`, the other services on a
/// closed port, one-second timeouts.
#[cfg(test)]
pub(crate) fn test_config(base: &str) -> UpstreamConfig {
    UpstreamConfig {
        platform_base: base.to_owned(),
        platform_key: "sk-platform-secret".to_owned(),
        speech_origin: "http://127.0.0.1:1".to_owned(),
        speech_key: "sk-speech-secret".to_owned(),
        messages_base: "http://127.0.0.1:1/api/compatible/".to_owned(),
        connect_timeout: Duration::from_secs(1),
        timeout: Duration::from_secs(1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn simulator_bases_and_hidden_keys() {
        let addr: SocketAddr = ([127, 0, 0, 1], 4321).into();
        let c = UpstreamConfig::for_simulator(addr, Duration::from_secs(1), Duration::from_secs(2));
        assert_eq!(c.platform_base, "http://127.0.0.1:4321/api/v3");
        assert_eq!(c.speech_origin, "http://127.0.0.1:4321");
        assert_eq!(c.messages_base, "http://127.0.0.1:4321/api/compatible");
        let text = format!("{c:?}");
        assert!(!text.contains(SIM_PLATFORM_KEY) && !text.contains(SIM_SPEECH_KEY), "{text}");
        assert!(text.contains("*****"), "{text}");
    }

    #[test]
    fn assets_simulator_config_hides_the_secret() {
        let addr: SocketAddr = ([127, 0, 0, 1], 4321).into();
        let c = AssetsConfig::for_simulator(addr, Duration::from_secs(1), Duration::from_secs(2));
        assert_eq!((c.origin.as_str(), c.region.as_str()), ("http://127.0.0.1:4321", "cn-beijing"));
        let text = format!("{c:?}");
        assert!(!text.contains(SIM_ASSETS_SECRET_KEY) && text.contains(SIM_ASSETS_ACCESS_KEY), "{text}");
    }
}
