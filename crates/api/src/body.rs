//! Request bodies: JSON content-type check (415), size limit (413) enforced while reading, never by
//! buffering an oversized body first, a pace every body must keep (408), and a shared memory budget
//! for large bodies in flight with a most per user (503).

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, StatusCode, header};
use hyper::body::Body;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

mod segments;

pub use segments::SMALL_BODY_BYTES;
use segments::Segments;

use crate::error::ApiError;

/// True when the `Content-Type` is `application/json` (parameters such as `charset` allowed).
pub fn is_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|mime| mime.trim().eq_ignore_ascii_case("application/json"))
}

/// The default [`BodyBudget`]: 1 GiB of large request bodies buffered at once, across all requests.
pub const DEFAULT_BODY_BUDGET_BYTES: u64 = 1024 * 1024 * 1024;

/// The default share of the [`BodyBudget`] one user may hold at once: 640 MiB, room for the largest
/// body any route takes (an image request, 600 MiB) and no more.
pub const DEFAULT_USER_BODY_BYTES: u64 = 640 * 1024 * 1024;

/// How long a large request waits for room in the budget before it is refused with 503 `server_busy`.
pub const BUDGET_WAIT: Duration = Duration::from_secs(10);

/// The budget counts in units of this many bytes (a semaphore permit each).
const UNIT: u64 = 64 * 1024;

/// Bounds the memory that large request bodies take together, and each user's part of it: a body
/// above [`SMALL_BODY_BYTES`] holds the bytes it has received in the budget (as they arrive, a
/// megabyte or a quarter more at a time) while it is read and processed, and its buffer never grows
/// past what it holds. A body that finds no room, in the budget or in its
/// user's share, within [`BUDGET_WAIT`] answers 503 `server_busy`, so a burst of big uploads waits or
/// is turned away instead of exhausting the process, and one user's uploads cannot take every
/// other user's room. A slow body holds only what it has sent, and is cut by its [`Pace`].
#[derive(Debug, Clone)]
pub struct BodyBudget {
    units: Arc<Semaphore>,
    total_units: u32,
    user_units: u32,
    users: Arc<Mutex<HashMap<String, u32>>>,
    freed: Arc<Notify>,
    wait: Duration,
}

impl BodyBudget {
    /// A budget of `bytes` (at least one largest body's worth is sensible), of which one user may hold
    /// [`DEFAULT_USER_BODY_BYTES`].
    pub fn new(bytes: u64) -> BodyBudget {
        let total_units = units_of(bytes).max(1);
        let permits = usize::try_from(total_units).unwrap_or(usize::MAX).min(Semaphore::MAX_PERMITS);
        BodyBudget {
            units: Arc::new(Semaphore::new(permits)),
            total_units,
            user_units: units_of(DEFAULT_USER_BODY_BYTES).min(total_units),
            users: Arc::new(Mutex::new(HashMap::new())),
            freed: Arc::new(Notify::new()),
            wait: BUDGET_WAIT,
        }
    }

    /// The same budget with another most one user may hold at once.
    pub fn with_user_share(mut self, bytes: u64) -> BodyBudget {
        self.user_units = units_of(bytes).clamp(1, self.total_units);
        self
    }

    /// The same budget with another wait before 503 (tests use a short one).
    pub fn with_wait(mut self, wait: Duration) -> BodyBudget {
        self.wait = wait;
        self
    }

    /// Bytes of the budget held now, by all users (for tests and diagnostics).
    pub fn held_bytes(&self) -> u64 {
        let free = u64::try_from(self.units.available_permits()).unwrap_or(u64::MAX);
        u64::from(self.total_units).saturating_sub(free).saturating_mul(UNIT)
    }

