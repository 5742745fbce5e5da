//! Algebraic identities with splat constants: `x * 1`, `1 * x`, `x / 1`,
//! `x + 0`, `0 + x`, `x - 0` become `x`, and an integer `x * 0` becomes the
//! zero operand. Derivative rules emit these without knowing their
//! operands: `jvp(grad(f))` with a `ones_like` tangent multiplies by a
//! broadcast 1.0, and a seed cotangent of 1 scales the first transposed
//! equation by it. Each would cost a pass over the tensor at run time.
//!
//! A *splat* is a value known at build time to hold one repeated number: a
//! `constant` whose elements are all equal, or a `broadcast_in_dim` or
//! `reshape` of a splat.
//!
//! Exactness: `x * 1`, `x / 1` and integer `x * 0` are the identity (or
//! zero) bit for bit, NaN and infinities included. `x + 0` and `x - 0` are
//! folded too (as XLA does); they differ from IEEE arithmetic only in the
//! sign of a zero result (`-0.0 + 0.0` is `+0.0`, the folded graph keeps
//! `-0.0`; the two compare equal), never in a nonzero value.
//! Float `x * 0` is *not* folded: it is NaN for infinite or NaN `x` and
//! `-0.0` for negative `x`.
//!
//! Sign identities, exact bit for bit (NaN included: `neg` flips the sign
//! bit, `abs` clears it): `neg(neg(x))` is `x`, `abs(abs(x))` is `abs(x)`,
//! and `abs(neg(x))` reads `x` instead (`abs(x)`; not for unsigned
//! integers, whose `abs` is the identity). Written programs hold these:
//! the side-by-side chain's `abs(-maximum(t2, x))`.
//!
//! Invariant: a folded equation's result has exactly the type of the value
//! replacing it (binary primitives take identical operand types; unary
//! ones keep their operand's type).

use crate::ir::{Func, Value};
use crate::ops::binary::Binary;
use crate::ops::index::IndexMode;
use crate::ops::unary::Unary;
use crate::ops::Prim;

/// The repeated element of every splat value (`None` for other values).
fn splats(f: &Func) -> Vec<Option<f64>> {
    let mut s: Vec<Option<f64>> = vec![None; f.n_values()];
    for eqn in &f.eqns {
        let v = match &eqn.prim {
            Prim::Constant(c) => {
                let st = c.value.storage();
                let n = st.len();
                // A constant's elements are all read here; huge ones are not splats in practice.
                if n == 0 || n > 1 << 16 {
                    None
                } else {
                    let first = st.get_f64(0);
                    ((1..n).all(|i| st.get_f64(i) == first) && !first.is_nan()).then_some(first)
                }
            }
            Prim::BroadcastInDim(_) | Prim::Reshape(_) => eqn.inputs.first().and_then(|v| s[v.index()]),
            _ => None,
        };
        if let (Some(v), [out]) = (v, eqn.outputs.as_slice()) {
            s[out.index()] = Some(v);
        }
    }
    s
}

/// The value a binary equation `op(x, y)` equals, if an identity applies.
fn fold(f: &Func, s: &[Option<f64>], op: Binary, x: Value, y: Value) -> Option<Value> {
    let (sx, sy) = (s[x.index()], s[y.index()]);
    let is = |v: Option<f64>, c: f64| v == Some(c);
    let float = f.ty(x).dtype.is_float();
    match op {
        Binary::Mul if is(sy, 1.0) => Some(x),
        Binary::Mul if is(sx, 1.0) => Some(y),
        Binary::Mul if !float && is(sy, 0.0) => Some(y),
        Binary::Mul if !float && is(sx, 0.0) => Some(x),
        Binary::Div if float && is(sy, 1.0) => Some(x),
        Binary::Add if is(sy, 0.0) => Some(x),
        Binary::Add if is(sx, 0.0) => Some(y),
        Binary::Sub if is(sy, 0.0) => Some(x),
        _ => None,
    }
}

