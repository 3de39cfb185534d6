//! The adapter itself over real HTTP on 127.0.0.1: routing and credentials per endpoint,
//! unconfigured endpoints, stream framings, answer bounds, keys kept out of output.
#![allow(clippy::panic, clippy::unwrap_used)]

mod common;

use std::net::SocketAddr;

use common::{LONG, adapter, capture_server, drain, header_of, names, open_raw, scripted_server, send};
use domain::ports::{Endpoint, UpstreamError};
use upstream::http::{MAX_ANSWER_BYTES, MESSAGES_VERSION};
use upstream::{HttpUpstream, UpstreamConfig};

const PLATFORM_KEY: &str = "sk-platform-0123456789";
const SPEECH_KEY: &str = "sk-speech-9876543210";

fn config(addr: SocketAddr) -> UpstreamConfig {
    UpstreamConfig {
        platform_key: PLATFORM_KEY.to_owned(),
        speech_key: SPEECH_KEY.to_owned(),
        ..UpstreamConfig::for_simulator(addr, LONG, LONG)
    }
}

/// Only `endpoint`'s base set (at `addr`); the others empty.
fn only(endpoint: Endpoint, addr: SocketAddr) -> UpstreamConfig {
    let full = config(addr);
    let mut c = UpstreamConfig {
        platform_base: String::new(),
        speech_origin: String::new(),
        messages_base: String::new(),
        ..full.clone()
    };
    match endpoint {
        Endpoint::ChatCompletions | Endpoint::ImageGenerations | Endpoint::Responses => {
            c.platform_base = full.platform_base
        }
        Endpoint::Speech => c.speech_origin = full.speech_origin,
        Endpoint::Messages => c.messages_base = full.messages_base,
    }
    c
}

#[tokio::test]
async fn each_endpoint_gets_its_path_and_credentials() {
    let (addr, mut heads) = capture_server().await;
    let up = adapter(config(addr));
    let bearer = format!("Bearer {PLATFORM_KEY}");
    for (endpoint, path, authorization, api_key, version) in [
        (Endpoint::ChatCompletions, "/api/v3/chat/completions", Some(bearer.as_str()), None, None),
        (Endpoint::ImageGenerations, "/api/v3/images/generations", Some(bearer.as_str()), None, None),
        (Endpoint::Responses, "/api/v3/responses", Some(bearer.as_str()), None, None),
        (Endpoint::Messages, "/api/compatible/v1/messages", Some(bearer.as_str()), None, Some(MESSAGES_VERSION)),
        (Endpoint::Speech, "/api/v3/tts/create", None, Some(SPEECH_KEY), None),
    ] {
        let answer = send(&up, endpoint, b"{\"model\":\"m\"}").await.unwrap();
        assert_eq!(answer, b"{}");
        let head = heads.recv().await.unwrap();
        assert!(head.starts_with(&format!("POST {path} HTTP/1.1\r\n")), "{endpoint:?}: {head}");
        assert_eq!(header_of(&head, "authorization").as_deref(), authorization, "{endpoint:?}");
        assert_eq!(header_of(&head, "x-api-key").as_deref(), api_key, "{endpoint:?}");
        assert_eq!(header_of(&head, "anthropic-version").as_deref(), version, "{endpoint:?}");
        assert_eq!(header_of(&head, "content-type").as_deref(), Some("application/json"), "{endpoint:?}");
        assert_eq!(header_of(&head, "content-length").as_deref(), Some("13"), "{endpoint:?}");
    }
    assert_eq!(MESSAGES_VERSION, "2023-06-01");
}

#[tokio::test]
async fn empty_keys_send_no_credentials() {
    let (addr, mut heads) = capture_server().await;
    let up = adapter(UpstreamConfig::for_simulator(addr, LONG, LONG));
    let up_no_keys = adapter(UpstreamConfig {
        platform_key: String::new(),
        speech_key: String::new(),
        ..UpstreamConfig::for_simulator(addr, LONG, LONG)
    });
    send(&up, Endpoint::ChatCompletions, b"{}").await.unwrap();
    assert!(header_of(&heads.recv().await.unwrap(), "authorization").is_some());
    for endpoint in [Endpoint::ChatCompletions, Endpoint::Speech, Endpoint::Messages] {
        send(&up_no_keys, endpoint, b"{}").await.unwrap();
        let head = heads.recv().await.unwrap();
        assert!(header_of(&head, "authorization").is_none() && header_of(&head, "x-api-key").is_none(), "{head}");
    }
}

