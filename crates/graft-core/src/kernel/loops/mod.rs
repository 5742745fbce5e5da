//! Loops compiled whole: a `scan` whose body runs entirely as kernels
//! becomes one native function with the loop inside; so does a `while`
//! whose `cond` and body both do (`whiles.rs`).
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
//! `x` is a pointer into the stacked operand, no copy); the first step
//! reads the initial carry in place, later steps alternate between two
//! sets of work buffers, the last writes the final carry into the result,
//! and a carry output computed by the body is written straight into the
//! set the step writes (no carry is copied in or out); a `y` computed by
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

use super::host::HostOp;
use super::ir::{Arg, Index, Inst, Kernel, Lit, Reg};
use super::lower::{eqn_kernels, group_kernel, row_strides, EqnLowering};
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

pub mod blocks;
mod inline;
mod whiles;

pub(crate) use whiles::build as build_while;
pub(crate) use whiles::NativeWhile;
pub use whiles::WhileProgram;

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

/// What a [`Call`] runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Callee {
    /// Index into [`LoopProgram::kernels`].
    Kernel(usize),
    /// Index into [`LoopProgram::hosts`]: an equation run by Rust (see
    /// [`super::host`]).
    Host(usize),
}

/// One call of a step.
#[derive(Debug, Clone)]
pub struct Call {
    /// The kernel or host call.
    pub callee: Callee,
    /// Where each argument points, in argument order.
    pub args: Vec<Loc>,
}

/// A scan body as kernels and calls (see the module docs).
#[derive(Debug)]
pub struct LoopProgram {
    /// Name of the loop's function (the kernels are named after it).
    pub name: String,
    /// The body's kernels, each called by one or more [`Call`]s.
    pub kernels: Vec<Kernel>,
    /// The equations the loop hands back to Rust each step (matrix
    /// products), each called by one [`Call`].
    pub hosts: Vec<HostOp>,
    /// One step of the loop, in order.
    pub calls: Vec<Call>,
    /// Counts of the scan's const, carry and `xs` operands and `ys` results.
    pub n_consts: usize,
    /// See `n_consts`.
    pub n_carry: usize,
    /// How many outputs are carries: `n_carry` for a loop body, 0 for a
    /// while loop's `cond` (its one output, the predicate, is `Ys(0)`).
    pub carry_outs: usize,
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
    build_program(func, plan, nc, nk, nk, reverse, name)
}

/// [`build`] for a function whose first `carry_outs` outputs are carries
/// (a scan or while body: all `nk`; a while loop's `cond`: none, its one
/// output is `Ys(0)`).
fn build_program(
    func: &Func,
    plan: &Plan,
    nc: usize,
    nk: usize,
    carry_outs: usize,
    reverse: bool,
    name: &str,
) -> Option<LoopProgram> {
    let np = func.params.len();
    let nx = np.checked_sub(nc + nk)?;
    let ny = func.outputs.len().checked_sub(carry_outs)?;
    let mut b = Builder {
        func,
        kernels: Vec::new(),
        calls: Vec::new(),
        alias: HashMap::new(),
        statics: Vec::new(),
        views: HashMap::new(),
        hosts: HashMap::new(),
    };
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
                if let Some(view) = b.view_of(eqn).filter(|_| gathers_pieces(eqn)) {
                    // A concatenation or pad: one pass over the result reading
                    // every piece where it lies, through the views its pieces
                    // come from (`concat(1, y[:-1])` reads `y` in place).
                    let out = *eqn.outputs.first()?;
                    let (k, binds) = view_kernel(func, &view, out)?;
                    b.call(k, binds);
                    b.views.insert(out, view);
                    i += 1;
                    continue;
                }
                let Some(lowered) = eqn_kernels(func, eqn, "") else {
                    // No kernel form: a matrix product is called back for
                    // (`host.rs`); anything else keeps the loop interpreted.
                    let host = HostOp::of(func, eqn)?;
                    let binds = eqn.inputs.iter().chain(&eqn.outputs).copied().collect();
                    b.host(host, binds);
                    i += 1;
                    continue;
                };
                match lowered {
                    EqnLowering::Alias => {
                        let src = b.root(*eqn.inputs.first()?);
                        b.alias.insert(*eqn.outputs.first()?, src);
                    }
                    EqnLowering::Kernels(ks) => {
                        for (k, binds) in ks {
                            b.call(k, binds);
                        }
                        if let Some(view) = b.view_of(eqn) {
                            b.views.insert(*eqn.outputs.first()?, view);
                        }
                    }
                }
            }
        }
        i += 1;
    }
    b.forward();
    b.finish(fixed, nc, nk, carry_outs, nx, ny, reverse, name)
}