/// Replaces every use of a foldable equation's result by the value it
/// equals and drops the equation (see the module docs for which).
pub fn fold_identities(f: &Func) -> Func {
    let s = splats(f);
    let mut subst: Vec<Value> = (0..f.n_values() as u32).map(Value).collect();
    // The kept `neg`/`abs` equation defining a value, with its operand.
    let mut sign_op: Vec<Option<(Unary, Value)>> = vec![None; f.n_values()];
    let mut keep = vec![true; f.eqns.len()];
    let mut out = f.clone();
    for (i, eqn) in out.eqns.iter_mut().enumerate() {
        for v in &mut eqn.inputs {
            *v = subst[v.index()];
        }
        match (&eqn.prim, eqn.inputs.as_mut_slice(), eqn.outputs.as_slice()) {
            (Prim::Binary(op), [x, y], [o]) => {
                if let Some(r) = fold(f, &s, *op, *x, *y) {
                    if f.ty(r) == f.ty(*o) {
                        subst[o.index()] = r;
                        keep[i] = false;
                    }
                }
            }
            (Prim::Unary(op @ (Unary::Neg | Unary::Abs)), [x], [o]) => {
                match (op, sign_op[x.index()]) {
                    // neg(neg(y)) = y; abs(abs(y)) = abs(y).
                    (Unary::Neg, Some((Unary::Neg, y))) => {
                        subst[o.index()] = y;
                        keep[i] = false;
                    }
                    (Unary::Abs, Some((Unary::Abs, _))) => {
                        subst[o.index()] = *x;
                        keep[i] = false;
                    }
                    // abs(neg(y)) = abs(y).
                    (Unary::Abs, Some((Unary::Neg, y))) if !f.ty(y).dtype.is_unsigned() => {
                        *x = y;
                        sign_op[o.index()] = Some((Unary::Abs, y));
                    }
                    _ => sign_op[o.index()] = Some((*op, *x)),
                }
            }
            _ => {}
        }
    }
    for v in &mut out.outputs {
        *v = subst[v.index()];
    }
    super::dce::renumber(&out, &keep)
}

/// Reads of a splat become splats: a `gather` (clipping mode) or a
/// `dynamic_slice` of a value that repeats one element, a `broadcast_in_dim`
/// or `reshape` chain over a one-element value (constant or not), reads
/// that element at every position whatever the indices, so it is replaced
/// by a broadcast of the element. Forward-over-reverse derivatives emit
/// these: `jvp(grad(f), ones_like(c))` gathers the `ones` tangent where the
/// primal gathers `c` (k-means' `dir`: a `[n, d]` gather of ones, then
/// elementwise work on it). Exact: the result holds the very element the
/// gather would have copied. A `fill`-mode gather is left alone (an index
/// out of range reads 0 there), as is an operand with no elements.
pub fn splat_reads(f: &Func) -> Func {
    // For each value, the one-element value it repeats, if any.
    let mut root: Vec<Option<Value>> = vec![None; f.n_values()];
    for &p in &f.params {
        if f.ty(p).numel() == 1 {
            root[p.index()] = Some(p);
        }
    }
    for eqn in &f.eqns {
        for &o in &eqn.outputs {
            if f.ty(o).numel() == 1 {
                root[o.index()] = Some(o);
            }
        }
        let Some(&x) = eqn.inputs.first() else { continue };
        let Some(r) = root[x.index()] else { continue };
        match &eqn.prim {
            Prim::BroadcastInDim(_) | Prim::Reshape(_) => {
                if let [o] = eqn.outputs.as_slice() {
                    root[o.index()] = Some(r);
                }
            }
            _ => {}
        }
    }
    // Whether an equation reads a splat at indices.
    let reads_splat = |e: &crate::ir::Eqn| match (&e.prim, e.inputs.first()) {
        (Prim::Gather(g), Some(&x)) if g.mode == IndexMode::Clip => root[x.index()].is_some(),
        (Prim::DynamicSlice(_), Some(&x)) => root[x.index()].is_some(),
        _ => false,
    };
    if !f.eqns.iter().any(reads_splat) {
        return f.clone();
    }
    // New values of the old function's equation results, as emitted.
    let mut new: Vec<Option<Value>> = vec![None; f.n_values()];
    let rebuilt = super::rebuild(f, |b, e, ins| {
        if let (true, Some(&x), [o]) = (reads_splat(e), ins.first(), e.outputs.as_slice()) {
            if f.ty(e.inputs[0]).numel() >= 1 {
                // The repeated element itself where it is an equation's
                // result, else the first element of the operand.
                let r = root[e.inputs[0].index()].and_then(|r| new[r.index()]);
                let one = first_element(b, r.unwrap_or(x))?;
                let out = b.broadcast_in_dim(one, &f.ty(*o).shape, &[])?;
                new[o.index()] = Some(out);
                return Ok(vec![out]);
            }
        }
        let outs = b.emit(e.prim.clone(), ins)?;
        for (&o, &n) in e.outputs.iter().zip(&outs) {
            new[o.index()] = Some(n);
        }
        Ok(outs)
    });
    rebuilt.unwrap_or_else(|_| f.clone())
}

/// The first element of `x` as a rank-0 value: `x` reshaped when it has one
/// element, else sliced to one element first (a splat's elements are all
/// equal, so any one will do).
fn first_element(b: &mut crate::ir::Builder, x: Value) -> Result<Value, crate::error::IrError> {
    let ty = b.ty(x)?.clone();
    if ty.rank() == 0 {
        return Ok(x);
    }
    if ty.numel() == 1 {
        return b.reshape(x, &[]);
    }
    let zeros = vec![0; ty.rank()];
    let ones = vec![1; ty.rank()];
    let one = b.slice(x, &zeros, &ones, &ones)?;
    b.reshape(one, &[])
}
