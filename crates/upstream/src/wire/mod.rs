//! The platform's request bodies and answers that carry meaning for the gateway, as typed serde
//! structs: the video task's create body, create answer and task object ([`video`]). The ports
//! take and give the domain's types ([`domain::ports::VideoTaskRequest`],
//! [`domain::ports::VideoTaskState`]); only this module knows the platform's field names for them.

pub mod video;
