//! Accumulations hoisted out of scans: a carry that only sums a matrix
//! product per step becomes one product over the stacked steps after the
//! loop.
//!
//! Why: reverse mode through a recurrent cell accumulates each weight's
//! gradient in a carry, `w_bar' = w_bar + dot(x_t, z_bar_t)`, contracting
//! over the batch alone (16 rows in the LSTM benchmark). Every step then
//! runs a GEMM whose inner dimension is tiny (packing dominates) and
//! reads and writes the whole accumulator once more. Summed over the
//! steps it is one product contracting over (step, batch):
//! `w_bar = w_bar0 + dot(xs, z_bar_s)` with `z_bar` stacked as a `ys`
//! output, a GEMM with an inner dimension of steps x batch, run once. The
//! same holds for a `reduce_sum` accumulation (a bias gradient) whose
//! operand is stacked anyway.
//!
//! The pattern, for carry `j` of a scan body: the body's output `j` is
//! `add(c, d)` (either order) where `c` is the carry's parameter, read by
//! nothing else, and `d` is `dot_general(u, v)` or `reduce_sum(u)` (under
//! any reshapes) of floats. Each operand must be known per step outside the
//! loop: an `xs` parameter (its stacked operand) or a value the body
//! computes (added as a `ys` output); a const or carry parameter is not
//! hoisted. A reduction is hoisted only when its operand is stacked anyway.
//! Stacked values added by the pass stay under [`HOIST_MAX_BYTES`].
//!
//! Numerics: the sum over steps is reassociated (the product's own order
//! instead of one add per step), so results may differ in the last bits
//! from the loop as written; like `fold_identities`' zero signs, this is
//! documented in ARCHITECTURE.md. The executor applies the pass to every
//! function before planning whatever its options, so the interpreter and
//! the native code still run the same graph and agree bitwise.

use crate::dtype::DType;
use crate::error::IrError;
use crate::ir::{lookup, Builder, Func, Value};
use crate::ops::binary::Binary;
use crate::ops::linalg::DotGeneral;
use crate::ops::reduce::{Reduce, ReduceKind};
use crate::ops::scan::{Scan, ScanOpts};
use crate::ops::Prim;
use std::sync::Arc;

/// Most bytes of new stacked `ys` one scan may get.
pub const HOIST_MAX_BYTES: usize = 64 << 20;

/// What a hoisted carry sums per step.
#[derive(Debug, Clone)]
enum Term {
    Dot(DotGeneral, Value, Value),
    Sum(Vec<usize>, Value),
}

/// One hoisted carry of a scan body.
#[derive(Debug, Clone)]
struct Hoist {
    /// Carry index.
    carry: usize,
    term: Term,
    /// The carry's parameter is the add's left operand.
    carry_first: bool,
}

/// Where a per-step operand is found outside the loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stacked {
    /// The scan's `k`-th `xs` operand.
    Xs(usize),
    /// The new body's `k`-th added `ys` output.
    New(usize),
}

/// `f` with its scans' hoistable accumulations moved after the loops (see
/// the module docs), or `None` when there are none.
pub fn hoist_accumulations(f: &Func) -> Option<Func> {
    // Each scan's plan, by equation (planned once, used by the rebuild).
    let mut plans: Vec<Option<(Vec<Hoist>, Vec<Value>)>> = f
        .eqns
        .iter()
        .map(|e| match &e.prim {
            Prim::Scan(s) => Some(plan(s)).filter(|(h, _)| !h.is_empty()),
            _ => None,
        })
        .collect();
    if plans.iter().all(Option::is_none) {
        return None;
    }
    let mut at = 0;
    let rebuilt = super::rebuild(f, |b, e, ins| {
        let planned = plans.get_mut(at).and_then(Option::take);
        at += 1;
        match (&e.prim, planned) {
            (Prim::Scan(s), Some((hoists, stacked))) => hoisted_scan(b, s, ins, &hoists, &stacked),
            (p, _) => b.emit(p.clone(), ins),
        }
    });
    rebuilt.ok()
}

