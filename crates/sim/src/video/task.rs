//! One simulated video task: its plan (fixed at creation), its status at any simulated time,
//! and its JSON form.

use serde_json::{Value, json};

/// Frames per second of every simulated video.
pub const FPS: u64 = 24;
/// Seconds the simulator picks for `duration: -1`.
pub const AUTO_DURATION_SECONDS: u64 = 10;
/// Default `execution_expires_after`, seconds.
pub const DEFAULT_EXPIRES_AFTER_S: u64 = 172_800;

/// (resolution, ratio, width, height): the frame size of every fixed ratio. `adaptive` is
/// rendered as 16:9.
pub const SIZES: [(&str, &str, u64, u64); 24] = [
    ("480p", "16:9", 854, 480),
    ("480p", "4:3", 752, 560),
    ("480p", "1:1", 640, 640),
    ("480p", "3:4", 560, 752),
    ("480p", "9:16", 480, 854),
    ("480p", "21:9", 992, 432),
    ("720p", "16:9", 1280, 720),
    ("720p", "4:3", 1112, 834),
    ("720p", "1:1", 960, 960),
    ("720p", "3:4", 834, 1112),
    ("720p", "9:16", 720, 1280),
    ("720p", "21:9", 1470, 630),
    ("1080p", "16:9", 1920, 1080),
    ("1080p", "4:3", 1664, 1248),
    ("1080p", "1:1", 1440, 1440),
    ("1080p", "3:4", 1248, 1664),
    ("1080p", "9:16", 1080, 1920),
    ("1080p", "21:9", 2206, 946),
    ("4k", "16:9", 3840, 2160),
    ("4k", "4:3", 3328, 2496),
    ("4k", "1:1", 2880, 2880),
    ("4k", "3:4", 2496, 3328),
    ("4k", "9:16", 2160, 3840),
    ("4k", "21:9", 4412, 1892),
];

/// The frame size for `resolution` and `ratio` (`adaptive` → 16:9), if both are known.
pub fn dimensions(resolution: &str, ratio: &str) -> Option<(u64, u64)> {
    let ratio = if ratio == "adaptive" { "16:9" } else { ratio };
    SIZES.iter().find(|(res, rat, ..)| *res == resolution && *rat == ratio).map(|&(_, _, w, h)| (w, h))
}

/// `usage.completion_tokens` (= `total_tokens`): `W × H × (24 × seconds + 1) / 1024`, floored.
pub fn tokens(width: u64, height: u64, seconds: u64) -> u64 {
    width.saturating_mul(height).saturating_mul(FPS.saturating_mul(seconds).saturating_add(1)) / 1024
}

/// How a task ends if it is neither cancelled nor past its deadline first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    Succeed,
    Fail,
    Expire,
}

/// A task status as the platform names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Status {
    Queued,
    Running,
    Succeeded,
    Failed,
    Cancelled,
    Expired,
}

impl Status {
    pub(crate) const fn as_str(self) -> &'static str {
        match self {
            Status::Queued => "queued",
            Status::Running => "running",
            Status::Succeeded => "succeeded",
            Status::Failed => "failed",
            Status::Cancelled => "cancelled",
            Status::Expired => "expired",
        }
    }
}

/// A simulated task.
#[derive(Debug, Clone)]
pub(crate) struct VideoTask {
    pub(crate) id: String,
    pub(crate) model: String,
    /// `http://<host>` for the output links.
    pub(crate) origin: String,
    pub(crate) created_ms: u64,
    pub(crate) queue_ms: u64,
    pub(crate) run_ms: u64,
    pub(crate) outcome: Outcome,
    pub(crate) resolution: String,
    /// The ratio reported (`adaptive` reported as `16:9`).
    pub(crate) ratio: String,
    pub(crate) seconds: u64,
    pub(crate) width: u64,
    pub(crate) height: u64,
    pub(crate) generate_audio: bool,
    pub(crate) return_last_frame: bool,
    pub(crate) expires_after_s: u64,
    /// Where status changes are POSTed (`[sim:video=callback]` only).
    pub(crate) callback_url: Option<String>,
    pub(crate) poll_errors_left: u64,
    pub(crate) cancelled_at_ms: Option<u64>,
    /// How many of [`VideoTask::transitions`] have been sent to the callback.
    pub(crate) notified: usize,
}

impl VideoTask {
    /// Every status the task takes, with the simulated ms it starts at, in order.
    pub(crate) fn transitions(&self) -> Vec<(Status, u64)> {
        let start = self.created_ms;
        let running = start.saturating_add(self.queue_ms);
        let end = running.saturating_add(self.run_ms);
        let deadline = start.saturating_add(self.expires_after_s.saturating_mul(1000));
        let mut steps = vec![(Status::Queued, start)];
        if let Some(at) = self.cancelled_at_ms.filter(|&at| at < running.min(deadline)) {
            steps.push((Status::Cancelled, at));
            return steps;
        }
        if deadline <= running {
            steps.push((Status::Expired, deadline));
            return steps;
        }
        steps.push((Status::Running, running));
        let terminal = match self.outcome {
            _ if deadline < end => (Status::Expired, deadline),
            Outcome::Succeed => (Status::Succeeded, end),
            Outcome::Fail => (Status::Failed, end),
            Outcome::Expire => (Status::Expired, end),
        };
        steps.push(terminal);
        steps
    }

    /// The status at simulated ms `now` and when it began.
    pub(crate) fn status_at(&self, now: u64) -> (Status, u64) {
        let steps = self.transitions();
        steps.iter().rev().find(|(_, at)| *at <= now).copied().unwrap_or((Status::Queued, self.created_ms))
    }

