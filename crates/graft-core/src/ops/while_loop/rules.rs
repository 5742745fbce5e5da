//! Derivative rules of the loop primitives (the table is in the module docs
//! of `while_loop`). Operand layout: `x = (k..., c...)`, then `v`/`u`/`w`.
//! In the augmented loop `L'`, `x' = (k, dk, c, dc)` and its float entries
//! are `(k_f, dk, c_f, dc)`; its float carries are `(c_f, dc)`.
//!
//! Every rule puts tangents only in operand slots the emitted primitive is
//! linear in, and primal values everywhere else; symbolic zeros in a
//! linear slot are materialised (the primitives take every slot).

use super::{Loop, While, WhileHvp, WhileJvp, WhileVjp};
use crate::ad::helpers::add_opt;
use crate::ad::{not_linear, Diff, JvpCx, TransposeCx};
use crate::error::IrError;
use crate::ir::{Builder, Value};
use crate::ops::Op;

/// `t[i]` for each `i`, zeros of `like[i]`'s type where absent.
fn or_zeros(b: &mut Builder, t: &[Option<Value>], like: &[Value]) -> Result<Vec<Value>, IrError> {
    t.iter().zip(like).map(|(&t, &l)| crate::ad::helpers::or_zeros(b, t, l)).collect()
}

/// Tangents of the float entries of `x` from per-operand tangents.
fn float_x_tangents(lp: &Loop, b: &mut Builder, x: &[Value], t: &[Option<Value>]) -> Result<Vec<Value>, IrError> {
    let fx = lp.float_x();
    let t: Vec<Option<Value>> = fx.iter().map(|&i| t[i]).collect();
    let like: Vec<Value> = fx.iter().map(|&i| x[i]).collect();
    or_zeros(b, &t, &like)
}

/// Zeros of the float carry types.
fn zero_carries(lp: &Loop, b: &mut Builder) -> Result<Vec<Value>, IrError> {
    lp.float_carry_types().iter().map(|t| b.zeros(t)).collect()
}

/// The augmented loop's `x'` from `x` and a vector `v` over the float entries of `x`.
fn aug_x(lp: &Loop, x: &[Value], v: &[Value]) -> Vec<Value> {
    let (nk, (nfk, _)) = (lp.n_consts, lp.n_float());
    let mut xa = x[..nk].to_vec();
    xa.extend_from_slice(&v[..nfk]);
    xa.extend_from_slice(&x[nk..]);
    xa.extend_from_slice(&v[nfk..]);
    xa
}

/// A vector over the augmented loop's float `x'` entries `(k_f, dk, c_f, dc)`
/// from one over `x`'s float entries (`p`) and one for the tangent half (`q`).
fn aug_fx(lp: &Loop, p: &[Value], q: &[Value]) -> Vec<Value> {
    let (nfk, _) = lp.n_float();
    let mut v = p[..nfk].to_vec();
    v.extend_from_slice(&q[..nfk]);
    v.extend_from_slice(&p[nfk..]);
    v.extend_from_slice(&q[nfk..]);
    v
}

/// The `x` half `(k_f, c_f)` of a vector over the augmented float `x'`.
fn x_half(lp: &Loop, all: &[Value]) -> Vec<Value> {
    let (nfk, nfc) = lp.n_float();
    let mut v = all[..nfk].to_vec();
    v.extend_from_slice(&all[2 * nfk..2 * nfk + nfc]);
    v
}

fn emit(b: &mut Builder, op: impl Into<crate::ops::Prim>, parts: &[&[Value]]) -> Result<Vec<Value>, IrError> {
    b.emit(op, &parts.concat())
}

fn sum_opt(b: &mut Builder, x: Option<Vec<Value>>, y: Option<Vec<Value>>) -> Result<Vec<Option<Value>>, IrError> {
    let n = x.as_ref().or(y.as_ref()).map_or(0, Vec::len);
    (0..n).map(|i| add_opt(b, x.as_ref().map(|v| v[i]), y.as_ref().map(|v| v[i]))).collect()
}

/// The `x` operands of a transposed equation, which must all be primal:
/// each primitive is linear only in its extra slots.
fn primal_x(name: &str, cx: &TransposeCx<'_>, nx: usize) -> Result<Vec<Value>, IrError> {
    (0..nx).map(|i| cx.primal(name, i)).collect()
}

