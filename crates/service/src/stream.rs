//! Streamed billable calls: upstream events are forwarded as they arrive, a per-format [`StreamMeter`]
//! records what was produced, and the call is settled (or refunded) when the stream ends for any reason:
//! the upstream's end, an upstream failure, the client leaving, or the client not reading for
//! [`CLIENT_STALL_LIMIT`].
//!
//! The items are typed: the edge (`api`) writes each one in the wire format of its endpoint (data-only
//! chunks ending in `data: [DONE]`, or named events), including a failure, which becomes that format's
//! own error event.

use std::time::{Duration, Instant};

use domain::UsdAmount;
use domain::ports::{EventStream, SseEvent, UpstreamError};
use tokio::sync::{mpsc, oneshot};

use crate::call::{OpenCall, upstream_message};
use crate::reply::{CallStream, StreamFailure, StreamItem};
use crate::{Gateway, ServiceError};

/// A stream whose client accepts no item for this long is treated as abandoned and settled.
pub const CLIENT_STALL_LIMIT: Duration = Duration::from_secs(60);

/// How often a running stream touches its task, so that the recovery sweep leaves it alone.
/// The sweep's age limit must exceed the upstream read timeout plus this plus the stall limit.
pub const STREAM_HEARTBEAT: Duration = Duration::from_secs(30);

/// What one streaming format knows about its events: how to rewrite them, where usage is, and how a
/// proper end looks.
#[async_trait::async_trait]
pub(crate) trait StreamMeter: Send + 'static {
    /// Rewrites one upstream event for the client and records what it says about usage and progress
    /// (before the client sees it). An event that is not what the format promises is `Malformed`.
    async fn observe(&mut self, event: SseEvent) -> Result<StreamItem, UpstreamError>;
    /// Whether a format with a final event (`message_stop`, `response.completed`) ends only with it;
    /// such a stream that stops before it failed. Chat's end (`data: [DONE]`) is checked by the adapter.
    const ENDS_WITH_FINAL_EVENT: bool;
    /// Whether the event just observed was the format's final event.
    fn complete(&self) -> bool;
    /// The charge for what was produced (reported usage, else an estimate from what was delivered),
    /// the usage to record and the tokens used (prompt + completion, counted against the key's
    /// `tpm`); `None` when nothing billable was produced.
    fn charge(&self) -> Result<Option<(UsdAmount, String, u64)>, ServiceError>;
}

impl Gateway {
    /// Starts pumping `events` of the open `call` to the client through `meter`.
    pub(crate) fn start_stream<M: StreamMeter>(
        &self,
        call: OpenCall,
        events: Box<dyn EventStream>,
        meter: M,
    ) -> CallStream {
        let (tx, items) = mpsc::channel(32);
        let (billed_tx, billed) = oneshot::channel();
        let task_id = call.task_id().clone();
        let gateway = self.clone();
        self.background.spawn(async move { gateway.pump(call, events, meter, tx, billed_tx).await });
        CallStream { task_id, items, billed }
    }

    /// Forwards events until the stream ends, then settles or refunds and sends the last item.
    async fn pump<M: StreamMeter>(
        self,
        call: OpenCall,
        mut events: Box<dyn EventStream>,
        mut meter: M,
        tx: mpsc::Sender<StreamItem>,
        billed: oneshot::Sender<bool>,
    ) {
        let mut failure: Option<UpstreamError> = None;
        let mut client_gone = false;
        // The format's final event is held back until the call is settled, so that a client that
        // reads the task as soon as the stream ends finds it settled.
        let mut final_item = None;
        let mut last_beat = Instant::now();
        while let Some(event) = events.next_event().await {
            let observed = match event {
                Ok(event) => meter.observe(event).await,
                Err(e) => Err(e),
            };
            let item = match observed {
                Ok(item) => item,
                Err(e) => {
                    failure = Some(e);
                    break;
                }
            };
            if meter.complete() {
                final_item = Some(item);
                break;
            }
            if !matches!(tokio::time::timeout(CLIENT_STALL_LIMIT, tx.send(item)).await, Ok(Ok(()))) {
                client_gone = true;
                break;
            }
            if last_beat.elapsed() >= STREAM_HEARTBEAT {
                last_beat = Instant::now();
                if let Err(e) = self.ports.tasks.touch_task(call.task_id(), self.ports.clock.now()).await {
                    tracing::warn!(task = %call.task_id(), error = %e, "stream heartbeat failed");
                }
            }
        }
        drop(events); // Stop reading upstream as soon as the client is gone.
        if failure.is_none() && !client_gone && M::ENDS_WITH_FINAL_EVENT && !meter.complete() {
            failure = Some(UpstreamError::Stream("the stream ended before its final event".into()));
        }
        if let Some(e) = &failure {
            self.metrics.upstream_failed(call.model(), e);
        }
        // Boxed: the settlement's future is large and needed only once, at the end, so the pump
        // that every open stream keeps for its whole life does not carry room for it.
        let charged = Box::pin(close_stream(call, meter, failure.as_ref())).await;
        let _ = billed.send(charged);
        if client_gone {
            return;
        }
        if let Some(item) = final_item
            && tx.send(item).await.is_err()
        {
            return;
        }
        let last = match failure {
            Some(e) if charged => StreamItem::Failed(StreamFailure {
                message: format!("the upstream stream failed ({e}); only the output delivered was charged"),
                retryable: e.retryable(),
                charged,
            }),
            Some(e) => {
                StreamItem::Failed(StreamFailure { message: upstream_message(&e), retryable: e.retryable(), charged })
            }
            None => StreamItem::Done,
        };
        let _ = tx.send(last).await;
    }
}

/// Settles the stream's call on what the meter measured, or refunds it; whether anything was charged.
async fn close_stream<M: StreamMeter>(call: OpenCall, meter: M, failure: Option<&UpstreamError>) -> bool {
    let task = call.task_id().clone();
    let closed = match meter.charge() {
        Ok(Some((amount, usage, tokens))) => call.settle(amount, Some(usage), tokens).await.map(|_| true),
        Ok(None) => {
            let why = failure.map_or_else(|| "the stream ended with no output".to_owned(), ToString::to_string);
            call.refund("upstream_request_failed", why, None).await.map(|_| false)
        }
        Err(e) => {
            tracing::error!(%task, error = %e, "stream could not be priced; refunding it");
            call.refund("internal_error", "the call could not be priced".into(), None).await.map(|_| false)
        }
    };
    closed.unwrap_or_else(|e| {
        tracing::error!(%task, error = %e, "stream settlement failed; the recovery sweep will end it");
        false
    })
}
