//! What a poll of an upstream task comes to: the adapter reads the task's state (the platform's task
//! object is the `upstream` crate's business); an upstream that no longer knows the task (404)
//! means the task failed; any other failure leaves the outcome unknown.

use domain::ports::{UpstreamError, VideoTaskState};

/// The state a poll of upstream task `upstream_id` found, or the failure that left it unknown.
pub(crate) fn polled(
    answer: Result<VideoTaskState, UpstreamError>,
    upstream_id: &str,
) -> Result<VideoTaskState, UpstreamError> {
    match answer {
        Err(UpstreamError::Status { status: 404, .. }) => Ok(VideoTaskState::Failed {
            code: "upstream_task_missing".into(),
            message: format!("the upstream no longer knows task {upstream_id}"),
        }),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_task_failed_and_other_failures_stay_unknown() {
        let missing =
            polled(Err(UpstreamError::Status { status: 404, body: String::new(), reason: String::new() }), "task-1");
        assert!(matches!(missing, Ok(VideoTaskState::Failed { ref code, .. }) if code == "upstream_task_missing"));
        assert_eq!(polled(Ok(VideoTaskState::Running), "task-1"), Ok(VideoTaskState::Running));
        assert_eq!(polled(Err(UpstreamError::Timeout), "task-1"), Err(UpstreamError::Timeout));
        let refused = UpstreamError::Status { status: 500, body: String::new(), reason: String::new() };
        assert_eq!(polled(Err(refused.clone()), "task-1"), Err(refused));
    }
}
