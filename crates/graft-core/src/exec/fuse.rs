//! Elementwise fusion: an executor planning decision (the IR is untouched).
//!
//! A group is also the unit the kernel compiler works on: `kernel::lower`
//! turns each group into one kernel of the kernel IR, compiled to native
//! code (see `crate::kernel`). What this module describes is how the
//! interpreter runs a group: always when compilation is off, and until the
//! group's native kernel is ready otherwise; both give the same bits.
//!
//! Unfused, a chain like `tanh(x * 2 + 1)` makes one full pass over memory
//! per primitive, each reading and writing whole tensors. A fused group
//! instead walks the element range once, in cache-sized blocks, running every
//! op of the group on a block before moving on, so intermediates stay in
//! L1/L2 and only the group's inputs and materialised results touch memory.
//!
//! # What fuses
//! - Elementwise primitives: `Unary`, `Binary`, `Compare`, `Select`, `Fma`,
//!   `Convert`, `StopGradient`, grouped by element count `n` (all operands
//!   and results of such an equation have the same count; shapes may differ
//!   between members, since every value of a group is processed as its flat
//!   row-major data).
//! - Splats: `broadcast_in_dim` of a one-element operand (rank 0, or any
//!   shape of size 1) to `n > 1` elements. Every output element is that one
//!   element, so a splat needs no strided indexing: when only the group reads
//!   it, it is a per-task buffer of one block filled once per task (never a
//!   full-size buffer). Recognised by primitive name, so the planner does not
//!   depend on the shape family's types.
//! - Rank-0 `constant`s read only by splats of fused groups are evaluated
//!   once at plan time and dropped from the schedule (no buffer, no kernel
//!   per run), so `x * 2.0 + 1.0` (constant -> broadcast_in_dim -> mul, ...)
//!   fuses completely.
//!
//! # Grouping (greedy, one pass over the equations)
//! Several groups may be open at once, one per element count. A fusable
//! equation joins the open group of its count (or opens one). Any other
//! equation with small results (at most [`HOIST_MAX_BYTES`]) is scheduled
//! immediately, *before* the open groups, unless it reads a value of an
//! open group, in which case that group is closed (scheduled) first; one
//! with larger results closes every open group, so heavy operations keep
//! their program order. A fusable equation reading a group of another count
//! closes that group likewise. This is a valid topological reordering:
//! open groups never read each other's values (reading one closes it), an
//! equation hoisted before a group does not read the group, and later
//! members may read the hoisted equation's results. Constants, scalar
//! arithmetic and interleaved chains of other sizes therefore do not split
//! a chain.
//! A group of one equation, or of splats only, runs as plain equations.
//!
//! # Materialisation and memory
//! A value defined in a group is *materialised* (given a full-size buffer
//! from the pool, exactly like an unfused result) when a function output or
//! an equation outside the group reads it; members after it read it back
//! from that buffer's block. Every other member value lives only in per-block
//! scratch. Scratch slots are register-allocated: a slot is reused once the
//! value in it has had its last reader in the group. `RunStats::peak_bytes`
//! counts full-size buffers only; per-task scratch (a few slots of one block,
//! tens of KiB) is not counted.
//!
//! A group takes all its result buffers before it runs and releases its
//! operands after, so a group with several materialised results whose
//! operands die inside it can hold a little more at once than the unfused
//! schedule (which frees an operand before allocating later results). For
//! chains, where intermediates are read only inside the group, fusion only
//! removes buffers.
//!
//! # Execution
//! The range `0..n` is cut into blocks of `block` elements (sized so one
//! block of everything the group touches fits in about [`BLOCK_BUDGET`]
//! bytes, within [`MIN_BLOCK`]..=[`MAX_BLOCK`]). When the work is large the blocks are
//! split into contiguous tasks run in parallel with rayon; each task
//! takes its scratch once (kept by the group from an earlier run, else
//! allocated; handed back afterwards) and walks its blocks in order. Each op runs the
//! same `eval_block` function its unfused kernel runs, on the same elements,
//! so results are bitwise identical to unfused execution (up to which NaN
//! payload propagates) and independent of
//! block size and thread count.

use super::ExecOptions;
use crate::dtype::DType;
use crate::error::ExecError;
use crate::ir::{Eqn, Func, Value};
use crate::ops::kernel::{parallel_tasks, BlockMut, BlockRef, MAX_BLOCK_INPUTS};
use crate::ops::{Op, Prim};
use crate::tensor::{Storage, Tensor};
use rayon::prelude::*;
use std::collections::HashMap;

/// Bytes one block of a group aims to touch (scratch slots, splat buffers,
/// and the blocks of its inputs and materialised results): about L1d plus a
/// little, so every op of the group finds its operands in L1/L2. Measured
/// flat (within noise) between 1024 and 16384 elements for 10-op f32 chains.
pub const BLOCK_BUDGET: usize = 64 << 10;
/// Fewest elements per block: below this, per-block dispatch overhead shows.
pub const MIN_BLOCK: usize = 1024;
/// Most elements per block.
pub const MAX_BLOCK: usize = 8192;

/// A non-fusable equation producing at most this many bytes may run before
/// the open groups it does not read (so constants, scalar arithmetic and
/// small reductions between chain members do not split the chain); a
/// larger one closes every open group, keeping program order around heavy
/// operations so fusion does not stretch buffer lifetimes across them.
pub const HOIST_MAX_BYTES: usize = 4096;