/// Output cotangents, zeros where absent.
fn cts(b: &mut Builder, cx: &TransposeCx<'_>) -> Result<Vec<Value>, IrError> {
    cx.cts.iter().zip(cx.out_types).map(|(c, t)| c.map_or_else(|| b.zeros(t), Ok)).collect()
}

/// Places `vals` at operand positions `start..` that are linear.
fn at_linear(cx: &TransposeCx<'_>, start: usize, vals: Vec<Value>) -> Vec<Option<Value>> {
    let mut res = vec![None; cx.inputs.len()];
    for (i, v) in vals.into_iter().enumerate() {
        if cx.is_linear(start + i) {
            res[start + i] = Some(v);
        }
    }
    res
}

fn any_linear(cx: &TransposeCx<'_>, r: std::ops::Range<usize>) -> bool {
    r.into_iter().any(|i| cx.is_linear(i))
}

impl Diff for While {
    fn jvp(&self, b: &mut Builder, cx: &JvpCx<'_>) -> Result<Vec<Option<Value>>, IrError> {
        let lp = &self.lp;
        let v = float_x_tangents(lp, b, cx.primals, cx.tangents)?;
        let outs = emit(b, WhileJvp::new(lp.clone())?, &[cx.primals, &v])?;
        let mut res = vec![None; lp.carry_types().len()];
        for (j, o) in super::float_positions(&lp.carry_types()).into_iter().zip(outs) {
            res[j] = Some(o);
        }
        Ok(res)
    }

    fn transpose(&self, _b: &mut Builder, _cx: &TransposeCx<'_>) -> Result<Vec<Option<Value>>, IrError> {
        // Tangents reach loops only through `while_jvp`.
        Err(not_linear(self.name()))
    }
}

impl WhileJvp {
    /// The merged form (`primal`) exists only in plans, after every transform.
    pub(super) fn untransformable(&self, rule: &'static str) -> Result<(), IrError> {
        if !self.primal {
            return Ok(());
        }
        Err(IrError::NoRule {
            prim: "while_jvp".into(),
            rule,
            msg: "internal error: a `while_jvp` with primal results is made by the executor \
                  (opt::merge_while_jvp) after every transform and is never transformed"
                .into(),
        })
    }
}

impl Diff for WhileJvp {
    fn jvp(&self, b: &mut Builder, cx: &JvpCx<'_>) -> Result<Vec<Option<Value>>, IrError> {
        self.untransformable("jvp")?;
        let lp = &self.lp;
        let nx = lp.n_x();
        let (x, v) = cx.primals.split_at(nx);
        let (xt, vt) = cx.tangents.split_at(nx);
        let dv = or_zeros(b, vt, v)?;
        if xt.iter().all(Option::is_none) {
            // J(x) v' only.
            return Ok(emit(b, self.clone(), &[x, &dv])?.into_iter().map(Some).collect());
        }
        // Tangent half of J_{L'}(x, v)(x', v').
        let dx = float_x_tangents(lp, b, x, xt)?;
        let outs = emit(b, WhileJvp::new(self.aug.clone())?, &[&aug_x(lp, x, v), &aug_fx(lp, &dx, &dv)])?;
        let nfc = lp.n_float().1;
        Ok(outs[nfc..].iter().map(|&o| Some(o)).collect())
    }

    fn transpose(&self, b: &mut Builder, cx: &TransposeCx<'_>) -> Result<Vec<Option<Value>>, IrError> {
        self.untransformable("transpose")?;
        let nx = self.lp.n_x();
        let x = primal_x(self.name(), cx, nx)?;
        let u = cts(b, cx)?;
        let outs = emit(b, WhileVjp::new(self.lp.clone())?, &[&x, &u])?;
        Ok(at_linear(cx, nx, outs))
    }
}

