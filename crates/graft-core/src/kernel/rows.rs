//! Row fusion: runs of the schedule that work row by row become one row
//! kernel (see `ir`, "Row kernels").
//!
//! Softmax, log-softmax, layer norm, logsumexp and cross-entropy are
//! reductions over the last axis surrounded by elementwise work on the
//! reduced rows (`[rows]` values) and on the full matrix (`[rows, len]`
//! values, some of them per-row values broadcast back along the row). The
//! executor's plan runs them as several steps: each reduction on its own
//! and fused elementwise groups between, each a pass over memory. A
//! *region* is a run of consecutive steps around such a reduction in which
//! every equation is one of
//! - elementwise work on full values (`rows * len` elements) or row values
//!   (`rows` elements), with splats and layout operations of the
//!   region's external inputs (strided loads);
//! - a broadcast of a row value along its row (`[rows] -> [rows, len]`);
//! - a reduction of a full value over its trailing `len` elements (in the
//!   row form of `ops::reduce`: coalesced to `[rows, len]`, `rows >= 2`, or
//!   a full reduction of a small value), floating-point only.
//!
//! Lowering keeps the full values as an expression graph and inlines the
//! part each reduction needs into the reduction's inner body (recompute,
//! never materialise: a row of every value stays in registers or L1), row
//! values in the outer body, and one final `Map` stores the full values
//! read after the region. The region's steps stay in the plan: until the
//! row kernel is compiled (or when it cannot be), the interpreter runs
//! them, with bitwise the same results, because every element is computed
//! by the same per-element function and every reduction combines in the
//! same order (the kernel reproduces `ops::reduce`'s pairwise tree).

use super::ir::{Access, Arg, Index, Inner, Inst, Kernel, Lit, Reduction, Reg};
use crate::exec::fuse::{strided_map, Plan, Step};
use crate::ir::{Func, Value};
use crate::ops::{Op, Prim};
use crate::tensor::Tensor;
use std::collections::HashMap;

/// A region of the plan that runs as one row kernel once compiled.
#[derive(Debug)]
pub(crate) struct Region {
    /// First step of the region (index into `Plan::steps`).
    pub(crate) start: usize,
    /// One past its last step.
    pub(crate) end: usize,
    /// Points of the kernel (rows).
    pub(crate) rows: usize,
    /// Values read, in the kernel's argument order.
    pub(crate) inputs: Vec<Value>,
    /// Values written (read after the region or returned), in order.
    pub(crate) outputs: Vec<Value>,
    /// The kernel.
    pub(crate) kernel: Kernel,
    /// Its native code, once compiled.
    pub(crate) native: Option<std::sync::Arc<super::native::Slot>>,
}

/// The `(rows, len)` of a reduction in row form: a floating-point
/// `reduce_*` whose reduced axes, after dropping size-1 dimensions, are one
/// trailing block of `len >= 2` elements after `rows >= 2` kept ones.
fn row_form(func: &Func, e: usize) -> Option<(usize, usize)> {
    let eqn = &func.eqns[e];
    let Prim::Reduce(r) = &eqn.prim else { return None };
    let x = func.ty(*eqn.inputs.first()?);
    if !x.dtype.is_float() {
        return None;
    }
    let (mut rows, mut len, mut seen_reduced) = (1usize, 1usize, false);
    for (i, &d) in x.shape.iter().enumerate() {
        if d == 1 {
            continue;
        }
        if r.axes.contains(&i) {
            seen_reduced = true;
            len *= d;
        } else if seen_reduced {
            return None; // a kept axis after a reduced one
        } else {
            rows *= d;
        }
    }
    // One row (a full reduction) only where the interpreter would not split
    // it across threads either: a region runs its rows in parallel, never
    // one row's reduction.
    let one_row = rows == 1 && len < crate::ops::kernel::PAR_MIN;
    ((rows >= 2 || one_row) && len >= 2).then_some((rows, len))
}