/// One unit of the schedule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    /// An equation run by its own kernel.
    Eqn(usize),
    /// A fused group (index into [`Plan::groups`]).
    Group(usize),
}

/// The executor's schedule: every equation appears exactly once, either as
/// a step, inside a group, or folded into a group as a plan-time constant.
#[derive(Debug)]
pub(crate) struct Plan {
    pub(crate) steps: Vec<Step>,
    pub(crate) groups: Vec<Group>,
    /// Runs of steps that also have a row-kernel form (see
    /// `kernel::rows`), sorted by start, non-overlapping. Filled by
    /// `kernel::prepare`; the steps run whenever the kernel is not ready.
    pub(crate) regions: Vec<crate::kernel::rows::Region>,
}

impl Plan {
    /// For each group, whether it lies inside a region (such groups run
    /// only until their region's kernel is ready, so they are not compiled).
    pub(crate) fn groups_in_regions(&self) -> Vec<bool> {
        let mut inside = vec![false; self.groups.len()];
        for r in &self.regions {
            for step in &self.steps[r.start..r.end] {
                if let Step::Group(g) = *step {
                    inside[g] = true;
                }
            }
        }
        inside
    }
}

/// The one-element operand of a splat.
#[derive(Debug)]
pub(crate) enum Scalar {
    /// Read from the environment at run time.
    Value(Value),
    /// A `constant` evaluated at plan time.
    Folded(Tensor),
}

/// Where a member reads or writes its block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Loc {
    /// Block of an external full-size operand (`Group::inputs`).
    Input(usize),
    /// Block of a materialised result (`Group::outputs`).
    Output(usize),
    /// A reusable per-block scratch slot.
    Scratch(usize),
    /// A per-task buffer holding a splat (filled once per task).
    Splat(usize),
}

#[derive(Debug)]
enum Work {
    /// Run an elementwise primitive; `out` is `Output` or `Scratch`.
    Op { prim: Prim, ins: Vec<Loc>, out: Loc },
    /// Write a materialised splat's block.
    Fill { scalar: usize, out: usize },
    /// Gather a layout member's block from a whole input buffer.
    Gather { input: usize, map: StridedMap, out: Loc },
}

/// A fused group of elementwise equations over `n` elements.
#[derive(Debug)]
pub(crate) struct Group {
    /// Elements of each member's result.
    pub(crate) n: usize,
    block: usize,
    /// Member equations, in schedule order.
    pub(crate) eqns: Vec<usize>,
    work: Vec<Work>,
    /// Operands defined outside the group: full-size ones read in step,
    /// and the whole operands of layout members (any size).
    pub(crate) inputs: Vec<Value>,
    /// Element count of each input.
    pub(crate) input_len: Vec<usize>,
    /// One-element operands of the group's splats.
    pub(crate) scalars: Vec<Scalar>,
    /// Member values that get full-size buffers (read after the group or returned).
    pub(crate) outputs: Vec<Value>,
    /// Dtypes of the scratch slots.
    slots: Vec<DType>,
    /// Per-task splat buffers: (scalar index, dtype).
    splats: Vec<(usize, DType)>,
    /// Native code for this group, once compiled (`None`: no kernel form).
    pub(crate) native: Option<std::sync::Arc<crate::kernel::native::Slot>>,
    /// Scratch and splat buffers of finished tasks, reused by later runs
    /// (a group inside a loop body runs once per step; allocating and
    /// zeroing its buffers each time showed as ~15% of small loops).
    spare: std::sync::Mutex<Vec<TaskBufs>>,
    /// Per output: the inputs whose buffer its native kernel may write in
    /// place when the input dies here (`kernel::in_place_candidates`);
    /// empty without native code.
    pub(crate) in_place: Vec<Vec<usize>>,
}

/// One task's scratch slots and splat buffers, each of `cap` elements.
#[derive(Debug)]
struct TaskBufs {
    cap: usize,
    scratch: Vec<Storage>,
    splats: Vec<Storage>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// An elementwise primitive over `n` elements.
    Elementwise(usize),
    /// A one-element operand broadcast to `n` elements.
    Splat(usize),
    /// A layout operation over `n` result elements whose every element is
    /// one element of the operand at an affine address ([`strided_map`]):
    /// broadcast, transpose, slice, reverse. Runs as a gather, no copy.
    Layout(usize),
    /// Anything else.
    Other,
}

pub(crate) fn classify(func: &Func, eqn: &Eqn) -> Kind {
    if eqn.outputs.len() != 1 {
        return Kind::Other;
    }
    let n = func.ty(eqn.outputs[0]).numel();
    match &eqn.prim {
        Prim::Unary(_)
        | Prim::Binary(_)
        | Prim::Compare(_)
        | Prim::Select(_)
        | Prim::Fma(_)
        | Prim::Convert(_)
        | Prim::StopGradient(_)
            if eqn.inputs.len() <= MAX_BLOCK_INPUTS =>
        {
            Kind::Elementwise(n)
        }
        // A reshape keeps the row-major element order: the identity on flat data.
        Prim::Reshape(_) if n > 0 => Kind::Elementwise(n),
        // Reachable once the shape family registers `broadcast_in_dim`.
        #[allow(unreachable_patterns)]
        // A splat to one element is a copy, and its operand could be a member
        // of the same group; it is not worth a special case.
        p if p.name() == "broadcast_in_dim"
            && eqn.inputs.len() == 1
            && func.ty(eqn.inputs[0]).numel() == 1
            && n > 1 =>
        {
            Kind::Splat(n)
        }
        _ if n > 1 && eqn.inputs.len() == 1 && strided_map(func, eqn).is_some() => Kind::Layout(n),
        #[allow(unreachable_patterns)]
        _ => Kind::Other,
    }
}

