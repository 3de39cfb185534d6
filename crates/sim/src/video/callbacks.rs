//! `[sim:video=callback]`: finding the status changes not yet sent, and sending them.

use std::sync::Arc;
use std::time::Duration;

use super::task::Status;
use crate::state::{SimState, VideoTable};

/// Attempts per callback POST.
pub(crate) const CALLBACK_ATTEMPTS: u32 = 4;
/// Bound on each attempt.
pub(crate) const CALLBACK_TIMEOUT: Duration = Duration::from_secs(5);

/// The task objects to POST to one callback URL, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Delivery {
    pub(crate) url: String,
    pub(crate) bodies: Vec<String>,
}

impl VideoTable {
    /// Marks a task as wanting callbacks.
    pub(crate) fn watch(&mut self, id: &str) {
        self.watched.insert(id.to_owned());
    }

    /// The status changes up to simulated ms `now` not yet handed out, per task; tasks whose
    /// terminal status has been handed out stop being watched.
    pub(crate) fn due_callbacks(&mut self, now: u64, unix: impl Fn(u64) -> u64) -> Vec<Delivery> {
        let mut deliveries = Vec::new();
        let mut finished = Vec::new();
        for id in &self.watched {
            let Some(task) = self.tasks.get_mut(id) else {
                finished.push(id.clone());
                continue;
            };
            let Some(url) = task.callback_url.clone() else {
                finished.push(id.clone());
                continue;
            };
            let steps = task.transitions();
            let due: Vec<(Status, u64)> =
                steps.iter().skip(task.notified).filter(|(_, at)| *at <= now).copied().collect();
            if !due.is_empty() {
                task.notified += due.len();
                let bodies = due.iter().map(|&(status, at)| task.render(status, at, &unix).to_string()).collect();
                deliveries.push(Delivery { url, bodies });
            }
            // `transitions` always ends with the terminal status (in the future or not).
            if task.notified >= steps.len() {
                finished.push(id.clone());
            }
        }
        for id in finished {
            self.watched.remove(&id);
        }
        deliveries
    }
}

/// POSTs each body in order, each up to [`CALLBACK_ATTEMPTS`] times until a 2xx.
pub(crate) async fn deliver(state: Arc<SimState>, delivery: Delivery) {
    for body in delivery.bodies {
        for attempt in 1..=CALLBACK_ATTEMPTS {
            let sent = state
                .client()
                .post(&delivery.url)
                .timeout(CALLBACK_TIMEOUT)
                .header(http::header::CONTENT_TYPE, "application/json")
                .body(body.clone())
                .send()
                .await;
            match sent {
                Ok(response) if response.status().is_success() => {
                    state.count_callback();
                    break;
                }
                Ok(response) => {
                    tracing::debug!(status = response.status().as_u16(), attempt, "simulated callback refused")
                }
                Err(e) => tracing::debug!(error = %e, attempt, "simulated callback failed"),
            }
            tokio::time::sleep(Duration::from_millis(100 * u64::from(attempt))).await;
        }
    }
}