impl Diff for WhileVjp {
    fn jvp(&self, b: &mut Builder, cx: &JvpCx<'_>) -> Result<Vec<Option<Value>>, IrError> {
        let lp = &self.lp;
        let nx = lp.n_x();
        let (x, u) = cx.primals.split_at(nx);
        let (xt, ut) = cx.tangents.split_at(nx);
        let t1 = if ut.iter().any(Option::is_some) {
            let du = or_zeros(b, ut, u)?;
            Some(emit(b, self.clone(), &[x, &du])?)
        } else {
            None
        };
        let t2 = if xt.iter().any(Option::is_some) {
            let w = float_x_tangents(lp, b, x, xt)?;
            Some(emit(b, WhileHvp::new(lp.clone())?, &[x, u, &w])?)
        } else {
            None
        };
        sum_opt(b, t1, t2)
    }

    fn transpose(&self, b: &mut Builder, cx: &TransposeCx<'_>) -> Result<Vec<Option<Value>>, IrError> {
        let nx = self.lp.n_x();
        let x = primal_x(self.name(), cx, nx)?;
        let ct = cts(b, cx)?;
        let outs = emit(b, WhileJvp::new(self.lp.clone())?, &[&x, &ct])?;
        Ok(at_linear(cx, nx, outs))
    }
}

impl Diff for WhileHvp {
    fn jvp(&self, b: &mut Builder, cx: &JvpCx<'_>) -> Result<Vec<Option<Value>>, IrError> {
        let lp = &self.lp;
        let (nx, nfc) = (lp.n_x(), lp.n_float().1);
        let (x, rest) = cx.primals.split_at(nx);
        let (u, w) = rest.split_at(nfc);
        let (xt, rest_t) = cx.tangents.split_at(nx);
        let (ut, wt) = rest_t.split_at(nfc);
        let xa = aug_x(lp, x, w);
        let zc = zero_carries(lp, b)?;
        // D_(x, w)[H_u(x) w](x', w') = x half of H^{L'}_{(0, u)}(x, w)(x', w').
        let t1 = if xt.iter().chain(wt).any(Option::is_some) {
            let dx = float_x_tangents(lp, b, x, xt)?;
            let dw = or_zeros(b, wt, w)?;
            let outs = emit(b, WhileHvp::new(self.aug.clone())?, &[&xa, &zc, u, &aug_fx(lp, &dx, &dw)])?;
            Some(x_half(lp, &outs))
        } else {
            None
        };
        // H_{u'}(x) w = x half of J_{L'}(x, w)^T (0, u').
        let t2 = if ut.iter().any(Option::is_some) {
            let du = or_zeros(b, ut, u)?;
            let outs = emit(b, WhileVjp::new(self.aug.clone())?, &[&xa, &zc, &du])?;
            Some(x_half(lp, &outs))
        } else {
            None
        };
        sum_opt(b, t1, t2)
    }

    fn transpose(&self, b: &mut Builder, cx: &TransposeCx<'_>) -> Result<Vec<Option<Value>>, IrError> {
        let lp = &self.lp;
        let (nx, nfc, nfx) = (lp.n_x(), lp.n_float().1, lp.float_x().len());
        let x = primal_x(self.name(), cx, nx)?;
        let ct = cts(b, cx)?;
        let (lin_u, lin_w) = (any_linear(cx, nx..nx + nfc), any_linear(cx, nx + nfc..nx + nfc + nfx));
        match (lin_u, lin_w) {
            (false, true) => {
                // H_u(x) is symmetric.
                let u: Vec<Value> = (nx..nx + nfc).map(|i| cx.primal(self.name(), i)).collect::<Result<_, _>>()?;
                let outs = emit(b, self.clone(), &[&x, &u, &ct])?;
                Ok(at_linear(cx, nx + nfc, outs))
            }
            (true, false) => {
                // u -> x half of J_{L'}^T (0, u) transposes to the tangent half of J_{L'} (ct, 0).
                let w: Vec<Value> =
                    (nx + nfc..nx + nfc + nfx).map(|i| cx.primal(self.name(), i)).collect::<Result<_, _>>()?;
                let zeros: Vec<Value> = lp.float_x_types().iter().map(|t| b.zeros(t)).collect::<Result<_, _>>()?;
                let outs = emit(b, WhileJvp::new(self.aug.clone())?, &[&aug_x(lp, &x, &w), &aug_fx(lp, &ct, &zeros)])?;
                Ok(at_linear(cx, nx, outs[nfc..].to_vec()))
            }
            _ => Err(not_linear(self.name())),
        }
    }
}
