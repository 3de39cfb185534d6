//! The platform's request bodies and answers that carry meaning for the gateway, as typed serde
//! structs: the image generation body and answer ([`images`]), the speech answer ([`speech`]), the
//! video task's create body, create answer and task object ([`video`]), and the reason an error
//! body gives ([`errors`]). The ports take and give the domain's types
//! ([`domain::ports::ImageGeneration`], [`domain::ports::VideoTaskRequest`],
//! [`domain::ports::VideoTaskState`]); only this module knows the platform's field names for them.

pub mod errors;
pub mod images;
pub mod speech;
pub mod video;
