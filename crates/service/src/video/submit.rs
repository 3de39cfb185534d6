//! Submitting a `submitting` task: import its media links into the media store (SSRF rules, size
//! bounds, quota), register every stored file as an asset in the owner's asset group (the upstream
//! fetches it through a signed, expiring link), wait until the assets are active, and create the
//! upstream task naming the assets. Each step is recorded, so a retry (or another replica
//! after a crash) resumes where the last attempt stopped.

use catalog::ModelDef;
use domain::ports::{AssetKind, AssetStatus, UpstreamError, VideoTaskRequest};
use domain::{EgressError, MediaObject, Task, VideoJob};

use super::create::record_media;
use super::media::{SizeLimits, TypedError, TypedSink, media_key};
use crate::{Gateway, ServiceError};

/// How an attempt to submit ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Submission {
    /// The upstream accepted the task under `id`, on the endpoint `via` names.
    Accepted {
        /// The upstream's id.
        id: String,
        /// The endpoint that created it and the attempts made.
        via: Option<domain::ports::Via>,
    },
    /// Assets are still being processed: check again soon.
    Waiting,
    /// It cannot succeed (a refused link, a rejected asset or request): end the task.
    Failed {
        /// Error code for the task.
        code: &'static str,
        /// Error text.
        message: String,
    },
    /// A transient failure: try again after a back-off.
    Retry(String),
}

fn failed(code: &'static str, message: impl Into<String>) -> Submission {
    Submission::Failed { code, message: message.into() }
}

impl Gateway {
    /// One attempt to submit `job` (a `submitting` task of model `def`).
    pub(crate) async fn submit_video(&self, def: &ModelDef, job: &VideoJob) -> Result<Submission, ServiceError> {
        let task = &job.task;
        if let Some(outcome) = self.import_links(def, task).await? {
            return Ok(outcome);
        }
        let objects = self.ports.videos.task_media(&task.id).await?;
        let mut assets = Vec::with_capacity(objects.len());
        for object in &objects {
            match self.asset_of(task, object).await? {
                Ok(id) => assets.push((object.kind, id)),
                Err(outcome) => return Ok(outcome),
            }
        }
        let request = task_request(def, task, assets, self.video_settings.deadline.as_secs());
        let video = self.video()?;
        let started = std::time::Instant::now();
        let attempted = video.upstream.create_task(&request).await;
        let created = attempted.result;
        self.metrics.upstream(&def.name, started.elapsed(), created.as_ref().err());
        Ok(match created {
            Ok(id) => Submission::Accepted { id, via: attempted.via },
            Err(e) if e.is_callers_fault() => {
                failed("upstream_request_failed", format!("the upstream refused the task: {e}"))
            }
            // Not the caller's fault, but asking again cannot help either: a refused key (401,
            // 403), an unknown model (404), a timeout the upstream reported (408), an answer
            // refusing the task or one that cannot be read.
            Err(
                e @ (UpstreamError::Status { status: 401 | 403 | 404 | 408, .. }
                | UpstreamError::Rejected { .. }
                | UpstreamError::Malformed(_)),
            ) => failed("upstream_request_failed", format!("the upstream refused the task: {e}")),
            Err(e) => Submission::Retry(e.to_string()),
        })
    }

    /// Imports the links not imported yet; `Some` when the submission cannot go on now.
    async fn import_links(&self, def: &ModelDef, task: &Task) -> Result<Option<Submission>, ServiceError> {
        let video = self.video()?;
        let stored = self.ports.videos.task_media(&task.id).await?;
        let limits =
            SizeLimits::of(def).ok_or_else(|| ServiceError::Internal(format!("{} is not a video model", def.name)))?;
        for (position, item) in (0u32..).zip(&task.media) {
            let Some(url) = item.url() else { continue };
            if stored.iter().any(|o| o.position == position) {
                continue;
            }
            let key = media_key(&task.user_id, &task.id, position);
            let sink = video.media.create(&key).await.map_err(|e| ServiceError::MediaUnavailable(e.to_string()))?;
            let mut sink = TypedSink::new(sink, limits);
            let fetched = video.outbound.fetch_to(url, limits.largest(), &mut sink).await;
            if let Err(e) = fetched {
                let refused = sink.refused();
                sink.abort().await;
                return Ok(Some(import_failure(position, e, refused)));
            }
            let (kind, mime, bytes) = match sink.finish().await {
                Ok(done) => done,
                Err(e) => return Ok(Some(import_failure(position, EgressError::Network(e.to_string()), Some(e)))),
            };
            if kind != item.kind {
                let _ = video.media.delete(&key).await;
                let message = format!("media[{position}] is {} content, not {}", kind.as_str(), item.kind.as_str());
                return Ok(Some(failed("media_import_failed", message)));
            }
            let object = MediaObject {
                key,
                user: task.user_id.clone(),
                task: task.id.clone(),
                position,
                kind,
                mime: mime.to_owned(),
                bytes,
                source_url: Some(url.to_owned()),
                asset_id: None,
                created_at: self.ports.clock.now(),
            };
            match record_media(self, object).await {
                Ok(()) => {}
                Err(ServiceError::MediaQuotaExceeded(m)) => return Ok(Some(failed("media_quota_exceeded", m))),
                Err(e) => return Err(e),
            }
        }
        Ok(None)
    }