/// The hoistable carries of a scan's body and the body values to stack.
fn plan(s: &Scan) -> (Vec<Hoist>, Vec<Value>) {
    let body = &*s.body;
    let (nc, nk) = (s.n_consts, s.n_carry);
    let n = body.n_values();
    let mut uses = vec![0usize; n];
    let mut def: Vec<Option<usize>> = vec![None; n];
    for (i, e) in body.eqns.iter().enumerate() {
        for &v in &e.inputs {
            uses[v.index()] += 1;
        }
        for &v in &e.outputs {
            def[v.index()] = Some(i);
        }
    }
    for &v in &body.outputs {
        uses[v.index()] += 1;
    }
    let param_pos = |v: Value| body.params.iter().position(|&p| p == v);
    let mut hoists: Vec<Hoist> = Vec::new();
    let mut dots: Vec<Hoist> = Vec::new();
    for j in 0..nk {
        let (c, o) = (body.params[nc + j], body.outputs[j]);
        if uses[c.index()] != 1 || uses[o.index()] != 1 || !matches!(body.ty(o).dtype, DType::F32 | DType::F64) {
            continue;
        }
        let Some(add) = def[o.index()].map(|i| &body.eqns[i]) else { continue };
        if !matches!(add.prim, Prim::Binary(Binary::Add)) {
            continue;
        }
        let (carry_first, d) = match add.inputs[..] {
            [a, b] if a == c && b != c => (true, b),
            [a, b] if b == c && a != c => (false, a),
            _ => continue,
        };
        // Under reshapes (a bias gradient arrives as `reshape(reduce_sum)`).
        let mut core = d;
        while let Some(e) = def[core.index()].map(|i| &body.eqns[i]) {
            match e.prim {
                Prim::Reshape(_) => core = e.inputs[0],
                _ => break,
            }
        }
        let Some(e) = def[core.index()].map(|i| &body.eqns[i]) else { continue };
        let term = match &e.prim {
            Prim::DotGeneral(p) => Term::Dot(p.clone(), e.inputs[0], e.inputs[1]),
            Prim::Reduce(Reduce { kind: ReduceKind::Sum, axes }) => Term::Sum(axes.clone(), e.inputs[0]),
            _ => continue,
        };
        // Operands known per step outside the loop: xs, or computed.
        let known = |v: Value| param_pos(v).is_none_or(|k| k >= nc + nk);
        let ok = match &term {
            Term::Dot(_, u, v) => known(*u) && known(*v),
            Term::Sum(_, u) => known(*u),
        };
        if !ok {
            continue;
        }
        let h = Hoist { carry: j, term, carry_first };
        match h.term {
            Term::Dot(..) => dots.push(h),
            Term::Sum(..) => hoists.push(h),
        }
    }
    // Values to stack: the products' operands, then the reductions whose
    // operand is stacked anyway (an `xs` or a product's operand).
    let mut stacked: Vec<Value> = Vec::new();
    let mut bytes = 0usize;
    let mut chosen: Vec<Hoist> = Vec::new();
    let computed = |v: Value| param_pos(v).is_none();
    for h in dots {
        let Term::Dot(_, u, v) = h.term else { continue };
        let new: Vec<Value> = [u, v].into_iter().filter(|&x| computed(x) && !stacked.contains(&x)).collect();
        let more: usize = new.iter().map(|&x| body.ty(x).size_bytes().saturating_mul(s.length)).sum();
        if bytes.saturating_add(more) > HOIST_MAX_BYTES {
            continue;
        }
        bytes += more;
        for x in new {
            if !stacked.contains(&x) {
                stacked.push(x);
            }
        }
        chosen.push(h);
    }
    for h in hoists {
        let Term::Sum(_, u) = h.term else { continue };
        if !computed(u) || stacked.contains(&u) {
            chosen.push(h);
        }
    }
    chosen.sort_by_key(|h| h.carry);
    (chosen, stacked)
}