    /// Takes room for `bytes` more for `user` (first in the user's share, then in the whole budget),
    /// waiting up to the budget's wait.
    async fn take(&self, user: &str, bytes: u64, held: &mut Option<Room>) -> Result<(), ApiError> {
        let units = units_of(bytes).min(self.total_units);
        let deadline = tokio::time::Instant::now() + self.wait;
        loop {
            let freed = self.freed.notified();
            let mut freed = std::pin::pin!(freed);
            freed.as_mut().enable();
            {
                let mut users = self.users.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                let mine = users.entry(user.to_owned()).or_insert(0);
                if mine.saturating_add(units) <= self.user_units {
                    *mine += units;
                    break;
                }
                if *mine == 0 {
                    users.remove(user);
                }
            }
            if tokio::time::timeout_at(deadline, freed).await.is_err() {
                return Err(busy(
                    "this account has too many large request bodies in flight; retry once one has finished",
                    self.wait,
                ));
            }
        }
        // The user's share is counted; now the whole budget.
        let share = Share { budget: self.clone(), user: user.to_owned(), units };
        let permit = match tokio::time::timeout_at(deadline, Arc::clone(&self.units).acquire_many_owned(units)).await {
            Ok(Ok(permit)) => permit,
            Ok(Err(_)) | Err(_) => {
                return Err(busy("too many large requests are being processed; retry shortly", self.wait));
            }
        };
        match held {
            Some(room) => {
                room.permit.merge(permit);
                room.share.units += share.take();
            }
            None => *held = Some(Room { permit, share }),
        }
        Ok(())
    }
}

impl Default for BodyBudget {
    fn default() -> BodyBudget {
        BodyBudget::new(DEFAULT_BODY_BUDGET_BYTES)
    }
}

fn units_of(bytes: u64) -> u32 {
    u32::try_from(bytes.div_ceil(UNIT)).unwrap_or(u32::MAX)
}

fn busy(message: &str, wait: Duration) -> ApiError {
    ApiError::from(service::ServiceError::Busy { message: message.into(), retry_after_secs: wait.as_secs().max(1) })
}

/// Units of one user's share, given back when dropped.
#[derive(Debug)]
struct Share {
    budget: BodyBudget,
    user: String,
    units: u32,
}

impl Share {
    /// Hands the units over to another share of the same user (this one then gives nothing back).
    fn take(mut self) -> u32 {
        std::mem::take(&mut self.units)
    }
}

impl Drop for Share {
    fn drop(&mut self) {
        if self.units == 0 {
            return;
        }
        {
            let mut users = self.budget.users.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            if let Some(mine) = users.get_mut(&self.user) {
                *mine = mine.saturating_sub(self.units);
                if *mine == 0 {
                    users.remove(&self.user);
                }
            }
        }
        self.budget.freed.notify_waiters();
    }
}

/// Room a body holds in the [`BodyBudget`]: budget units and its user's share of them (dropped in
/// that order, so the units are back before waiters on the share are woken).
#[derive(Debug)]
struct Room {
    permit: OwnedSemaphorePermit,
    share: Share,
}

/// The pace a request body must keep, and how long it may stall.
///
/// - **Pace:** once the grace period has passed, every window as long as the grace must have brought
///   at least `min_rate` bytes per second (`min_rate × grace` bytes): the rate is judged over a
///   sliding window, not since the start, so bytes sent fast early buy no silence later. The first
///   window is the grace itself. Time the reader spends waiting for room in the budget does not
///   count (the body is not blamed for it).
/// - **Stall:** a body that brings no byte for `stall` while the reader waits for one is cut,
///   whatever came before.
///
/// Either way the body is cut with 408 `request_timeout`, and the room it held in the
/// [`BodyBudget`] is given back at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pace {
    min_rate: u64,
    grace: Duration,
    stall: Duration,
}

/// The sliding window counts arrivals in steps of this fraction of the window (an arrival counts as
/// made at the end of its step: a body is never cut before the exact rule would, and at most a
/// sixteenth of the window after).
const WINDOW_STEPS: u64 = 16;

