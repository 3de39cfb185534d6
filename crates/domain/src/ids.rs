//! The ids of the records: users, API keys and tasks, each a string newtype.

use std::fmt;

macro_rules! string_id {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(pub String);

        impl $name {
            /// The id as text.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }
    };
}

string_id!(
    /// A user's id, `usr_…`.
    UserId
);
string_id!(
    /// An API key's id, `key_…` (not the secret).
    ApiKeyId
);
string_id!(
    /// A task's id, `task_…`; also the reference of the task's reservation.
    TaskId
);
