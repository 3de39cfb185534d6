//! Short-lived in-process caches for the request hot path: authenticated keys and the catalog
//! snapshot (enabled models, prices, maintenance flag).
//!
//! Changes made through this process's `Gateway` (key revocation, model, price and maintenance
//! commands) clear them at once; changes made by another process (an `admin` command, another
//! replica) are seen within [`CACHE_TTL`]. The model list endpoint always reads the store.
//!
//! The catalog is reloaded by one caller at a time ([`Caches::catalog_or_load`]): when it expires
//! under load, the calls that arrive during the reload wait for it instead of each reading and
//! parsing every model (at 3,000 calls/s and a few milliseconds per reload that was a dozen
//! reloads a second, and a burst of 300 new streams held 300 parsed catalogs at once).

use std::collections::HashMap;
use std::sync::RwLock;
use std::time::{Duration, Instant};

use crate::Principal;
use crate::reads::CatalogSnapshot;

/// How long a cached entry is trusted.
pub const CACHE_TTL: Duration = Duration::from_secs(1);

/// Most keys kept; the map is cleared when it would grow past this.
const MAX_KEYS: usize = 10_000;

/// The caches of one gateway, shared by its clones.
#[derive(Debug, Default)]
pub(crate) struct Caches {
    keys: RwLock<HashMap<String, (Instant, Principal)>>,
    catalog: RwLock<Option<(Instant, CatalogSnapshot)>>,
    /// Held by the one caller reloading the catalog.
    catalog_reload: tokio::sync::Mutex<()>,
}

impl Caches {
    pub(crate) fn principal(&self, hash: &str) -> Option<Principal> {
        let keys = self.keys.read().ok()?;
        let (at, principal) = keys.get(hash)?;
        (at.elapsed() < CACHE_TTL).then(|| principal.clone())
    }

    pub(crate) fn remember_principal(&self, hash: String, principal: Principal) {
        if let Ok(mut keys) = self.keys.write() {
            if keys.len() >= MAX_KEYS {
                keys.clear();
            }
            keys.insert(hash, (Instant::now(), principal));
        }
    }

    pub(crate) fn catalog(&self) -> Option<CatalogSnapshot> {
        let catalog = self.catalog.read().ok()?;
        let (at, snapshot) = catalog.as_ref()?;
        (at.elapsed() < CACHE_TTL).then(|| snapshot.clone())
    }

    fn remember_catalog(&self, snapshot: CatalogSnapshot) {
        if let Ok(mut catalog) = self.catalog.write() {
            *catalog = Some((Instant::now(), snapshot));
        }
    }

    /// The cached catalog, or the one `load` returns (then cached): one caller loads at a time,
    /// and those that waited for it take what it loaded.
    pub(crate) async fn catalog_or_load<E>(
        &self,
        load: impl Future<Output = Result<CatalogSnapshot, E>>,
    ) -> Result<CatalogSnapshot, E> {
        if let Some(snapshot) = self.catalog() {
            return Ok(snapshot);
        }
        let _reloading = self.catalog_reload.lock().await;
        if let Some(snapshot) = self.catalog() {
            return Ok(snapshot);
        }
        let snapshot = load.await?;
        self.remember_catalog(snapshot.clone());
        Ok(snapshot)
    }

    /// Forgets everything (after an operator change through this process).
    pub(crate) fn clear(&self) {
        if let Ok(mut keys) = self.keys.write() {
            keys.clear();
        }
        if let Ok(mut catalog) = self.catalog.write() {
            *catalog = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    fn snapshot(maintenance: bool) -> CatalogSnapshot {
        CatalogSnapshot { models: Arc::new(Vec::new()), maintenance, aliases: Arc::default(), disabled: Arc::default() }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn callers_that_miss_together_share_one_load_and_a_failed_load_is_not_kept() {
        let caches = Arc::new(Caches::default());
        let loads = Arc::new(AtomicUsize::new(0));
        let callers: Vec<_> = (0..64)
            .map(|_| {
                let (caches, loads) = (Arc::clone(&caches), Arc::clone(&loads));
                tokio::spawn(async move {
                    caches
                        .catalog_or_load(async {
                            loads.fetch_add(1, Ordering::SeqCst);
                            tokio::time::sleep(Duration::from_millis(20)).await;
                            Ok::<_, String>(snapshot(true))
                        })
                        .await
                })
            })
            .collect();
        for caller in callers {
            let answered = caller.await.map_err(|e| e.to_string()).and_then(|s| s.map(|s| s.maintenance));
            assert_eq!(answered, Ok(true));
        }
        assert_eq!(loads.load(Ordering::SeqCst), 1, "64 callers missed together; one loaded");

        // A failed load is the caller's error and leaves nothing cached: the next caller loads.
        caches.clear();
        let failed = caches.catalog_or_load(async { Err::<CatalogSnapshot, _>("store down".to_owned()) }).await;
        assert_eq!(failed.map(|s| s.maintenance), Err("store down".to_owned()));
        let next = caches.catalog_or_load(async { Ok::<_, String>(snapshot(false)) }).await;
        assert_eq!(next.map(|s| s.maintenance), Ok(false));
        // Cached now: a load that would fail is not run.
        let cached = caches.catalog_or_load(async { Err::<CatalogSnapshot, _>("not called".to_owned()) }).await;
        assert_eq!(cached.map(|s| s.maintenance), Ok(false));
    }
}