impl Pace {
    /// A pace of `min_rate` bytes per second over windows of `grace`, after `grace`; a rate of 0 sets
    /// no pace. No stall bound until [`Pace::with_stall`].
    pub fn new(min_rate: u64, grace: Duration) -> Pace {
        Pace { min_rate, grace, stall: Duration::ZERO }
    }

    /// The same pace, and a body that brings no byte for `stall` is cut (`Duration::ZERO`: never).
    pub fn with_stall(mut self, stall: Duration) -> Pace {
        self.stall = stall;
        self
    }

    /// The window's length in milliseconds (at least one step each).
    fn window_ms(&self) -> u64 {
        domain::duration_millis(self.grace).unsigned_abs().max(WINDOW_STEPS)
    }

    /// Bytes every window must bring.
    fn per_window(&self) -> u64 {
        self.min_rate.saturating_mul(self.window_ms()) / 1000
    }

    /// The 408 of a body that fell behind this pace (`Slow`) or stopped (`Stalled`).
    pub(crate) fn timeout(&self, why: BodyError) -> ApiError {
        let message = if matches!(why, BodyError::Stalled) {
            format!("the request body stopped: no byte arrived for {} ms", self.stall.as_millis())
        } else {
            format!(
                "the request body arrived too slowly: it must bring {} bytes per second over every {} ms",
                self.min_rate,
                self.window_ms()
            )
        };
        ApiError::new(StatusCode::REQUEST_TIMEOUT, "request_timeout", message)
    }
}

/// Arrivals of a body over its last window: (end of step, bytes received by then), on the body's own
/// clock (milliseconds since its start, time excused not counted). At most `WINDOW_STEPS + 2`
/// entries.
#[derive(Debug, Default)]
struct Arrivals {
    /// The newest entry that has left the window (the count before it), `(0, 0)` at first.
    base: (u64, u64),
    steps: std::collections::VecDeque<(u64, u64)>,
}

impl Arrivals {
    /// `total` bytes have arrived by `now` (ms on the body's clock).
    fn record(&mut self, now: u64, total: u64, window: u64) {
        let step = (window / WINDOW_STEPS).max(1);
        let end = now.div_ceil(step).saturating_mul(step);
        match self.steps.back_mut() {
            Some(last) if last.0 == end => last.1 = total,
            _ => self.steps.push_back((end, total)),
        }
        while let Some(&first) = self.steps.front() {
            if first.0.saturating_add(window) > now {
                break;
            }
            self.base = first;
            self.steps.pop_front();
        }
    }

    /// When (ms on the body's clock) the last `window` will hold fewer than `need` bytes, `total`
    /// received so far and none more: the end of the first arrival after which fewer than `need`
    /// came, plus the window.
    fn due(&self, total: u64, need: u64, window: u64) -> u64 {
        let floor = total.saturating_sub(need);
        let from = std::iter::once(&self.base)
            .chain(self.steps.iter())
            .find(|(_, by)| need > total || *by > floor)
            .map_or(u64::MAX, |(at, _)| *at);
        from.saturating_add(window)
    }
}

/// Why reading a request body stopped.
#[derive(Debug)]
pub(crate) enum BodyError {
    /// The body fell behind its [`Pace`].
    Slow,
    /// No byte came for the pace's stall time.
    Stalled,
    /// The connection failed.
    Read(String),
}

