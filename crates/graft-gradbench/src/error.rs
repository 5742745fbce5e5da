//! The one error type of the GradBench side. Every failure a session can hit
//! (an unreadable line, an unknown module or function, an input of the wrong
//! shape, a backend's compile or run error, even a panic inside a backend)
//! becomes a `GbError`, whose `Display` text is what the tool sends back as
//! the response's `error` string.

use thiserror::Error;

/// Errors answered with `success: false` (or, for unreadable lines, with a
/// failure response whose id may be `null`).
#[derive(Debug, Clone, PartialEq, Error)]
pub enum GbError {
    /// The line is not a well-formed protocol message.
    #[error("malformed message: {0}")]
    Malformed(String),
    /// The tool has no implementation of this module.
    #[error("unknown module `{0}`")]
    UnknownModule(String),
    /// `evaluate` named a module that no successful `define` prepared.
    #[error("module `{0}` was not defined: send a `define` message for it first")]
    NotDefined(String),
    /// The module has no function of this name.
    #[error("module `{module}` has no function `{function}`")]
    UnknownFunction {
        /// Module name.
        module: String,
        /// Function name asked for.
        function: String,
    },
    /// A field of the input is missing or has the wrong type or shape.
    #[error("input field `{field}`: {msg}")]
    Input {
        /// Dotted path of the field within the input (`x`, `data.points`, ...).
        field: String,
        /// What was wrong.
        msg: String,
    },
    /// The `min_runs`/`min_seconds` fields are unusable.
    #[error("run policy: {0}")]
    Runs(String),
    /// The function produced something JSON cannot carry (NaN, infinity) or
    /// that does not fit the module's output format.
    #[error("output: {0}")]
    Output(String),
    /// The input's sizes would need more memory than the session's budget
    /// (see [`crate::memory`]); nothing of that size was allocated.
    #[error("{0}")]
    Memory(String),
    /// A failure inside the backend (compiling or running the function).
    #[error("{0}")]
    Backend(String),
    /// The backend panicked; the panic was caught so the tool keeps serving.
    #[error("internal error (panic in the backend): {0}")]
    Panic(String),
}

impl GbError {
    /// An input error for `field`.
    pub fn input(field: impl Into<String>, msg: impl Into<String>) -> GbError {
        GbError::Input { field: field.into(), msg: msg.into() }
    }
}