    /// The task object (upstream-wire §2 GET) as it stood at `status`, which began at `since`;
    /// `unix` turns simulated ms into Unix seconds.
    pub(crate) fn render(&self, status: Status, since: u64, unix: impl Fn(u64) -> u64) -> Value {
        let mut task = json!({
            "id": self.id,
            "model": self.model,
            "status": status.as_str(),
            "error": null,
            "seed": seed(&self.id),
            "resolution": self.resolution,
            "ratio": self.ratio,
            "duration": self.seconds,
            "framespersecond": FPS,
            "generate_audio": self.generate_audio,
            "service_tier": "default",
            "execution_expires_after": self.expires_after_s,
            "created_at": unix(self.created_ms),
            "updated_at": unix(since),
        });
        match status {
            Status::Succeeded => {
                let mut content = json!({"video_url": format!("{}/files/videos/{}.mp4", self.origin, self.id)});
                if self.return_last_frame {
                    content["last_frame_url"] = json!(format!("{}/files/videos/{}.png", self.origin, self.id));
                }
                task["content"] = content;
                let n = tokens(self.width, self.height, self.seconds);
                task["usage"] = json!({"completion_tokens": n, "total_tokens": n});
            }
            Status::Failed => {
                task["error"] = json!({
                    "code": "OutputVideoSensitiveContentDetected",
                    "message": "The generated video may contain sensitive content (simulated failure).",
                });
            }
            _ => {}
        }
        task
    }
}

/// A deterministic seed from the id.
fn seed(id: &str) -> u64 {
    id.bytes().fold(7u64, |acc, b| acc.wrapping_mul(31).wrapping_add(u64::from(b))) % 4_294_967_296
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task() -> VideoTask {
        VideoTask {
            id: "cgt-1".into(),
            model: "m".into(),
            origin: "http://127.0.0.1:1".into(),
            created_ms: 1000,
            queue_ms: 1000,
            run_ms: 2000,
            outcome: Outcome::Succeed,
            resolution: "720p".into(),
            ratio: "16:9".into(),
            seconds: 5,
            width: 1280,
            height: 720,
            generate_audio: true,
            return_last_frame: true,
            expires_after_s: 3600,
            callback_url: None,
            poll_errors_left: 0,
            cancelled_at_ms: None,
            notified: 0,
        }
    }

    #[test]
    fn token_formula_and_sizes() {
        assert_eq!(tokens(1280, 720, 5), 108_900);
        assert_eq!(dimensions("720p", "adaptive"), Some((1280, 720)));
        assert_eq!(dimensions("480p", "16:9"), Some((854, 480)));
        assert_eq!(dimensions("4k", "9:16"), Some((2160, 3840)));
        assert_eq!(dimensions("2k", "16:9"), None);
        assert_eq!(dimensions("720p", "2:1"), None);
        assert_eq!(tokens(3840, 2160, 15), 3840 * 2160 * 361 / 1024);
    }

    #[test]
    fn statuses_follow_the_clock() {
        let t = task();
        assert_eq!(t.status_at(1000), (Status::Queued, 1000));
        assert_eq!(t.status_at(1999).0, Status::Queued);
        assert_eq!(t.status_at(2000), (Status::Running, 2000));
        assert_eq!(t.status_at(3999).0, Status::Running);
        assert_eq!(t.status_at(4000), (Status::Succeeded, 4000));
        let failing = VideoTask { outcome: Outcome::Fail, ..task() };
        assert_eq!(failing.status_at(4000).0, Status::Failed);
        let expiring = VideoTask { outcome: Outcome::Expire, ..task() };
        assert_eq!(expiring.status_at(4000).0, Status::Expired);
        let cancelled = VideoTask { cancelled_at_ms: Some(1500), ..task() };
        assert_eq!(cancelled.transitions(), vec![(Status::Queued, 1000), (Status::Cancelled, 1500)]);
        let slow = VideoTask { queue_ms: 10_000_000, ..task() };
        assert_eq!(slow.status_at(3_600_999).0, Status::Queued);
        assert_eq!(slow.status_at(1000 + 3_600_000), (Status::Expired, 3_601_000));
        let long_run = VideoTask { run_ms: 10_000_000, ..task() };
        assert_eq!(long_run.transitions().last(), Some(&(Status::Expired, 3_601_000)));
    }

    #[test]
    fn rendering() {
        let t = task();
        let done = t.render(Status::Succeeded, 4000, |ms| ms / 1000);
        assert_eq!(done["usage"], json!({"completion_tokens": 108_900, "total_tokens": 108_900}));
        assert_eq!(done["content"]["video_url"], "http://127.0.0.1:1/files/videos/cgt-1.mp4");
        assert_eq!(done["content"]["last_frame_url"], "http://127.0.0.1:1/files/videos/cgt-1.png");
        assert_eq!((done["created_at"].as_u64(), done["updated_at"].as_u64()), (Some(1), Some(4)));
        let running = t.render(Status::Running, 2000, |ms| ms / 1000);
        assert!(running.get("usage").is_none() && running.get("content").is_none() && running["error"].is_null());
        let failed = t.render(Status::Failed, 4000, |ms| ms);
        assert_eq!(failed["error"]["code"], "OutputVideoSensitiveContentDetected");
        let no_frame = VideoTask { return_last_frame: false, ..task() }.render(Status::Succeeded, 4000, |ms| ms);
        assert!(no_frame["content"].get("last_frame_url").is_none());
    }
}