/// A request body read chunk by chunk under a [`Pace`]: by each deadline, more must have arrived.
pub(crate) struct Paced<B> {
    body: B,
    pace: Pace,
    start: Instant,
    waited: Duration,
    received: u64,
    arrivals: Arrivals,
    /// Since when the reader has been waiting for a byte (`None` right after one arrived, until the
    /// reader asks again: time the reader spends elsewhere is not the body's stall).
    waiting: Option<Instant>,
    /// Armed only once the body makes the reader wait (a body that arrives with its headers sets none).
    sleep: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl<B> Paced<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: std::fmt::Display,
{
    /// `body`, from now on held to `pace`.
    pub(crate) fn new(body: B, pace: Pace) -> Paced<B> {
        Paced {
            body,
            pace,
            start: Instant::now(),
            waited: Duration::ZERO,
            received: 0,
            arrivals: Arrivals::default(),
            waiting: None,
            sleep: None,
        }
    }

    /// Time the reader spent not reading (waiting for room in the budget): the body is not blamed.
    pub(crate) fn excuse(&mut self, waited: Duration) {
        self.waited += waited;
    }

    /// Milliseconds on the body's clock (since its start, excused time not counted).
    fn clock(&self, at: Instant) -> u64 {
        domain::duration_millis(at.saturating_duration_since(self.start).saturating_sub(self.waited)).unsigned_abs()
    }

    /// When the body must have brought more, and what it is cut for if it has not.
    fn deadline(&mut self, now: Instant) -> Option<(Instant, BodyError)> {
        let waiting = *self.waiting.get_or_insert(now);
        let stalled = (!self.pace.stall.is_zero())
            .then(|| waiting.checked_add(self.pace.stall))
            .flatten()
            .map(|at| (at, BodyError::Stalled));
        let slow = (self.pace.min_rate > 0)
            .then(|| {
                let window = self.pace.window_ms();
                let due = self.arrivals.due(self.received, self.pace.per_window(), window);
                self.start.checked_add(self.waited)?.checked_add(Duration::from_millis(due))
            })
            .flatten()
            .map(|at| (at, BodyError::Slow));
        match (stalled, slow) {
            (Some(a), Some(b)) => Some(if a.0 <= b.0 { a } else { b }),
            (a, b) => a.or(b),
        }
    }

    /// The next chunk of data (trailers skipped), `None` at the end.
    pub(crate) fn poll_data(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Bytes, BodyError>>> {
        loop {
            match Pin::new(&mut self.body).poll_frame(cx) {
                Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                    Ok(data) => {
                        self.received = self.received.saturating_add(data.len() as u64);
                        let now = self.clock(Instant::now());
                        self.arrivals.record(now, self.received, self.pace.window_ms());
                        self.waiting = None;
                        return Poll::Ready(Some(Ok(data)));
                    }
                    Err(_) => continue, // trailers
                },
                Poll::Ready(Some(Err(e))) => return Poll::Ready(Some(Err(BodyError::Read(e.to_string())))),
                Poll::Ready(None) => return Poll::Ready(None),
                Poll::Pending => break,
            }
        }
        let Some((deadline, why)) = self.deadline(Instant::now()) else {
            return Poll::Pending;
        };
        let sleep = self.sleep.get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
        if sleep.deadline() != deadline {
            sleep.as_mut().reset(deadline);
        }
        match sleep.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Some(Err(why))),
            Poll::Pending => Poll::Pending,
        }
    }

    /// The next chunk of data, `None` at the end.
    pub(crate) async fn data(&mut self) -> Option<Result<Bytes, BodyError>> {
        std::future::poll_fn(|cx| self.poll_data(cx)).await
    }

    /// The error a reader answers for `e`.
    pub(crate) fn error(&self, e: BodyError) -> ApiError {
        match e {
            BodyError::Read(e) => ApiError::invalid(format!("the request body could not be read: {e}")),
            why => self.pace.timeout(why),
        }
    }
}

/// A request body read into memory, holding its share of the [`BodyBudget`] until dropped.
#[derive(Debug)]
pub struct BufferedBody {
    bytes: Bytes,
    _room: Option<Room>,
}

impl std::ops::Deref for BufferedBody {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        &self.bytes
    }
}

