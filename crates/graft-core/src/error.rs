//! Typed errors of the core: shape/type errors from primitive shape rules,
//! IR construction and verification errors, and executor errors.

use crate::ir::{SrcLoc, Value};
use crate::types::{fmt_list, TensorType};
use std::sync::Arc;
use thiserror::Error;

/// A primitive's shape rule rejected its operands.
///
/// Names the primitive, the operand types it was given, and what it expected,
/// so the message is useful without looking at the code.
#[derive(Debug, Clone, PartialEq, Error)]
#[error("{prim}: {expected}; got operands ({})", fmt_types(.operands))]
pub struct TypeError {
    /// Primitive name with its parameters, as the printer shows it.
    pub prim: String,
    /// The operand types that were rejected.
    pub operands: Vec<TensorType>,
    /// What the rule expected, as a sentence fragment.
    pub expected: String,
}

fn fmt_types(ts: &[TensorType]) -> String {
    ts.iter().map(|t| t.to_string()).collect::<Vec<_>>().join(", ")
}

impl TypeError {
    /// Builds a type error for `prim` (name and params) given its operands.
    pub fn new(prim: impl Into<String>, operands: &[TensorType], expected: impl Into<String>) -> Self {
        TypeError { prim: prim.into(), operands: operands.to_vec(), expected: expected.into() }
    }
}

/// Errors while building, verifying or transforming IR.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum IrError {
    /// A shape rule failed.
    #[error(transparent)]
    Type(#[from] TypeError),
    /// A value handle that does not belong to this function.
    #[error("value {value} is not defined in function `{func}`")]
    UnknownValue {
        /// The bad handle.
        value: Value,
        /// The function being built.
        func: String,
    },
    /// A structural invariant does not hold (see `verify`).
    #[error("verify `{func}`: equation {eqn}: {msg}")]
    Verify {
        /// Function name.
        func: String,
        /// Index of the offending equation (or `usize::MAX` for the signature).
        eqn: usize,
        /// What is wrong.
        msg: String,
    },
    /// A transformation rule is missing or cannot apply (names the primitive and the rule).
    #[error("{rule} of `{prim}`: {msg}")]
    NoRule {
        /// Primitive name.
        prim: String,
        /// Which rule (`jvp`, `transpose`, `batch`).
        rule: &'static str,
        /// Why it cannot apply.
        msg: String,
    },
    /// An argument to a library (composite) op is invalid, e.g. an axis out of range.
    #[error("{op}: {msg}")]
    Invalid {
        /// The op that was called.
        op: String,
        /// What is wrong.
        msg: String,
    },
    /// An error a transform's rule raised while rewriting an equation that
    /// came from user source: carries that equation's location, so a front
    /// end can point at the user's line rather than at the transform call.
    #[error("{inner} (at {loc})")]
    At {
        /// Where the equation being rewritten came from.
        loc: Arc<SrcLoc>,
        /// The rule's error.
        inner: Box<IrError>,
    },
}

impl IrError {
    /// Shorthand for [`IrError::Invalid`].
    pub fn invalid(op: impl Into<String>, msg: impl Into<String>) -> Self {
        IrError::Invalid { op: op.into(), msg: msg.into() }
    }

    /// Attaches the location of the equation a rule was rewriting. The
    /// innermost location wins: an error already located (inside a nested
    /// transform or sub-function) keeps its own.
    pub fn at(self, loc: Option<&Arc<SrcLoc>>) -> IrError {
        match (self, loc) {
            (e @ IrError::At { .. }, _) | (e, None) => e,
            (e, Some(loc)) => IrError::At { loc: loc.clone(), inner: Box::new(e) },
        }
    }

    /// The error without its location, and the location if any.
    pub fn located(&self) -> (&IrError, Option<&Arc<SrcLoc>>) {
        match self {
            IrError::At { loc, inner } => (inner, Some(loc)),
            e => (e, None),
        }
    }
}

/// Errors while running a compiled function.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum ExecError {
    /// Wrong number of inputs.
    #[error("function `{func}` takes {expected} inputs, got {got}")]
    InputCount {
        /// Function name.
        func: String,
        /// Declared parameter count.
        expected: usize,
        /// Inputs supplied.
        got: usize,
    },
    /// An input's dtype or shape differs from the parameter's type.
    #[error("function `{func}`: input {index} must be {expected}, got {got}")]
    InputType {
        /// Function name.
        func: String,
        /// Position of the input.
        index: usize,
        /// Declared type.
        expected: TensorType,
        /// Supplied type.
        got: TensorType,
    },
    /// A kernel could not run (e.g. a dtype the kernel does not support).
    #[error("kernel {prim}: {msg}")]
    Kernel {
        /// Primitive name.
        prim: String,
        /// What went wrong.
        msg: String,
    },
    /// The function failed verification or planning.
    #[error(transparent)]
    Ir(#[from] IrError),
    /// A tensor had an unexpected dtype or size inside a kernel.
    #[error(transparent)]
    Tensor(#[from] crate::tensor::TensorError),
}

impl ExecError {
    /// Shorthand for [`ExecError::Kernel`].
    pub fn kernel(prim: impl Into<String>, msg: impl Into<String>) -> Self {
        ExecError::Kernel { prim: prim.into(), msg: msg.into() }
    }
}

/// Formats axes like the printer does, for error messages.
pub fn axes_str(axes: &[usize]) -> String {
    fmt_list(axes)
}
