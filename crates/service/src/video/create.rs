//! `POST /api/v1/tasks`: uploads stored as they arrive, then the task created at once in `submitting`
//! with its estimate held; the worker does the rest.
//!
//! Media order (what the prompt's "Image 1", "Video 1"… refer to): the request's links in their order,
//! then the uploaded files in upload order. Stored objects carry that order as their position: the
//! request's links take positions `0..15`, uploaded files `15..`.

use domain::ports::AssetKind;
use domain::{MediaObject, MediaRecordError, MediaSource, ModelKind, Task, TaskId, TaskMedia, UserId};
use validation::VideoPlan;

use super::media::{SizeLimits, TypedError, TypedSink, media_key};
use crate::call::{CallSpec, TaskDetails};
use crate::{Gateway, Principal, ServiceError};

/// The first position of uploaded files (after the request's at most 15 links).
pub(crate) const UPLOAD_POSITION_BASE: u32 = validation::VIDEO_MAX_MEDIA as u32;

/// An uploaded file, stored and counted against its user's media quota.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredUpload {
    /// The media store key.
    pub key: String,
    /// What it is (sniffed).
    pub kind: AssetKind,
    /// Its MIME type (sniffed).
    pub mime: &'static str,
    /// Its size.
    pub bytes: u64,
}

/// A file being uploaded for a new task: stored chunk by chunk, typed by its first bytes, bounded by
/// its kind's size limit. Finish it (recording it against the quota) or abort it.
pub struct Upload {
    gateway: Gateway,
    sink: TypedSink,
    /// What is left of the user's media quota: the write that passes it is refused at once.
    room: u64,
    /// Bytes written so far.
    written: u64,
    key: String,
    user: UserId,
    task: TaskId,
    position: u32,
}

impl std::fmt::Debug for Upload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Upload").field("key", &self.key).finish_non_exhaustive()
    }
}

fn typed_error(e: TypedError) -> ServiceError {
    match e {
        TypedError::Unknown => {
            ServiceError::InvalidRequest("an uploaded media file is not a recognised image, video or audio file".into())
        }
        TypedError::TooLarge { .. } => ServiceError::TooLarge(format!("an uploaded media file is too large: {e}")),
        TypedError::Sink(inner) => ServiceError::MediaUnavailable(format!("storing an upload: {inner}")),
    }
}

impl Upload {
    /// Adds the next bytes of the file.
    ///
    /// The user's media quota is checked as the bytes arrive (the first byte over it is refused with
    /// 413 `media_quota_exceeded`); the count that holds is the one recorded when the file finishes.
    pub async fn write(&mut self, chunk: &[u8]) -> Result<(), ServiceError> {
        self.written = self.written.saturating_add(chunk.len() as u64);
        if self.written > self.room {
            return Err(ServiceError::MediaQuotaExceeded(format!(
                "media quota exceeded: this upload passes the {} bytes left of the account's media quota",
                self.room
            )));
        }
        self.sink.push(chunk).await.map_err(typed_error)
    }

    /// Finishes the file and records it against its user's media quota (413 `media_quota_exceeded`
    /// when it does not fit; the file is deleted then).
    pub async fn finish(self) -> Result<StoredUpload, ServiceError> {
        let (kind, mime, bytes) = self.sink.finish().await.map_err(typed_error)?;
        let object = MediaObject {
            key: self.key.clone(),
            user: self.user,
            task: self.task,
            position: self.position,
            kind,
            mime: mime.to_owned(),
            bytes,
            source_url: None,
            asset_id: None,
            created_at: self.gateway.ports.clock.now(),
        };
        record_media(&self.gateway, object).await?;
        Ok(StoredUpload { key: self.key, kind, mime, bytes })
    }

    /// Drops the file.
    pub async fn abort(self) {
        self.sink.abort().await;
    }
}

/// Records a stored object against its user's quota; a refused one is deleted from the media store.
pub(crate) async fn record_media(gateway: &Gateway, object: MediaObject) -> Result<(), ServiceError> {
    let key = object.key.clone();
    match gateway.ports.videos.add_media(object).await {
        Ok(()) => Ok(()),
        Err(e) => {
            if let Ok(video) = gateway.video()
                && let Err(delete) = video.media.delete(&key).await
            {
                tracing::warn!(key, error = %delete, "deleting refused media failed");
            }
            Err(match e {
                MediaRecordError::QuotaExceeded { .. } => ServiceError::MediaQuotaExceeded(e.to_string()),
                MediaRecordError::Store(s) => s.into(),
            })
        }
    }
}

