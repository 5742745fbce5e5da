//! Products with a diagonal matrix: `dot_general(diag(d), r)` is `r` with
//! each row scaled by `d` (and `dot_general(l, diag(d))` `l` with each
//! column scaled), `n` multiplications per row instead of a product that
//! is `n` times larger.
//!
//! Such products are what `jacrev` and `jacfwd` build: they vmap a VJP or
//! JVP over the identity basis (`jac::basis`, `convert(eq(iota, iota))`),
//! and through an elementwise function the basis meets the derivative as
//! `eye * broadcast(d)`, which the next linear layer's rule multiplies by
//! its weight: `jacrev(tanh(a @ v))` is `(eye * (1 - t^2)) @ a`, an
//! `n x n x n` product for an `n x n` result.
//!
//! A *diagonal* value here is a square matrix known at build time to be
//! `diag(d)`: the identity basis (`convert(eq(iota(axis 0), iota(axis
//! 1)))`, or a constant holding the identity) times a broadcast of a vector
//! `d` along either axis (`eye * broadcast(d)`, in either operand order), or
//! the identity alone (`d` all ones). A `dot_general` without batch dims
//! that contracts one axis of a diagonal operand with one axis of the other
//! is replaced by the other operand, its contracted axis moved to where the
//! diagonal's free axis lands in the result (a transpose when it is not
//! already there), times `d` broadcast along that axis.
//!
//! Exactness: each element of the product is `d_i * r_ik` plus `n - 1`
//! products with a zero of the identity, so for finite operands the two
//! agree bit for bit but for the sign of a zero result (`-0.0 + 0.0` is
//! `+0.0`; the same latitude `fold_identities` takes with `x + 0`). Where
//! the other operand holds an infinity or a NaN, the dense product also
//! spreads a NaN (`0 * inf`) into every element that summed over it; the
//! rewritten one keeps it in its own row, as the Jacobian does.

use super::rebuild_mapped;
use crate::error::IrError;
use crate::ir::{Builder, Func, Value};
use crate::ops::binary::{Binary, Compare};
use crate::ops::Prim;

/// What a value is known to be: `diag(d)` for a vector `d` (a value of the
/// original function), or the identity.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Diag {
    Eye,
    Scaled(Value),
}

/// Identity constants are recognised up to this many elements (each is
/// read once at build time).
const CONSTANT_MAX_ELEMS: usize = 1 << 20;

/// Whether a constant tensor is a square identity matrix.
fn is_identity(t: &crate::tensor::Tensor) -> bool {
    let s = t.shape();
    if s.len() != 2 || s[0] != s[1] || s[0] == 0 || s[0] * s[1] > CONSTANT_MAX_ELEMS {
        return false;
    }
    let n = s[0];
    let st = t.storage();
    (0..n * n).all(|k| st.get_f64(k) == if k / n == k % n { 1.0 } else { 0.0 })
}

/// Every value of `f` known to be diagonal (see the module docs).
fn diagonals(f: &Func) -> Vec<Option<Diag>> {
    let nv = f.n_values();
    let mut iota_axis: Vec<Option<usize>> = vec![None; nv];
    let mut eye_mask = vec![false; nv];
    // A vector broadcast to a square matrix along one axis: the vector.
    let mut bcast_vec: Vec<Option<Value>> = vec![None; nv];
    let mut diag: Vec<Option<Diag>> = vec![None; nv];
    for e in &f.eqns {
        let [out] = e.outputs.as_slice() else { continue };
        let o = out.index();
        let square = |v: Value| {
            let s = &f.ty(v).shape;
            s.len() == 2 && s[0] == s[1]
        };
        match (&e.prim, e.inputs.as_slice()) {
            (Prim::Iota(i), []) if square(*out) => iota_axis[o] = Some(i.axis),
            (Prim::Compare(Compare::Eq), [a, b]) => {
                if let (Some(x), Some(y)) = (iota_axis[a.index()], iota_axis[b.index()]) {
                    eye_mask[o] = x != y;
                }
            }
            (Prim::Convert(_), [x]) if eye_mask[x.index()] && f.ty(*out).dtype.is_float() => diag[o] = Some(Diag::Eye),
            (Prim::Constant(c), []) if f.ty(*out).dtype.is_float() && is_identity(&c.value) => {
                diag[o] = Some(Diag::Eye)
            }
            (Prim::BroadcastInDim(bd), [x]) if square(*out) && bd.dims.len() == 1 && f.ty(*x).rank() == 1 => {
                bcast_vec[o] = Some(*x)
            }
            (Prim::Binary(Binary::Mul), [x, y]) => {
                let scaled = |a: &Value, b: &Value| match (diag[a.index()], bcast_vec[b.index()]) {
                    (Some(Diag::Eye), Some(d)) => Some(Diag::Scaled(d)),
                    _ => None,
                };
                diag[o] = scaled(x, y).or_else(|| scaled(y, x));
            }
            _ => {}
        }
    }
    diag
}

/// `f` with every product by a diagonal operand replaced (see the module
/// docs), or `None` when it has none.
pub fn diagonal_products(f: &Func) -> Result<Option<Func>, IrError> {
    let diag = diagonals(f);
    let target = |e: &crate::ir::Eqn| -> Option<(usize, Diag)> {
        let Prim::DotGeneral(p) = &e.prim else { return None };
        if !p.lhs_batch.is_empty() || p.lhs_contract.len() != 1 || e.inputs.len() != 2 {
            return None;
        }
        let (l, r) = (f.ty(e.inputs[0]), f.ty(e.inputs[1]));
        if l.dtype != r.dtype || e.outputs.len() != 1 || f.ty(e.outputs[0]).dtype != l.dtype {
            return None;
        }
        (0..2).find_map(|side| diag[e.inputs[side].index()].map(|d| (side, d)))
    };
    if !f.eqns.iter().any(|e| target(e).is_some()) {
        return Ok(None);
    }
    let g = rebuild_mapped(f, |b, e, ins, new_of| {
        let (Some((side, d)), Prim::DotGeneral(p)) = (target(e), &e.prim) else {
            return b.emit(e.prim.clone(), ins);
        };
        let d = match d {
            Diag::Eye => None,
            // Defined before its broadcast, so before this product.
            Diag::Scaled(v) => match new_of[v.index()] {
                Some(n) => Some(n),
                None => return b.emit(e.prim.clone(), ins),
            },
        };
        let other = ins[1 - side];
        let contract = if side == 0 { p.rhs_contract[0] } else { p.lhs_contract[0] };
        Ok(vec![scale_along(b, other, contract, side == 0, d)?])
    })?;
    Ok(Some(g))
}

/// `x` with axis `axis` moved to the front (`front`) or to the back, times
/// `d` broadcast along it (`d` `None`: the identity, no multiplication).
fn scale_along(b: &mut Builder, x: Value, axis: usize, front: bool, d: Option<Value>) -> Result<Value, IrError> {
    let rank = b.ty(x)?.rank();
    let mut perm: Vec<usize> = (0..rank).filter(|&a| a != axis).collect();
    if front {
        perm.insert(0, axis);
    } else {
        perm.push(axis);
    }
    let moved = if perm.iter().enumerate().all(|(i, &a)| i == a) { x } else { b.transpose(x, &perm)? };
    let Some(d) = d else { return Ok(moved) };
    let ty = b.ty(moved)?.clone();
    let at = if front { 0 } else { rank - 1 };
    let db = b.broadcast_in_dim(d, &ty.shape, &[at])?;
    b.mul(moved, db)
}