/// Where a layout operation reads: result element `i` (row-major over
/// `dims`, the result shape) is operand element
/// `offset + sum_k coord_k(i) * strides[k]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StridedMap {
    pub(crate) dims: Vec<usize>,
    pub(crate) strides: Vec<isize>,
    pub(crate) offset: isize,
}

/// The [`StridedMap`] of a `broadcast_in_dim`, `transpose`, `slice` or
/// `reverse` equation (`None` for anything else).
pub(crate) fn strided_map(func: &Func, eqn: &Eqn) -> Option<StridedMap> {
    let src = func.ty(*eqn.inputs.first()?);
    let out = func.ty(*eqn.outputs.first()?);
    let rank = src.shape.len();
    let mut row = vec![1isize; rank];
    for k in (0..rank.saturating_sub(1)).rev() {
        row[k] = row[k + 1] * src.shape[k + 1] as isize;
    }
    let dims = out.shape.clone();
    let (strides, offset) = match &eqn.prim {
        Prim::BroadcastInDim(p) => {
            let mut st = vec![0isize; dims.len()];
            for (k, &d) in p.dims.iter().enumerate() {
                if src.shape[k] != 1 {
                    st[d] = row[k];
                }
            }
            (st, 0)
        }
        Prim::Transpose(p) => (p.perm.iter().map(|&k| row[k]).collect(), 0),
        Prim::Slice(p) => {
            let st = (0..rank).map(|k| row[k] * p.stride[k] as isize).collect();
            (st, (0..rank).map(|k| row[k] * p.start[k] as isize).sum())
        }
        Prim::Reverse(p) => {
            let mut st = row.clone();
            let mut off = 0isize;
            for &k in &p.axes {
                st[k] = -row[k];
                off += row[k] * (src.shape[k] as isize - 1);
            }
            (st, off)
        }
        _ => return None,
    };
    (strides.len() == dims.len()).then_some(StridedMap { dims, strides, offset })
}

/// True for a rank-0 (or one-element) `constant`: cheap to evaluate at plan time.
fn is_scalar_constant(func: &Func, eqn: &Eqn) -> bool {
    eqn.prim.name() == "constant"
        && eqn.inputs.is_empty()
        && eqn.outputs.len() == 1
        && func.ty(eqn.outputs[0]).numel() == 1
}

/// Gives every elementwise reader of a splat (a one-element value broadcast
/// to many) its own copy of the splat, placed just before the reader.
///
/// Why: a splat costs nothing inside a fused group (its operand is read as
/// a scalar), but one that lands in another group than its reader (shared
/// by two groups, or defined early and closed into a group that a layout
/// operation ended) is that group's member and output: the group stores
/// the whole broadcast array (`n` copies of one number) for the reader's
/// group to load back. Reverse-mode
/// rules and the language's literals make such shared splats everywhere (a
/// step size `h` broadcast once and used by each stage of an ODE solver).
/// After this pass each group builds its own splat and none is stored; the
/// original stays only for readers that are not elementwise (they would
/// materialise it anyway) and when it is returned. Results are unchanged:
/// every copy computes the same elements. `None` when nothing changes.
pub(crate) fn unshare_splats(func: &Func) -> Option<Func> {
    let kinds: Vec<Kind> = func.eqns.iter().map(|e| classify(func, e)).collect();
    let splat: Vec<bool> = kinds.iter().map(|k| matches!(k, Kind::Splat(_))).collect();
    let elementwise: Vec<bool> = kinds.iter().map(|k| matches!(k, Kind::Elementwise(_))).collect();
    // Splat values with at least two reading equations, and whether one of
    // them (or the function's result) needs the original.
    let mut n_readers = vec![0usize; func.n_values()];
    let mut keep = vec![false; func.n_values()];
    for v in &func.outputs {
        keep[v.index()] = true;
    }
    let mut producer: Vec<Option<usize>> = vec![None; func.n_values()];
    for (i, e) in func.eqns.iter().enumerate() {
        if splat[i] {
            producer[e.outputs[0].index()] = Some(i);
        }
    }
    for (i, e) in func.eqns.iter().enumerate() {
        let mut seen: Vec<Value> = Vec::new();
        for &v in &e.inputs {
            if producer[v.index()].is_some() && !seen.contains(&v) {
                seen.push(v);
                n_readers[v.index()] += 1;
                if !elementwise[i] {
                    keep[v.index()] = true;
                }
            }
        }
    }
    let shared = |v: Value| producer[v.index()].is_some() && n_readers[v.index()] >= 1;
    if !func.eqns.iter().any(|e| e.inputs.iter().any(|&v| shared(v))) {
        return None;
    }
    let mut out = func.clone();
    out.eqns = Vec::with_capacity(func.eqns.len());
    for (i, e) in func.eqns.iter().enumerate() {
        if splat[i] && shared(e.outputs[0]) && !keep[e.outputs[0].index()] {
            continue; // every reader gets its own copy
        }
        let mut e = e.clone();
        if elementwise[i] {
            let mut copies: Vec<(Value, Value)> = Vec::new();
            for v in e.inputs.iter_mut() {
                if !shared(*v) {
                    continue;
                }
                if let Some(&(_, c)) = copies.iter().find(|(o, _)| o == v) {
                    *v = c;
                    continue;
                }
                let src = &func.eqns[producer[v.index()].expect("internal error: shared values are splats")];
                let c = Value(out.types.len() as u32);
                out.types.push(func.ty(*v).clone());
                if let Some(name) = func.names.get(*v) {
                    out.names.set(c, name.clone());
                }
                let mut copy = src.clone();
                copy.outputs = vec![c];
                out.eqns.push(copy);
                copies.push((*v, c));
                *v = c;
            }
        }
        out.eqns.push(e);
    }
    Some(out)
}

