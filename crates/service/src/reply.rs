//! What a billable call hands the edge: [`CallReply`], either the whole answer with its
//! [`CallBilling`], or a [`CallStream`] of typed [`StreamItem`]s that the edge writes in its
//! endpoint's wire format (a failure included, as [`StreamFailure`]).

use domain::{TaskBilling, TaskId};
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};

/// The billing object of a finished or running call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallBilling {
    /// The task the call is recorded as.
    pub task_id: TaskId,
    /// The public name of the call's model.
    pub model: String,
    /// Its billing.
    pub billing: TaskBilling,
}

/// What a billable call returns to the edge.
#[derive(Debug)]
pub enum CallReply {
    /// The answer (rewritten to the public model name) and the call's billing.
    Complete {
        /// The answer object.
        answer: crate::Answer,
        /// Task id and billing.
        call: CallBilling,
    },
    /// A stream of items; settlement happens when it ends, whatever the client does.
    Stream(CallStream),
}

/// One item of a streamed call, for the edge to write in its endpoint's wire format.
#[derive(Debug, Clone, PartialEq)]
pub enum StreamItem {
    /// An upstream event to forward (already rewritten to the public model name).
    Event {
        /// The SSE `event:` name, for named-event formats.
        name: Option<String>,
        /// The event's JSON data.
        data: Value,
    },
    /// An upstream event to forward as its JSON text, already rewritten to the public model name
    /// (chat chunks: data-only events, passed through without building a JSON tree).
    Data(Vec<u8>),
    /// The stream failed; nothing follows.
    Failed(StreamFailure),
    /// The proper end of the stream.
    Done,
}

/// Why a stream ended early, and what it cost.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamFailure {
    /// Human-readable text for the client.
    pub message: String,
    /// Whether retrying the call may succeed.
    pub retryable: bool,
    /// Whether the output delivered before the failure was charged (else the hold was refunded).
    pub charged: bool,
}

/// A streamed call as the edge sees it.
#[derive(Debug)]
pub struct CallStream {
    /// The task id, for the `X-Svc-Task-Id` header.
    pub task_id: domain::TaskId,
    /// Items in order; the channel closes after `Done` or `Failed`.
    pub items: mpsc::Receiver<StreamItem>,
    /// Whether the call was charged, once the stream has ended.
    pub billed: oneshot::Receiver<bool>,
}

/// What a call would hold before it runs (`POST …/quote`): nothing is held or recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Quote {
    /// The public model name.
    pub model: String,
    /// The active price the call would be held and billed at.
    pub pricing: domain::PricingVersion,
    /// The worst case the call would hold from the balance.
    pub hold: domain::UsdAmount,
}
