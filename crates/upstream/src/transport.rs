//! What the crate's HTTP adapters share about one exchange over `reqwest`: building a client,
//! reading a body within a bound, the text kept of an error body, and a failed request as an [`UpstreamError`] whose text
//! never names the upstream's URL or host.

use domain::ports::UpstreamError;

/// A `reqwest` client builder, with ring installed first as the process's rustls crypto provider
/// (reqwest is built without one of its own). Every client of this crate starts here.
pub fn client_builder() -> reqwest::ClientBuilder {
    // Err: a provider is installed already (this one, or one the process chose).
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
}

/// Most bytes of a non-2xx answer kept in [`UpstreamError::Status`].
pub const MAX_ERROR_BODY: usize = 2048;

/// Up to `limit` bytes of the response body as text; read errors end it early.
pub(crate) async fn read_prefix(mut response: reqwest::Response, limit: usize) -> String {
    let mut bytes = Vec::new();
    while bytes.len() < limit {
        match response.chunk().await {
            Ok(Some(chunk)) => bytes.extend_from_slice(&chunk),
            Ok(None) | Err(_) => break,
        }
    }
    truncate_lossy(&bytes, limit)
}

/// The first `limit` bytes as text, without splitting a UTF-8 character.
pub(crate) fn truncate_lossy(bytes: &[u8], limit: usize) -> String {
    if bytes.len() <= limit {
        return String::from_utf8_lossy(bytes).into_owned();
    }
    let cut = &bytes[..limit];
    let cut = match std::str::from_utf8(cut) {
        Err(e) if e.error_len().is_none() => &cut[..e.valid_up_to()],
        _ => cut,
    };
    String::from_utf8_lossy(cut).into_owned()
}

/// The whole body, at most `limit` bytes (a larger one is `Malformed`, unread past the limit).
pub(crate) async fn read_limited(mut response: reqwest::Response, limit: usize) -> Result<Vec<u8>, UpstreamError> {
    let too_large = || UpstreamError::Malformed(format!("answer larger than {limit} bytes"));
    let announced = response.content_length().and_then(|n| usize::try_from(n).ok());
    if announced.is_some_and(|n| n > limit) {
        return Err(too_large());
    }
    let mut answer = Vec::with_capacity(announced.unwrap_or(0));
    while let Some(chunk) = response.chunk().await.map_err(|e| map_reqwest(&e))? {
        if answer.len() + chunk.len() > limit {
            return Err(too_large());
        }
        answer.extend_from_slice(&chunk);
    }
    Ok(answer)
}

/// The variant of a failed request. The text of `Connect` goes to the caller and so never holds
/// the upstream's URL or host (reqwest prints the URL; the log line here keeps it for the operator).
pub(crate) fn map_reqwest(error: &reqwest::Error) -> UpstreamError {
    if error.is_timeout() {
        return UpstreamError::Timeout;
    }
    tracing::warn!(error = %chain(error), "upstream request failed");
    UpstreamError::Connect(without_url(error))
}

/// [`chain`] of `error` with its request's URL, and the URL's host, left out.
pub(crate) fn without_url(error: &reqwest::Error) -> String {
    let mut text = chain(error);
    if let Some(url) = error.url() {
        text = text.replace(&format!(" for url ({url})"), "").replace(url.as_str(), "the upstream");
        if let Some(host) = url.host_str().filter(|h| !h.is_empty()) {
            text = text.replace(host, "the upstream host");
        }
    }
    text
}

/// An error and its sources, joined with `: `.
pub(crate) fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncation_keeps_characters_whole() {
        assert_eq!(truncate_lossy("héllo".as_bytes(), 2), "h");
        assert_eq!(truncate_lossy(b"hello", 10), "hello");
        assert_eq!(truncate_lossy(b"hello", 3), "hel");
    }
}
