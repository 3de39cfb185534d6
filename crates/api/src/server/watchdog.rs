//! The per-connection watchdog: what a connection is doing ([`Activity`]), the timer that closes it
//! when idle or stalled ([`Watchdog`]), and the wrappers that tell it (the socket, each response).

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

use crate::state::Limits;

/// What the watchdog of one connection knows: requests in flight, when the connection last fell idle,
/// when the first byte after that arrived, and which responses wait on the client to take their
/// bytes. Updated with relaxed atomics on the request path.
///
/// **A response the client does not take counts as idle.** A request in flight is normally left
/// alone however long it takes: a chat whose first token comes after a minute, a stream whose
/// events are far apart, or a body still being read are the server's business or have their own
/// bounds (the body's [`Pace`](crate::body::Pace)). But once our side has produced bytes for the
/// client (the response's head is ready, its body has yielded a frame, or the body woke up after it
/// was pending), what happens next is the transport's: hyper polls the body again only when it has
/// sent what came before (HTTP/1.1: its write buffer drained into the socket; HTTP/2: the stream has
/// flow-control window and send buffer). A client that stops reading, or announces an HTTP/2 window
/// of 0, therefore leaves the response *owed* ([`Flow`]). Such a connection is closed when, with a
/// response owed, the client has taken nothing for [`Limits::idle_timeout`]: bytes the client does
/// not take are no more progress than bytes it does not send. Taking is judged per protocol: for
/// HTTP/1.1, bytes written into the socket (hyper's own buffer takes a few more frames whenever
/// the connection is polled, so a poll of the body proves nothing); for HTTP/2, a poll of an owed
/// body, which h2 allows only once the client's window and the stream's send buffer have room
/// (socket writes would count PINGs and other control frames: a client that answers PINGs but
/// opens no window holds its slot just the same). A response that waits on our side (its body
/// polled and pending, not woken since) is never owed.
pub(super) struct Activity {
    /// When the connection was accepted; the times below are milliseconds since then.
    opened: tokio::time::Instant,
    /// Requests whose response has not been sent completely (HTTP/2 streams count one each).
    in_flight: AtomicUsize,
    /// When the last request ended (or the connection opened).
    idle_since: AtomicU64,
    /// When the first byte after `idle_since` arrived, plus one; 0 while none has.
    first_byte: AtomicU64,
    /// Responses that have produced bytes the transport has not taken yet (see above).
    owed: AtomicUsize,
    /// When the client last took an owed response's bytes ([`Activity::wrote`], [`Activity::took`]),
    /// or the first owed response became owed.
    moved: AtomicU64,
    /// The watchdog's waker while it has no timer armed (requests in flight, none owed): a response
    /// that becomes owed on another task (an HTTP/2 stream) wakes it.
    parked: Mutex<Option<Waker>>,
    /// Whether the client speaks HTTP/2 (whose PINGs are not the start of a request); set from
    /// `opening` before the connection is served.
    http2: AtomicBool,
}

impl Activity {
    /// A connection accepted now.
    pub(super) fn new() -> Activity {
        Activity {
            opened: tokio::time::Instant::now(),
            in_flight: AtomicUsize::new(0),
            idle_since: AtomicU64::new(0),
            first_byte: AtomicU64::new(0),
            owed: AtomicUsize::new(0),
            moved: AtomicU64::new(0),
            parked: Mutex::new(None),
            http2: AtomicBool::new(false),
        }
    }

    /// The client speaks HTTP/2 (with prior knowledge), judged on its first bytes.
    pub(super) fn set_http2(&self, http2: bool) {
        self.http2.store(http2, Ordering::Relaxed);
    }

