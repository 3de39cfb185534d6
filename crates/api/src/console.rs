//! `GET /console/…`: the web console, a few static files embedded in the binary (no Node, no CDN),
//! served with a strict Content-Security-Policy: scripts, styles and requests from this origin
//! only, no inline script, no framing. The pages sign in with an API key kept in
//! `sessionStorage` and call the same `/api/v1/…` routes as any client.

use http::{HeaderValue, StatusCode, header};

use crate::response::{Response, full};

/// The policy every console file is served with.
pub const CONSOLE_CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; \
     img-src 'self' data: blob: https: http:; media-src 'self' blob: https: http:; font-src 'self'; \
     base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// `(path under /console/, content type, bytes)`.
const ASSETS: &[(&str, &str, &[u8])] = &[
    ("", "text/html; charset=utf-8", include_bytes!("../console/index.html")),
    ("app.js", "text/javascript; charset=utf-8", include_bytes!("../console/app.js")),
    ("app.css", "text/css; charset=utf-8", include_bytes!("../console/app.css")),
    ("chart.js", "text/javascript; charset=utf-8", include_bytes!("../console/chart.js")),
];

/// The console file at `path` (`""` and `index.html` are the page), or a 404 page.
pub(crate) fn asset(path: &str) -> Response {
    let path = if path == "index.html" { "" } else { path };
    let found = ASSETS.iter().find(|(name, _, _)| *name == path);
    let (status, content_type, bytes): (StatusCode, &str, &'static [u8]) = match found {
        Some((_, content_type, bytes)) => (StatusCode::OK, content_type, bytes),
        None => (StatusCode::NOT_FOUND, "text/plain; charset=utf-8", b"not found\n"),
    };
    let mut response = http::Response::new(full(bytes));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CONSOLE_CSP));
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_carry_the_policy_and_unknown_ones_are_404() {
        let page = asset("");
        assert_eq!(page.status(), StatusCode::OK);
        assert_eq!(page.headers()[header::CONTENT_SECURITY_POLICY], CONSOLE_CSP);
        assert!(page.headers()[header::CONTENT_TYPE].to_str().is_ok_and(|t| t.starts_with("text/html")));
        assert_eq!(asset("index.html").status(), StatusCode::OK);
        assert_eq!(asset("../Cargo.toml").status(), StatusCode::NOT_FOUND);
        assert!(!CONSOLE_CSP.contains("unsafe-inline") && !CONSOLE_CSP.contains("unsafe-eval"));
    }
}
