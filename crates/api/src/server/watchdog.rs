//! The per-connection watchdog: what a connection is doing ([`Activity`]), the timer that closes it
//! when idle or stalled ([`Watchdog`]), and the wrappers that tell it (the socket, each response).

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

use crate::state::Limits;

/// What the watchdog of one connection knows: requests in flight, when the connection last fell idle,
/// and when the first byte after that arrived. Updated with relaxed atomics on the request path.
pub(super) struct Activity {
    /// When the connection was accepted; the times below are milliseconds since then.
    opened: tokio::time::Instant,
    /// Requests whose response has not been sent completely (HTTP/2 streams count one each).
    in_flight: AtomicUsize,
    /// When the last request ended (or the connection opened).
    idle_since: AtomicU64,
    /// When the first byte after `idle_since` arrived, plus one; 0 while none has.
    first_byte: AtomicU64,
    /// Whether the client speaks HTTP/2 (whose PINGs are not the start of a request); set from
    /// [`opening`] before the connection is served.
    pub(super) http2: AtomicBool,
}

impl Activity {
    pub(super) fn new() -> Activity {
        Activity {
            opened: tokio::time::Instant::now(),
            in_flight: AtomicUsize::new(0),
            idle_since: AtomicU64::new(0),
            first_byte: AtomicU64::new(0),
            http2: AtomicBool::new(false),
        }
    }

    fn now(&self) -> u64 {
        domain::duration_millis(self.opened.elapsed()).unsigned_abs()
    }

    fn at(&self, millis: u64) -> tokio::time::Instant {
        self.opened + Duration::from_millis(millis)
    }

    /// Bytes arrived: the first after a quiet spell starts the header clock.
    fn read(&self) {
        if self.in_flight.load(Ordering::Relaxed) == 0 && self.first_byte.load(Ordering::Relaxed) == 0 {
            self.first_byte.store(self.now().saturating_add(1), Ordering::Relaxed);
        }
    }

    /// When the connection will have been idle, or stalled in a header, too long; `None` while a
    /// request is in flight.
    fn deadline(&self, limits: &Limits) -> Option<tokio::time::Instant> {
        if self.in_flight.load(Ordering::Relaxed) > 0 {
            return None;
        }
        let first = self.first_byte.load(Ordering::Relaxed);
        let idle = self.at(self.idle_since.load(Ordering::Relaxed)) + limits.idle_timeout;
        Some(if first > 0 && !self.http2.load(Ordering::Relaxed) {
            idle.min(self.at(first - 1) + limits.header_read_timeout)
        } else {
            idle
        })
    }
}

/// Why a [`Watchdog`] woke its connection.
pub(super) enum Wake {
    /// Idle or stalled in a header for too long: close it.
    Stalled,
    /// A closing connection's time to finish is up: drop it.
    TimeUp,
}

/// A timer that completes when its connection has been idle, or stalled in a header, too long (and,
/// once the connection is closing, when its time to finish is up). It re-arms itself from the
/// connection's [`Activity`] each time it is polled, which is after every poll of the connection.
pub(super) struct Watchdog {
    pub(super) activity: Arc<Activity>,
    limits: Limits,
    sleep: Pin<Box<tokio::time::Sleep>>,
    armed: tokio::time::Instant,
    closing: Option<tokio::time::Instant>,
}

impl Watchdog {
    pub(super) fn new(activity: Arc<Activity>, limits: Limits) -> Watchdog {
        let armed = tokio::time::Instant::now() + limits.header_read_timeout.min(limits.idle_timeout);
        Watchdog { activity, limits, sleep: Box::pin(tokio::time::sleep_until(armed)), armed, closing: None }
    }

    /// From now on, complete (with [`Wake::TimeUp`]) at `at`.
    pub(super) fn close_by(&mut self, at: tokio::time::Instant) {
        self.closing = Some(at);
    }

    fn arm(&mut self, at: tokio::time::Instant) {
        if at != self.armed {
            self.sleep.as_mut().reset(at);
            self.armed = at;
        }
    }
}

impl Future for Watchdog {
    type Output = Wake;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Wake> {
        let this = self.get_mut();
        if let Some(at) = this.closing {
            this.arm(at);
            return this.sleep.as_mut().poll(cx).map(|()| Wake::TimeUp);
        }
        loop {
            match this.activity.deadline(&this.limits) {
                Some(at) => this.arm(at),
                // A request in flight: nothing to time. The poll of the connection that ends it is
                // followed by this one (the select is biased), which arms the timer then; HTTP/2
                // streams that end on their own tasks are seen at the connection's next wake-up at
                // the latest (a keep-alive PING wakes it).
                None => return Poll::Pending,
            }
            if this.sleep.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            match this.activity.deadline(&this.limits) {
                Some(at) if at <= tokio::time::Instant::now() => return Poll::Ready(Wake::Stalled),
                Some(at) => this.arm(at),
                None => return Poll::Pending,
            }
        }
    }
}

/// A request in flight on a connection, from the moment hyper hands it over until its response body
/// has been sent or dropped.
pub(super) struct Busy(Arc<Activity>);

impl Busy {
    pub(super) fn begin(activity: &Arc<Activity>) -> Busy {
        activity.in_flight.fetch_add(1, Ordering::Relaxed);
        activity.first_byte.store(0, Ordering::Relaxed);
        Busy(Arc::clone(activity))
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        let activity = &self.0;
        activity.idle_since.store(activity.now(), Ordering::Relaxed);
        activity.first_byte.store(0, Ordering::Relaxed);
        activity.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A response body that keeps its request counted as in flight until it is finished or dropped.
pub(super) struct BusyBody {
    pub(super) body: crate::response::Body,
    pub(super) _busy: Busy,
}

impl hyper::body::Body for BusyBody {
    type Data = bytes::Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<hyper::body::Frame<bytes::Bytes>, Infallible>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.body.size_hint()
    }
}

/// The client's socket, telling the connection's [`Activity`] when bytes arrive.
pub(super) struct Watched {
    pub(super) inner: TcpStream,
    pub(super) activity: Arc<Activity>,
}

impl AsyncRead for Watched {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.activity.read();
        }
        polled
    }
}

impl AsyncWrite for Watched {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, data)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
