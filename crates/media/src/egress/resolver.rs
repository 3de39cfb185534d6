//! The DNS resolver the egress client connects with: it resolves a name and keeps only the
//! addresses the [`AllowList`] permits, so the addresses checked are exactly the addresses
//! connected to (a name that answers differently on a second lookup gains nothing).

use std::net::SocketAddr;
use std::sync::Arc;

use domain::EgressError;
use reqwest::dns::{Addrs, Name, Resolve, Resolving};

use super::policy::{AllowList, non_public_reason};

/// The error a refused name fails with; found again in the client's error chain.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub(crate) struct PolicyRefusal(pub(crate) String);

/// Resolves with the system resolver, then filters by policy.
#[derive(Debug, Clone)]
pub(crate) struct PolicyResolver {
    pub(crate) allow: Arc<AllowList>,
}

/// The permitted addresses of `host`: when none is left, a refusal that names the host but not the
/// addresses it resolved to, nor why they were refused (what a name resolves to from inside our
/// network is ours to know; the log keeps it).
pub(crate) async fn permitted(allow: &AllowList, host: &str) -> Result<Vec<SocketAddr>, EgressError> {
    let found: Vec<SocketAddr> = tokio::net::lookup_host((host, 0))
        .await
        .map_err(|e| EgressError::Network(format!("cannot resolve {host}: {e}")))?
        .collect();
    let (kept, refused): (Vec<SocketAddr>, Vec<SocketAddr>) =
        found.into_iter().partition(|addr| allow.permits(host, addr.ip()));
    if kept.is_empty() {
        return Err(match refused.first() {
            Some(addr) => {
                tracing::info!(
                    host,
                    address = %addr.ip(),
                    why = non_public_reason(addr.ip()).unwrap_or("refused"),
                    "egress refused a name that resolves to no public address"
                );
                EgressError::Refused(format!("{host} does not resolve to a public address"))
            }
            None => EgressError::Network(format!("{host} resolves to no address")),
        });
    }
    if !refused.is_empty() {
        tracing::debug!(host, refused = refused.len(), "egress dropped non-public addresses of a name");
    }
    Ok(kept)
}

impl Resolve for PolicyResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let allow = Arc::clone(&self.allow);
        let host = name.as_str().to_owned();
        Box::pin(async move {
            match permitted(&allow, &host).await {
                Ok(kept) => Ok(Box::new(kept.into_iter()) as Addrs),
                Err(EgressError::Refused(why)) => {
                    Err(Box::new(PolicyRefusal(why)) as Box<dyn std::error::Error + Send + Sync>)
                }
                Err(other) => Err(std::io::Error::new(std::io::ErrorKind::NotFound, other.to_string()).into()),
            }
        })
    }
}
