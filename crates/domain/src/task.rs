//! Task states, the transition table, and the list filter groups.

use std::fmt;
use std::str::FromStr;

use crate::kind::UnknownName;

/// The state of a task. Synchronous calls pass through `processing`; video starts at `submitting`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TaskStatus {
    /// Stored; the upstream has not acknowledged it yet.
    Submitting,
    /// Accepted by the upstream and waiting to run.
    Queued,
    /// Running.
    Processing,
    /// Finished with a result.
    Succeeded,
    /// Finished without a result.
    Failed,
    /// Cancelled by its owner while queued.
    Cancelled,
    /// Not finished before its deadline.
    Expired,
}

/// Something that happens to a task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskEvent {
    /// The upstream acknowledged the submission.
    Accepted,
    /// The upstream started the work.
    Started,
    /// The work produced its result.
    Succeeded,
    /// The work failed.
    Failed,
    /// The owner asked to cancel.
    Cancel,
    /// The deadline passed or the upstream reported expiry.
    Expire,
}

/// A transition the table does not allow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("task in state {from} cannot take event {event:?}")]
pub struct TransitionError {
    /// The state the task was in.
    pub from: TaskStatus,
    /// The refused event.
    pub event: TaskEvent,
}

impl TaskStatus {
    /// Every state, in the spec's order.
    pub const ALL: [TaskStatus; 7] = [
        TaskStatus::Submitting,
        TaskStatus::Queued,
        TaskStatus::Processing,
        TaskStatus::Succeeded,
        TaskStatus::Failed,
        TaskStatus::Cancelled,
        TaskStatus::Expired,
    ];

    /// The states of the `running` filter group.
    pub const RUNNING: [TaskStatus; 3] = [TaskStatus::Submitting, TaskStatus::Queued, TaskStatus::Processing];

    /// The terminal states: the `completed` filter group.
    pub const TERMINAL: [TaskStatus; 4] =
        [TaskStatus::Succeeded, TaskStatus::Failed, TaskStatus::Cancelled, TaskStatus::Expired];

    /// The wire name.
    pub const fn as_str(self) -> &'static str {
        match self {
            TaskStatus::Submitting => "submitting",
            TaskStatus::Queued => "queued",
            TaskStatus::Processing => "processing",
            TaskStatus::Succeeded => "succeeded",
            TaskStatus::Failed => "failed",
            TaskStatus::Cancelled => "cancelled",
            TaskStatus::Expired => "expired",
        }
    }

    /// True for the states a task never leaves.
    pub const fn is_terminal(self) -> bool {
        matches!(self, TaskStatus::Succeeded | TaskStatus::Failed | TaskStatus::Cancelled | TaskStatus::Expired)
    }

    /// The state after `event`, or an error when the table does not allow it.
    pub fn apply(self, event: TaskEvent) -> Result<TaskStatus, TransitionError> {
        use TaskEvent as E;
        use TaskStatus as S;
        let next = match (self, event) {
            (S::Submitting, E::Accepted) => S::Queued,
            (S::Submitting | S::Queued, E::Started) => S::Processing,
            (S::Submitting | S::Queued | S::Processing, E::Succeeded) => S::Succeeded,
            (S::Submitting | S::Queued | S::Processing, E::Failed) => S::Failed,
            (S::Queued, E::Cancel) => S::Cancelled,
            (S::Submitting | S::Queued | S::Processing, E::Expire) => S::Expired,
            (
                S::Submitting | S::Queued | S::Processing | S::Succeeded | S::Failed | S::Cancelled | S::Expired,
                E::Accepted | E::Started | E::Succeeded | E::Failed | E::Cancel | E::Expire,
            ) => return Err(TransitionError { from: self, event }),
        };
        Ok(next)
    }
}

impl TaskEvent {
    /// The event that ends a task in the terminal state `status`; `None` for a non-terminal one.
    pub const fn ending_in(status: TaskStatus) -> Option<TaskEvent> {
        match status {
            TaskStatus::Succeeded => Some(TaskEvent::Succeeded),
            TaskStatus::Failed => Some(TaskEvent::Failed),
            TaskStatus::Cancelled => Some(TaskEvent::Cancel),
            TaskStatus::Expired => Some(TaskEvent::Expire),
            TaskStatus::Submitting | TaskStatus::Queued | TaskStatus::Processing => None,
        }
    }
}

/// What a state change records besides the state: each field given replaces the stored one,
/// each field left `None` keeps it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TaskUpdate {
    /// The upstream's id for the task (video: recorded on `submitting → queued`).
    pub upstream_id: Option<String>,
    /// Result address.
    pub output_url: Option<String>,
    /// Video last frame address.
    pub last_frame_url: Option<String>,
    /// Usage reported by the upstream, as JSON text.
    pub usage_json: Option<String>,
    /// Failure code.
    pub error_code: Option<String>,
    /// Failure text.
    pub error_message: Option<String>,
    /// The upstream endpoint that served the task (or was tried last) and the attempts made;
    /// for operators, not in the public task object.
    pub via: Option<crate::ports::Via>,
    /// The model that served a call which fell back from its first candidate, and the price
    /// version it was charged at.
    pub served_by: Option<(String, crate::pricing::PricingVersionId)>,
}

