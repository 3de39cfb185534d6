//! What one simulator remembers across requests: ids, seen prompts, issued responses, counters,
//! its video tasks, and its asset groups and assets.

use std::collections::hash_map::DefaultHasher;
use std::collections::{HashMap, HashSet, VecDeque};
use std::hash::{Hash, Hasher};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use super::SimOptions;
use super::clock::SimClock;
use super::video::task::VideoTask;

/// Bound on remembered first messages (the set is cleared when full).
const MAX_SEEN: usize = 100_000;
/// Bound on remembered response ids (the oldest is forgotten first).
pub(crate) const MAX_REMEMBERED_RESPONSES: usize = 100_000;
/// Bound on distinct counted paths (requests to further new paths count only in the total).
pub(crate) const MAX_COUNTED_PATHS: usize = 10_000;

/// The shared state of one simulator.
#[derive(Debug)]
pub(crate) struct SimState {
    /// The listening address, for links when a request has no usable `Host`.
    pub(crate) addr: SocketAddr,
    seen: Mutex<HashSet<u64>>,
    counter: AtomicU64,
    total: AtomicU64,
    requests: Mutex<HashMap<String, u64>>,
    responses: Mutex<Remembered>,
    options: SimOptions,
    clock: SimClock,
    video: Mutex<VideoTable>,
    assets: Arc<Mutex<AssetTable>>,
    /// For callbacks and asset fetches (loopback only; certificates not checked).
    client: reqwest::Client,
    callbacks: AtomicU64,
    /// Generation requests being answered now, and the most at once so far.
    in_flight: AtomicU64,
    in_flight_max: AtomicU64,
    /// Set by a test: every generation request answers this status (and `Retry-After`, seconds).
    outage: Mutex<Option<(u16, Option<u64>)>>,
    /// Set by a test: generation requests with one of these bearer keys answer 401.
    refused_keys: Mutex<Vec<String>>,
}

/// Every task of one simulator, oldest first.
#[derive(Debug, Default)]
pub(crate) struct VideoTable {
    pub(crate) tasks: HashMap<String, VideoTask>,
    pub(crate) order: VecDeque<String>,
    /// Tasks with callbacks still to send.
    pub(crate) watched: HashSet<String>,
}

/// One asset group.
#[derive(Debug, Clone)]
pub(crate) struct Group {
    pub(crate) name: String,
    pub(crate) group_type: String,
    pub(crate) created: u64,
}

/// Where a simulated asset stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum AssetState {
    Processing,
    Active,
    Failed(String),
}

#[derive(Debug, Clone)]
pub(crate) struct SimAsset {
    pub(crate) group_id: String,
    pub(crate) name: String,
    pub(crate) asset_type: String,
    pub(crate) url: String,
    pub(crate) created: u64,
    pub(crate) state: AssetState,
    /// What the fetch of `url` read: its length and SHA-256 (hex), once it answered.
    pub(crate) fetched: Option<(u64, String)>,
}

/// The groups and assets of one simulator.
#[derive(Debug, Default)]
pub(crate) struct AssetTable {
    pub(crate) groups: HashMap<String, Group>,
    pub(crate) assets: HashMap<String, SimAsset>,
    pub(crate) order: VecDeque<String>,
}

impl AssetTable {
    /// What each active asset's fetch read, in creation order: (URL, length, SHA-256 hex).
    pub(crate) fn fetched(&self) -> Vec<(String, u64, String)> {
        self.order
            .iter()
            .filter_map(|id| self.assets.get(id))
            .filter(|a| a.state == AssetState::Active)
            .filter_map(|a| a.fetched.as_ref().map(|(len, digest)| (a.url.clone(), *len, digest.clone())))
            .collect()
    }

    /// Whether `id` is an `Active` asset.
    pub(crate) fn is_active(&self, id: &str) -> bool {
        self.assets.get(id).is_some_and(|a| a.state == AssetState::Active)
    }
}

/// Issued response ids and their `total_tokens`, oldest first.
#[derive(Debug, Default)]
struct Remembered {
    order: VecDeque<String>,
    totals: HashMap<String, u64>,
}

pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    match mutex.lock() {
        Ok(guard) => guard,
        Err(poisoned) => poisoned.into_inner(),
    }
}

impl SimState {
    pub(crate) fn new(addr: SocketAddr, options: SimOptions) -> SimState {
        // reqwest is built without a crypto provider: ring, as everywhere in the process.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = reqwest::Client::builder()
            .no_proxy()
            .danger_accept_invalid_certs(true)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap_or_default();
        SimState {
            addr,
            seen: Mutex::default(),
            counter: AtomicU64::new(0),
            total: AtomicU64::new(0),
            requests: Mutex::default(),
            responses: Mutex::default(),
            clock: SimClock::new(options.clock),
            options,
            video: Mutex::default(),
            assets: Arc::default(),
            client,
            callbacks: AtomicU64::new(0),
            in_flight: AtomicU64::new(0),
            in_flight_max: AtomicU64::new(0),
            outage: Mutex::default(),
            refused_keys: Mutex::default(),
        }
    }

    /// Makes every generation request answer `status` (with `Retry-After: <secs>` when given), or
    /// serve normally again (`None`).
    pub(crate) fn set_outage(&self, outage: Option<(u16, Option<u64>)>) {
        *lock(&self.outage) = outage;
    }

    /// The outage a test set, if any.
    pub(crate) fn outage(&self) -> Option<(u16, Option<u64>)> {
        *lock(&self.outage)
    }

    /// Refuses generation requests carrying `key` as their bearer token with 401 from now on.
    pub(crate) fn refuse_key(&self, key: &str) {
        lock(&self.refused_keys).push(key.to_owned());
    }

