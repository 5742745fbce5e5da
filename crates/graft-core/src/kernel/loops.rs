//! Loops compiled whole: a `scan` whose body runs entirely as kernels
//! becomes one native function with the loop inside.
//!
//! The executor runs a loop body as a nested plan, once per step: every
//! step pays the plan's dispatch, buffer pool and kernel-call overhead for
//! each of its equations (0.3-1 µs each). For bodies of small tensors
//! (ODE steps, diagonal LSTM cells, solvers) that overhead is the whole
//! cost. A [`LoopProgram`] is the body's plan turned into data a backend
//! can render: the kernels of its steps (fused groups, row-kernel regions,
//! and standalone elementwise, layout, concatenate and pad equations), the
//! calls that run them in plan order with the buffers they read and write,
//! and where each body output lives. The C renderer turns it into one
//! function that runs all steps of the loop with no call back into Rust.
//!
//! Buffers (see [`Loc`]): consts and `xs` slices are read in place (an
//! `x` is a pointer into the stacked operand, no copy); the carry lives in
//! two sets of buffers swapped after each step, and a carry output computed
//! by the body is written straight into the next set; a `y` computed by
//! the body is written straight into its stacked result at the step's
//! index; other values get scratch buffers, shared by values whose
//! lifetimes (in call order, within one step) do not overlap. Values that
//! depend on nothing but constants (a `constant`, an `iota`, a broadcast
//! of a constant) are computed once when the program is built: loop-
//! invariant code motion at execution level.
//!
//! Results are bitwise those of the interpreted loop: each kernel computes
//! what its steps compute (the kernel IR's contract), in the same order,
//! on the same values.

use super::ir::Kernel;
use super::lower::{eqn_kernels, group_kernel, EqnLowering};
use super::native::{NativeFn, Slot};
use crate::dtype::DType;
use crate::error::ExecError;
use crate::exec::fuse::{Plan, Scalar, Step};
use crate::ir::{Func, Value};
use crate::ops::Op;
use crate::tensor::Tensor;
use crate::types::TensorType;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Where a value of the body lives while the compiled loop runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Loc {
    /// The loop's `j`-th const operand.
    Const(usize),
    /// The current carry `j` (the set of carry buffers read this step).
    CarryIn(usize),
    /// The step's slice of the `j`-th `xs` operand.
    Xs(usize),
    /// Scratch buffer `j`.
    Scratch(usize),
    /// Loop-invariant value `j`, computed when the program was built.
    Static(usize),
    /// The next carry `j` (the set written this step, read the next).
    CarryOut(usize),
    /// The step's slice of the `j`-th stacked result.
    Ys(usize),
}

/// One kernel call of a step.
#[derive(Debug, Clone)]
pub struct Call {
    /// Index into [`LoopProgram::kernels`].
    pub kernel: usize,
    /// Where each kernel argument points, in argument order.
    pub args: Vec<Loc>,
}

/// A scan body as kernels and calls (see the module docs).
#[derive(Debug)]
pub struct LoopProgram {
    /// Name of the loop's function (the kernels are named after it).
    pub name: String,
    /// The body's kernels, each called by one or more [`Call`]s.
    pub kernels: Vec<Kernel>,
    /// One step of the loop, in order.
    pub calls: Vec<Call>,
    /// Counts of the scan's const, carry and `xs` operands and `ys` results.
    pub n_consts: usize,
    /// See `n_consts`.
    pub n_carry: usize,
    /// See `n_consts`.
    pub n_xs: usize,
    /// See `n_consts`.
    pub n_ys: usize,
    /// Steps run from the last index to the first.
    pub reverse: bool,
    /// (dtype, elements) of each body parameter (consts, carry, one `x`).
    pub params: Vec<(DType, usize)>,
    /// (dtype, elements) of each body output (carry, one `y`).
    pub outputs: Vec<(DType, usize)>,
    /// Where each body output is at the end of a step.
    pub out_loc: Vec<Loc>,
    /// (dtype, elements) of each scratch buffer.
    pub scratch: Vec<(DType, usize)>,
    /// The loop-invariant values.
    pub statics: Vec<Tensor>,
}

