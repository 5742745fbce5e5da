//! Batching rules of the loop primitives (JAX's approach for while loops).
//!
//! The batched loop is found first: which carries become batched is a
//! fixed point (a carry whose next value depends on a batched value is
//! batched from the start, so its type does not change between trips).
//! If the predicate then depends on a batched value, every carry is batched
//! and the loop runs while *any* example runs, with finished examples frozen
//! by `select`; each example's carries, and hence its derivatives, follow
//! its own trip count, and frozen trips have identity Jacobians.
//!
//! The derivative primitives batch every operand: their results include
//! per-example cotangents of the consts, which a shared const would sum.
//!
//! Under a vmap that names its axis (`axis_name`), a body or predicate
//! running collectives over that name is batched as a whole: a collective
//! makes batched values out of unbatched ones (`axis_index`) and the
//! dependency fixed point does not see that, so every carry is batched and
//! the name is passed on to the vmapped body and predicate.

use super::{Loop, While, WhileHvp, WhileJvp, WhileVjp};
use crate::batch::helpers::{all_to_front, materialize, move_bdim};
use crate::batch::{binds_axis, vmap_func_named, Batch, BatchCx, Batched};
use crate::error::IrError;
use crate::ir::{Builder, Value};
use crate::transform::rewrite::outputs_depending as depends;
use std::sync::Arc;

/// The batched loop, given which consts and initial carries are batched (at
/// axis 0); also returns which carries the batched loop holds batched.
pub(super) fn batch_loop(
    lp: &Loop,
    const_b: &[bool],
    carry_b: &[bool],
    size: usize,
    axis: Option<&str>,
) -> Result<(Loop, Vec<bool>), IrError> {
    let vmap_func = |f: &crate::ir::Func, ins: &[Option<usize>], outs: &[Option<usize>], size| {
        vmap_func_named(f, ins, outs, size, axis)
    };
    let collective =
        axis.is_some_and(|a| [&lp.body, &lp.cond].iter().any(|f| f.eqns.iter().any(|e| binds_axis(&e.prim, a))));
    let mut carry_b = if collective { vec![true; carry_b.len()] } else { carry_b.to_vec() };
    loop {
        let outs = depends(&lp.body, &[const_b, &carry_b].concat());
        let next: Vec<bool> = carry_b.iter().zip(&outs).map(|(&a, &b)| a || b).collect();
        if next == carry_b {
            break;
        }
        carry_b = next;
    }
    let masked = collective || depends(&lp.cond, &[const_b, &carry_b].concat()).first().copied().unwrap_or(false);
    if masked {
        carry_b = vec![true; carry_b.len()];
    }
    let in_axes: Vec<Option<usize>> = const_b.iter().chain(&carry_b).map(|&x| x.then_some(0)).collect();
    let carry_axes: Vec<Option<usize>> = carry_b.iter().map(|&x| x.then_some(0)).collect();
    let body_v = vmap_func(&lp.body, &in_axes, &carry_axes, size)?;
    let (cond, body) = if masked {
        let cond_v = vmap_func(&lp.cond, &in_axes, &[Some(0)], size)?;
        let xt = body_v.param_types();
        // Run while any example runs.
        let mut cb = Builder::new(format!("{}_any", lp.cond.name));
        let ps: Vec<Value> = xt.iter().map(|t| cb.param(t.clone())).collect();
        let p = cb.inline(&cond_v, &ps)?;
        let any = cb.reduce_max(p[0], &[0])?;
        let cond = cb.finish(&[any])?;
        // Finished examples keep their carry.
        let mut bb = Builder::new(format!("{}_masked", lp.body.name));
        let ps: Vec<Value> = xt.iter().map(|t| bb.param(t.clone())).collect();
        let p = bb.inline(&cond_v, &ps)?[0];
        let new = bb.inline(&body_v, &ps)?;
        let mut outs = Vec::with_capacity(new.len());
        for (j, &n) in new.iter().enumerate() {
            let old = ps[lp.n_consts + j];
            let shape = bb.ty(old)?.shape.to_vec();
            let m = bb.broadcast_in_dim(p, &shape, &[0])?;
            outs.push(bb.select(m, n, old)?);
        }
        (cond, crate::opt::simplify(&bb.finish(&outs)?))
    } else {
        (vmap_func(&lp.cond, &in_axes, &[None], size)?, body_v)
    };
    let lp = Loop { cond: Arc::new(cond), body: Arc::new(body), n_consts: lp.n_consts, remat: lp.remat };
    Ok((lp, carry_b))
}

/// The loop with every const and carry batched.
fn all_batched(lp: &Loop, size: usize, axis: Option<&str>) -> Result<Loop, IrError> {
    let nc = lp.carry_types().len();
    Ok(batch_loop(lp, &vec![true; lp.n_consts], &vec![true; nc], size, axis)?.0)
}

fn at0(outs: Vec<Value>) -> Batched {
    outs.into_iter().map(|o| (o, Some(0))).collect()
}

impl Batch for While {
    fn batch(&self, b: &mut Builder, cx: &BatchCx<'_>) -> Result<Batched, IrError> {
        let nk = self.lp.n_consts;
        let mut args: Vec<Value> = cx
            .args
            .iter()
            .zip(cx.bdims)
            .map(|(&a, &d)| match d {
                Some(d) => move_bdim(b, a, d, 0),
                None => Ok(a),
            })
            .collect::<Result<_, _>>()?;
        let isb: Vec<bool> = cx.bdims.iter().map(Option::is_some).collect();
        let (lp, carry_b) = batch_loop(&self.lp, &isb[..nk], &isb[nk..], cx.size, cx.axis)?;
        for (j, &bt) in carry_b.iter().enumerate() {
            if bt && !isb[nk + j] {
                args[nk + j] = materialize(b, args[nk + j], 0, cx.size)?;
            }
        }
        let outs = b.emit(While { lp }, &args)?;
        Ok(outs.into_iter().zip(carry_b).map(|(o, bt)| (o, bt.then_some(0))).collect())
    }
}

impl Batch for WhileJvp {
    fn batch(&self, b: &mut Builder, cx: &BatchCx<'_>) -> Result<Batched, IrError> {
        self.untransformable("batch")?;
        let args = all_to_front(b, cx)?;
        Ok(at0(b.emit(WhileJvp::new(all_batched(&self.lp, cx.size, cx.axis)?)?, &args)?))
    }
}

impl Batch for WhileVjp {
    fn batch(&self, b: &mut Builder, cx: &BatchCx<'_>) -> Result<Batched, IrError> {
        let args = all_to_front(b, cx)?;
        Ok(at0(b.emit(WhileVjp::new(all_batched(&self.lp, cx.size, cx.axis)?)?, &args)?))
    }
}

impl Batch for WhileHvp {
    fn batch(&self, b: &mut Builder, cx: &BatchCx<'_>) -> Result<Batched, IrError> {
        let args = all_to_front(b, cx)?;
        Ok(at0(b.emit(WhileHvp::new(all_batched(&self.lp, cx.size, cx.axis)?)?, &args)?))
    }
}