/// The equations of a step, in schedule order.
fn step_eqns<'a>(plan: &'a Plan, step: &'a Step) -> &'a [usize] {
    match step {
        Step::Eqn(e) => std::slice::from_ref(e),
        Step::Group(g) => plan.groups[*g].eqns(),
    }
}

/// Finds the regions of a plan (non-overlapping, in step order) and
/// lowers each to a row kernel named `rk<k>`.
pub(crate) fn find_regions(func: &Func, plan: &Plan) -> Vec<Region> {
    let steps = &plan.steps;
    let mut def: Vec<Option<usize>> = vec![None; func.n_values()];
    for (i, eqn) in func.eqns.iter().enumerate() {
        for &v in &eqn.outputs {
            def[v.index()] = Some(i);
        }
    }
    let mut regions = Vec::new();
    let mut covered = vec![false; steps.len()];
    for s in 0..steps.len() {
        let Step::Eqn(e) = steps[s] else { continue };
        let Some(key) = row_form(func, e) else { continue };
        if covered[s] {
            continue;
        }
        let plausible = |t: usize| {
            !covered[t]
                && step_eqns(plan, &steps[t]).iter().all(|&e| {
                    let eqn = &func.eqns[e];
                    eqn.outputs.len() == 1 && {
                        let n = func.ty(eqn.outputs[0]).numel();
                        n == key.0 || n == key.0 * key.1
                    }
                })
        };
        let mut lo = s;
        while lo > 0 && plausible(lo - 1) {
            lo -= 1;
        }
        // Build forward; a step that does not fit before the reduction
        // restarts the region after it, one after it ends the region.
        let mut b = Builder::new(func, &def, key);
        let mut start = lo;
        let mut end = lo;
        let mut t = lo;
        while t < steps.len() && plausible(t) {
            let mut trial = b.clone();
            if trial.add_step(step_eqns(plan, &steps[t])).is_some() {
                b = trial;
                end = t + 1;
            } else if t < s {
                b = Builder::new(func, &def, key);
                start = t + 1;
                end = t + 1;
            } else {
                break;
            }
            t += 1;
        }
        if end <= s || end - start < 2 {
            continue;
        }
        let name = format!("rk{}", regions.len());
        if let Some(r) = b.finish(plan, start, end, name) {
            covered[start..end].iter_mut().for_each(|c| *c = true);
            regions.push(r);
        }
    }
    regions
}

/// Where a value of the region lives.
#[derive(Debug, Clone, Copy)]
enum Site {
    /// A full value: a node of the full-value graph.
    Full(Reg),
    /// A row value: an outer register.
    Row(Reg),
}

#[derive(Clone)]
struct Builder<'a> {
    func: &'a Func,
    def: &'a [Option<usize>],
    rows: usize,
    len: usize,
    args: Vec<Arg>,
    arg_of: HashMap<Value, u32>,
    /// The outer body (row values, reductions).
    outer: Vec<Inst>,
    /// The full-value graph: instructions of an inner body over all full
    /// values (`Outer` reads row values, `Load` external inputs).
    nodes: Vec<Inst>,
    /// The dtype of each node.
    node_dtype: Vec<crate::dtype::DType>,
    site: HashMap<Value, Site>,
    /// Values defined by the region, in definition order.
    defined: Vec<Value>,
    /// For each reduction (by outer register): the full-graph nodes its
    /// inner body computes, with their registers there.
    computed: Vec<(Reg, HashMap<Reg, Reg>)>,
}

impl<'a> Builder<'a> {
    fn new(func: &'a Func, def: &'a [Option<usize>], (rows, len): (usize, usize)) -> Self {
        Builder {
            func,
            def,
            rows,
            len,
            args: Vec::new(),
            arg_of: HashMap::new(),
            outer: Vec::new(),
            nodes: Vec::new(),
            node_dtype: Vec::new(),
            site: HashMap::new(),
            defined: Vec::new(),
            computed: Vec::new(),
        }
    }