/// Plans the schedule. With fusion off every equation is its own step.
pub(crate) fn plan(func: &Func, opts: &ExecOptions) -> Plan {
    let eqn_steps = || (0..func.eqns.len()).map(Step::Eqn).collect();
    if !opts.fuse {
        return Plan { steps: eqn_steps(), groups: Vec::new(), regions: Vec::new() };
    }
    let kinds: Vec<Kind> = func.eqns.iter().map(|e| classify(func, e)).collect();

    // 1. Greedy grouping into raw groups (lists of equations).
    let mut raw: Vec<Vec<usize>> = Vec::new();
    let mut open: Vec<(usize, usize)> = Vec::new(); // (n, raw group id), in opening order
    let mut owner: Vec<Option<usize>> = vec![None; func.n_values()];
    let mut steps: Vec<Step> = Vec::new(); // Step::Group holds a raw id for now
    let close = |g: usize, open: &mut Vec<(usize, usize)>, steps: &mut Vec<Step>| {
        open.retain(|&(_, id)| id != g);
        steps.push(Step::Group(g));
    };
    for (i, eqn) in func.eqns.iter().enumerate() {
        let mut reads: Vec<usize> = eqn
            .inputs
            .iter()
            .filter_map(|v| owner[v.index()])
            .filter(|g| open.iter().any(|&(_, id)| id == *g))
            .collect();
        reads.sort_unstable();
        reads.dedup();
        match kinds[i] {
            Kind::Elementwise(n) | Kind::Splat(n) | Kind::Layout(n) => {
                // A layout member reads its operand at arbitrary addresses,
                // so the operand must be complete: close its group, whatever its count.
                let layout = matches!(kinds[i], Kind::Layout(_));
                for &g in &reads {
                    if open.iter().any(|&(m, id)| id == g && (m != n || layout)) {
                        close(g, &mut open, &mut steps);
                    }
                }
                let g = match open.iter().find(|&&(m, _)| m == n) {
                    Some(&(_, g)) => g,
                    None => {
                        raw.push(Vec::new());
                        open.push((n, raw.len() - 1));
                        raw.len() - 1
                    }
                };
                raw[g].push(i);
                owner[eqn.outputs[0].index()] = Some(g);
            }
            Kind::Other => {
                let bytes: usize = eqn.outputs.iter().map(|&v| func.ty(v).size_bytes()).sum();
                if bytes > HOIST_MAX_BYTES {
                    reads = open.iter().map(|&(_, g)| g).collect();
                    reads.sort_unstable();
                }
                for &g in &reads {
                    close(g, &mut open, &mut steps);
                }
                steps.push(Step::Eqn(i));
            }
        }
    }
    while let Some(&(_, g)) = open.first() {
        close(g, &mut open, &mut steps);
    }

    // 2. Keep groups worth fusing; expand the rest into plain steps.
    let fused = |eqns: &[usize]| eqns.len() >= 2 && eqns.iter().any(|&i| matches!(kinds[i], Kind::Elementwise(_)));
    let mut eqn_group: Vec<Option<usize>> = vec![None; func.eqns.len()];
    let mut members: Vec<Vec<usize>> = Vec::new();
    let mut final_steps = Vec::with_capacity(steps.len());
    for step in steps {
        match step {
            Step::Group(g) if fused(&raw[g]) => {
                for &i in &raw[g] {
                    eqn_group[i] = Some(members.len());
                }
                final_steps.push(Step::Group(members.len()));
                members.push(std::mem::take(&mut raw[g]));
            }
            Step::Group(g) => final_steps.extend(raw[g].iter().map(|&i| Step::Eqn(i))),
            s => final_steps.push(s),
        }
    }
    if members.is_empty() {
        return Plan { steps: eqn_steps(), groups: Vec::new(), regions: Vec::new() };
    }

    // 3. Readers of every value (equation indices), and function outputs.
    let mut readers: Vec<Vec<usize>> = vec![Vec::new(); func.n_values()];
    for (i, eqn) in func.eqns.iter().enumerate() {
        for &v in &eqn.inputs {
            if readers[v.index()].last() != Some(&i) {
                readers[v.index()].push(i);
            }
        }
    }
    let mut returned = vec![false; func.n_values()];
    for &v in &func.outputs {
        returned[v.index()] = true;
    }

    // 4. Fold scalar constants read only by splats inside fused groups.
    // A constant read by several groups is copied into each (it is one element).
    let mut folded: HashMap<Value, Tensor> = HashMap::new();
    final_steps.retain(|&s| {
        let Step::Eqn(i) = s else { return true };
        let eqn = &func.eqns[i];
        let v = match eqn.outputs.first() {
            Some(&v) if is_scalar_constant(func, eqn) && !returned[v.index()] => v,
            _ => return true,
        };
        let rs = &readers[v.index()];
        if rs.is_empty() || !rs.iter().all(|&r| eqn_group[r].is_some() && matches!(kinds[r], Kind::Splat(_))) {
            return true;
        }
        let mut t = Tensor::zeros(func.ty(v));
        if eqn.prim.kernel(&[], std::slice::from_mut(&mut t)).is_err() {
            return true; // leave it to run (and report) at run time
        }
        folded.insert(v, t);
        false
    });

    // 5. Lay out each group.
    let groups = members
        .into_iter()
        .enumerate()
        .map(|(g, eqns)| layout(func, opts, g, eqns, &kinds, &eqn_group, &readers, &returned, &folded))
        .collect();
    Plan { steps: final_steps, groups, regions: Vec::new() }
}

