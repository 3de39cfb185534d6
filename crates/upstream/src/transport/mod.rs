//! How the crate's HTTP adapters reach the upstream: the HTTP/1.1 [`Client`] ([`client`], its
//! framing in `wire`), reading a body within a bound, the text kept of an error body, and a
//! failed exchange as an [`UpstreamError`] whose text never names the upstream's URL or host.

mod client;
mod wire;

pub use client::{
    Client, ClientConfig, Error, ErrorKind, IDLE_TIMEOUT, INITIAL_READ, MAX_IDLE_PER_ORIGIN, MAX_READ, RequestBuilder,
    Response,
};
use domain::ports::UpstreamError;

/// Most bytes of a non-2xx answer kept in [`UpstreamError::Status`].
pub const MAX_ERROR_BODY: usize = 2048;

/// Up to `limit` bytes of the response body as text; read errors end it early.
pub(crate) async fn read_prefix(mut response: Response, limit: usize) -> String {
    let mut bytes = Vec::new();
    while bytes.len() < limit {
        match response.chunk().await {
            Ok(Some(chunk)) => bytes.extend_from_slice(chunk),
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
///
/// Memory is taken as the bytes arrive, never from the announced length: an upstream that
/// announces 32 MB and sends ten bytes costs ten bytes (and the vector's growth).
pub(crate) async fn read_limited(mut response: Response, limit: usize) -> Result<Vec<u8>, UpstreamError> {
    let too_large = || UpstreamError::Malformed(format!("answer larger than {limit} bytes"));
    if response.content_length().is_some_and(|n| u64::try_from(limit).is_ok_and(|limit| n > limit)) {
        return Err(too_large());
    }
    let mut answer = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|e| map_error(&e))? {
        // `answer` never holds more than `limit`: the difference cannot wrap.
        if chunk.len() > limit - answer.len() {
            return Err(too_large());
        }
        answer.extend_from_slice(chunk);
    }
    Ok(answer)
}

/// The variant of a failed exchange: `Timeout` when no connection came within the connect
/// timeout, else `Connect` (the text names no URL, host or address).
pub(crate) fn map_error(error: &Error) -> UpstreamError {
    if error.is_timeout() {
        return UpstreamError::Timeout;
    }
    tracing::warn!(error = %error, "upstream request failed");
    UpstreamError::Connect(error.to_string())
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