    fn arg(&mut self, v: Value) -> u32 {
        let ty = self.func.ty(v);
        let next = self.args.len() as u32;
        *self.arg_of.entry(v).or_insert_with(|| {
            self.args.push(Arg { dtype: ty.dtype, len: ty.numel(), access: Access::Read });
            next
        })
    }

    fn push_outer(&mut self, i: Inst) -> Reg {
        self.outer.push(i);
        (self.outer.len() - 1) as Reg
    }

    fn push_node(&mut self, i: Inst, v: Value) -> Reg {
        self.nodes.push(i);
        self.node_dtype.push(self.func.ty(v).dtype);
        (self.nodes.len() - 1) as Reg
    }

    /// A one-element value as a literal (a scalar constant evaluated now)
    /// or a scalar load.
    fn scalar_inst(&mut self, v: Value) -> Option<Inst> {
        if let Some(e) = self.def[v.index()] {
            let eqn = &self.func.eqns[e];
            if eqn.prim.name() == "constant" && eqn.inputs.is_empty() {
                let mut t = Tensor::zeros(self.func.ty(v));
                eqn.prim.kernel(&[], std::slice::from_mut(&mut t)).ok()?;
                return Some(Inst::Lit(Lit::of_tensor(&t)?));
            }
        }
        if self.site.contains_key(&v) {
            return None; // a region value of one element: not a row or full value
        }
        Some(Inst::Load { arg: self.arg(v), index: Index::Scalar })
    }

    /// The full-graph node of an operand with `rows * len` elements.
    fn full(&mut self, v: Value) -> Option<Reg> {
        match self.site.get(&v) {
            Some(Site::Full(r)) => return Some(*r),
            Some(_) => return None,
            None => {}
        }
        if self.func.ty(v).numel() != self.rows * self.len {
            return None;
        }
        let arg = self.arg(v);
        let r = self.push_node(Inst::Load { arg, index: Index::Point }, v);
        self.site.insert(v, Site::Full(r));
        Some(r)
    }

    /// The outer register of an operand with `rows` elements.
    fn row(&mut self, v: Value) -> Option<Reg> {
        match self.site.get(&v) {
            Some(Site::Row(r)) => return Some(*r),
            Some(_) => return None,
            None => {}
        }
        if self.func.ty(v).numel() != self.rows {
            return None;
        }
        let arg = self.arg(v);
        let r = self.push_outer(Inst::Load { arg, index: Index::Point });
        self.site.insert(v, Site::Row(r));
        Some(r)
    }

    /// Adds one step's equations; `None` if one of them does not fit.
    fn add_step(&mut self, eqns: &[usize]) -> Option<()> {
        for &e in eqns {
            self.add_eqn(e)?;
        }
        Some(())
    }