/// Emits the scan without the hoisted carries, then their sums; returns
/// values for the original scan's outputs.
fn hoisted_scan(
    b: &mut Builder,
    s: &Scan,
    ins: &[Value],
    hoists: &[Hoist],
    stacked: &[Value],
) -> Result<Vec<Value>, IrError> {
    let body = &*s.body;
    let (nc, nk) = (s.n_consts, s.n_carry);
    let gone = |j: usize| hoists.iter().any(|h| h.carry == j);
    // The new body: hoisted carries' parameters and outputs dropped,
    // stacked values appended as `ys`.
    let mut nb = Builder::new(body.name.clone());
    let mut bmap: Vec<Option<Value>> = vec![None; body.n_values()];
    for (k, &p) in body.params.iter().enumerate() {
        if k >= nc && k < nc + nk && gone(k - nc) {
            continue;
        }
        bmap[p.index()] = Some(nb.param_like(body, p));
    }
    let dead_adds: Vec<Value> = hoists.iter().map(|h| body.outputs[h.carry]).collect();
    for e in &body.eqns {
        if e.outputs.iter().any(|o| dead_adds.contains(o)) {
            continue;
        }
        let bins: Vec<Value> = e.inputs.iter().map(|&v| lookup(&bmap, v)).collect::<Result<_, _>>()?;
        nb.set_loc(e.loc.clone());
        let outs = nb.emit(e.prim.clone(), &bins)?;
        for (&o, n) in e.outputs.iter().zip(outs) {
            bmap[o.index()] = Some(n);
            if let Some(name) = body.names.get(o) {
                nb.name_if_unnamed(n, name.clone());
            }
        }
    }
    nb.set_loc(None);
    let mut bouts: Vec<Value> = Vec::new();
    for (j, &o) in body.outputs.iter().enumerate() {
        if j < nk && gone(j) {
            continue;
        }
        bouts.push(lookup(&bmap, o)?);
    }
    for &v in stacked {
        bouts.push(lookup(&bmap, v)?);
    }
    let new_body = crate::opt::dce(&nb.finish(&bouts)?);
    // The new scan.
    let consts = &ins[..nc];
    let init: Vec<Value> = (0..nk).filter(|&j| !gone(j)).map(|j| ins[nc + j]).collect();
    let xs = &ins[nc + nk..];
    let opts = ScanOpts { length: s.length, reverse: s.reverse, remat: s.remat };
    let outs = b.scan(Arc::new(new_body), consts, &init, xs, opts)?;
    let nk2 = init.len();
    let ny = body.outputs.len() - nk;
    let (carries, rest) = outs.split_at(nk2);
    let (ys, new_ys) = rest.split_at(ny);
    // Where a per-step operand is stacked.
    let at = |v: Value| -> Result<Value, IrError> {
        let found = match body.params.iter().position(|&p| p == v) {
            Some(k) => Stacked::Xs(k - nc - nk),
            None => Stacked::New(stacked.iter().position(|&x| x == v).ok_or_else(|| {
                IrError::invalid("hoist_accumulations", "internal error: an operand was not stacked")
            })?),
        };
        Ok(match found {
            Stacked::Xs(k) => xs[k],
            Stacked::New(k) => new_ys[k],
        })
    };
    let shift = |d: &[usize]| d.iter().map(|&x| x + 1).collect::<Vec<usize>>();
    let mut result: Vec<Value> = Vec::with_capacity(body.outputs.len());
    let mut kept = carries.iter();
    for j in 0..nk {
        let Some(h) = hoists.iter().find(|h| h.carry == j) else {
            result.push(*kept.next().ok_or_else(|| IrError::invalid("hoist_accumulations", "internal error"))?);
            continue;
        };
        let total = match &h.term {
            Term::Dot(p, u, v) => {
                let mut lc = vec![0];
                lc.extend(shift(&p.lhs_contract));
                let mut rc = vec![0];
                rc.extend(shift(&p.rhs_contract));
                b.dot_general(at(*u)?, at(*v)?, &lc, &rc, &shift(&p.lhs_batch), &shift(&p.rhs_batch))?
            }
            Term::Sum(axes, u) => {
                let mut all = vec![0];
                all.extend(shift(axes));
                b.reduce_sum(at(*u)?, &all)?
            }
        };
        let carry_ty = body.ty(body.outputs[j]).clone();
        let total = if b.ty(total)?.shape != carry_ty.shape { b.reshape(total, &carry_ty.shape)? } else { total };
        let init = ins[nc + j];
        result.push(if h.carry_first { b.add(init, total)? } else { b.add(total, init)? });
    }
    result.extend_from_slice(ys);
    Ok(result)
}
