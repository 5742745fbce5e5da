//! The public API's error type: every failure is a value, never a panic.

use graft_core::{ExecError, IrError, TensorError};
use thiserror::Error;

/// Any error from building, compiling or running a graft function.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum Error {
    /// Building or verifying the graph failed (shape/dtype errors included).
    #[error(transparent)]
    Ir(#[from] IrError),
    /// Running the graph failed (wrong inputs included).
    #[error(transparent)]
    Exec(#[from] ExecError),
    /// A tensor could not be constructed or converted.
    #[error(transparent)]
    Tensor(#[from] TensorError),
    /// Reading or writing a file failed, or its contents are not what was
    /// expected (the message names the file and every problem).
    #[error("{0}")]
    Io(String),
    /// The GPU backend failed or refused the function (no adapter, a 64-bit
    /// value, exhausted device memory...), with its message (feature `gpu`).
    #[error("{0}")]
    Gpu(String),
}