    fn add_eqn(&mut self, e: usize) -> Option<()> {
        let func = self.func;
        let eqn = &func.eqns[e];
        let out = *eqn.outputs.first()?;
        let n = func.ty(out).numel();
        let full = n == self.rows * self.len;
        if !full && n != self.rows {
            return None;
        }
        // Operands through `full`/`row` by level; the instruction is built
        // with registers of that level.
        let site = match &eqn.prim {
            Prim::Reduce(r) => {
                if row_form(func, e) != Some((self.rows, self.len)) {
                    return None;
                }
                let x = self.full(eqn.inputs[0])?;
                let mut body = Vec::new();
                let mut map = HashMap::new();
                let value = self.emit(x, &mut body, &mut map);
                let red = Reduction { kind: r.kind, inner: Inner { len: self.len, body }, value };
                let reg = self.push_outer(Inst::Reduce(Box::new(red)));
                self.computed.push((reg, map));
                Site::Row(reg)
            }
            Prim::StopGradient(_) | Prim::Reshape(_) if full => Site::Full(self.full(eqn.inputs[0])?),
            Prim::StopGradient(_) | Prim::Reshape(_) => Site::Row(self.row(eqn.inputs[0])?),
            Prim::Binary(op) if !super::lower::has_c_form(*op, func.ty(out).dtype) => return None,
            Prim::Unary(_) | Prim::Binary(_) | Prim::Compare(_) | Prim::Select(_) | Prim::Fma(_) | Prim::Convert(_) => {
                let mut ops = Vec::with_capacity(eqn.inputs.len());
                for &v in &eqn.inputs {
                    ops.push(if full { self.full(v)? } else { self.row(v)? });
                }
                let inst = match (&eqn.prim, ops.as_slice()) {
                    (Prim::Unary(op), &[a]) => Inst::Unary(*op, a),
                    (Prim::Binary(op), &[a, b]) => Inst::Binary(*op, a, b),
                    (Prim::Compare(op), &[a, b]) => Inst::Compare(*op, a, b),
                    (Prim::Select(_), &[p, a, b]) => Inst::Select(p, a, b),
                    (Prim::Fma(_), &[a, b, c]) => Inst::Fma(a, b, c),
                    (Prim::Convert(c), &[a]) => Inst::Convert(c.dtype, a),
                    _ => return None,
                };
                if full {
                    Site::Full(self.push_node(inst, out))
                } else {
                    Site::Row(self.push_outer(inst))
                }
            }
            p if p.name() == "broadcast_in_dim" && func.ty(eqn.inputs[0]).numel() == 1 => {
                let inst = self.scalar_inst(eqn.inputs[0])?;
                if full {
                    Site::Full(self.push_node(inst, out))
                } else {
                    Site::Row(self.push_outer(inst))
                }
            }
            _ => {
                // A layout operation.
                let map = strided_map(func, eqn)?;
                let src = *eqn.inputs.first()?;
                match self.site.get(&src).copied() {
                    Some(Site::Row(r)) if full && self.is_row_broadcast(&map) => {
                        Site::Full(self.push_node(Inst::Outer(r), out))
                    }
                    Some(Site::Row(r)) if !full && is_identity(&map, self.rows) => Site::Row(r),
                    Some(_) => return None,
                    None => {
                        let arg = self.arg(src);
                        let index = Index::Strided { dims: map.dims, strides: map.strides, offset: map.offset };
                        let load = Inst::Load { arg, index };
                        if full {
                            Site::Full(self.push_node(load, out))
                        } else {
                            Site::Row(self.push_outer(load))
                        }
                    }
                }
            }
        };
        self.site.insert(out, site);
        self.defined.push(out);
        Some(())
    }

    /// True if the map sends flat point `j` of `[rows * len]` to `j / len`.
    fn is_row_broadcast(&self, map: &crate::exec::fuse::StridedMap) -> bool {
        if map.offset != 0 {
            return false;
        }
        // Split the dims at the point where the prefix product is `rows`.
        let mut prefix = 1usize;
        let mut k = 0;
        while k < map.dims.len() && prefix < self.rows {
            prefix *= map.dims[k];
            k += 1;
        }
        if prefix != self.rows {
            return false;
        }
        // Trailing dims (the row) must not move; leading dims must walk
        // the row values in order.
        if map.dims[k..].iter().zip(&map.strides[k..]).any(|(&d, &s)| d > 1 && s != 0) {
            return false;
        }
        is_identity_dims(&map.dims[..k], &map.strides[..k])
    }