/// Concatenations of at most this many operands, and pads without
/// interior padding, are built by [`view_kernel`]: one pass whose every
/// point tests the pieces' boxes in turn. Longer concatenations store each
/// operand with its own kernel ([`eqn_kernels`]).
const VIEW_PIECES_MAX: usize = 4;

fn gathers_pieces(eqn: &crate::ir::Eqn) -> bool {
    match &eqn.prim {
        crate::ops::Prim::Concatenate(_) => (1..=VIEW_PIECES_MAX).contains(&eqn.inputs.len()),
        crate::ops::Prim::Pad(p) => p.interior.iter().all(|&e| e == 0),
        _ => false,
    }
}

/// The kernel that materialises `view` as `out`: every point starts from
/// the fill (zero when the view has none: its pieces then cover every
/// point) and takes each piece's element where the point lies in its box,
/// later pieces winning, as [`View`] defines. Only copies: bitwise the
/// interpreter's result.
fn view_kernel(func: &Func, view: &View, out: Value) -> Option<(Kernel, Vec<Value>)> {
    let ot = func.ty(out);
    let rd = |v: Value| Arg { dtype: func.ty(v).dtype, len: func.ty(v).numel(), access: super::ir::Access::Read };
    let mut args = Vec::new();
    let mut binds = Vec::new();
    let mut body = Vec::new();
    match view.fill {
        Some(f) => {
            args.push(rd(f));
            binds.push(f);
            body.push(Inst::Load { arg: 0, index: Index::Scalar });
        }
        None => body.push(Inst::Lit(Lit { dtype: ot.dtype, bits: 0 })),
    }
    for p in &view.pieces {
        let window = p.window(&view.dims);
        let fill = body.len() as u32 - 1;
        body.push(Inst::Window { arg: args.len() as u32, window, fill });
        args.push(rd(p.src));
        binds.push(p.src);
    }
    let value = body.len() as u32 - 1;
    body.push(Inst::Store { arg: args.len() as u32, value, index: Index::Point });
    args.push(Arg { dtype: ot.dtype, len: ot.numel(), access: super::ir::Access::Write });
    binds.push(out);
    let k = Kernel { name: String::new(), args, extent: ot.numel(), body };
    super::ir::verify(&k).ok()?;
    Some((k, binds))
}

/// A value that only moves other values' elements (a slice, broadcast,
/// transpose, reversal, concatenation or pad): its element at coordinates
/// `c` (over `dims`) is that of the last piece whose box holds `c`, else
/// the one-element `fill`.
#[derive(Debug, Clone)]
struct View {
    dims: Vec<usize>,
    pieces: Vec<Piece>,
    fill: Option<Value>,
}

/// One source of a [`View`] (the fields of [`super::ir::Window`]).
#[derive(Debug, Clone)]
struct Piece {
    src: Value,
    lo: Vec<isize>,
    size: Vec<usize>,
    strides: Vec<isize>,
    offset: isize,
}

impl Piece {
    /// This piece as a window load's box over a view of shape `dims`.
    fn window(&self, dims: &[usize]) -> super::ir::Window {
        super::ir::Window {
            dims: dims.to_vec(),
            lo: self.lo.clone(),
            size: self.size.clone(),
            strides: self.strides.clone(),
            offset: self.offset,
        }
    }
}

impl View {
    /// A single piece covering every point: a plain strided read.
    fn strided(&self) -> Option<&Piece> {
        match &self.pieces[..] {
            [p] if self.fill.is_none() && p.lo.iter().all(|&l| l == 0) && p.size == self.dims => Some(p),
            _ => None,
        }
    }
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
    /// Values that only move other values' elements, by root value.
    views: HashMap<Value, View>,
    /// Host calls, by the index of the stand-in kernel that carries their
    /// arguments (and no body: forwarding and inlining leave them alone,
    /// while reader counts and buffer planning see their reads and writes).
    hosts: HashMap<usize, HostOp>,
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