/// Which configured base serves `endpoint`.
fn base_of(endpoint: Endpoint) -> &'static str {
    match endpoint {
        Endpoint::ChatCompletions | Endpoint::ImageGenerations | Endpoint::Responses => "platform",
        Endpoint::Speech => "speech",
        Endpoint::Messages => "messages",
    }
}

#[tokio::test]
async fn unconfigured_endpoints_send_nothing() {
    let (addr, sim) = sim::spawn().await.unwrap();
    for configured in Endpoint::ALL {
        let up = adapter(only(configured, addr));
        for endpoint in Endpoint::ALL {
            let before = sim.requests_total();
            let result = send(&up, endpoint, b"{}").await;
            if base_of(endpoint) == base_of(configured) {
                assert!(!matches!(result, Err(UpstreamError::NotConfigured(_))), "{endpoint:?}: {result:?}");
                continue;
            }
            let streamed = open_raw(&up, endpoint, b"{}").await.err();
            assert_eq!(result, Err(UpstreamError::NotConfigured(endpoint.as_str().to_owned())), "{configured:?}");
            assert_eq!(streamed, Some(UpstreamError::NotConfigured(endpoint.as_str().to_owned())));
            assert_eq!(sim.requests_total(), before, "{endpoint:?} sent a request");
        }
    }
    let none = adapter(UpstreamConfig {
        platform_base: String::new(),
        speech_origin: String::new(),
        messages_base: String::new(),
        ..config(addr)
    });
    for endpoint in Endpoint::ALL {
        assert!(matches!(send(&none, endpoint, b"{}").await, Err(UpstreamError::NotConfigured(_))));
    }
    // One request per endpoint served above: 3 × the platform's three, speech, messages.
    assert_eq!(sim.requests_total(), 3 * 3 + 1 + 1);
}

#[tokio::test]
async fn keys_never_appear_in_debug_or_errors() {
    let (addr, _sim) = sim::spawn().await.unwrap();
    let c = config(addr);
    let up = adapter(c.clone());
    for text in [format!("{c:?}"), format!("{up:?}"), format!("{:?}", HttpUpstream::new(c.clone()))] {
        assert!(!text.contains(PLATFORM_KEY) && !text.contains(SPEECH_KEY), "{text}");
        assert!(text.contains("*****"), "{text}");
    }
    // Errors from every endpoint (bad bodies, refused connections) never carry a key.
    let dead = {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await.unwrap();
        listener.local_addr().unwrap()
    };
    for up in [adapter(c.clone()), adapter(config(dead))] {
        for endpoint in Endpoint::ALL {
            let error = send(&up, endpoint, b"[]").await.err();
            let text = format!("{error:?} {}", error.as_ref().map(ToString::to_string).unwrap_or_default());
            assert!(!text.contains(PLATFORM_KEY) && !text.contains(SPEECH_KEY), "{text}");
        }
    }
}

/// A 200 `text/event-stream` answer with `body`, closed after it.
fn sse_answer(body: &str) -> Vec<u8> {
    format!("HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n{body}").into_bytes()
}