impl Gateway {
    /// A fresh id for a video task about to be created (its uploads are stored under it).
    pub fn new_video_task_id(&self) -> TaskId {
        self.new_task_id()
    }

    /// Starts storing the `index`-th uploaded file (0-based) of the new task `task` for `who`. Before
    /// the request is read the file is bounded by the widest per-kind limit of the video models; the
    /// chosen model's limits are checked when the task is created.
    pub async fn begin_upload(&self, who: &Principal, task: &TaskId, index: u32) -> Result<Upload, ServiceError> {
        let video = self.video()?;
        let snapshot = self.catalog_snapshot().await?;
        let limits = SizeLimits::widest(snapshot.models.iter().map(|m| &*m.def));
        let position = UPLOAD_POSITION_BASE.saturating_add(index);
        let key = media_key(&who.user_id, task, position);
        let user = self
            .ports
            .accounts
            .user(&who.user_id)
            .await?
            .ok_or_else(|| ServiceError::NotFound(format!("user {}", who.user_id)))?;
        let room = u64::try_from(user.media_quota_bytes.saturating_sub(user.media_used_bytes)).unwrap_or(0);
        if room == 0 {
            return Err(ServiceError::MediaQuotaExceeded(
                "media quota exceeded: the account's media quota is used up".into(),
            ));
        }
        let sink = video.media.create(&key).await.map_err(|e| ServiceError::MediaUnavailable(e.to_string()))?;
        Ok(Upload {
            gateway: self.clone(),
            sink: TypedSink::new(sink, limits),
            room,
            written: 0,
            key,
            user: who.user_id.clone(),
            task: task.clone(),
            position,
        })
    }

    /// The most a multipart task request's files may take together: over the video models, the most
    /// files of each kind times that kind's size limit (the request field comes on top).
    pub async fn upload_body_limit(&self) -> Result<u64, ServiceError> {
        let snapshot = self.catalog_snapshot().await?;
        let widest = snapshot
            .models
            .iter()
            .filter_map(|m| m.def.video_limits())
            .map(|l| {
                let (m, u) = (&l.media, &l.upload_max_bytes);
                let sum = m
                    .max_images
                    .saturating_mul(u.image)
                    .saturating_add(m.max_videos.saturating_mul(u.video))
                    .saturating_add(m.max_audios.saturating_mul(u.audio));
                sum.min(m.max_items.saturating_mul(u.image.max(u.video).max(u.audio)))
            })
            .max()
            .unwrap_or(0);
        Ok(widest)
    }

    /// Forgets uploads of a request that did not create its task: the files go, the quota comes back.
    pub async fn discard_uploads(&self, uploads: &[StoredUpload]) {
        let Ok(video) = self.video() else { return };
        for upload in uploads {
            if let Err(e) = self.ports.videos.remove_media(&upload.key).await {
                tracing::error!(key = upload.key, error = %e, "releasing the quota of a discarded upload failed");
            }
            if let Err(e) = video.media.delete(&upload.key).await {
                tracing::warn!(key = upload.key, error = %e, "deleting a discarded upload failed");
            }
        }
    }

    /// Creates video task `task_id` for `who` from a CreateTaskRequest `body` and the files already
    /// uploaded for it; answers with the task (`submitting`, its estimate held).
    pub async fn create_video_task(
        &self,
        who: &Principal,
        task_id: TaskId,
        body: &[u8],
        uploads: &[StoredUpload],
    ) -> Result<Task, ServiceError> {
        let video = self.video()?;
        let request = validation::parse_video_request(body)?;
        let (def, pricing) = self.priced_model(who, ModelKind::Video, &request.model).await?;
        let kinds: Vec<AssetKind> = uploads.iter().map(|u| u.kind).collect();
        let plan = validation::check_video_request(&def, request, &kinds)?;
        check_upload_sizes(&def, uploads)?;
        self.check_links(video, &plan).await?;
        let estimate = billing::video_reservation(
            &pricing.sheet,
            plan.resolution,
            plan.ratio(),
            plan.duration(),
            plan.has_video_input,
        )
        .map_err(|e| ServiceError::Internal(format!("pricing {}: {e}", def.name)))?;
        let details = TaskDetails {
            prompt: plan.request.prompt.clone(),
            input_mode: Some(plan.input_mode),
            media_type: plan.media_type,
            media: task_media(&plan, uploads),
            duration: Some(plan.duration()),
            resolution: Some(plan.resolution),
            ratio: Some(plan.ratio()),
            generate_audio: plan.request.generate_audio,
            webhook_url: plan.request.webhook_url.clone(),
            requested: None,
        };
        // The slots are taken last, right before the task is stored, and given back on every path.
        let holder = self.take_video_slots(who, &task_id, &def.name).await?;
        let rate = crate::rates::RateClaim::request(who);
        let spec = CallSpec {
            user: who.user_id.clone(),
            key: who.key_id.clone(),
            budget_keys: who.budget_keys.clone(),
            def,
            pricing,
            estimate,
            rate,
            details,
            max_cost: who.max_cost,
        };
        let opened = self.open_call_as(task_id, spec).await;
        // Stored (or not): the task row counts from now on, so the slots it held go back.
        if let Err(e) = self.ports.caps.release_leases(&holder).await {
            tracing::warn!(%holder, error = %e, "giving back a video task's slots failed; they expire on their own");
        }
        let id = opened?.keep();
        self.wake_video_worker();
        self.ports
            .tasks
            .task(&who.user_id, &id)
            .await?
            .ok_or_else(|| ServiceError::Internal(format!("task {id} vanished")))
    }

