//! The platform's content-generation tasks (upstream-wire §2): [`HttpUpstream`] implements
//! [`TaskUpstream`].
//!
//! | port call | request | 2xx answer returned |
//! | --- | --- | --- |
//! | `create_task(request)` | `POST <platform_base>/contents/generations/tasks`, `Content-Type: application/json`, the body [`crate::wire::video::create_body`] writes | the task's id (read from `{"id":…}`) |
//! | `get_task(id)` | `GET <platform_base>/contents/generations/tasks/<id>` | the task's state ([`crate::wire::video::parse_task`]) |
//! | `cancel_task(id)` | `DELETE <platform_base>/contents/generations/tasks/<id>` | nothing (the body is read and dropped) |
//!
//! [`HttpUpstream::create_task_body`] and [`HttpUpstream::get_task_body`] send and return raw bodies
//! (the simulator's tests send bodies the gateway never writes).
//!
//! Every call carries `Authorization: Bearer <platform_key>` and is bounded by the config's
//! `timeout` as a whole. Errors map as for the synchronous endpoints (see [`crate::http`]):
//! an empty platform base → `NotConfigured("video_tasks")`; connection trouble → `Connect`; no
//! answer in time → `Timeout`; non-2xx → `Status` with the body truncated to
//! [`crate::transport::MAX_ERROR_BODY`] (a platform error such as 404 for an unknown id or 409 for a
//! task that can no longer be cancelled); a 2xx create/get answer that is not a JSON object, is
//! larger than [`MAX_TASK_ANSWER_BYTES`] or lacks what the port returns (an id, a known status,
//! a succeeded task's usage) → `Malformed`. An id that is empty, longer than
//! [`MAX_TASK_ID_LEN`] or has characters other than ASCII letters, digits, `-`, `_` and `.` is
//! refused as `Malformed` without sending anything.

use async_trait::async_trait;
use domain::ports::{Attempted, TaskUpstream, UpstreamError, VideoTaskRequest, VideoTaskState};
use http::header::{ACCEPT, CONTENT_TYPE};
use http::{HeaderValue, Method};

use crate::adapter::{Failed, HttpUpstream, MAX_TASK_ANSWER_BYTES, Route};
use crate::transport::{MAX_ERROR_BODY, read_limited, read_prefix};
use crate::wire::video::{create_body, parse_created, parse_task};

/// Longest accepted upstream task id.
pub const MAX_TASK_ID_LEN: usize = 128;

impl HttpUpstream {
    fn tasks_route(&self) -> Result<&Route, UpstreamError> {
        self.tasks.as_ref().ok_or_else(|| UpstreamError::NotConfigured("video_tasks".to_owned()))
    }

    /// Sends one task request; the 2xx answer's body, at most [`MAX_TASK_ANSWER_BYTES`].
    async fn task_call(&self, method: Method, id: Option<&str>, body: Option<Vec<u8>>) -> Result<Vec<u8>, Failed> {
        let route = self.tasks_route()?;
        let mut url = route.url.clone();
        if let Some(id) = id {
            let valid = !id.is_empty()
                && id.len() <= MAX_TASK_ID_LEN
                && id.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
            if !valid {
                return Err(UpstreamError::Malformed(format!("invalid upstream task id {id:?}")).into());
            }
            url.set_path(&format!("{}/{id}", url.path()));
        }
        let mut request = self
            .client
            .request(method, &url)
            .headers(&route.headers)
            .header(&ACCEPT, &HeaderValue::from_static("application/json"));
        if let Some(body) = body {
            request = request.header(&CONTENT_TYPE, &HeaderValue::from_static("application/json")).body(body);
        }
        let exchange = async {
            let response = request.send().await.map_err(|e| Failed::request(&e))?;
            let status = response.status();
            if !status.is_success() {
                let body = read_prefix(response, MAX_ERROR_BODY).await;
                tracing::debug!(status = status.as_u16(), "video task call answered with an error status");
                return Err(crate::wire::errors::status(status.as_u16(), body).into());
            }
            Ok(read_limited(response, MAX_TASK_ANSWER_BYTES).await?)
        };
        match tokio::time::timeout(self.timeout, exchange).await {
            Ok(result) => result,
            Err(_) => Err(UpstreamError::Timeout.into()),
        }
    }

    /// Creates a task: the answer, or the failure with whether the request never left (the
    /// only failure a router may retry elsewhere without risking a second task).
    pub(crate) async fn try_create_task(&self, body: Vec<u8>) -> Result<Vec<u8>, Failed> {
        Ok(json_object(self.task_call(Method::POST, None, Some(body)).await?)?)
    }

    /// Sends `body` as a create request as it is; the 2xx answer (a JSON object).
    pub async fn create_task_body(&self, body: Vec<u8>) -> Result<Vec<u8>, UpstreamError> {
        self.try_create_task(body).await.map_err(|f| f.error)
    }

    /// The task object of `upstream_id` as it came (a JSON object).
    pub async fn get_task_body(&self, upstream_id: &str) -> Result<Vec<u8>, UpstreamError> {
        json_object(self.task_call(Method::GET, Some(upstream_id), None).await.map_err(|f| f.error)?)
    }
}

/// `answer` if it is a JSON object.
fn json_object(answer: Vec<u8>) -> Result<Vec<u8>, UpstreamError> {
    match serde_json::from_slice::<serde_json::Value>(&answer) {
        Ok(serde_json::Value::Object(_)) => Ok(answer),
        Ok(_) => Err(UpstreamError::Malformed("answer is JSON but not an object".to_owned())),
        Err(e) => Err(UpstreamError::Malformed(format!("answer is not JSON: {e}"))),
    }
}

#[async_trait]
impl TaskUpstream for HttpUpstream {
    async fn create_task(&self, request: &VideoTaskRequest) -> Attempted<String> {
        let created = match create_body(request) {
            Ok(body) => self.create_task_body(body).await,
            Err(e) => Err(e),
        };
        Attempted::direct(created.and_then(|answer| parse_created(&answer)))
    }

    async fn get_task(&self, _at: Option<&str>, upstream_id: &str) -> Result<VideoTaskState, UpstreamError> {
        parse_task(&self.get_task_body(upstream_id).await?)
    }

    async fn cancel_task(&self, _at: Option<&str>, upstream_id: &str) -> Result<(), UpstreamError> {
        self.task_call(Method::DELETE, Some(upstream_id), None).await.map(drop).map_err(|f| f.error)
    }
}