    /// The active asset of `object` (registering it first if needed), or how the submission ends now.
    async fn asset_of(&self, task: &Task, object: &MediaObject) -> Result<Result<String, Submission>, ServiceError> {
        let video = self.video()?;
        let id = match &object.asset_id {
            Some(id) => id.clone(),
            None => {
                let group = match video.assets.asset_group(&format!("gw-{}", task.user_id)).await {
                    Ok(group) => group,
                    Err(e) => return Ok(Err(asset_failure(e))),
                };
                let ttl = self.video_settings.link_ttl;
                let presigned = match self.video_settings.presigned_links {
                    true => video
                        .media
                        .presigned_get(&object.key, ttl)
                        .await
                        .map_err(|e| ServiceError::MediaUnavailable(e.to_string()))?,
                    false => None,
                };
                let link = match presigned {
                    Some(link) => link,
                    None => {
                        let now = u64::try_from(self.ports.clock.now().millis() / 1000).unwrap_or(0);
                        video.links.link(&object.key, now + ttl.as_secs())
                    }
                };
                match video.assets.create_asset(&group, &link, object.kind).await {
                    Ok(id) => {
                        self.ports.videos.set_media_asset(&object.key, &id).await?;
                        id
                    }
                    Err(e) => return Ok(Err(asset_failure(e))),
                }
            }
        };
        Ok(match video.assets.asset_status(&id).await {
            Ok(AssetStatus::Active) => Ok(id),
            Ok(AssetStatus::Failed(why)) => {
                Err(failed("asset_failed", format!("the upstream refused a media file: {why}")))
            }
            Ok(AssetStatus::Processing) => {
                let age = self.ports.clock.now().millis().saturating_sub(task.created_at.millis());
                if age > domain::duration_millis(self.video_settings.asset_wait) {
                    Err(failed("asset_failed", "the upstream did not accept the media in time"))
                } else {
                    Err(Submission::Waiting)
                }
            }
            Err(e) => Err(asset_failure(e)),
        })
    }
}

fn asset_failure(e: UpstreamError) -> Submission {
    match e {
        UpstreamError::Rejected { .. } | UpstreamError::NotConfigured(_) => {
            failed("asset_failed", format!("registering the media failed: {e}"))
        }
        other => Submission::Retry(other.to_string()),
    }
}

fn import_failure(position: u32, e: EgressError, typed: Option<TypedError>) -> Submission {
    if let Some(typed) = typed {
        return match typed {
            TypedError::Sink(inner) => Submission::Retry(format!("storing media[{position}]: {inner}")),
            other => failed("media_import_failed", format!("media[{position}]: {other}")),
        };
    }
    match e {
        EgressError::Timeout | EgressError::TooSlow { .. } | EgressError::Network(_) | EgressError::Sink(_) => {
            Submission::Retry(format!("importing media[{position}]: {e}"))
        }
        other => failed("media_import_failed", format!("media[{position}] could not be imported: {other}")),
    }
}

/// The task to create upstream: the prompt, the media as assets in order, the options, and the
/// gateway's deadline (the adapter writes the platform's body).
fn task_request(def: &ModelDef, task: &Task, assets: Vec<(AssetKind, String)>, deadline_secs: u64) -> VideoTaskRequest {
    VideoTaskRequest {
        model: def.upstream.model_id.clone(),
        prompt: task.prompt.clone(),
        references: assets,
        resolution: task.resolution,
        ratio: task.ratio,
        duration: task.duration,
        generate_audio: task.generate_audio,
        deadline_secs,
    }
}