#[tokio::test]
async fn named_framing_keeps_names_skips_done_and_ends_at_eof() {
    let body = "event: response.created\ndata: {\"type\":\"response.created\"}\n\n: comment\n\ndata: [DONE]\n\nevent: response.completed\r\ndata: {\"type\":\"response.completed\"}\r\n\r\n";
    let (addr, _) = scripted_server(sse_answer(body)).await;
    let up = adapter(config(addr));
    for endpoint in [Endpoint::Responses, Endpoint::Messages, Endpoint::ImageGenerations] {
        let (events, error) = drain(open_raw(&up, endpoint, b"{}").await.unwrap()).await;
        assert!(error.is_none(), "{endpoint:?}: {error:?}");
        assert_eq!(names(&events), ["response.created", "response.completed"], "{endpoint:?}");
        assert_eq!(events[1].data, b"{\"type\":\"response.completed\"}");
    }
    // The same body on the chat framing ends at its `[DONE]`.
    let (events, error) = drain(open_raw(&up, Endpoint::ChatCompletions, b"{}").await.unwrap()).await;
    assert!(error.is_none());
    assert_eq!(names(&events), ["response.created"], "chat ends at [DONE]");
}

#[tokio::test]
async fn named_error_event_is_a_stream_error() {
    let body = "event: message_start\ndata: {\"type\":\"message_start\"}\n\nevent: error\ndata: {\"type\":\"error\",\"error\":{\"code\":\"ServerOverloaded\",\"message\":\"busy\",\"param\":\"\",\"type\":\"TooManyRequests\"}}\n\nevent: message_stop\ndata: {}\n\n";
    let (addr, _) = scripted_server(sse_answer(body)).await;
    let up = adapter(config(addr));
    let (events, error) = drain(open_raw(&up, Endpoint::Messages, b"{}").await.unwrap()).await;
    assert_eq!(names(&events), ["message_start"]);
    assert_eq!(error, Some(UpstreamError::Stream("ServerOverloaded: busy".to_owned())));
}

#[tokio::test]
async fn data_only_framing_needs_done() {
    let (addr, _) = scripted_server(sse_answer("data: {\"a\":1}\n\ndata: {\"b\":2}\n\n")).await;
    let up = adapter(config(addr));
    let (events, error) = drain(open_raw(&up, Endpoint::ChatCompletions, b"{}").await.unwrap()).await;
    assert_eq!(events.len(), 2);
    assert!(matches!(error, Some(UpstreamError::Stream(ref m)) if m.contains("[DONE]")), "{error:?}");
    // The same body on a named framing simply ends.
    let (events, error) = drain(open_raw(&up, Endpoint::Responses, b"{}").await.unwrap()).await;
    assert_eq!((events.len(), error), (2, None));
}

/// A 200 JSON answer of exactly `len` bytes, with or without `Content-Length`.
fn json_answer(len: usize, announce: bool) -> Vec<u8> {
    let filler = "x".repeat(len - 8);
    let body = format!("{{\"a\":\"{filler}\"}}");
    assert_eq!(body.len(), len);
    let length = if announce { format!("content-length: {len}\r\n") } else { String::new() };
    format!("HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n{length}connection: close\r\n\r\n{body}").into_bytes()
}

#[tokio::test]
async fn answer_size_bound_just_inside_and_outside() {
    for (len, announce, ok) in [
        (MAX_ANSWER_BYTES, false, true),
        (MAX_ANSWER_BYTES + 1, false, false),
        (MAX_ANSWER_BYTES, true, true),
        (MAX_ANSWER_BYTES + 1, true, false),
    ] {
        let (addr, _) = scripted_server(json_answer(len, announce)).await;
        let up = adapter(config(addr));
        let result = send(&up, Endpoint::ChatCompletions, b"{}").await;
        match (ok, result) {
            (true, Ok(answer)) => assert_eq!(answer.len(), len),
            (false, Err(UpstreamError::Malformed(m))) => assert!(m.contains("larger than"), "{m}"),
            (_, other) => panic!("{len} announced={announce}: {:?}", other.map(|a| a.len())),
        }
    }
}

#[tokio::test]
async fn non_object_answers_are_malformed() {
    for body in ["[1,2]", "\"text\"", "{\"a\":", ""] {
        let answer = format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}", body.len());
        let (addr, _) = scripted_server(answer.into_bytes()).await;
        let up = adapter(config(addr));
        let result = send(&up, Endpoint::Responses, b"{}").await;
        assert!(matches!(result, Err(UpstreamError::Malformed(_))), "{body:?}: {result:?}");
    }
}
