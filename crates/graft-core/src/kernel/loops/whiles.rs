//! `while` loops compiled whole: the loop's `cond` and body, each planned
//! as the executor plans them, turned into two [`LoopProgram`]s that one
//! native function runs back to back (`cond`, then the body while the
//! predicate holds) with no executor round trip per trip.
//!
//! Why: a while body of a few dozen scalar operations (GradBench's
//! `particle` and `saddle` solvers, a Newton iteration) pays the nested
//! plan's dispatch for `cond` and body on every trip, 0.3-1 µs per
//! equation; compiled, a trip costs what its arithmetic costs.
//!
//! The two programs share the consts and the carry buffers (`cond` reads
//! the carry the body is about to read); each has its own scratch and
//! loop-invariant values. The predicate (a `bool[]`) is `cond`'s only
//! output; the C driver reads it after `cond`'s calls. Results are bitwise
//! those of the interpreted loop, for the reasons given in the parent
//! module; the trip count is the same because the predicate is.

use super::{build_program, LoopProgram};
use crate::dtype::DType;
use crate::error::ExecError;
use crate::exec::fuse::Plan;
use crate::ir::Func;
use crate::kernel::native::{NativeFn, Slot};
use crate::tensor::Tensor;
use crate::types::TensorType;
use std::sync::{Arc, Mutex};

/// A while loop as kernels: its `cond` and its body.
#[derive(Debug)]
pub struct WhileProgram {
    /// Name of the native function.
    pub name: String,
    /// `cond`: params (consts, carry), one output (the predicate, `Ys(0)`).
    pub cond: LoopProgram,
    /// The body: params (consts, carry), outputs the next carry.
    pub body: LoopProgram,
}

/// The program of a while loop (`nc` consts, `nk` carries) whose `cond` and
/// body are planned as `cond_plan` and `body_plan`, or `None` when a step
/// of either has no kernel form.
pub(crate) fn build(
    cond: (&Func, &Plan),
    body: (&Func, &Plan),
    nc: usize,
    nk: usize,
    name: &str,
) -> Option<WhileProgram> {
    let c = build_program(cond.0, cond.1, nc, nk, 0, false, &format!("{name}_c"))?;
    if c.n_xs != 0 || c.n_ys != 1 || c.outputs.first() != Some(&(DType::Bool, 1)) {
        return None;
    }
    let b = build_program(body.0, body.1, nc, nk, nk, false, &format!("{name}_b"))?;
    if b.n_xs != 0 || b.n_ys != 0 || b.params[..nc + nk] != c.params[..nc + nk] {
        return None;
    }
    Some(WhileProgram { name: name.to_string(), cond: c, body: b })
}

impl std::fmt::Display for WhileProgram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "while {}: run cond, stop unless ys0 is true, run the body, repeat", self.name)?;
        write!(f, "\n# cond\n{}", self.cond)?;
        write!(f, "\n# body\n{}", self.body)
    }
}

/// A while loop's compiled form: the program and its native code.
#[derive(Debug)]
pub(crate) struct NativeWhile {
    program: WhileProgram,
    /// The body's loop-invariant values, then `cond`'s (argument order).
    statics: Vec<Tensor>,
    /// The body's host calls, then `cond`'s (the table's order).
    hosts: Vec<crate::kernel::host::HostOp>,
    slot: Arc<Slot>,
    /// Carry and scratch buffers of finished runs, reused by later ones.
    spare: Mutex<Vec<Vec<Tensor>>>,
}

impl NativeWhile {
    /// Starts compiling `program` (now, or on the background thread).
    /// `shapeless` renders it size-generic (`render_c::render_while_sized`).
    pub(crate) fn start(
        mut program: WhileProgram,
        mode: crate::kernel::CompileMode,
        shapeless: bool,
    ) -> Arc<NativeWhile> {
        let mut kernels = program.body.kernels.clone();
        kernels.extend(program.cond.kernels.iter().cloned());
        let lanes = crate::kernel::unit_lanes(&kernels);
        let (source, tables) = if shapeless {
            let (source, table) = crate::kernel::render_c::render_while_sized(&program, lanes);
            (source, vec![Arc::from(table)])
        } else {
            (crate::kernel::render_c::render_while(&program, lanes), Vec::new())
        };
        let mut statics = std::mem::take(&mut program.body.statics);
        statics.append(&mut program.cond.statics);
        let hosts = program.body.hosts.iter().chain(&program.cond.hosts).cloned().collect();
        let nw = Arc::new(NativeWhile {
            program,
            statics,
            hosts,
            slot: Arc::new(Slot::default()),
            spare: Mutex::new(Vec::new()),
        });
        let job = crate::kernel::native::Job {
            source,
            kernels: vec![(nw.program.name.clone(), Arc::downgrade(&nw.slot))],
            tables,
        };
        job.start(mode);
        nw
    }

    /// The native code, once compiled.
    pub(crate) fn ready(&self) -> Option<&NativeFn> {
        self.slot.get()
    }

    /// Runs the loop from `init` with `consts`; returns the final carry and
    /// the number of trips.
    pub(crate) fn run(
        &self,
        f: &NativeFn,
        consts: &[&Tensor],
        init: &[&Tensor],
    ) -> Result<(Vec<Tensor>, usize), ExecError> {
        let b = &self.program.body;
        let (nc, nk) = (b.n_consts, b.n_carry);
        let fits = |t: &Tensor, (d, n): (DType, usize)| t.dtype() == d && t.numel() == n;
        let ok = consts.len() == nc
            && init.len() == nk
            && consts.iter().chain(init).zip(&b.params).all(|(t, &p)| fits(t, p));
        if !ok {
            return Err(ExecError::kernel("while", "internal error: operands do not match the compiled loop"));
        }
        let ins: Vec<&Tensor> = consts.iter().chain(init).copied().collect();
        let mut outs: Vec<Tensor> = init
            .iter()
            .map(|t| Tensor::try_zeros(&TensorType { dtype: t.dtype(), shape: t.shape().to_vec() }))
            .collect::<Result<_, _>>()?;
        let spare = self.spare.lock().unwrap_or_else(|e| e.into_inner()).pop();
        let mut work = match spare {
            Some(w) => w,
            None => {
                let carry = (0..2 * nk).map(|j| b.params[nc + j / 2]);
                carry
                    .chain(b.scratch.iter().copied())
                    .chain(self.program.cond.scratch.iter().copied())
                    .chain([(DType::I64, 1)])
                    .map(|(dtype, n)| Tensor::try_zeros(&TensorType { dtype, shape: vec![n] }))
                    .collect::<Result<Vec<_>, _>>()?
            }
        };
        let held: usize = work.iter().chain(&outs).map(Tensor::size_bytes).sum();
        let ran = crate::kernel::native::run_program(f, 0, &ins, &mut outs, &mut work, &self.statics, &self.hosts);
        crate::exec::note_nested_peak(held);
        ran?;
        let trips = work.last().and_then(|t| t.as_slice::<i64>().ok()).and_then(|s| s.first().copied()).unwrap_or(0);
        self.spare.lock().unwrap_or_else(|e| e.into_inner()).push(work);
        super::NATIVE_RUNS.with(|c| c.set(c.get() + 1));
        Ok((outs, trips.max(0) as usize))
    }
}