/// Decides where every member reads and writes, allocates scratch slots and
/// picks the block size.
fn layout(
    func: &Func,
    opts: &ExecOptions,
    g: usize,
    eqns: Vec<usize>,
    kinds: &[Kind],
    eqn_group: &[Option<usize>],
    readers: &[Vec<usize>],
    returned: &[bool],
    folded: &HashMap<Value, Tensor>,
) -> Group {
    let n = match kinds[eqns[0]] {
        Kind::Elementwise(n) | Kind::Splat(n) | Kind::Layout(n) => n,
        Kind::Other => unreachable!("internal error: groups hold only fusable equations"),
    };
    let mut inputs: Vec<Value> = Vec::new();
    let mut scalars: Vec<Scalar> = Vec::new();
    let mut scalar_of: HashMap<Value, usize> = HashMap::new();
    let mut outputs: Vec<Value> = Vec::new();
    let mut splats: Vec<(usize, DType)> = Vec::new();
    let mut loc: HashMap<Value, Loc> = HashMap::new();
    // Scratch values get virtual ids first (one per value), slots below.
    let mut virt_dtype: Vec<DType> = Vec::new();
    let mut work: Vec<Work> = Vec::new();
    // Where a member's result goes: a full-size buffer if it escapes the
    // group, else a (virtual) scratch slot.
    let place = |escapes: bool, v: Value, outputs: &mut Vec<Value>, virt: &mut Vec<DType>| {
        if escapes {
            outputs.push(v);
            Loc::Output(outputs.len() - 1)
        } else {
            virt.push(func.ty(v).dtype);
            Loc::Scratch(virt.len() - 1)
        }
    };

    for &i in &eqns {
        let eqn = &func.eqns[i];
        let v = eqn.outputs[0];
        let rs = &readers[v.index()];
        let escapes = returned[v.index()] || rs.iter().any(|&r| eqn_group[r] != Some(g));
        if let Kind::Splat(_) = kinds[i] {
            let src = eqn.inputs[0];
            let s = *scalar_of.entry(src).or_insert_with(|| {
                scalars.push(match folded.get(&src) {
                    Some(t) => Scalar::Folded(t.clone()),
                    None => Scalar::Value(src),
                });
                scalars.len() - 1
            });
            if escapes {
                outputs.push(v);
                loc.insert(v, Loc::Output(outputs.len() - 1));
                work.push(Work::Fill { scalar: s, out: outputs.len() - 1 });
            } else if !rs.is_empty() {
                splats.push((s, func.ty(v).dtype));
                loc.insert(v, Loc::Splat(splats.len() - 1));
            }
            continue;
        }
        if let Kind::Layout(_) = kinds[i] {
            let src = eqn.inputs[0];
            let k = inputs.iter().position(|w| *w == src).unwrap_or_else(|| {
                inputs.push(src);
                inputs.len() - 1
            });
            let out = place(escapes, v, &mut outputs, &mut virt_dtype);
            loc.insert(v, out);
            let map = strided_map(func, eqn).expect("internal error: layout members have a strided map");
            work.push(Work::Gather { input: k, map, out });
            continue;
        }
        let ins = eqn
            .inputs
            .iter()
            .map(|u| match loc.get(u) {
                Some(&l) => l,
                None => {
                    let k = inputs.iter().position(|w| w == u).unwrap_or_else(|| {
                        inputs.push(*u);
                        inputs.len() - 1
                    });
                    Loc::Input(k)
                }
            })
            .collect();
        let out = place(escapes, v, &mut outputs, &mut virt_dtype);
        loc.insert(v, out);
        work.push(Work::Op { prim: eqn.prim.clone(), ins, out });
    }
    let slots = allocate_slots(&mut work, &virt_dtype);

    // Bytes a block touches per element: scratch and splat buffers plus the
    // streamed blocks of inputs and materialised results.
    let size = |v: &Value| func.ty(*v).dtype.size_bytes();
    let block_bpe: usize = slots.iter().map(|d| d.size_bytes()).sum::<usize>()
        + splats.iter().map(|(_, d)| d.size_bytes()).sum::<usize>()
        + inputs.iter().map(size).sum::<usize>()
        + outputs.iter().map(size).sum::<usize>();
    let block = match opts.block_elems {
        Some(b) => b.max(1),
        None => {
            let b = BLOCK_BUDGET / block_bpe.max(1);
            (b.clamp(MIN_BLOCK, MAX_BLOCK) / 256) * 256
        }
    };
    let input_len = inputs.iter().map(|v| func.ty(*v).numel()).collect();
    Group {
        n,
        block,
        eqns,
        work,
        inputs,
        input_len,
        scalars,
        outputs,
        slots,
        splats,
        native: None,
        spare: Default::default(),
        in_place: Vec::new(),
    }
}

