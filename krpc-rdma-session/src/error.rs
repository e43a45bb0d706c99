//! Why a session (or a command over one) failed.

use std::fmt;

/// Why a command failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunError {
    /// Something failed; the message is one line.
    Failed(String),
    /// The connection to `peer` was lost.
    Lost {
        /// The server, as the dialer names it.
        peer: String,
        /// Calls that completed before.
        completed: u64,
        /// Calls in flight that were lost.
        lost: u64,
    },
}

impl RunError {
    /// The process exit status: 3 for a lost connection, 1 otherwise.
    pub fn exit_code(&self) -> u8 {
        match self {
            RunError::Failed(_) => 1,
            RunError::Lost { .. } => 3,
        }
    }
}

impl fmt::Display for RunError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RunError::Failed(m) => f.write_str(m),
            RunError::Lost {
                peer,
                completed,
                lost,
            } => write!(
                f,
                "connection to {peer} lost: {completed} calls completed, {lost} lost in flight"
            ),
        }
    }
}

impl From<String> for RunError {
    fn from(s: String) -> Self {
        RunError::Failed(s)
    }
}