/// Reads `user`'s JSON request body of at most `limit` bytes at `pace`.
///
/// A non-JSON content type is 415. A declared `Content-Length` above the limit is 413 before
/// any byte is read; an undeclared (chunked) body is cut off with 413 as soon as it passes the limit.
/// Bodies above [`SMALL_BODY_BYTES`] take room in `budget` as they grow (503 `server_busy` when there
/// is none); a body that falls behind `pace` or stalls is 408, and its room is given back at once.
/// The buffer grows with the bytes received ([`Segments`]), never to the declared length up front.
pub async fn read_json<B>(
    headers: &HeaderMap,
    body: B,
    limit: u64,
    budget: &BodyBudget,
    user: &str,
    pace: Pace,
) -> Result<BufferedBody, ApiError>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: std::fmt::Display,
{
    if !is_json(headers) {
        return Err(ApiError::unsupported_content_type());
    }
    let declared =
        headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit) {
        return Err(ApiError::too_large(limit));
    }
    let mut room = None;
    let mut reserved = 0;
    let mut body = Paced::new(body, pace);
    let mut buffer = Segments::default();
    while let Some(data) = body.data().await {
        let data = data.map_err(|e| body.error(e))?;
        let len = buffer.len() + data.len() as u64;
        if len > limit {
            return Err(ApiError::too_large(limit));
        }
        if len > SMALL_BODY_BYTES && len > reserved {
            // A large body takes room as it grows: a megabyte, or a quarter of what it holds, at a time.
            // Never more than the body can still bring (its declared length, else the limit).
            // Once a quarter of a declared length has arrived, the body takes room for all of it, so
            // that its bytes go into one buffer of its length and are never joined at the end.
            let most = declared.unwrap_or(limit).min(limit).max(len) - reserved;
            let whole = declared.is_some_and(|d| len.saturating_mul(4) >= d);
            let more = if whole { most } else { (len - reserved).max(SMALL_BODY_BYTES).max(reserved / 4).min(most) };
            let asked = Instant::now();
            budget.take(user, more, &mut room).await?;
            body.excuse(asked.elapsed());
            reserved += more;
        }
        let room = reserved.max(SMALL_BODY_BYTES).min(declared.unwrap_or(u64::MAX));
        buffer.push(&data, room, declared == Some(room));
    }
    Ok(BufferedBody { bytes: Bytes::from(buffer.into_vec()), _room: room })
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;
    use http_body_util::Full;
    use hyper::body::Frame;

    fn headers(content_type: &str, length: Option<u64>) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::CONTENT_TYPE, HeaderValue::from_str(content_type).expect("header"));
        if let Some(n) = length {
            h.insert(header::CONTENT_LENGTH, HeaderValue::from(n));
        }
        h
    }

    const PACE: Pace = Pace { min_rate: 1000, grace: Duration::from_secs(5), stall: Duration::from_secs(30) };

    /// Runs `f` on a runtime whose clock only moves when every task waits (so deadlines pass at once).
    fn run<F: std::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .expect("runtime")
            .block_on(f)
    }

    #[test]
    fn content_type_rules() {
        assert!(is_json(&headers("application/json", None)));
        assert!(is_json(&headers("Application/JSON; charset=utf-8", None)));
        for bad in ["text/plain", "application/jsonx", "multipart/form-data; boundary=x", ""] {
            assert!(!is_json(&headers(bad, None)), "{bad}");
        }
        let budget = BodyBudget::default();
        let err =
            run(read_json(&headers("text/plain", None), Full::new(Bytes::from_static(b"{}")), 10, &budget, "u", PACE));
        assert_eq!(err.map(|b| b.len()).map_err(|e| e.status.as_u16()), Err(415));
    }

    #[test]
    fn size_limit_edges() {
        let b = BodyBudget::default();
        let body = |n: usize| Full::new(Bytes::from(vec![b' '; n]));
        assert_eq!(
            run(read_json(&headers("application/json", Some(10)), body(10), 10, &b, "u", PACE)).map(|b| b.len()),
            Ok(10)
        );
        let err = run(read_json(&headers("application/json", Some(11)), body(11), 10, &b, "u", PACE));
        assert_eq!(err.map(|b| b.len()).map_err(|e| e.code), Err("request_too_large"));
        // No Content-Length: the limit is enforced while streaming.
        let err = run(read_json(&headers("application/json", None), Chunks(vec![b"abc"; 5]), 10, &b, "u", PACE));
        assert_eq!(err.map(|b| b.len()).map_err(|e| e.code), Err("request_too_large"));
        let ok = run(read_json(&headers("application/json", None), Chunks(vec![b"abc"; 3]), 10, &b, "u", PACE));
        assert_eq!(ok.map(|b| b.len()), Ok(9));
    }

    #[test]
    fn large_bodies_share_the_budget() {
        let mib = 1024 * 1024;
        let budget = BodyBudget::new(3 * mib).with_wait(Duration::from_millis(50));
        let big = |n: u64| Full::new(Bytes::from(vec![b' '; usize::try_from(n).unwrap_or(0)]));
        let limit = 10 * mib;
        run(async {
            let json = |n| headers("application/json", Some(n));
            let first =
                read_json(&json(2 * mib), big(2 * mib), limit, &budget, "u", PACE).await.expect("room for the first");
            // Small bodies never wait for the budget.
            assert!(read_json(&json(SMALL_BODY_BYTES), big(SMALL_BODY_BYTES), limit, &budget, "u", PACE).await.is_ok());
            let busy = read_json(&json(2 * mib), big(2 * mib), limit, &budget, "u", PACE).await;
            let busy = busy.expect_err("no room while the first body is held");
            assert_eq!((busy.status.as_u16(), busy.code, busy.retry_after), (503, "server_busy", Some(1)));
            // An undeclared body takes room as it grows, and is refused the same way.
            let chunked = read_json(&headers("application/json", None), big(2 * mib), limit, &budget, "u", PACE).await;
            assert_eq!(chunked.map_err(|e| e.code).map(|b| b.len()), Err("server_busy"));
            drop(first);
            let second = read_json(&json(2 * mib), big(2 * mib), limit, &budget, "u", PACE).await;
            assert_eq!(second.map(|b| b.len() as u64), Ok(2 * mib), "room is back once the first is dropped");
        });
    }

    #[test]
    fn one_user_cannot_take_the_whole_budget() {
        let mib = 1024 * 1024;
        let budget = BodyBudget::new(8 * mib).with_user_share(3 * mib).with_wait(Duration::from_millis(50));
        let big = |n: u64| Full::new(Bytes::from(vec![b' '; usize::try_from(n).unwrap_or(0)]));
        let json = |n| headers("application/json", Some(n));
        run(async {
            let a = read_json(&json(2 * mib), big(2 * mib), 10 * mib, &budget, "a", PACE).await.expect("a's first");
            let again = read_json(&json(2 * mib), big(2 * mib), 10 * mib, &budget, "a", PACE).await;
            let again = again.expect_err("a is at its share");
            assert_eq!((again.status.as_u16(), again.code), (503, "server_busy"));
            assert!(again.message.contains("this account"), "{}", again.message);
            // Another user still has room, and a's share comes back with a's body.
            let b = read_json(&json(3 * mib), big(3 * mib), 10 * mib, &budget, "b", PACE).await.expect("b has room");
            assert_eq!(budget.held_bytes(), 5 * mib);
            drop(a);
            let a2 = read_json(&json(3 * mib), big(3 * mib), 10 * mib, &budget, "a", PACE).await;
            assert!(a2.is_ok(), "a's share is back");
            drop((a2, b));
            assert_eq!(budget.held_bytes(), 0, "everything given back");
            assert!(budget.users.lock().expect("lock").is_empty(), "no user entry left behind");
        });
    }

    #[test]
    fn a_body_that_falls_behind_its_pace_is_cut_and_gives_its_room_back() {
        let mib = 1024 * 1024;
        let budget = BodyBudget::new(8 * mib);
        run(async {
            // 2 MiB arrive at once, then nothing: the sliding window (5 s at 1000 B/s) no longer holds
            // 5,000 bytes 5 s later; the 2 MiB sent early buy no silence (the old average would have
            // waited 5 s + 2 MiB / 1000 B/s, 35 minutes).
            let started = tokio::time::Instant::now();
            let body = Stalling(Some(Bytes::from(vec![b' '; 2 * 1024 * 1024])));
            let cut = read_json(&headers("application/json", Some(3 * mib)), body, 10 * mib, &budget, "t", PACE).await;
            let cut = cut.expect_err("a stalled body is cut");
            assert_eq!((cut.status.as_u16(), cut.code), (408, "request_timeout"));
            assert_eq!(started.elapsed(), Duration::from_secs(5), "cut when the window runs dry");
            assert_eq!(budget.held_bytes(), 0, "the room is given back");
            // A body that sends nothing at all is cut after the grace period.
            let started = tokio::time::Instant::now();
            let cut =
                read_json(&headers("application/json", Some(10)), Stalling(None), 10 * mib, &budget, "t", PACE).await;
            assert_eq!(cut.map(|b| b.len()).map_err(|e| e.status.as_u16()), Err(408));
            assert_eq!(started.elapsed(), Duration::from_secs(5));
        });
    }

    /// Reads `steps` (a pause, then that many bytes) under `pace`: the outcome and when it came.
    fn read_script(pace: Pace, steps: Vec<(u64, usize)>) -> (Result<usize, String>, Duration) {
        let total: usize = steps.iter().map(|(_, n)| n).sum();
        let budget = BodyBudget::default();
        run(async move {
            let started = tokio::time::Instant::now();
            let body = Script { steps, sleep: None };
            let json = headers("application/json", Some(total as u64 + 1));
            let read = read_json(&json, body, 1024 * 1024, &budget, "t", pace).await;
            (read.map(|b| b.len()).map_err(|e| e.message), started.elapsed())
        })
    }

    #[test]
    fn the_pace_is_judged_over_a_sliding_window() {
        // 1000 B/s over 5-s windows: 5,000 bytes every 5 s. No stall bound here.
        let pace = Pace::new(1000, Duration::from_secs(5));
        // Just inside: 1,000 bytes a second for 30 s, after 100 kB at once, is never cut.
        let mut steady = vec![(0, 100_000)];
        steady.extend((0..30).map(|_| (1000, 1000)));
        steady.push((0, 0));
        let (read, took) = read_script(pace, steady);
        assert_eq!((read, took), (Ok(130_000), Duration::from_secs(30)));
        // Just outside: 990 bytes a second after the same 100 kB burst is cut within two windows,
        // though its average since the start stays far above the rate for 100 s.
        let mut short = vec![(0, 100_000)];
        short.extend((0..30).map(|_| (1000, 990)));
        let (read, took) = read_script(pace, short);
        assert!(read.as_ref().is_err_and(|m| m.contains("too slowly")), "{read:?}");
        assert!(took >= Duration::from_secs(5) && took <= Duration::from_secs(11), "cut after {took:?}");
        // The window is the grace: 4,999 bytes at once are cut exactly when the first window ends
        // (plus at most one sixteenth of it), 5,000 are not.
        let (read, took) = read_script(pace, vec![(0, 4999), (6000, 1)]);
        assert!(read.is_err() && took == Duration::from_secs(5), "{read:?} after {took:?}");
        let (read, took) = read_script(pace, vec![(0, 5000), (4900, 5000), (0, 0)]);
        assert_eq!(read, Ok(10_000), "after {took:?}");
    }

    #[test]
    fn a_stalled_body_is_cut_after_the_stall_time_whatever_came_before() {
        // No pace at all, only the stall bound: 1.5 s.
        let pace = Pace::new(0, Duration::from_secs(5)).with_stall(Duration::from_millis(1500));
        // Just inside: gaps of 1,499 ms, a hundred of them (150 s in all), then the end.
        let mut steps: Vec<(u64, usize)> = (0..100).map(|_| (1499, 10)).collect();
        steps.push((0, 0));
        let (read, took) = read_script(pace, steps);
        assert_eq!(read, Ok(1000), "after {took:?}");
        // Just outside: 1 MB at once, then a gap of 1,501 ms: cut 1,500 ms after the last byte.
        let (read, took) = read_script(pace, vec![(0, 1_000_000), (1501, 10)]);
        assert!(read.as_ref().is_err_and(|m| m.contains("no byte arrived for 1500 ms")), "{read:?}");
        assert_eq!(took, Duration::from_millis(1500));
        // The stall counts from the last byte, not from the start: 1,400 ms, 1,400 ms, then silence.
        let (read, took) = read_script(pace, vec![(1400, 10), (1400, 10), (10_000, 1)]);
        assert!(read.is_err(), "{read:?}");
        assert_eq!(took, Duration::from_millis(2800 + 1500));
    }

    #[test]
    fn a_large_body_takes_room_as_it_arrives_and_never_its_declared_length() {
        let mib = 1024 * 1024;
        let budget = BodyBudget::new(64 * mib);
        run(async {
            // 600 MiB declared, 3 MiB sent, then a stall: at most 3 MiB and a quarter held meanwhile.
            let body = Script { steps: vec![(0, 3 * 1024 * 1024), (60_000, 1)], sleep: None };
            let json = headers("application/json", Some(600 * mib));
            let reading = read_json(&json, body, 600 * mib, &budget, "t", PACE);
            let mut reading = std::pin::pin!(reading);
            assert!(tokio::time::timeout(Duration::from_secs(1), reading.as_mut()).await.is_err());
            let held = budget.held_bytes();
            assert!(held >= 3 * mib && held <= 3 * mib + mib, "held {held} bytes for 3 MiB received");
            assert!(reading.await.is_err(), "cut by its pace");
            assert_eq!(budget.held_bytes(), 0);
        });
    }

    /// A body that waits, then yields, step by step (a pause in ms, then that many bytes; 0 bytes:
    /// the end), then never anything more.
    struct Script {
        steps: Vec<(u64, usize)>,
        sleep: Option<Pin<Box<tokio::time::Sleep>>>,
    }

    impl Body for Script {
        type Data = Bytes;
        type Error = std::io::Error;

        fn poll_frame(
            mut self: std::pin::Pin<&mut Self>,
            cx: &mut std::task::Context<'_>,
        ) -> std::task::Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
            let Some(&(pause, bytes)) = self.steps.first() else { return Poll::Pending };
            let sleep = self.sleep.get_or_insert_with(|| Box::pin(tokio::time::sleep(Duration::from_millis(pause))));
            if sleep.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            self.sleep = None;
            self.steps.remove(0);
            if bytes == 0 {
                return Poll::Ready(None);
            }
            Poll::Ready(Some(Ok(Frame::data(Bytes::from(vec![b' '; bytes])))))
        }
    }

    /// A body that yields its one chunk (if any), then never anything more.
    struct Stalling(Option<Bytes>);

    impl Body for Stalling {
        type Data = Bytes;
        type Error = std::io::Error;

        fn poll_frame(
            mut self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
            match self.0.take() {
                Some(data) => std::task::Poll::Ready(Some(Ok(Frame::data(data)))),
                None => std::task::Poll::Pending,
            }
        }
    }

    /// A body that arrives in chunks and declares no length.
    struct Chunks(Vec<&'static [u8; 3]>);

    impl Body for Chunks {
        type Data = Bytes;
        type Error = std::io::Error;

        fn poll_frame(
            mut self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
            let next = if self.0.is_empty() { None } else { Some(self.0.remove(0)) };
            std::task::Poll::Ready(next.map(|c| Ok(Frame::data(Bytes::from_static(c)))))
        }
    }
}