/// Linear-scan slot allocation: virtual scratch value `k` gets a slot of its
/// dtype that is free from its definition to its last reader. A result never
/// shares a slot with an operand of the same op (the slot is assigned before
/// the op's operands are freed). Rewrites `Loc::Scratch` to physical slots
/// and returns their dtypes.
fn allocate_slots(work: &mut [Work], virt_dtype: &[DType]) -> Vec<DType> {
    let mut last_use: Vec<Option<usize>> = vec![None; virt_dtype.len()];
    for (w, item) in work.iter().enumerate() {
        if let Work::Op { ins, .. } = item {
            for l in ins {
                if let Loc::Scratch(k) = *l {
                    last_use[k] = Some(w);
                }
            }
        }
    }
    let mut slots: Vec<DType> = Vec::new();
    let mut free: Vec<usize> = Vec::new();
    let mut phys: Vec<usize> = vec![usize::MAX; virt_dtype.len()];
    for (w, item) in work.iter_mut().enumerate() {
        let mut no_ins: [Loc; 0] = [];
        let (ins, out) = match item {
            Work::Op { ins, out, .. } => (&mut ins[..], out),
            Work::Gather { out, .. } => (&mut no_ins[..], out),
            Work::Fill { .. } => continue,
        };
        let mut dying: Vec<usize> = Vec::new();
        for l in ins.iter_mut() {
            if let Loc::Scratch(k) = *l {
                *l = Loc::Scratch(phys[k]);
                if last_use[k] == Some(w) {
                    dying.push(phys[k]);
                }
            }
        }
        if let Loc::Scratch(k) = *out {
            let d = virt_dtype[k];
            let s = match free.iter().position(|&s| slots[s] == d) {
                Some(p) => free.remove(p),
                None => {
                    slots.push(d);
                    slots.len() - 1
                }
            };
            phys[k] = s;
            *out = Loc::Scratch(s);
            if last_use[k].is_none() {
                dying.push(s); // never read: free again right after this op
            }
        }
        for s in dying {
            if !free.contains(&s) {
                free.push(s);
            }
        }
    }
    slots
}

impl Group {
    /// Number of member equations (splats included).
    pub(crate) fn len(&self) -> usize {
        self.eqns.len()
    }

    /// Element count of every member value.
    pub(crate) fn n(&self) -> usize {
        self.n
    }

    /// Member equations (indices into the function), in schedule order.
    pub(crate) fn eqns(&self) -> &[usize] {
        &self.eqns
    }