/// Values above this many bytes are not computed at build time (they
/// stay steps of the loop, or keep it interpreted).
const STATIC_MAX_BYTES: usize = 16 << 20;

/// The program of a scan body (`nc` consts, `nk` carries) planned as
/// `plan`, or `None` when some step has no kernel form.
pub(crate) fn build(func: &Func, plan: &Plan, nc: usize, nk: usize, reverse: bool, name: &str) -> Option<LoopProgram> {
    let np = func.params.len();
    let nx = np.checked_sub(nc + nk)?;
    let ny = func.outputs.len().checked_sub(nk)?;
    let mut b = Builder { func, kernels: Vec::new(), calls: Vec::new(), alias: HashMap::new(), statics: Vec::new() };
    let mut fixed: HashMap<Value, Loc> = HashMap::new();
    for (j, &p) in func.params.iter().enumerate() {
        let loc = if j < nc {
            Loc::Const(j)
        } else if j < nc + nk {
            Loc::CarryIn(j - nc)
        } else {
            Loc::Xs(j - nc - nk)
        };
        fixed.insert(p, loc);
    }
    let mut regions = plan.regions.iter().peekable();
    let mut i = 0;
    while i < plan.steps.len() {
        while regions.peek().is_some_and(|r| r.start < i) {
            regions.next();
        }
        if let Some(r) = regions.peek().filter(|r| r.start == i) {
            let binds = r.inputs.iter().chain(&r.outputs).copied().collect();
            b.call(r.kernel.clone(), binds);
            i = r.end;
            continue;
        }
        match plan.steps[i] {
            Step::Group(g) => {
                let group = &plan.groups[g];
                let k = group_kernel(func, group, String::new())?;
                let scalars = group.scalars.iter().filter_map(|s| match s {
                    Scalar::Value(v) => Some(*v),
                    Scalar::Folded(_) => None,
                });
                let binds = group.inputs.iter().copied().chain(scalars).chain(group.outputs.iter().copied()).collect();
                b.call(k, binds);
            }
            Step::Eqn(e) => {
                let eqn = &func.eqns[e];
                if b.try_static(eqn, &fixed) {
                    i += 1;
                    continue;
                }
                match eqn_kernels(func, eqn, "")? {
                    EqnLowering::Alias => {
                        let src = b.root(*eqn.inputs.first()?);
                        b.alias.insert(*eqn.outputs.first()?, src);
                    }
                    EqnLowering::Kernels(ks) => {
                        for (k, binds) in ks {
                            b.call(k, binds);
                        }
                    }
                }
            }
        }
        i += 1;
    }
    b.finish(fixed, nc, nk, nx, ny, reverse, name)
}

struct Builder<'a> {
    func: &'a Func,
    kernels: Vec<Kernel>,
    /// Kernel index and the value each argument binds to.
    calls: Vec<(usize, Vec<Value>)>,
    /// Values that are another value's buffer read as is.
    alias: HashMap<Value, Value>,
    /// Loop-invariant values and their tensors.
    statics: Vec<(Value, Tensor)>,
}