    /// Whether `key` is refused.
    pub(crate) fn is_refused(&self, key: &str) -> bool {
        lock(&self.refused_keys).iter().any(|k| k == key)
    }

    /// The options the simulator was started with.
    pub(crate) fn options(&self) -> &SimOptions {
        &self.options
    }

    /// The video tasks' clock.
    pub(crate) fn clock(&self) -> &SimClock {
        &self.clock
    }

    /// Runs `f` on the video tasks.
    pub(crate) fn with_video<R>(&self, f: impl FnOnce(&mut VideoTable) -> R) -> R {
        f(&mut lock(&self.video))
    }

    /// The asset groups and assets.
    pub(crate) fn assets(&self) -> &Mutex<AssetTable> {
        &self.assets
    }

    /// The asset table, shared with fetches still running.
    pub(crate) fn assets_arc(&self) -> &Arc<Mutex<AssetTable>> {
        &self.assets
    }

    /// Whether `id` is an `Active` asset.
    pub(crate) fn asset_active(&self, id: &str) -> bool {
        lock(&self.assets).is_active(id)
    }

    /// The client for outgoing loopback calls.
    pub(crate) fn client(&self) -> &reqwest::Client {
        &self.client
    }

    /// Counts one acknowledged callback.
    pub(crate) fn count_callback(&self) {
        self.callbacks.fetch_add(1, Ordering::Relaxed);
    }

    /// Callbacks acknowledged with a 2xx so far.
    pub(crate) fn callbacks(&self) -> u64 {
        self.callbacks.load(Ordering::Relaxed)
    }

    /// Counts a generation request as being answered until the guard drops.
    pub(crate) fn enter(&self) -> InFlight<'_> {
        let now = self.in_flight.fetch_add(1, Ordering::AcqRel) + 1;
        self.in_flight_max.fetch_max(now, Ordering::AcqRel);
        InFlight(self)
    }

    /// The most generation requests answered at once so far.
    pub(crate) fn in_flight_max(&self) -> u64 {
        self.in_flight_max.load(Ordering::Acquire)
    }

    /// A fresh request id, `sim-<16 hex digits>`.
    pub(crate) fn next_id(&self) -> String {
        format!("sim-{:016x}", self.counter.fetch_add(1, Ordering::Relaxed) + 1)
    }

    /// A fresh id in the same sequence, without the `sim-` prefix.
    pub(crate) fn next_hex(&self) -> String {
        format!("{:016x}", self.counter.fetch_add(1, Ordering::Relaxed) + 1)
    }

    /// Records that `namespace` saw `value`; whether it had been recorded before.
    pub(crate) fn seen_before(&self, namespace: &str, value: &str) -> bool {
        let mut hasher = DefaultHasher::new();
        namespace.hash(&mut hasher);
        value.hash(&mut hasher);
        let key = hasher.finish();
        let mut seen = lock(&self.seen);
        if seen.len() >= MAX_SEEN {
            seen.clear();
        }
        !seen.insert(key)
    }

    /// Counts one request to `path`.
    pub(crate) fn count(&self, path: &str) {
        self.total.fetch_add(1, Ordering::Relaxed);
        let mut requests = lock(&self.requests);
        if let Some(n) = requests.get_mut(path) {
            *n += 1;
        } else if requests.len() < MAX_COUNTED_PATHS {
            requests.insert(path.to_owned(), 1);
        }
    }

    /// Requests received for `path` so far.
    pub(crate) fn requests(&self, path: &str) -> u64 {
        lock(&self.requests).get(path).copied().unwrap_or(0)
    }

    /// Requests received for any path so far.
    pub(crate) fn requests_total(&self) -> u64 {
        self.total.load(Ordering::Relaxed)
    }

    /// Remembers an issued response id and its `total_tokens`.
    pub(crate) fn remember_response(&self, id: &str, total_tokens: u64) {
        let mut remembered = lock(&self.responses);
        if remembered.totals.insert(id.to_owned(), total_tokens).is_none() {
            remembered.order.push_back(id.to_owned());
        }
        while remembered.order.len() > MAX_REMEMBERED_RESPONSES {
            if let Some(oldest) = remembered.order.pop_front() {
                remembered.totals.remove(&oldest);
            }
        }
    }

    /// The `total_tokens` of an issued response, if this simulator issued (and still remembers) it.
    pub(crate) fn response_total(&self, id: &str) -> Option<u64> {
        lock(&self.responses).totals.get(id).copied()
    }
}

/// One generation request being answered (see [`SimState::enter`]).
pub(crate) struct InFlight<'a>(&'a SimState);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state() -> SimState {
        SimState::new(([127, 0, 0, 1], 1).into(), SimOptions::default())
    }

    #[test]
    fn counts_per_path() {
        let s = state();
        s.count("/a");
        s.count("/a");
        s.count("/b");
        assert_eq!((s.requests("/a"), s.requests("/b"), s.requests("/c"), s.requests_total()), (2, 1, 0, 3));
    }

    #[test]
    fn seen_is_per_namespace() {
        let s = state();
        assert!(!s.seen_before("chat", "x"));
        assert!(s.seen_before("chat", "x"));
        assert!(!s.seen_before("messages", "x"));
    }

    #[test]
    fn responses_are_bounded_oldest_first() {
        let s = state();
        for i in 0..=MAX_REMEMBERED_RESPONSES {
            s.remember_response(&format!("r{i}"), 7);
        }
        assert_eq!(s.response_total("r0"), None);
        assert_eq!(s.response_total("r1"), Some(7));
        assert_eq!(s.response_total(&format!("r{MAX_REMEMBERED_RESPONSES}")), Some(7));
    }
}
