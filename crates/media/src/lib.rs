//! Media kept by the gateway and the gateway's outgoing requests to user-named URLs.
//!
//! - [`LocalMediaStore`] implements [`domain::ports::MediaStore`] on a directory
//!   (`GATEWAY_MEDIA_DIR`): keys are checked ([`validate_key`]), writes are atomic (a temporary
//!   file renamed into place on finish), reads are chunked.
//! - [`ObjectMediaStore`] implements it on an S3-compatible bucket (`GATEWAY_MEDIA_STORE=s3://…`)
//!   through `object_store`: streamed multipart writes, aborted on any failure, streamed reads,
//!   pre-signed links; [`MediaLocation`] parses the setting.
//! - [`LinkSigner`] makes and checks signed, expiring links to stored media
//!   (`<GATEWAY_PUBLIC_URL>/media/<key>?expires=<unix>&sig=<hex>`), which the upstream fetches.
//! - [`Egress`] is the only way media imports and webhooks reach the outside: https only,
//!   every address actually connected checked against [`egress::policy`] (no loopback,
//!   private, link-local, CGNAT, metadata… unless allow-listed with `GATEWAY_EGRESS_ALLOW`),
//!   redirects followed by hand and re-checked, bounded size and time, extra root certificates
//!   (`GATEWAY_EXTRA_CA_FILE`).
//!
//! **Architecture Invariant:** no request to a URL a user named leaves the gateway except
//! through [`Egress`]; the policy is applied by the DNS resolver the HTTP client connects
//! with, so a name that resolves differently the second time (DNS rebinding) cannot slip past.

pub mod egress;
pub mod link;
pub mod object;
pub mod store;
pub mod stripe;

pub use egress::policy::AllowList;
pub use egress::{Egress, EgressConfig, EgressError, FetchedMeta, MinRate};
pub use link::LinkSigner;
pub use object::{MediaLocation, ObjectMediaStore, S3Location};
pub use store::{LocalMediaStore, validate_key};
pub use stripe::StripeCheckout;