impl Builder<'_> {
    fn root(&self, mut v: Value) -> Value {
        while let Some(&w) = self.alias.get(&v) {
            v = w;
        }
        v
    }

    fn call(&mut self, k: Kernel, binds: Vec<Value>) {
        let binds = binds.into_iter().map(|v| self.root(v)).collect();
        self.kernels.push(k);
        self.calls.push((self.kernels.len() - 1, binds));
    }

    /// Computes an equation at build time when its operands are all
    /// loop-invariant (no parameter, no value computed per step): true if
    /// it did.
    fn try_static(&mut self, eqn: &crate::ir::Eqn, params: &HashMap<Value, Loc>) -> bool {
        let func = self.func;
        let bytes: usize = eqn.outputs.iter().map(|&v| func.ty(v).size_bytes()).sum();
        if bytes > STATIC_MAX_BYTES || !eqn.prim.subfuncs().is_empty() {
            return false;
        }
        let mut ins: Vec<&Tensor> = Vec::with_capacity(eqn.inputs.len());
        for &v in &eqn.inputs {
            let v = self.root(v);
            if params.contains_key(&v) {
                return false;
            }
            match self.statics.iter().find(|(w, _)| *w == v) {
                Some((_, t)) => ins.push(t),
                None => return false,
            }
        }
        let mut outs: Vec<Tensor> = eqn.outputs.iter().map(|&v| Tensor::zeros(func.ty(v))).collect();
        if eqn.prim.kernel(&ins, &mut outs).is_err() {
            return false; // the interpreted loop reports it
        }
        self.statics.extend(eqn.outputs.iter().copied().zip(outs));
        true
    }

    #[allow(clippy::too_many_arguments)]
    fn finish(
        self,
        mut loc: HashMap<Value, Loc>,
        nc: usize,
        nk: usize,
        nx: usize,
        ny: usize,
        reverse: bool,
        name: &str,
    ) -> Option<LoopProgram> {
        let func = self.func;
        let shape = |v: Value| (func.ty(v).dtype, func.ty(v).numel());
        for (j, (v, _)) in self.statics.iter().enumerate() {
            loc.insert(*v, Loc::Static(j));
        }
        // Values the calls compute: where each is first written and last read.
        let mut first_write: HashMap<Value, usize> = HashMap::new();
        let mut last_use: HashMap<Value, usize> = HashMap::new();
        for (c, (k, binds)) in self.calls.iter().enumerate() {
            let kernel = &self.kernels[*k];
            for (a, &v) in kernel.args.iter().zip(binds) {
                if a.access == super::ir::Access::Write {
                    first_write.entry(v).or_insert(c);
                }
                last_use.insert(v, c);
            }
        }
        // Body outputs computed by the body go straight to their place.
        let outs: Vec<Value> = func.outputs.iter().map(|&v| self.root(v)).collect();
        for (j, &v) in outs.iter().enumerate() {
            if first_write.contains_key(&v) && !loc.contains_key(&v) {
                loc.insert(v, if j < nk { Loc::CarryOut(j) } else { Loc::Ys(j - nk) });
            }
        }
        // Everything read must be defined by now or by an earlier call.
        for (c, (k, binds)) in self.calls.iter().enumerate() {
            for (a, v) in self.kernels[*k].args.iter().zip(binds) {
                if a.access == super::ir::Access::Read
                    && !loc.contains_key(v)
                    && first_write.get(v).is_none_or(|&w| w >= c)
                {
                    return None;
                }
            }
        }
        // Scratch: a value's buffer is free after its last read or write
        // (outputs live to the end of the step).
        let end = self.calls.len();
        let mut scratch: Vec<(DType, usize)> = Vec::new();
        let mut busy: Vec<Option<usize>> = Vec::new(); // per buffer: the call after which it is free
        for (c, (k, binds)) in self.calls.iter().enumerate() {
            for (a, &v) in self.kernels[*k].args.iter().zip(binds) {
                if a.access != super::ir::Access::Write || loc.contains_key(&v) || first_write.get(&v) != Some(&c) {
                    continue;
                }
                let dies = if outs.contains(&v) { end } else { last_use.get(&v).copied().unwrap_or(c) };
                let want = shape(v);
                let free = (0..scratch.len()).find(|&s| scratch[s] == want && busy[s].is_none_or(|d| d < c));
                let s = match free {
                    Some(s) => s,
                    None => {
                        scratch.push(want);
                        busy.push(None);
                        scratch.len() - 1
                    }
                };
                busy[s] = Some(dies);
                loc.insert(v, Loc::Scratch(s));
            }
        }
        let calls = self
            .calls
            .iter()
            .map(|(k, binds)| {
                Some(Call { kernel: *k, args: binds.iter().map(|v| loc.get(v).copied()).collect::<Option<_>>()? })
            })
            .collect::<Option<Vec<_>>>()?;
        let out_loc = outs.iter().map(|v| loc.get(v).copied()).collect::<Option<Vec<_>>>()?;
        let kernels = self
            .kernels
            .into_iter()
            .enumerate()
            .map(|(j, mut k)| {
                k.name = format!("{name}_k{j}");
                k
            })
            .collect();
        Some(LoopProgram {
            name: name.to_string(),
            kernels,
            calls,
            n_consts: nc,
            n_carry: nk,
            n_xs: nx,
            n_ys: ny,
            reverse,
            params: func.params.iter().map(|&p| shape(p)).collect(),
            outputs: func.outputs.iter().map(|&v| shape(v)).collect(),
            out_loc,
            scratch,
            statics: self.statics.into_iter().map(|(_, t)| t).collect(),
        })
    }
}