    fn emit(&self, node: Reg, body: &mut Vec<Inst>, map: &mut HashMap<Reg, Reg>) -> Reg {
        if let Some(&r) = map.get(&node) {
            return r;
        }
        let mut m = |a: Reg, body: &mut Vec<Inst>| self.emit(a, body, map);
        let inst = match self.nodes[node as usize].clone() {
            Inst::Unary(op, a) => Inst::Unary(op, m(a, body)),
            Inst::Binary(op, a, b) => {
                let a = m(a, body);
                Inst::Binary(op, a, m(b, body))
            }
            Inst::Compare(op, a, b) => {
                let a = m(a, body);
                Inst::Compare(op, a, m(b, body))
            }
            Inst::Select(p, a, b) => {
                let p = m(p, body);
                let a = m(a, body);
                Inst::Select(p, a, m(b, body))
            }
            Inst::Fma(a, b, c) => {
                let a = m(a, body);
                let b = m(b, body);
                Inst::Fma(a, b, m(c, body))
            }
            Inst::Convert(to, a) => Inst::Convert(to, m(a, body)),
            other => other,
        };
        body.push(inst);
        let r = (body.len() - 1) as Reg;
        map.insert(node, r);
        r
    }

    /// Rough cost of computing a node from scratch, in simple-op units
    /// (`ir::unary_units`: a transcendental function is worth about 16
    /// adds, a division 4).
    fn cost(&self, node: Reg, memo: &mut HashMap<Reg, usize>) -> usize {
        if let Some(&c) = memo.get(&node) {
            return c;
        }
        let c = match &self.nodes[node as usize] {
            Inst::Lit(_) | Inst::Outer(_) => 0,
            Inst::Load { .. } => 1,
            Inst::Unary(op, a) => super::ir::unary_units(*op) + self.cost(*a, memo),
            Inst::Binary(op, a, b) => super::ir::binary_units(*op) + self.cost(*a, memo) + self.cost(*b, memo),
            Inst::Compare(_, a, b) => 1 + self.cost(*a, memo) + self.cost(*b, memo),
            Inst::Select(p, a, b) | Inst::Fma(p, a, b) => {
                1 + self.cost(*p, memo) + self.cost(*a, memo) + self.cost(*b, memo)
            }
            Inst::Convert(_, a) => 1 + self.cost(*a, memo),
            _ => 1,
        };
        memo.insert(node, c);
        c
    }

    /// The nodes the final map should read back from a reduction's scratch
    /// instead of recomputing (recompute vs materialise): walking from the
    /// map's roots, a node that a reduction computed and that costs at
    /// least [`KEEP_COST`] is kept (and what it needs is not visited).
    fn keep_for_map(&self, roots: &[Reg]) -> Vec<(usize, Reg)> {
        let mut memo = HashMap::new();
        let mut seen = std::collections::HashSet::new();
        let mut keep = Vec::new();
        let mut stack: Vec<Reg> = roots.to_vec();
        while let Some(n) = stack.pop() {
            if !seen.insert(n) {
                continue;
            }
            let by = self.computed.iter().position(|(_, m)| m.contains_key(&n));
            if let Some(red) = by.filter(|_| self.cost(n, &mut memo) >= KEEP_COST) {
                keep.push((red, n));
                continue;
            }
            stack.extend(self.nodes[n as usize].operands());
        }
        // Scratch is one row per kept value, on the kernel's stack.
        let bytes = |k: &(usize, Reg)| self.len * self.node_dtype_size(k.1);
        let mut total = 0;
        keep.sort_unstable();
        keep.retain(|k| {
            total += bytes(k);
            total <= KEEP_MAX_BYTES
        });
        keep
    }

    fn node_dtype_size(&self, node: Reg) -> usize {
        self.node_dtype[node as usize].size_bytes()
    }