/// A compare-and-set state change: the task moves by `event` (through [`TaskStatus::apply`]) only
/// if it is in `from` when the store applies it; `from: None` accepts whatever state it is in.
/// `updated_at` becomes the time of the change, and `completed_at` too when the new state is terminal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskTransition {
    /// The state the task must be in; `None`: any state the event is allowed from.
    pub from: Option<TaskStatus>,
    /// What happened.
    pub event: TaskEvent,
    /// Fields recorded with the change.
    pub update: TaskUpdate,
}

impl TaskTransition {
    /// The change `from` → `from.apply(event)` recording nothing else.
    pub fn new(from: TaskStatus, event: TaskEvent) -> TaskTransition {
        TaskTransition { from: Some(from), event, update: TaskUpdate::default() }
    }

    /// The state after this change from `current`, if the expected state and the table allow it.
    pub fn target(&self, current: TaskStatus) -> Result<TaskStatus, TransitionError> {
        match self.from {
            Some(from) if from != current => Err(TransitionError { from: current, event: self.event }),
            _ => current.apply(self.event),
        }
    }
}

impl fmt::Display for TaskStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for TaskStatus {
    type Err = UnknownName;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        TaskStatus::ALL
            .into_iter()
            .find(|k| k.as_str() == s)
            .ok_or_else(|| UnknownName { what: "task status", value: s.to_owned() })
    }
}

/// The `status` filter of the task list: one state, or one of the two groups.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatusFilter {
    /// Exactly this state.
    Is(TaskStatus),
    /// `running`: submitting, queued or processing.
    Running,
    /// `completed`: any terminal state.
    Completed,
}

impl StatusFilter {
    /// The states the filter admits.
    pub fn statuses(&self) -> &[TaskStatus] {
        match self {
            StatusFilter::Is(s) => std::slice::from_ref(s),
            StatusFilter::Running => &TaskStatus::RUNNING,
            StatusFilter::Completed => &TaskStatus::TERMINAL,
        }
    }
}

impl FromStr for StatusFilter {
    type Err = UnknownName;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "running" => Ok(StatusFilter::Running),
            "completed" => Ok(StatusFilter::Completed),
            _ => {
                s.parse().map(StatusFilter::Is).map_err(|_| UnknownName { what: "status filter", value: s.to_owned() })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use TaskEvent as E;
    use TaskStatus as S;

    #[test]
    fn transition_table() {
        // (from, event, expected next or None when refused)
        let table: &[(S, E, Option<S>)] = &[
            (S::Submitting, E::Accepted, Some(S::Queued)),
            (S::Submitting, E::Started, Some(S::Processing)),
            (S::Submitting, E::Succeeded, Some(S::Succeeded)),
            (S::Submitting, E::Failed, Some(S::Failed)),
            (S::Submitting, E::Cancel, None),
            (S::Submitting, E::Expire, Some(S::Expired)),
            (S::Queued, E::Accepted, None),
            (S::Queued, E::Started, Some(S::Processing)),
            (S::Queued, E::Succeeded, Some(S::Succeeded)),
            (S::Queued, E::Failed, Some(S::Failed)),
            (S::Queued, E::Cancel, Some(S::Cancelled)),
            (S::Queued, E::Expire, Some(S::Expired)),
            (S::Processing, E::Accepted, None),
            (S::Processing, E::Started, None),
            (S::Processing, E::Succeeded, Some(S::Succeeded)),
            (S::Processing, E::Failed, Some(S::Failed)),
            (S::Processing, E::Cancel, None),
            (S::Processing, E::Expire, Some(S::Expired)),
        ];
        for &(from, event, want) in table {
            assert_eq!(from.apply(event).ok(), want, "{from} + {event:?}");
        }
        for from in TaskStatus::TERMINAL {
            for event in [E::Accepted, E::Started, E::Succeeded, E::Failed, E::Cancel, E::Expire] {
                assert_eq!(from.apply(event), Err(TransitionError { from, event }));
            }
        }
    }

    #[test]
    fn groups_partition_the_states() {
        for s in TaskStatus::ALL {
            assert_ne!(TaskStatus::RUNNING.contains(&s), s.is_terminal());
            assert_eq!(TaskStatus::TERMINAL.contains(&s), s.is_terminal());
            assert_eq!(s.as_str().parse::<TaskStatus>(), Ok(s));
        }
    }

    #[test]
    fn filter_parses_states_and_groups() {
        assert_eq!("running".parse::<StatusFilter>().map(|f| f.statuses().len()), Ok(3));
        assert_eq!("completed".parse::<StatusFilter>().map(|f| f.statuses().len()), Ok(4));
        assert_eq!("queued".parse::<StatusFilter>(), Ok(StatusFilter::Is(S::Queued)));
        for bad in ["", "Running", "done", "queued,failed"] {
            assert!(bad.parse::<StatusFilter>().is_err(), "{bad:?}");
        }
    }
}
