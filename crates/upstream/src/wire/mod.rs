//! The platform's request bodies and answers that carry meaning for the gateway, as typed serde
//! structs: the image generation body ([`images`]) and the video task's create body, create answer
//! and task object ([`video`]). The ports take and give the domain's types
//! ([`domain::ports::ImageGeneration`], [`domain::ports::VideoTaskRequest`],
//! [`domain::ports::VideoTaskState`]); only this module knows the platform's field names for them.

pub mod images;
pub mod video;
