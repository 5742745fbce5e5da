//! Host calls: equations a compiled loop hands back to Rust once per step.
//!
//! A loop body whose steps all have kernel forms runs as one native
//! function with the loop inside (`loops`). A body with a matrix product
//! (an LSTM or GRU cell, a solver's matrix-vector step) has one step with
//! no kernel form: its GEMM is better left to the `gemm` crate than
//! rendered as a kernel. Rather than interpret the whole loop for it, the
//! native loop calls back into Rust for that step: the C code passes the
//! step's buffer pointers to [`HostTable::call`], which runs the
//! primitive's own slice kernel on them (for `dot_general`, a `DotPlan` set
//! up once, running the function its interpreted kernel runs, so the bits
//! are the same). A call costs an indirect call and the
//! slice set-up, tens of nanoseconds, against the 0.3-1 µs per equation of
//! the interpreted loop, and the step's other values stay in the loop's
//! buffers (no `xs` slice copied in, no `ys` slice copied out).
//!
//! Which equations ([`HostOp::of`]): `dot_general`, and reductions the
//! kernel planner leaves standalone (over leading or middle axes), on f32
//! or f64. Anything else without a kernel form still keeps the loop
//! interpreted.
//!
//! Safety: the trampoline builds slices from the pointers the C code
//! passes. Their lengths are the element counts of the equation's types,
//! which the loop program binds to buffers of exactly those types (the
//! same contract every kernel call of the loop relies on); a written
//! buffer is never bound to a read argument of the same call (scratch
//! buffers are only shared by values whose lifetimes do not overlap).
//! A panic must not unwind into C: it is caught and turned into an error,
//! and the host calls after it do nothing.

#![allow(unsafe_code)]

use crate::dtype::DType;
use crate::error::ExecError;
use crate::ir::{Eqn, Func};
use crate::ops::kernel::Real;
use crate::ops::linalg::DotPlan;
use crate::ops::monoid::RedElem;
use crate::ops::reduce::Reduce;
use crate::ops::{Op, Prim};
use crate::types::TensorType;
use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// One equation a compiled loop calls back for, with its operand types.
#[derive(Debug, Clone)]
pub struct HostOp {
    /// The equation's primitive.
    pub prim: Prim,
    /// Types of its inputs, in order.
    pub ins: Vec<TensorType>,
    /// Types of its outputs, in order.
    pub outs: Vec<TensorType>,
    /// A product's operand views, set up once (they cost more than a
    /// small product).
    dot: Option<DotPlan>,
}

impl HostOp {
    /// `eqn` as a host call, when it is one a compiled loop can make.
    pub(crate) fn of(func: &Func, eqn: &Eqn) -> Option<HostOp> {
        let ins: Vec<TensorType> = eqn.inputs.iter().map(|&v| func.ty(v).clone()).collect();
        let outs: Vec<TensorType> = eqn.outputs.iter().map(|&v| func.ty(v).clone()).collect();
        let float = |n: usize| {
            ins.len() == n
                && outs.len() == 1
                && matches!(outs[0].dtype, DType::F32 | DType::F64)
                && ins.iter().all(|t| t.dtype == outs[0].dtype)
        };
        let (ok, dot) = match &eqn.prim {
            Prim::DotGeneral(p) if float(2) => (true, Some(p.plan(&ins[0].shape, &ins[1].shape))),
            Prim::Reduce(_) => (float(1), None),
            _ => (false, None),
        };
        ok.then(|| HostOp { prim: eqn.prim.clone(), ins, outs, dot })
    }

    /// Argument count of the call: inputs, then outputs.
    pub fn arity(&self) -> usize {
        self.ins.len() + self.outs.len()
    }

    /// Runs the equation on the buffers at `ptrs` (inputs, then outputs).
    ///
    /// # Safety
    /// `ptrs` holds [`HostOp::arity`] pointers, each to a live, suitably
    /// aligned buffer of its type's dtype and element count; the output
    /// buffers overlap no other argument and nothing else accesses them
    /// during the call.
    unsafe fn run(&self, ptrs: &[*mut u8]) -> Result<(), ExecError> {
        match (&self.prim, self.outs[0].dtype) {
            (Prim::DotGeneral(_), DType::F32) => unsafe { self.dot::<f32>(ptrs) },
            (Prim::DotGeneral(_), DType::F64) => unsafe { self.dot::<f64>(ptrs) },
            (Prim::Reduce(p), DType::F32) => unsafe { self.reduce::<f32>(p, ptrs) },
            (Prim::Reduce(p), DType::F64) => unsafe { self.reduce::<f64>(p, ptrs) },
            _ => Err(ExecError::kernel(self.prim.name(), "internal error: not a host call")),
        }
    }