    /// A host call of `op` on `binds` (its inputs, then its outputs).
    fn host(&mut self, op: HostOp, binds: Vec<Value>) {
        let arg = |t: &TensorType, access| Arg { dtype: t.dtype, len: t.numel(), access };
        let args = op
            .ins
            .iter()
            .map(|t| arg(t, super::ir::Access::Read))
            .chain(op.outs.iter().map(|t| arg(t, super::ir::Access::Write)))
            .collect();
        self.hosts.insert(self.kernels.len(), op);
        self.call(Kernel { name: String::new(), args, extent: 0, body: Vec::new() }, binds);
    }

    /// The [`View`] of a layout, concatenate or pad equation, its pieces
    /// read straight from their sources' sources where those are plain
    /// strided views (`pad(slice(y))` reads `y`).
    fn view_of(&self, eqn: &crate::ir::Eqn) -> Option<View> {
        let func = self.func;
        let dims = func.ty(*eqn.outputs.first()?).shape.clone();
        let whole = |src: Value, lo: Vec<isize>| {
            let shape = func.ty(src).shape.clone();
            Piece { src, lo, strides: row_strides(&shape), size: shape, offset: 0 }
        };
        let (pieces, fill) = match &eqn.prim {
            crate::ops::Prim::Concatenate(p) => {
                let mut start = 0isize;
                let mut pieces = Vec::new();
                for &v in &eqn.inputs {
                    let mut lo = vec![0isize; dims.len()];
                    *lo.get_mut(p.axis)? = start;
                    start += *func.ty(v).shape.get(p.axis)? as isize;
                    if func.ty(v).numel() > 0 {
                        pieces.push(whole(v, lo));
                    }
                }
                (pieces, None)
            }
            crate::ops::Prim::Pad(p) if p.interior.iter().all(|&e| e == 0) => {
                let lo = p.lo.iter().map(|&l| l as isize).collect();
                (vec![whole(*eqn.inputs.first()?, lo)], Some(*eqn.inputs.get(1)?))
            }
            _ => {
                let map = crate::exec::fuse::strided_map(func, eqn)?;
                let src = *eqn.inputs.first()?;
                let piece = Piece {
                    src,
                    lo: vec![0; dims.len()],
                    size: dims.clone(),
                    strides: map.strides,
                    offset: map.offset,
                };
                return Some(View { dims, pieces: vec![piece], fill: None });
            }
        };
        let pieces = pieces
            .into_iter()
            .map(|p| {
                let src = self.root(p.src);
                match self.views.get(&src).and_then(View::strided) {
                    Some(inner) if inner.size == p.size => {
                        Piece { src: inner.src, strides: inner.strides.clone(), offset: inner.offset, ..p }
                    }
                    _ => Piece { src, ..p },
                }
            })
            .collect();
        Some(View { dims, pieces, fill: fill.map(|v| self.root(v)) })
    }

    /// Load forwarding: a kernel reading a view's value point by point
    /// reads the view's sources in place instead (window or strided
    /// loads); then producers are inlined into their readers (`inline.rs`),
    /// and the calls whose values nobody reads any more are dropped. Row
    /// kernels keep their loads.
    fn forward(&mut self) {
        for c in 0..self.calls.len() {
            let (kid, _) = self.calls[c];
            let row = self.kernels[kid].body.iter().any(|i| matches!(i, Inst::Reduce(_) | Inst::Map(_)));
            if row || self.hosts.contains_key(&kid) {
                continue;
            }
            let mut j = 0;
            while j < self.calls[c].1.len() {
                let v = self.calls[c].1[j];
                let k = &self.kernels[kid];
                let point_only = k.args[j].access == super::ir::Access::Read
                    && k.body.iter().all(|i| match i {
                        Inst::Load { arg, index } => *arg as usize != j || *index == Index::Point,
                        Inst::Window { arg, .. } | Inst::LoadAt { arg, .. } => *arg as usize != j,
                        _ => true,
                    });
                let rewritten = match self.views.get(&v) {
                    Some(view) if point_only && view.dims.iter().product::<usize>() == k.extent => {
                        forward_arg(self.func, k, &self.calls[c].1, j, view)
                    }
                    _ => None,
                };
                match rewritten {
                    Some((k2, binds)) => {
                        self.kernels[kid] = k2;
                        self.calls[c].1 = binds;
                        // Argument j is now the next one: look at it again.
                    }
                    None => j += 1,
                }
            }
        }
        self.drop_dead();
        self.inline_producers();
        self.drop_dead();
    }

