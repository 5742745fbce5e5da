//! `graft._graft`: the native half of the Python package.
//!
//! The Python package (`python/graft/`) holds the JAX-shaped API (pytrees,
//! `jit`, `grad`, `vmap`, `graft.numpy`, `graft.lax`, `graft.random`); this
//! extension gives it three things and nothing more:
//!
//! - [`Handle`]: a traced tensor (a `graft::Tr`) and the functions that emit
//!   operations on it (`ops.rs`), all forwarding to graft's composite library;
//! - [`function::Function`]: a Python callable over handles wrapped as a
//!   `graft::Jit`, with transform layers built as core `graft::Transform`
//!   values (the one home of every transform), compiled per input types and
//!   run with the GIL released;
//! - [`program::Program`]: a graft-language program loaded from a file.
//!
//! Errors are values to the end: graft's errors become `GraftError`
//! (a `ValueError`) carrying graft's text, a Python exception raised inside
//! a traced function is re-raised with its traceback, and a Rust panic is
//! caught by PyO3 at every entry point (a `PanicException`, never an abort).

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use std::cell::RefCell;

/// Large buffers on cache-line boundaries (`graft_core::alloc`).
#[global_allocator]
static ALLOC: graft_core::alloc::CacheAligned = graft_core::alloc::CacheAligned;

mod convert;
mod function;
mod nn;
mod ops;
mod program;

pyo3::create_exception!(
    _graft,
    GraftError,
    PyValueError,
    "An error reported by graft (shape or dtype mismatch, invalid transform, failed run); the message is graft's."
);

thread_local! {
    /// The first Python exception raised inside a traced function on this
    /// thread, waiting to be re-raised when control returns to Python.
    static PENDING: RefCell<Option<PyErr>> = const { RefCell::new(None) };
}

/// Keeps `e` to re-raise later, unless an earlier exception is waiting.
pub(crate) fn stash(e: PyErr) {
    PENDING.with(|p| {
        let mut p = p.borrow_mut();
        if p.is_none() {
            *p = Some(e);
        }
    });
}

/// The waiting Python exception, if any (taking it).
pub(crate) fn take_pending() -> Option<PyErr> {
    PENDING.with(|p| p.borrow_mut().take())
}

/// A graft error as a Python exception: a waiting Python exception from a
/// traced function wins (it caused the failure), else `GraftError`.
pub(crate) fn graft_err(e: impl std::fmt::Display) -> PyErr {
    take_pending().unwrap_or_else(|| GraftError::new_err(e.to_string()))
}

/// A traced tensor: a handle into the function being traced. Python wraps
/// it in `graft.Tracer`, which has the operators and NumPy-style methods.
#[pyclass(unsendable, module = "graft._graft", name = "Handle")]
pub struct Handle {
    pub(crate) tr: graft::Tr,
}

impl Handle {
    /// Checks that the operation that made `tr` succeeded: a failed trace
    /// raises at once, at the Python line that caused it.
    pub(crate) fn checked(tr: graft::Tr) -> PyResult<Handle> {
        if tr.value().is_none() {
            if let Some(e) = take_pending() {
                return Err(e);
            }
            let msg = tr.error().map_or_else(|| "the trace already failed".to_string(), |e| e.to_string());
            return Err(GraftError::new_err(msg));
        }
        Ok(Handle { tr })
    }
}

#[pymethods]
impl Handle {
    /// The shape, as a tuple of ints.
    #[getter]
    fn shape(&self) -> Vec<usize> {
        self.tr.shape()
    }

    /// The dtype's NumPy name (`float32`, `float64`, `int32`, `int64`, `bool`).
    #[getter]
    fn dtype(&self) -> PyResult<&'static str> {
        let t = self.tr.ty().ok_or_else(|| GraftError::new_err("the trace already failed"))?;
        Ok(convert::dtype_name(t.dtype))
    }

    /// An identity of the trace the handle belongs to.
    #[getter]
    fn trace_id(&self) -> usize {
        self.tr.trace_id()
    }

    fn __repr__(&self) -> String {
        match self.tr.ty() {
            Some(t) => format!("Handle({t})"),
            None => "Handle(<failed>)".to_string(),
        }
    }
}

#[pymodule]
fn _graft(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("GraftError", m.py().get_type::<GraftError>())?;
    m.add_class::<Handle>()?;
    function::register(m)?;
    ops::register(m)?;
    nn::register(m)?;
    program::register(m)?;
    Ok(())
}