    /// # Safety
    /// As [`HostOp::run`], with `T` the dtype of all three buffers.
    unsafe fn dot<T: Real>(&self, ptrs: &[*mut u8]) -> Result<(), ExecError> {
        let ([a, b, o], Some(plan)) = (ptrs, &self.dot) else {
            return Err(ExecError::kernel("dot_general", "internal error: a host call takes three buffers"));
        };
        let (ta, tb, to) = (&self.ins[0], &self.ins[1], &self.outs[0]);
        // SAFETY: the caller's contract: each pointer addresses `numel`
        // elements of `T`, the output overlapping neither input.
        let (a, b, o) = unsafe {
            (
                std::slice::from_raw_parts(*a as *const T, ta.numel()),
                std::slice::from_raw_parts(*b as *const T, tb.numel()),
                std::slice::from_raw_parts_mut(*o as *mut T, to.numel()),
            )
        };
        plan.run(a, b, o);
        Ok(())
    }

    /// # Safety
    /// As [`HostOp::run`], with `T` the dtype of both buffers.
    unsafe fn reduce<T: Real + RedElem>(&self, p: &Reduce, ptrs: &[*mut u8]) -> Result<(), ExecError> {
        let [x, y] = ptrs else {
            return Err(ExecError::kernel(p.name(), "internal error: a host call takes two buffers"));
        };
        let (tx, ty) = (&self.ins[0], &self.outs[0]);
        // SAFETY: the caller's contract, as in `dot`.
        let (x, y) = unsafe {
            (
                std::slice::from_raw_parts(*x as *const T, tx.numel()),
                std::slice::from_raw_parts_mut(*y as *mut T, ty.numel()),
            )
        };
        p.float_kernel(&tx.shape, x, y);
        Ok(())
    }
}

/// What a compiled loop receives as its last argument: the entry point it
/// calls for `host(j, args)` and the context it passes back (see the
/// module docs). Laid out as `render_c`'s `graft_host`.
#[repr(C)]
pub(crate) struct HostTable {
    call: unsafe extern "C" fn(*const c_void, i64, *const *mut u8),
    ctx: *const c_void,
}

/// The host calls of one run of a compiled loop, and the first error.
pub(crate) struct HostCtx<'a> {
    ops: &'a [HostOp],
    error: Mutex<Option<ExecError>>,
    /// Set with `error`: read by every call, so it is not behind the lock.
    failed: AtomicBool,
}

impl<'a> HostCtx<'a> {
    pub(crate) fn new(ops: &'a [HostOp]) -> HostCtx<'a> {
        HostCtx { ops, error: Mutex::new(None), failed: AtomicBool::new(false) }
    }

    /// The table to pass to the loop; valid while `self` lives.
    pub(crate) fn table(&self) -> HostTable {
        HostTable { call: trampoline, ctx: self as *const HostCtx<'_> as *const c_void }
    }

    /// The first error a host call met, if any.
    pub(crate) fn finish(self) -> Result<(), ExecError> {
        match self.error.into_inner().unwrap_or_else(|e| e.into_inner()) {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    fn fail(&self, e: ExecError) {
        let mut slot = self.error.lock().unwrap_or_else(|e| e.into_inner());
        slot.get_or_insert(e);
        self.failed.store(true, Ordering::Relaxed);
    }

    fn failed(&self) -> bool {
        self.failed.load(Ordering::Relaxed)
    }
}

/// The C loop's entry into Rust: runs host call `op` on `args`.
///
/// # Safety
/// `ctx` is the [`HostCtx`] whose table the loop was given (alive for the
/// loop's whole run), and `args` holds that op's arity of pointers
/// satisfying [`HostOp::run`]'s contract (the loop program's bindings).
unsafe extern "C" fn trampoline(ctx: *const c_void, op: i64, args: *const *mut u8) {
    // SAFETY: see above; the context outlives the native call that calls us.
    let cx = unsafe { &*(ctx as *const HostCtx<'_>) };
    if cx.failed() {
        return;
    }
    let Some(host) = usize::try_from(op).ok().and_then(|j| cx.ops.get(j)) else {
        cx.fail(ExecError::kernel("loop", format!("internal error: host call {op} does not exist")));
        return;
    };
    // SAFETY: `args` holds `arity` pointers (the renderer emits one per argument).
    let ptrs = unsafe { std::slice::from_raw_parts(args, host.arity()) };
    // SAFETY: the pointers satisfy `run`'s contract (module docs).
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| unsafe { host.run(ptrs) }));
    match result {
        Ok(Ok(())) => {}
        Ok(Err(e)) => cx.fail(e),
        Err(_) => cx.fail(ExecError::kernel(host.prim.name(), "internal error: a host call panicked")),
    }
}