    /// Drops calls whose written values nobody reads (outputs are read).
    fn drop_dead(&mut self) {
        loop {
            let mut readers: HashMap<Value, usize> = HashMap::new();
            for &v in &self.func.outputs {
                *readers.entry(self.root(v)).or_default() += 1;
            }
            for (kid, binds) in &self.calls {
                for (a, v) in self.kernels[*kid].args.iter().zip(binds) {
                    if a.access == super::ir::Access::Read {
                        *readers.entry(*v).or_default() += 1;
                    }
                }
            }
            // A kernel that still stores a value someone reads loses the
            // stores of those nobody does (a producer inlined into its
            // only reader for one of its outputs).
            for (kid, binds) in &mut self.calls {
                let k = &self.kernels[*kid];
                if self.hosts.contains_key(kid) || k.body.iter().any(|i| matches!(i, Inst::Reduce(_) | Inst::Map(_))) {
                    continue;
                }
                let dead: Vec<bool> = k
                    .args
                    .iter()
                    .zip(binds.iter())
                    .map(|(a, v)| a.access == super::ir::Access::Write && readers.get(v).copied().unwrap_or(0) == 0)
                    .collect();
                let live = k.args.iter().zip(&dead).any(|(a, d)| a.access == super::ir::Access::Write && !d);
                if live && dead.iter().any(|&d| d) {
                    if let Some((k2, b2)) = drop_stores(k, binds.clone(), &dead) {
                        self.kernels[*kid] = k2;
                        *binds = b2;
                    }
                }
            }
            let before = self.calls.len();
            let kernels = &self.kernels;
            self.calls.retain(|(kid, binds)| {
                kernels[*kid]
                    .args
                    .iter()
                    .zip(binds)
                    .any(|(a, v)| a.access == super::ir::Access::Write && readers.get(v).copied().unwrap_or(0) > 0)
            });
            if self.calls.len() == before {
                break;
            }
        }
    }

