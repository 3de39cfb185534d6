//! Short-lived in-process caches for the request hot path: authenticated keys and the catalog
//! snapshot (enabled models, prices, maintenance flag).
//!
//! Changes made through this process's `Gateway` (key revocation, model, price and maintenance
//! commands) clear them at once; changes made by another process (an `admin` command, another
//! replica) are seen within [`CACHE_TTL`]. The model list endpoint always reads the store.

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

    pub(crate) fn remember_catalog(&self, snapshot: CatalogSnapshot) {
        if let Ok(mut catalog) = self.catalog.write() {
            *catalog = Some((Instant::now(), snapshot));
        }
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