    /// Whether the client speaks HTTP/2.
    pub(super) fn http2(&self) -> bool {
        self.http2.load(Ordering::Relaxed)
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

    /// A response produced bytes for the client, polled with `waker`: it is owed until the transport
    /// polls it again. The first owed response starts the clock and wakes a parked watchdog (unless
    /// this is the watchdog's own task, which polls it right after the connection anyway).
    fn owe(&self, waker: &Waker) {
        if self.owed.load(Ordering::Relaxed) == 0 {
            self.moved.store(self.now(), Ordering::Relaxed);
        }
        if self.owed.fetch_add(1, Ordering::AcqRel) == 0 {
            let parked = self.parked.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take();
            if let Some(parked) = parked.filter(|p| !p.will_wake(waker)) {
                parked.wake();
            }
        }
    }

    /// HTTP/2: an owed response was polled again, which h2 does only once the client's window and
    /// the stream's send buffer have room: the client took what it had produced.
    fn took(&self) {
        if self.http2() {
            self.moved.store(self.now(), Ordering::Relaxed);
        }
    }

    /// Bytes went into the socket. HTTP/1.1: everything written is the answers' (HTTP/2 writes PINGs
    /// and other control frames too, which are no progress of an answer: see [`Activity::took`]).
    /// hyper's own write buffer takes a few more frames whenever the connection is polled, so for
    /// HTTP/1.1 only the socket tells that the client took anything.
    fn wrote(&self) {
        if !self.http2() && self.owed.load(Ordering::Relaxed) > 0 {
            self.moved.store(self.now(), Ordering::Relaxed);
        }
    }

    /// An owed response is owed no more (it waits on our side, ended or was dropped).
    fn settled(&self) {
        self.owed.fetch_sub(1, Ordering::AcqRel);
    }

    /// When the connection will have been idle, stalled in a header or left owed too long, and why;
    /// `None` while requests are in flight and none is owed.
    fn deadline(&self, limits: &Limits) -> Option<(tokio::time::Instant, Wake)> {
        if self.in_flight.load(Ordering::Relaxed) > 0 {
            if self.owed.load(Ordering::Acquire) == 0 {
                return None;
            }
            return Some((self.at(self.moved.load(Ordering::Relaxed)) + limits.idle_timeout, Wake::Stuck));
        }
        let first = self.first_byte.load(Ordering::Relaxed);
        let idle = self.at(self.idle_since.load(Ordering::Relaxed)) + limits.idle_timeout;
        Some(if first > 0 && !self.http2() {
            (idle.min(self.at(first - 1) + limits.header_read_timeout), Wake::Stalled)
        } else {
            (idle, Wake::Stalled)
        })
    }

    /// Parks the watchdog's `waker` until a response becomes owed; false when one already is (the
    /// watchdog then looks again instead of sleeping).
    fn park(&self, waker: &Waker) -> bool {
        let mut parked = self.parked.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if !parked.as_ref().is_some_and(|p| p.will_wake(waker)) {
            *parked = Some(waker.clone());
        }
        self.owed.load(Ordering::Acquire) == 0
    }
}

/// Why a [`Watchdog`] woke its connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Wake {
    /// Idle or stalled in a header for too long, nothing in flight: close it (HTTP/2 with a GOAWAY).
    Stalled,
    /// Responses owed to a client that has taken none of their bytes for the idle timeout: drop it
    /// (a goodbye it would not read either is pointless).
    Stuck,
    /// A closing connection's time to finish is up: drop it.
    TimeUp,
}

/// A timer that completes when its connection has been idle, stalled in a header, or left owed too
/// long (and, once the connection is closing, when its time to finish is up). It re-arms itself from
/// the connection's [`Activity`] each time it is polled, which is after every poll of the connection.
pub(super) struct Watchdog {
    activity: Arc<Activity>,
    limits: Limits,
    sleep: Pin<Box<tokio::time::Sleep>>,
    armed: tokio::time::Instant,
    closing: Option<tokio::time::Instant>,
}

impl Watchdog {
    /// The watchdog of the connection whose `activity` it reads, under `limits`.
    pub(super) fn new(activity: Arc<Activity>, limits: Limits) -> Watchdog {
        let armed = tokio::time::Instant::now() + limits.header_read_timeout.min(limits.idle_timeout);
        Watchdog { activity, limits, sleep: Box::pin(tokio::time::sleep_until(armed)), armed, closing: None }
    }

    /// Whether the watched connection speaks HTTP/2.
    pub(super) fn http2(&self) -> bool {
        self.activity.http2()
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
                Some((at, _)) => this.arm(at),
                // Requests in flight, none owed: nothing to time. The poll of the connection that
                // ends one is followed by this one (the select is biased), which arms the timer then;
                // a response that becomes owed on an HTTP/2 stream's own task wakes this one; HTTP/2
                // streams that end on their own tasks are seen at the connection's next wake-up at
                // the latest (a keep-alive PING wakes it).
                None if this.activity.park(cx.waker()) => return Poll::Pending,
                None => continue,
            }
            if this.sleep.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            match this.activity.deadline(&this.limits) {
                Some((at, why)) if at <= tokio::time::Instant::now() => return Poll::Ready(why),
                Some((at, _)) => this.arm(at),
                None => {}
            }
        }
    }
}

/// A request in flight on a connection, from the moment hyper hands it over until its response body
/// has been sent or dropped.
pub(super) struct Busy(Arc<Activity>);