    /// Checks every media link and the webhook URL against the egress policy (resolving their hosts,
    /// sending nothing): a refused one is 400.
    async fn check_links(&self, video: &super::VideoPorts, plan: &VideoPlan) -> Result<(), ServiceError> {
        for (i, item) in plan.request.media.iter().flatten().enumerate() {
            video
                .outbound
                .check(&item.url)
                .await
                .map_err(|e| ServiceError::InvalidRequest(format!("media[{i}].url cannot be imported: {e}")))?;
        }
        if let Some(url) = &plan.request.webhook_url {
            video
                .outbound
                .check(url)
                .await
                .map_err(|e| ServiceError::InvalidRequest(format!("webhook_url cannot be used: {e}")))?;
        }
        Ok(())
    }

    /// Takes a slot of the user's and the model's caps for the task about to be created, under the
    /// caps' locks and against every replica's leases and the running video tasks (429 at once when
    /// one is full). Returns the holder name to give the slots back with once the task is stored.
    async fn take_video_slots(&self, who: &Principal, task: &TaskId, model: &str) -> Result<String, ServiceError> {
        let holder = format!("video:{task}");
        let scopes = [domain::CapScope::User(who.user_id.clone()), domain::CapScope::Model(model.to_owned())];
        let now = self.ports.clock.now();
        // Long enough for the task's commit; a crash in between leaves the row to expire.
        let until = domain::Timestamp(now.millis().saturating_add(60_000));
        match self.ports.caps.take_slots(&holder, &scopes, now, until).await? {
            None => Ok(holder),
            Some(domain::CapScope::User(_)) => {
                let user = self.ports.accounts.user(&who.user_id).await?.ok_or(ServiceError::InvalidApiKey)?;
                Err(ServiceError::ConcurrencyLimitExceeded {
                    message: format!("at most {} of your calls and tasks may run at once", user.concurrency_limit),
                    retry_after_secs: 5,
                })
            }
            Some(domain::CapScope::Model(_)) => {
                let snapshot = self.catalog_snapshot().await?;
                let cap =
                    snapshot.models.iter().find(|m| m.record.name == model).map_or(0, |m| m.record.concurrency_limit);
                Err(ServiceError::ConcurrencyLimitExceeded {
                    message: format!("model {model} runs at most {cap} tasks at once"),
                    retry_after_secs: 5,
                })
            }
        }
    }
}

/// The chosen model's per-file limits over the uploads (413).
fn check_upload_sizes(def: &catalog::ModelDef, uploads: &[StoredUpload]) -> Result<(), ServiceError> {
    let Some(limits) = SizeLimits::of(def) else { return Ok(()) };
    for (i, upload) in uploads.iter().enumerate() {
        let limit = limits.of_kind(upload.kind);
        if upload.bytes > limit {
            return Err(ServiceError::TooLarge(format!(
                "uploaded file {} ({}) is {} bytes; model {} takes at most {limit}",
                i + 1,
                upload.kind.as_str(),
                upload.bytes,
                def.name
            )));
        }
    }
    Ok(())
}

/// The task's media in order: the request's links as given, then the uploaded files (numbered from 1).
fn task_media(plan: &VideoPlan, uploads: &[StoredUpload]) -> Vec<TaskMedia> {
    let links = plan
        .request
        .media
        .iter()
        .flatten()
        .map(|m| TaskMedia { kind: m.kind, source: MediaSource::Link(m.url.clone()) });
    let files = (1u32..).zip(uploads).map(|(number, u)| TaskMedia {
        kind: u.kind,
        source: MediaSource::Upload { number, mime: u.mime.to_owned(), bytes: u.bytes },
    });
    links.chain(files).collect()
}