/// A scan body's compiled loop: the program and its native code.
#[derive(Debug)]
pub(crate) struct NativeLoop {
    program: LoopProgram,
    slot: Arc<Slot>,
    /// Carry and scratch buffers of finished runs, reused by later ones.
    spare: Mutex<Vec<Vec<Tensor>>>,
}

thread_local! {
    static NATIVE_RUNS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// How many loops this thread has run as compiled loops (for tests and
/// diagnostics: a loop whose code is not ready runs interpreted).
pub fn native_loop_runs() -> usize {
    NATIVE_RUNS.with(std::cell::Cell::get)
}

impl NativeLoop {
    /// Starts compiling `program` (now, or on the background thread).
    pub(crate) fn start(program: LoopProgram, mode: super::CompileMode) -> Arc<NativeLoop> {
        let nl = Arc::new(NativeLoop { program, slot: Arc::new(Slot::default()), spare: Mutex::new(Vec::new()) });
        let source = super::render_c::render_loop(&nl.program, super::native::host_lanes());
        let job = super::native::Job { source, kernels: vec![(nl.program.name.clone(), Arc::downgrade(&nl.slot))] };
        match mode {
            super::CompileMode::Sync => job.run(),
            super::CompileMode::Async => super::native::submit(job),
            super::CompileMode::Off => {}
        }
        nl
    }

    /// The native code, once compiled.
    pub(crate) fn ready(&self) -> Option<&NativeFn> {
        self.slot.get()
    }

    /// Runs the loop for `length` steps: `ins` are the scan's operands,
    /// `outs` its results (checked here against the program's types).
    pub(crate) fn run(
        &self,
        f: &NativeFn,
        length: usize,
        ins: &[&Tensor],
        outs: &mut [Tensor],
    ) -> Result<(), ExecError> {
        let p = &self.program;
        let (nc, nk, nx, ny) = (p.n_consts, p.n_carry, p.n_xs, p.n_ys);
        let fits = |t: &Tensor, (d, n): (DType, usize), times: usize| {
            t.dtype() == d && Some(t.numel()) == n.checked_mul(times)
        };
        let ok = ins.len() == nc + nk + nx
            && outs.len() == nk + ny
            && ins.iter().enumerate().all(|(j, t)| fits(t, p.params[j], if j < nc + nk { 1 } else { length }))
            && outs.iter().enumerate().all(|(j, t)| fits(t, p.outputs[j], if j < nk { 1 } else { length }));
        if !ok {
            return Err(ExecError::kernel("scan", "internal error: operands do not match the compiled loop"));
        }
        let mut work = self.spare.lock().unwrap_or_else(|e| e.into_inner()).pop().unwrap_or_else(|| {
            let carry = (0..2 * nk).map(|j| p.params[nc + j / 2]);
            carry
                .chain(p.scratch.iter().copied())
                .map(|(dtype, n)| Tensor::zeros(&TensorType { dtype, shape: vec![n] }))
                .collect()
        });
        let held: usize = work.iter().map(Tensor::size_bytes).sum();
        super::native::run_program(f, length, ins, outs, &mut work, &p.statics);
        crate::exec::note_nested_peak(held);
        self.spare.lock().unwrap_or_else(|e| e.into_inner()).push(work);
        NATIVE_RUNS.with(|c| c.set(c.get() + 1));
        Ok(())
    }
}
