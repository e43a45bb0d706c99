//! [`Failure`]: which scenario failed, at which step, what was expected and what happened;
//! and the small checks the scenarios are written with (none of them panics).

use alloc::format;
use alloc::string::{String, ToString};
use core::fmt::{self, Debug, Display};

/// A scenario that did not hold. Displayed as one line.
#[derive(Clone, PartialEq, Eq)]
pub struct Failure {
    /// The scenario (filled in by [`crate::run`]).
    pub scenario: &'static str,
    /// The step that failed.
    pub step: String,
    /// What the step expected.
    pub expected: String,
    /// What happened.
    pub got: String,
}

/// What a scenario (or one of its steps) returns.
pub type Outcome = Result<(), Failure>;

impl Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "scenario {}: step \"{}\": expected {}, got {}",
            self.scenario, self.step, self.expected, self.got
        )
    }
}

// A test returning `Err(Failure)` prints it with `Debug`: the same line.
impl Debug for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        Display::fmt(self, f)
    }
}

impl core::error::Error for Failure {}

/// A failure of `step`.
pub fn fail(step: impl Display, expected: impl Display, got: impl Display) -> Failure {
    failure(&step, &expected, &got)
}

// The failure paths below are out of line (and cold): a scenario has hundreds of checks, and
// the formatting of each, inlined, would be stack in the scenario's frame (kernel frames
// stay under 1 KiB).
#[cold]
#[inline(never)]
fn failure(step: &dyn Display, expected: &dyn Display, got: &dyn Display) -> Failure {
    Failure {
        scenario: "",
        step: step.to_string(),
        expected: expected.to_string(),
        got: got.to_string(),
    }
}

#[cold]
#[inline(never)]
fn not_equal(step: &dyn Display, expected: &dyn Debug, got: &dyn Debug) -> Failure {
    failure(step, &format!("{expected:?}"), &format!("{got:?}"))
}

#[cold]
#[inline(never)]
fn failed_with(step: &dyn Display, e: &dyn Debug) -> Failure {
    failure(step, &"success", &format!("{e:?}"))
}

/// `cond` holds, or `step` failed expecting `expected`.
pub fn ensure(cond: bool, step: impl Display, expected: impl Display) -> Outcome {
    if cond {
        Ok(())
    } else {
        Err(failure(&step, &expected, &"the opposite"))
    }
}

/// `got == expected` (compared and shown with `Debug`).
pub fn eq<T: PartialEq + Debug>(step: impl Display, expected: T, got: T) -> Outcome {
    if got == expected {
        Ok(())
    } else {
        Err(not_equal(&step, &expected, &got))
    }
}

/// Byte strings equal; a mismatch names its first differing offset instead of dumping both.
pub fn bytes_eq(step: impl Display, expected: &[u8], got: &[u8]) -> Outcome {
    if expected == got {
        return Ok(());
    }
    Err(bytes_differ(&step, expected, got))
}

#[cold]
#[inline(never)]
fn bytes_differ(step: &dyn Display, expected: &[u8], got: &[u8]) -> Failure {
    let at = expected
        .iter()
        .zip(got)
        .position(|(a, b)| a != b)
        .unwrap_or(expected.len().min(got.len()));
    fail(
        step,
        format!("{} bytes", expected.len()),
        format!(
            "{} bytes, first difference at offset {at} ({:?} instead of {:?})",
            got.len(),
            got.get(at),
            expected.get(at)
        ),
    )
}

/// Turns a `Result` or an `Option` into an [`Outcome`] of a named step.
pub trait At<T> {
    /// The value, or a [`Failure`] of `step`.
    ///
    /// # Errors
    /// `Err` / `None`, as a failure of `step`.
    fn at(self, step: impl Display) -> Result<T, Failure>;
}

impl<T, E: Debug> At<T> for Result<T, E> {
    fn at(self, step: impl Display) -> Result<T, Failure> {
        self.map_err(|e| failed_with(&step, &e))
    }
}

impl<T> At<T> for Option<T> {
    fn at(self, step: impl Display) -> Result<T, Failure> {
        self.ok_or_else(|| failure(&step, &"a value", &"none"))
    }
}
