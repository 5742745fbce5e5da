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
//! Invariant: a folded equation's result has exactly the type of the value
//! replacing it (binary primitives take identical operand types).

use crate::ir::{Func, Value};
use crate::ops::binary::Binary;
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
    let mut keep = vec![true; f.eqns.len()];
    let mut out = f.clone();
    for (i, eqn) in out.eqns.iter_mut().enumerate() {
        for v in &mut eqn.inputs {
            *v = subst[v.index()];
        }
        if let (Prim::Binary(op), [x, y], [o]) = (&eqn.prim, eqn.inputs.as_slice(), eqn.outputs.as_slice()) {
            if let Some(r) = fold(f, &s, *op, *x, *y) {
                if f.ty(r) == f.ty(*o) {
                    subst[o.index()] = r;
                    keep[i] = false;
                }
            }
        }
    }
    for v in &mut out.outputs {
        *v = subst[v.index()];
    }
    super::dce::renumber(&out, &keep)
}
