//! Webhooks (DESIGN §5): every status change of a task with a `webhook_url` after its creation is one
//! delivery of `{"type": "task.<status>", "task": <Task>}`, signed with the owner's webhook secret:
//! `X-Svc-Webhook-Timestamp: <unix seconds>` and `X-Svc-Webhook-Signature: v1=<hex HMAC-SHA256 of
//! "<timestamp>.<body>">`. Enqueued exactly once per status (a compare-and-set in the store; changes a
//! crash left unannounced are found and enqueued by the worker), delivered by the worker through the
//! egress policy, retried with exponential back-off until a 2xx (the first retry after
//! `GATEWAY_WEBHOOK_RETRY_BASE`, then doubling up to an hour, given up after the configured number
//! of attempts), and every attempt is recorded and logged.

use std::time::Instant;

use domain::{DeliveryAttempt, Task, TaskId, Timestamp, UserId, WebhookDelivery, duration_millis};
use hmac::{Hmac, Mac};
use serde_json::json;
use sha2::Sha256;

use crate::keys::hex;
use crate::{Gateway, ServiceError};

/// The signature header's value for `body` sent at `timestamp` (seconds) with `secret`.
pub fn signature(secret: &str, timestamp: u64, body: &[u8]) -> Result<String, ServiceError> {
    // HMAC takes keys of any length; the error exists only for fixed-key MACs.
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes())
        .map_err(|e| ServiceError::Internal(format!("webhook signing key: {e}")))?;
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    Ok(format!("v1={}", hex(&mac.finalize().into_bytes())))
}

impl Gateway {
    /// Enqueues the webhook of `task`'s current status if it has a webhook URL and that status was not
    /// announced yet. Failures are logged: the worker finds unannounced changes again.
    pub(crate) async fn announce(&self, user: &UserId, task: &TaskId) {
        if let Err(e) = self.try_announce(user, task).await {
            tracing::warn!(%task, error = %e, "enqueueing a webhook failed; the worker will retry");
        }
    }

    async fn try_announce(&self, user: &UserId, id: &TaskId) -> Result<(), ServiceError> {
        let Some(task) = self.ports.tasks.task(user, id).await? else { return Ok(()) };
        self.announce_task(&task).await
    }

    async fn announce_task(&self, task: &Task) -> Result<(), ServiceError> {
        let Some(url) = &task.webhook_url else { return Ok(()) };
        let event = format!("task.{}", task.status);
        let payload = json!({"type": event, "task": self.video()?.wire.task_json(task)}).to_string();
        self.ports.videos.enqueue_webhook(&task.id, task.status, url, &event, &payload).await?;
        Ok(())
    }

    /// Enqueues the changes a crash left unannounced; how many tasks it looked at.
    pub(crate) async fn announce_missing(&self) -> Result<usize, ServiceError> {
        let tasks = self.ports.videos.unannounced_tasks(self.video_settings.batch).await?;
        for task in &tasks {
            self.announce_task(task).await?;
        }
        Ok(tasks.len())
    }

    /// One attempt of `delivery`; records it and schedules the next or gives up.
    pub(crate) async fn deliver(&self, delivery: WebhookDelivery) -> Result<bool, ServiceError> {
        let video = self.video()?;
        let now = self.ports.clock.now();
        let started = Instant::now();
        let result = match self.ports.videos.webhook_secret(&delivery.user_id).await? {
            None => Err("the user has no webhook secret (an operator sets one with rotate-webhook-secret)".to_owned()),
            Some(secret) => {
                let timestamp = u64::try_from(now.millis() / 1000).unwrap_or(0);
                let body = delivery.payload.as_bytes();
                let headers = vec![
                    ("x-svc-webhook-timestamp".to_owned(), timestamp.to_string()),
                    ("x-svc-webhook-signature".to_owned(), signature(&secret, timestamp, body)?),
                    ("x-svc-webhook-event".to_owned(), delivery.event.clone()),
                ];
                video.outbound.post_json(&delivery.url, &headers, body.to_vec()).await.map_err(|e| e.to_string())
            }
        };
        let latency_ms = duration_millis(started.elapsed()).unsigned_abs();
        let (status, error) = match &result {
            Ok(s) if (200..300).contains(s) => (Some(*s), None),
            Ok(s) => (Some(*s), Some(format!("the receiver answered {s}"))),
            Err(e) => (None, Some(e.clone())),
        };
        let delivered = error.is_none();
        self.metrics.webhook(delivered);
        let attempt_no = delivery.attempts.saturating_add(1);
        let task = delivery.task_id.as_ref().map_or("", TaskId::as_str);
        tracing::info!(
            task,
            event = delivery.event,
            attempt = attempt_no,
            status,
            latency_ms,
            error = error.as_deref().unwrap_or(""),
            "webhook attempt"
        );
        let retry_at =
            (!delivered && attempt_no < self.video_settings.webhook_attempts).then(|| self.retry_time(now, attempt_no));
        let attempt = DeliveryAttempt { status, latency_ms, error, at: now };
        self.ports.videos.record_delivery(delivery.id, attempt, delivered, retry_at).await?;
        Ok(delivered)
    }

    /// When attempt `attempt_no + 1` is due: the base delay doubled per attempt made, capped.
    fn retry_time(&self, now: Timestamp, attempt_no: u32) -> Timestamp {
        let base = duration_millis(self.video_settings.webhook_retry_base).max(1);
        let factor = 1_i64.checked_shl(attempt_no.saturating_sub(1).min(40)).unwrap_or(i64::MAX);
        let delay = base.saturating_mul(factor).min(duration_millis(self.video_settings.max_webhook_delay));
        Timestamp(now.millis().saturating_add(delay))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signature_is_hmac_sha256_over_timestamp_dot_body() {
        // Computed independently: printf '1700000000.{"a":1}' | openssl dgst -sha256 -hmac whsec_test
        assert_eq!(
            signature("whsec_test", 1_700_000_000, br#"{"a":1}"#).ok().as_deref(),
            Some("v1=38877139021993b830af32feea6e18a8da83eb2f6e49ee50bd9e4cf4ca4d3789")
        );
    }
}