    /// Computes an equation at build time when its operands are all
    /// loop-invariant (no parameter, no value computed per step): true if
    /// it did.
    fn try_static(&mut self, eqn: &crate::ir::Eqn, params: &HashMap<Value, Loc>) -> bool {
        let func = self.func;
        let bytes: usize = eqn.outputs.iter().map(|&v| func.ty(v).size_bytes()).sum();
        // A print of constants must print on every trip, not once here.
        if bytes > STATIC_MAX_BYTES || !eqn.prim.subfuncs().is_empty() || eqn.prim.has_effect() {
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
        let Ok(mut outs) = eqn.outputs.iter().map(|&v| Tensor::try_zeros(func.ty(v))).collect::<Result<Vec<_>, _>>()
        else {
            return false; // too big to fold: the interpreted loop reports it
        };
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
        carry_outs: usize,
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
                loc.insert(v, if j < carry_outs { Loc::CarryOut(j) } else { Loc::Ys(j - carry_outs) });
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
        // Calls that will run block by block (`blocks`) count as one: a
        // buffer is free after the run of its last read, and a value
        // written in a run takes none freed inside it.
        let end = self.calls.len();
        let views: Vec<blocks::CallView<'_, Value>> = self
            .calls
            .iter()
            .map(|(k, binds)| (Some(&self.kernels[*k]).filter(|_| !self.hosts.contains_key(k)), binds.as_slice()))
            .collect();
        let mut group: Vec<(usize, usize)> = (0..end).map(|c| (c, c)).collect(); // (first, last) call
        for r in blocks::find_runs(&views) {
            for c in r.calls.clone() {
                group[c] = (r.calls.start, r.calls.end - 1);
            }
        }
        let mut scratch: Vec<(DType, usize)> = Vec::new();
        let mut busy: Vec<Option<usize>> = Vec::new(); // per buffer: the call after which it is free
        for (c, (k, binds)) in self.calls.iter().enumerate() {
            for (a, &v) in self.kernels[*k].args.iter().zip(binds) {
                if a.access != super::ir::Access::Write || loc.contains_key(&v) || first_write.get(&v) != Some(&c) {
                    continue;
                }
                let dies = if outs.contains(&v) { end } else { group[last_use.get(&v).copied().unwrap_or(c)].1 };
                let want = shape(v);
                let free = (0..scratch.len()).find(|&s| scratch[s] == want && busy[s].is_none_or(|d| d < group[c].0));
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
        // Kernels and host calls get their own numbering. Kernels no call
        // runs any more (inlined producers, forwarded layout copies) are
        // left out, so the unit compiles only what runs.
        let mut called = vec![false; self.kernels.len()];
        for (k, _) in &self.calls {
            called[*k] = true;
        }
        let mut hosts_of = self.hosts;
        let mut kernels = Vec::new();
        let mut hosts = Vec::new();
        let mut callee = Vec::with_capacity(self.kernels.len());
        for (j, mut k) in self.kernels.into_iter().enumerate() {
            if !called[j] {
                callee.push(None);
                continue;
            }
            match hosts_of.remove(&j) {
                Some(h) => {
                    callee.push(Some(Callee::Host(hosts.len())));
                    hosts.push(h);
                }
                None => {
                    callee.push(Some(Callee::Kernel(kernels.len())));
                    k.name = format!("{name}_k{j}");
                    kernels.push(k);
                }
            }
        }
        let calls = self
            .calls
            .iter()
            .map(|(k, binds)| {
                Some(Call {
                    callee: callee[*k]?,
                    args: binds.iter().map(|v| loc.get(v).copied()).collect::<Option<_>>()?,
                })
            })
            .collect::<Option<Vec<_>>>()?;
        let out_loc = outs.iter().map(|v| loc.get(v).copied()).collect::<Option<Vec<_>>>()?;
        Some(LoopProgram {
            name: name.to_string(),
            kernels,
            hosts,
            calls,
            n_consts: nc,
            n_carry: nk,
            carry_outs,
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
    /// `shapeless` renders it size-generic (`render_c::render_loop_sized`):
    /// the same loop at other sizes then shares the compiled library.
    pub(crate) fn start(program: LoopProgram, mode: super::CompileMode, shapeless: bool) -> Arc<NativeLoop> {
        let nl = Arc::new(NativeLoop { program, slot: Arc::new(Slot::default()), spare: Mutex::new(Vec::new()) });
        let lanes = super::unit_lanes(&nl.program.kernels);
        let (source, tables) = if shapeless {
            let (source, table) = super::render_c::render_loop_sized(&nl.program, lanes);
            (source, vec![Arc::from(table)])
        } else {
            (super::render_c::render_loop(&nl.program, lanes), Vec::new())
        };
        let job =
            super::native::Job { source, kernels: vec![(nl.program.name.clone(), Arc::downgrade(&nl.slot))], tables };
        job.start(mode);
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
        let spare = self.spare.lock().unwrap_or_else(|e| e.into_inner()).pop();
        let mut work = match spare {
            Some(w) => w,
            None => {
                let carry = (0..2 * nk).map(|j| p.params[nc + j / 2]);
                carry
                    .chain(p.scratch.iter().copied())
                    .map(|(dtype, n)| Tensor::try_zeros(&TensorType { dtype, shape: vec![n] }))
                    .collect::<Result<Vec<_>, _>>()?
            }
        };
        let held: usize = work.iter().map(Tensor::size_bytes).sum();
        let ran = super::native::run_program(f, length, ins, outs, &mut work, &p.statics, &p.hosts);
        crate::exec::note_nested_peak(held);
        ran?;
        self.spare.lock().unwrap_or_else(|e| e.into_inner()).push(work);
        NATIVE_RUNS.with(|c| c.set(c.get() + 1));
        Ok(())
    }
}

/// `k` with argument `j` (bound to the value `view` describes, read only
/// by point loads) replaced by reads of the view's sources: new arguments
/// at the end, argument `j` removed. `None` if the result does not verify.
fn forward_arg(func: &Func, k: &Kernel, binds: &[Value], j: usize, view: &View) -> Option<(Kernel, Vec<Value>)> {
    let mut args = k.args.clone();
    let mut binds = binds.to_vec();
    let arg_of = |v: Value, args: &mut Vec<Arg>, binds: &mut Vec<Value>| -> u32 {
        if let Some(p) = binds.iter().zip(args.iter()).position(|(w, a)| *w == v && a.access == super::ir::Access::Read)
        {
            if p != j {
                return p as u32;
            }
        }
        args.push(Arg { dtype: func.ty(v).dtype, len: func.ty(v).numel(), access: super::ir::Access::Read });
        binds.push(v);
        (args.len() - 1) as u32
    };
    let dtype = k.args[j].dtype;
    // The instructions replacing one point load of argument j.
    let mut replacement: Vec<Inst> = Vec::new(); // registers relative to its start
    match view.strided() {
        Some(p) => {
            let arg = arg_of(p.src, &mut args, &mut binds);
            let index = Index::Strided { dims: view.dims.clone(), strides: p.strides.clone(), offset: p.offset };
            replacement.push(Inst::Load { arg, index });
        }
        None => {
            match view.fill {
                Some(f) => {
                    let arg = arg_of(f, &mut args, &mut binds);
                    replacement.push(Inst::Load { arg, index: Index::Scalar });
                }
                None => replacement.push(Inst::Lit(Lit { dtype, bits: 0 })),
            }
            for p in &view.pieces {
                let arg = arg_of(p.src, &mut args, &mut binds);
                let window = p.window(&view.dims);
                replacement.push(Inst::Window { arg, window, fill: (replacement.len() - 1) as Reg });
            }
        }
    }
    // Rebuild the body with the replacement spliced in at each point load of j.
    let mut map: Vec<Reg> = Vec::with_capacity(k.body.len());
    let mut body: Vec<Inst> = Vec::with_capacity(k.body.len() + replacement.len());
    for inst in &k.body {
        if matches!(inst, Inst::Load { arg, .. } if *arg as usize == j) {
            let base = body.len() as Reg;
            for r in &replacement {
                body.push(match r {
                    Inst::Window { arg, window, fill } => {
                        Inst::Window { arg: *arg, window: window.clone(), fill: fill + base }
                    }
                    other => other.clone(),
                });
            }
            map.push((body.len() - 1) as Reg);
            continue;
        }
        body.push(inst.remapped(&map)?);
        map.push((body.len() - 1) as Reg);
    }
    // Remove argument j.
    args.remove(j);
    binds.remove(j);
    let shift = |a: u32| if a as usize > j { a - 1 } else { a };
    for inst in &mut body {
        match inst {
            Inst::Load { arg, .. } | Inst::Store { arg, .. } | Inst::Window { arg, .. } | Inst::LoadAt { arg, .. } => {
                *arg = shift(*arg)
            }
            _ => {}
        }
    }
    let k2 = Kernel { name: k.name.clone(), args, extent: k.extent, body };
    super::ir::verify(&k2).ok()?;
    Some((k2, binds))
}

/// An elementwise kernel's instruction with its register operands renamed
/// through `map` (`None` for row-kernel instructions).
/// Removes the arguments no instruction of `body` loads or stores (and
/// their bindings), renumbering the others.
fn drop_unused_args<B>(args: Vec<Arg>, binds: Vec<B>, body: &mut [Inst]) -> (Vec<Arg>, Vec<B>) {
    let mut used = vec![false; args.len()];
    for inst in body.iter() {
        match inst {
            Inst::Load { arg, .. } | Inst::Store { arg, .. } | Inst::Window { arg, .. } | Inst::LoadAt { arg, .. } => {
                used[*arg as usize] = true
            }
            _ => {}
        }
    }
    let mut renum = vec![0u32; args.len()];
    let mut kept = 0u32;
    for (j, u) in used.iter().enumerate() {
        renum[j] = kept;
        kept += u32::from(*u);
    }
    for inst in body.iter_mut() {
        match inst {
            Inst::Load { arg, .. } | Inst::Store { arg, .. } | Inst::Window { arg, .. } | Inst::LoadAt { arg, .. } => {
                *arg = renum[*arg as usize]
            }
            _ => {}
        }
    }
    let args = args.into_iter().zip(&used).filter(|(_, u)| **u).map(|(a, _)| a).collect();
    let binds = binds.into_iter().zip(&used).filter(|(_, u)| **u).map(|(b, _)| b).collect();
    (args, binds)
}

/// Elementwise kernel `k` without its stores to the arguments `dead`
/// marks (values nobody reads), and without those arguments.
fn drop_stores<B>(k: &Kernel, binds: Vec<B>, dead: &[bool]) -> Option<(Kernel, Vec<B>)> {
    let mut body = Vec::with_capacity(k.body.len());
    let mut map: Vec<Reg> = Vec::with_capacity(k.body.len());
    for inst in &k.body {
        if matches!(inst, Inst::Store { arg, .. } if dead[*arg as usize]) {
            map.push(Reg::MAX); // a store defines no register
            continue;
        }
        body.push(inst.remapped(&map)?);
        map.push((body.len() - 1) as Reg);
    }
    let (args, binds) = drop_unused_args(k.args.clone(), binds, &mut body);
    let k2 = Kernel { name: k.name.clone(), args, extent: k.extent, body };
    super::ir::verify(&k2).ok()?;
    Some((k2, binds))
}

impl std::fmt::Display for Loc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Loc::Const(j) => write!(f, "const{j}"),
            Loc::CarryIn(j) => write!(f, "carry{j}"),
            Loc::Xs(j) => write!(f, "xs{j}[t]"),
            Loc::Scratch(j) => write!(f, "s{j}"),
            Loc::Static(j) => write!(f, "static{j}"),
            Loc::CarryOut(j) => write!(f, "carry{j}'"),
            Loc::Ys(j) => write!(f, "ys{j}[t]"),
        }
    }
}

impl std::fmt::Display for LoopProgram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let list = |v: &[Loc]| v.iter().map(|l| l.to_string()).collect::<Vec<_>>().join(", ");
        writeln!(
            f,
            "loop {} ({} consts, {} carries, {} xs, {} ys{}): {} calls per step, {} scratch buffers, {} static values {{",
            self.name,
            self.n_consts,
            self.n_carry,
            self.n_xs,
            self.n_ys,
            if self.reverse { ", reverse" } else { "" },
            self.calls.len(),
            self.scratch.len(),
            self.statics.len()
        )?;
        for c in &self.calls {
            match c.callee {
                Callee::Kernel(k) => writeln!(f, "  {}({})", self.kernels[k].name, list(&c.args))?,
                Callee::Host(h) => {
                    let p = &self.hosts[h].prim;
                    let params = p.params();
                    let params = if params.is_empty() { params } else { format!("[{params}]") };
                    writeln!(f, "  host {}{params}({})", p.name(), list(&c.args))?
                }
            }
        }
        for r in blocks::runs(self) {
            let leads = r.leads.iter().map(|l| l.to_string()).collect::<Vec<_>>().join(", ");
            writeln!(f, "  calls {}..{} in blocks of {} points (leads {leads})", r.calls.start, r.calls.end, r.block)?;
        }
        // Interior segments at the lanes this unit renders with (see
        // `kernel::interior`): constant-size rendering.
        let lanes = super::unit_lanes(&self.kernels);
        for k in &self.kernels {
            let Some(seg) = super::interior::segment(k, lanes) else { continue };
            let reused = super::interior::reuse_plan(k, &seg, lanes)
                .map_or(0, |p| p.how.iter().filter(|h| matches!(h, super::interior::Reuse::Shift { .. })).count());
            writeln!(
                f,
                "  {}: points {}..{} run without window tests, {reused} values taken from the previous vector ({lanes} lanes)",
                k.name, seg.lo, seg.hi
            )?;
        }
        let outs: Vec<Loc> = (0..self.carry_outs).map(Loc::CarryOut).chain((0..self.n_ys).map(Loc::Ys)).collect();
        for (o, l) in outs.iter().zip(&self.out_loc) {
            if o != l {
                writeln!(f, "  {o} = {l}")?;
            }
        }
        writeln!(f, "}}")?;
        let called: std::collections::BTreeSet<usize> = self
            .calls
            .iter()
            .filter_map(|c| match c.callee {
                Callee::Kernel(k) => Some(k),
                Callee::Host(_) => None,
            })
            .collect();
        for k in called {
            write!(f, "\n{}\n", self.kernels[k])?;
        }
        Ok(())
    }
}