impl Busy {
    /// A request handed over on the connection of `activity`.
    pub(super) fn begin(activity: &Arc<Activity>) -> Busy {
        activity.in_flight.fetch_add(1, Ordering::Relaxed);
        activity.first_byte.store(0, Ordering::Relaxed);
        Busy(Arc::clone(activity))
    }

    /// The response to this request, its head ready to be written (polled with `waker`): owed to the
    /// client from now on, until hyper polls its body.
    pub(super) fn respond(self, body: crate::response::Body, waker: &Waker) -> BusyBody {
        let flow = Arc::new(Flow {
            activity: Arc::clone(&self.0),
            owed: AtomicBool::new(false),
            wakes: AtomicU64::new(0),
            outer: Mutex::new(Some(waker.clone())),
        });
        flow.set(true, waker);
        let inner = Waker::from(Arc::clone(&flow));
        BusyBody { body, _busy: self, flow, inner }
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

/// A response body that keeps its request counted as in flight until it is finished or dropped, and
/// tells the watchdog when it is owed ([`Flow`]).
pub(super) struct BusyBody {
    body: crate::response::Body,
    _busy: Busy,
    flow: Arc<Flow>,
    /// The waker the body itself is polled with: `flow`'s.
    inner: Waker,
}

/// Whether one response is owed to its client: from when it has bytes ready for the transport (its
/// head, a frame it yielded, or a wake-up after it was pending: something is ready) until hyper
/// polls it again. Only a poll that finds it pending (it waits on our side) or its end settles it.
/// The body is polled with this as its waker, so that a body that becomes ready while the transport
/// is blocked (hyper does not poll it until the transport takes what it has) counts as owed.
struct Flow {
    activity: Arc<Activity>,
    owed: AtomicBool,
    /// Wake-ups so far (a wake-up while the body is polled owes it again).
    wakes: AtomicU64,
    /// The waker of the task that polls the body (hyper's); `None` once the body is dropped.
    outer: Mutex<Option<Waker>>,
}

impl Flow {
    /// Owed or not from now on, the connection's count kept in step (polled with `waker`).
    fn set(&self, owed: bool, waker: &Waker) {
        if self.owed.swap(owed, Ordering::AcqRel) != owed {
            if owed {
                self.activity.owe(waker);
            } else {
                self.activity.settled();
            }
        }
    }
}

impl std::task::Wake for Flow {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        let outer = {
            let outer = self.outer.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            let Some(outer) = outer.as_ref() else { return };
            self.wakes.fetch_add(1, Ordering::AcqRel);
            self.set(true, outer);
            outer.clone()
        };
        outer.wake();
    }
}

impl hyper::body::Body for BusyBody {
    type Data = bytes::Bytes;
    type Error = crate::response::StreamError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<hyper::body::Frame<bytes::Bytes>, Self::Error>>> {
        let this = &mut *self;
        {
            let mut outer = this.flow.outer.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            if !outer.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                *outer = Some(cx.waker().clone());
            }
        }
        if this.flow.owed.load(Ordering::Acquire) {
            this.flow.activity.took();
        }
        // Owed stays owed while a frame follows a frame (no change the watchdog could see half-way);
        // a body found pending is settled, unless it woke up while it was polled.
        let wakes = this.flow.wakes.load(Ordering::Acquire);
        let polled = Pin::new(&mut this.body).poll_frame(&mut Context::from_waker(&this.inner));
        if matches!(polled, Poll::Ready(Some(_))) {
            this.flow.set(true, cx.waker());
        } else {
            this.flow.set(false, cx.waker());
            if matches!(polled, Poll::Pending) && this.flow.wakes.load(Ordering::Acquire) != wakes {
                this.flow.set(true, cx.waker());
            }
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.body.size_hint()
    }
}

impl Drop for BusyBody {
    fn drop(&mut self) {
        // Under the lock a late wake-up takes, so that none owes a body that is gone.
        let mut outer = self.flow.outer.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(waker) = outer.take() {
            self.flow.set(false, &waker);
        }
    }
}

/// The client's socket, telling the connection's [`Activity`] when bytes arrive and leave.
pub(super) struct Watched {
    inner: TcpStream,
    activity: Arc<Activity>,
}

impl Watched {
    /// `inner`, telling `activity` when bytes arrive.
    pub(super) fn new(inner: TcpStream, activity: Arc<Activity>) -> Watched {
        Watched { inner, activity }
    }
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
        let polled = Pin::new(&mut self.inner).poll_write(cx, data);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.wrote();
        }
        polled
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.wrote();
        }
        polled
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
