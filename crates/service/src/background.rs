//! Work the gateway starts that outlives the request that started it: a billable call finishing
//! after its client hung up, a stream's pump, the refund of a call dropped half-way, an
//! `Idempotency-Key` completed after a stream, the reader behind a `GET /media/{key}` body. Each
//! runs on a task counted here, so that shutdown can wait for the money they move instead of
//! cutting them off (which would leave holds for the recovery sweep of the next start). Work that
//! runs until told to stop has its own stop, taken in order at shutdown: the cap-lease manager
//! (`Admission::release_all`), the video worker and the binary's periodic loops.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::sync::Notify;

#[derive(Default)]
struct Inner {
    running: AtomicUsize,
    idle: Notify,
}

/// The counted background tasks of one gateway (cheap to clone).
#[derive(Clone, Default)]
pub struct Background(Arc<Inner>);

impl std::fmt::Debug for Background {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Background").field("running", &self.running()).finish()
    }
}

/// One counted task; the count drops when it does.
struct Ticket(Arc<Inner>);

impl Drop for Ticket {
    fn drop(&mut self) {
        if self.0.running.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

pin_project_lite::pin_project! {
    /// `work` and the ticket that counts it, dropped together when the task ends (or panics).
    ///
    /// A struct rather than an `async move { work.await }` block: such a block keeps room for
    /// `work` twice, once as the value it captured and once as the value it awaits, so a stream's
    /// pump (~6 KiB) took ~12 KiB for the whole life of the stream.
    struct Counted<F> {
        #[pin]
        work: F,
        _ticket: Ticket,
    }
}

impl<F: Future> Future for Counted<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        self.project().work.poll(cx)
    }
}

impl Background {
    fn ticket(&self) -> Ticket {
        self.0.running.fetch_add(1, Ordering::AcqRel);
        Ticket(Arc::clone(&self.0))
    }

    /// Runs `work` on a task of its own, counted until it ends (or panics).
    pub fn spawn<F>(&self, work: F) -> tokio::task::JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        tokio::spawn(Counted { work, _ticket: self.ticket() })
    }

    /// [`Background::spawn`] on `runtime` (from code that is not itself on a runtime task).
    pub fn spawn_on<F>(&self, runtime: &tokio::runtime::Handle, work: F) -> tokio::task::JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        runtime.spawn(Counted { work, _ticket: self.ticket() })
    }

    /// Tasks still running.
    pub fn running(&self) -> usize {
        self.0.running.load(Ordering::Acquire)
    }

    /// Waits until no counted task runs, at most `limit`; whether they all ended.
    pub async fn wait(&self, limit: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let idle = self.0.idle.notified();
            let mut idle = std::pin::pin!(idle);
            idle.as_mut().enable();
            if self.running() == 0 {
                return true;
            }
            if tokio::time::timeout_at(deadline, idle).await.is_err() {
                return self.running() == 0;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn waits_for_every_task_and_no_longer_than_asked() {
        let background = Background::default();
        assert!(background.wait(Duration::from_millis(1)).await, "nothing runs");
        for ms in [30, 60] {
            background.spawn(tokio::time::sleep(Duration::from_millis(ms)));
        }
        background.spawn(async { panic!("a panicking task still leaves the count") });
        assert!(background.running() >= 2);
        assert!(!background.wait(Duration::from_millis(5)).await, "the sleeps still run");
        assert!(background.wait(Duration::from_secs(5)).await, "they end");
        assert_eq!(background.running(), 0);
    }
}