    /// Completes the kernel: outputs for the values read after the region
    /// (full ones stored by one final map, row ones by outer stores).
    fn finish(mut self, plan: &Plan, start: usize, end: usize, name: String) -> Option<Region> {
        let func = self.func;
        let mut escapes = vec![false; func.n_values()];
        for &v in &func.outputs {
            escapes[v.index()] = true;
        }
        for (t, step) in plan.steps.iter().enumerate() {
            if (start..end).contains(&t) {
                continue;
            }
            let reads: Vec<Value> = match step {
                Step::Eqn(e) => func.eqns[*e].inputs.clone(),
                Step::Group(g) => plan.groups[*g].reads().collect(),
            };
            for v in reads {
                escapes[v.index()] = true;
            }
        }
        let inputs: Vec<Value> = {
            let mut by_arg: Vec<(u32, Value)> = self.arg_of.iter().map(|(&v, &a)| (a, v)).collect();
            by_arg.sort_unstable();
            by_arg.into_iter().map(|(_, v)| v).collect()
        };
        let mut outputs = Vec::new();
        let mut full_out: Vec<(u32, Reg)> = Vec::new();
        let mut row_out: Vec<(u32, Reg)> = Vec::new();
        for &v in &self.defined.clone() {
            if !escapes[v.index()] {
                continue;
            }
            let ty = func.ty(v);
            let arg = self.args.len() as u32;
            self.args.push(Arg { dtype: ty.dtype, len: ty.numel(), access: Access::Write });
            outputs.push(v);
            match self.site.get(&v)? {
                Site::Full(r) => full_out.push((arg, *r)),
                Site::Row(r) => row_out.push((arg, *r)),
            }
        }
        if outputs.is_empty() {
            return None;
        }
        if !full_out.is_empty() {
            let roots: Vec<Reg> = full_out.iter().map(|&(_, r)| r).collect();
            let mut body = Vec::new();
            let mut map: HashMap<Reg, Reg> = HashMap::new();
            // Kept values: saved by their reduction, restored by the map
            // (slots numbered in reduction order).
            for (slot, (red, node)) in self.keep_for_map(&roots).into_iter().enumerate() {
                let (outer_reg, computed) = &self.computed[red];
                let value = computed[&node];
                if let Some(Inst::Reduce(r)) = self.outer.get_mut(*outer_reg as usize) {
                    r.inner.body.push(Inst::Save { slot: slot as u32, value });
                }
                body.push(Inst::Restore(slot as u32));
                map.insert(node, (body.len() - 1) as Reg);
            }
            let regs: Vec<Reg> = roots.iter().map(|&r| self.emit(r, &mut body, &mut map)).collect();
            for (&(arg, _), &value) in full_out.iter().zip(&regs) {
                body.push(Inst::Store { arg, value, index: Index::Point });
            }
            self.outer.push(Inst::Map(Box::new(Inner { len: self.len, body })));
        }
        for (arg, value) in row_out {
            self.outer.push(Inst::Store { arg, value, index: Index::Point });
        }
        let kernel = Kernel { name, args: self.args, extent: self.rows, body: self.outer };
        // A kernel the verifier rejects is a planner bug: keep the steps.
        super::ir::verify(&kernel).ok()?;
        Some(Region { start, end, rows: self.rows, inputs, outputs, kernel, native: None })
    }
}

/// Least [`Builder::cost`] of a value worth keeping in scratch rather
/// than recomputing: an exp of a subtraction (softmax's numerator) is kept,
/// layer norm's `x - mean` is recomputed.
const KEEP_COST: usize = 8;

/// Most scratch bytes per row (on the kernel's stack, per task).
const KEEP_MAX_BYTES: usize = 64 << 10;

/// True if a map over `[rows]` points is the identity (a reshape).
fn is_identity(map: &crate::exec::fuse::StridedMap, rows: usize) -> bool {
    map.offset == 0 && map.dims.iter().product::<usize>() == rows && is_identity_dims(&map.dims, &map.strides)
}

/// True if `strides` are the row-major strides of `dims` (size-1 dims free).
fn is_identity_dims(dims: &[usize], strides: &[isize]) -> bool {
    let mut expect = 1isize;
    for (&d, &s) in dims.iter().zip(strides).rev() {
        if d > 1 && s != expect {
            return false;
        }
        expect *= d as isize;
    }
    true
}