    /// Values the group reads from the environment.
    pub(crate) fn reads(&self) -> impl Iterator<Item = Value> + '_ {
        let scalars = self.scalars.iter().filter_map(|s| match s {
            Scalar::Value(v) => Some(*v),
            Scalar::Folded(_) => None,
        });
        self.inputs.iter().copied().chain(scalars)
    }

    /// Estimated work of one run in simple-operation units (see
    /// `kernel::ir::inst_units`): each member's operation, each gather and
    /// splat, and a load or store per input and output, at every element.
    /// How many tasks the run is split into depends on it
    /// ([`parallel_tasks`]).
    pub(crate) fn units(&self) -> usize {
        use crate::kernel::ir::{binary_units, unary_units};
        let per_point: usize = self
            .work
            .iter()
            .map(|w| match w {
                Work::Op { prim: Prim::Unary(op), .. } => unary_units(*op),
                Work::Op { prim: Prim::Binary(op), .. } => binary_units(*op),
                Work::Op { .. } | Work::Fill { .. } => 1,
                Work::Gather { .. } => 2,
            })
            .sum();
        self.n.saturating_mul(per_point + self.inputs.len() + self.outputs.len())
    }

    /// Runs the group: `inputs` match [`Group::inputs`], `scalars` match
    /// [`Group::scalars`] (folded ones included), `outs` are full-size
    /// buffers for [`Group::outputs`] whose contents get fully overwritten.
    pub(crate) fn run(&self, inputs: &[&Tensor], scalars: &[&Tensor], outs: &mut [Tensor]) -> Result<(), ExecError> {
        let n = self.n;
        if inputs.len() != self.inputs.len()
            || scalars.len() != self.scalars.len()
            || outs.len() != self.outputs.len()
            || inputs.iter().zip(&self.input_len).any(|(t, &len)| t.numel() != len)
            || scalars.iter().any(|t| t.numel() != 1)
            || outs.iter().any(|t| t.numel() != n)
        {
            return Err(ExecError::kernel("fused", "internal error: fused group operands do not match its plan"));
        }
        if let Some(f) = self.native.as_ref().and_then(|s| s.get()) {
            return self.run_native(f, inputs, scalars, outs);
        }
        let ins: Vec<BlockRef<'_>> = inputs.iter().map(|t| BlockRef::of(t)).collect();
        let sc: Vec<BlockRef<'_>> = scalars.iter().map(|t| BlockRef::of(t)).collect();
        let outs: Vec<BlockMut<'_>> = outs.iter_mut().map(BlockMut::of).collect();
        let blocks = n.div_ceil(self.block);
        let tasks = parallel_tasks(self.units());
        if blocks < 2 || tasks < 2 {
            return self.run_task(&ins, &sc, 0, n, outs);
        }
        let tasks = blocks.min(tasks);
        let per = blocks.div_ceil(tasks) * self.block;
        let tasks = n.div_ceil(per);
        let mut per_task: Vec<Vec<BlockMut<'_>>> = (0..tasks).map(|_| Vec::with_capacity(outs.len())).collect();
        for o in outs {
            for (t, c) in o.chunks(per).into_iter().enumerate() {
                per_task[t].push(c);
            }
        }
        per_task.into_par_iter().enumerate().try_for_each(|(t, o)| {
            let start = t * per;
            self.run_task(&ins, &sc, start, per.min(n - start), o)
        })
    }

    /// Runs elements `start..start + len` block by block; `outs` are the
    /// materialised results' slices for exactly that range.
    fn run_task(
        &self,
        ins: &[BlockRef<'_>],
        sc: &[BlockRef<'_>],
        start: usize,
        len: usize,
        mut outs: Vec<BlockMut<'_>>,
    ) -> Result<(), ExecError> {
        let cap = self.block.min(len);
        let reused = self.spare.lock().ok().and_then(|mut v| {
            let i = v.iter().position(|b| b.cap == cap)?;
            Some(v.swap_remove(i))
        });
        let TaskBufs { mut scratch, splats: mut splat_bufs, .. } = match reused {
            Some(b) => b,
            None => TaskBufs {
                cap,
                scratch: self.slots.iter().map(|&d| Storage::zeros(d, cap)).collect(),
                splats: self.splats.iter().map(|&(_, d)| Storage::zeros(d, cap)).collect(),
            },
        };
        // Every op overwrites its scratch block before reading it, so stale
        // contents are harmless; splats are refilled (their scalar may change).
        for (buf, &(s, _)) in splat_bufs.iter_mut().zip(&self.splats) {
            BlockMut::of_storage(buf).splat("broadcast_in_dim", sc[s])?;
        }
        let mut lo = 0;
        while lo < len {
            let bl = self.block.min(len - lo);
            let (a, b) = (start + lo, start + lo + bl);
            let mut ob: Vec<BlockMut<'_>> = outs.iter_mut().map(|o| o.reborrow().slice(lo..lo + bl)).collect();
            for item in &self.work {
                match item {
                    Work::Fill { scalar, out } => {
                        ob[*out].reborrow().splat("broadcast_in_dim", sc[*scalar])?;
                    }
                    Work::Gather { input, map, out } => {
                        let target = match *out {
                            Loc::Output(j) => ob[j].reborrow(),
                            Loc::Scratch(s) => BlockMut::of_storage(&mut scratch[s]).slice(0..bl),
                            Loc::Input(_) | Loc::Splat(_) => {
                                return Err(ExecError::kernel("gather", "internal error: result placed in an operand"))
                            }
                        };
                        gather_block(ins[*input], map, a, target)?;
                    }
                    Work::Op { prim, ins: locs, out } => {
                        // Move the result's block out of its list so the operands
                        // can borrow the rest (SSA: an op never reads its result).
                        let mut taken = match *out {
                            Loc::Output(j) => Taken::Output(j, std::mem::replace(&mut ob[j], BlockMut::empty())),
                            Loc::Scratch(s) => {
                                Taken::Slot(s, std::mem::replace(&mut scratch[s], Storage::F32(Vec::new())))
                            }
                            Loc::Input(_) | Loc::Splat(_) => {
                                return Err(ExecError::kernel(
                                    prim.name(),
                                    "internal error: result placed in an operand",
                                ))
                            }
                        };
                        let mut operands = [BlockRef::EMPTY; MAX_BLOCK_INPUTS];
                        for (o, l) in operands.iter_mut().zip(locs) {
                            *o = match *l {
                                Loc::Input(k) => ins[k].slice(a..b),
                                Loc::Output(j) => ob[j].as_ref(),
                                Loc::Scratch(s) => BlockRef::of_storage(&scratch[s]).slice(0..bl),
                                Loc::Splat(k) => BlockRef::of_storage(&splat_bufs[k]).slice(0..bl),
                            };
                        }
                        let target = match &mut taken {
                            Taken::Output(_, o) => o.reborrow(),
                            Taken::Slot(_, st) => BlockMut::of_storage(st).slice(0..bl),
                        };
                        eval_block(prim, &operands[..locs.len()], target)?;
                        match taken {
                            Taken::Output(j, o) => ob[j] = o,
                            Taken::Slot(s, st) => scratch[s] = st,
                        }
                    }
                }
            }
            lo += bl;
        }
        if let Ok(mut v) = self.spare.lock() {
            // At most one set per task a run can have (bounded memory).
            if v.len() < rayon::current_num_threads() * 4 {
                v.push(TaskBufs { cap, scratch, splats: splat_bufs });
            }
        }
        Ok(())
    }
}

/// A result place moved out of its list while an op writes it.
enum Taken<'b> {
    Output(usize, BlockMut<'b>),
    Slot(usize, Storage),
}

/// Runs one elementwise primitive on one block, through the family's own
/// block function (the same code its unfused kernel runs).
fn eval_block(prim: &Prim, ins: &[BlockRef<'_>], out: BlockMut<'_>) -> Result<(), ExecError> {
    match prim {
        Prim::Unary(p) => p.eval_block(ins, out),
        Prim::Binary(p) => p.eval_block(ins, out),
        Prim::Compare(p) => p.eval_block(ins, out),
        Prim::Select(p) => p.eval_block(ins, out),
        Prim::Fma(p) => p.eval_block(ins, out),
        Prim::Convert(p) => p.eval_block(ins, out),
        Prim::StopGradient(p) => p.eval_block(ins, out),
        Prim::Reshape(_) => crate::ops::cast::StopGradient.eval_block(ins, out),
        #[allow(unreachable_patterns)]
        p => Err(ExecError::kernel(p.name(), "internal error: not an elementwise primitive")),
    }
}

impl Group {
    /// Runs the group's compiled kernel. Arguments follow the kernel's
    /// order: inputs, run-time scalars (folded ones are literals in the
    /// kernel), outputs; `run` has checked their element counts, and the
    /// dtypes are the values' own (the plan was built from their types).
    fn run_native(
        &self,
        f: &crate::kernel::native::NativeFn,
        inputs: &[&Tensor],
        scalars: &[&Tensor],
        outs: &mut [Tensor],
    ) -> Result<(), ExecError> {
        let inputs: Vec<Result<&Tensor, usize>> = inputs.iter().map(|&t| Ok(t)).collect();
        self.run_native_aliased(f, &inputs, scalars, outs);
        Ok(())
    }

    fn run_native_aliased(
        &self,
        f: &crate::kernel::native::NativeFn,
        inputs: &[Result<&Tensor, usize>],
        scalars: &[&Tensor],
        outs: &mut [Tensor],
    ) {
        let mut reads: Vec<Result<&Tensor, usize>> = inputs.to_vec();
        reads.extend(
            scalars.iter().zip(&self.scalars).filter(|(_, s)| matches!(s, Scalar::Value(_))).map(|(t, _)| Ok(*t)),
        );
        crate::kernel::native::run_group(f, self.n, &reads, outs, parallel_tasks(self.units()));
    }

    /// Runs the group's native code `f` with some outputs written over
    /// inputs that die here: `inputs[j] = Err(k)` when output `k`'s buffer
    /// (`outs[k]`) holds input `j`'s values, which requires `j` to be in
    /// `in_place[k]`. Otherwise as [`Group::run`].
    pub(crate) fn run_in_place(
        &self,
        f: &crate::kernel::native::NativeFn,
        inputs: &[Result<&Tensor, usize>],
        scalars: &[&Tensor],
        outs: &mut [Tensor],
    ) -> Result<(), ExecError> {
        let n = self.n;
        let len_ok = |j: usize, r: &Result<&Tensor, usize>| match r {
            Ok(t) => t.numel() == self.input_len[j],
            Err(k) => self.in_place.get(*k).is_some_and(|c| c.contains(&j)) && outs.get(*k).is_some(),
        };
        if inputs.len() != self.inputs.len()
            || scalars.len() != self.scalars.len()
            || outs.len() != self.outputs.len()
            || inputs.iter().enumerate().any(|(j, r)| !len_ok(j, r))
            || scalars.iter().any(|t| t.numel() != 1)
            || outs.iter().any(|t| t.numel() != n)
        {
            return Err(ExecError::kernel("fused", "internal error: in-place group operands do not match its plan"));
        }
        self.run_native_aliased(f, inputs, scalars, outs);
        Ok(())
    }
}

/// `out[j] = src[map(a + j)]` for the block starting at point `a`: walks
/// the result coordinates like an odometer, so each element costs an add.
fn gather_block(src: BlockRef<'_>, map: &StridedMap, a: usize, out: BlockMut<'_>) -> Result<(), ExecError> {
    fn go<T: Copy>(src: &[T], map: &StridedMap, a: usize, out: &mut [T]) -> Result<(), ExecError> {
        let rank = map.dims.len();
        let mut coord = vec![0usize; rank];
        let mut rest = a;
        let mut e = map.offset;
        for k in (0..rank).rev() {
            let d = map.dims[k].max(1);
            coord[k] = rest % d;
            rest /= d;
            e += coord[k] as isize * map.strides[k];
        }
        for o in out.iter_mut() {
            *o = *usize::try_from(e)
                .ok()
                .and_then(|e| src.get(e))
                .ok_or_else(|| ExecError::kernel("gather", "internal error: layout address out of range"))?;
            // Advance the odometer.
            let mut k = rank;
            while k > 0 {
                k -= 1;
                coord[k] += 1;
                e += map.strides[k];
                if coord[k] < map.dims[k] {
                    break;
                }
                e -= map.strides[k] * map.dims[k] as isize;
                coord[k] = 0;
            }
        }
        Ok(())
    }
    match (src, out) {
        (BlockRef::F16(s), BlockMut::F16(o)) => go(s, map, a, o),
        (BlockRef::F32(s), BlockMut::F32(o)) => go(s, map, a, o),
        (BlockRef::F64(s), BlockMut::F64(o)) => go(s, map, a, o),
        (BlockRef::I32(s), BlockMut::I32(o)) => go(s, map, a, o),
        (BlockRef::I64(s), BlockMut::I64(o)) => go(s, map, a, o),
        (BlockRef::U32(s), BlockMut::U32(o)) => go(s, map, a, o),
        (BlockRef::Bool(s), BlockMut::Bool(o)) => go(s, map, a, o),
        _ => Err(ExecError::kernel("gather", "internal error: operand and result dtypes differ")),
    }
}
