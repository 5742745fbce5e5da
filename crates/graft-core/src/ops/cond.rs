//! `cond`: run exactly one of several branches (JAX's `lax.switch`/`lax.cond`).
//!
//! `cond[branches](index, operands...)`: `index` is an i32 scalar, clamped
//! into `0..branches.len()` (negative picks branch 0, too large the last
//! branch), and only that branch runs on the operands. Every branch is a
//! closed function with exactly the operands' types as parameters, and all
//! branches return the same types. [`Builder::cond`] takes a bool predicate
//! and two branches and picks `on_true` when it holds (it emits
//! `cond[on_false, on_true](convert(pred, i32), ...)`, as `lax.cond` does).
//!
//! Rules:
//! - JVP: a primal `cond` over the branches' forward parts, each returning
//!   its residuals and zeros in place of the other branches' residuals (so all
//!   branches have the same result types), and a `cond` over the branches'
//!   tangent maps that is linear in the tangents (reverse mode needs the
//!   two apart, see `ops/scan/body.rs`). Residuals that depend on no operand
//!   are computed once outside.
//! - transpose: a `cond` over the transposed branches (the taken branch's pullback).
//! - batch: an unbatched index gives a `cond` of the vmapped branches; a
//!   batched index runs every vmapped branch on the whole batch and picks each
//!   example's result with `select` (chained over `index >= k`, which also
//!   clamps). Untaken branches then do run: a branch that fails or produces
//!   NaN/inf on another example's data does so harmlessly in the forward
//!   pass, but, as in JAX, a NaN in an untaken branch's derivative can leak
//!   into gradients through the select's transpose (zero times NaN).

use super::{check, Op};
use crate::ad::{Diff, JvpCx, TransposeCx};
use crate::batch::{vmap_func_named, Batch, BatchCx, Batched};
use crate::dtype::DType;
use crate::error::{ExecError, IrError, TypeError};
use crate::ir::{Builder, Func, Value};
use crate::tensor::Tensor;
use crate::transform::rewrite::{self, prune, split_loop, transpose_linear, TangentOuts};
use crate::types::TensorType;
use std::fmt;
use std::sync::Arc;

/// Runs the branch picked by a run-time index (see the module docs).
#[derive(Clone)]
pub struct Cond {
    /// The branches, indexed from 0.
    pub branches: Vec<Arc<Func>>,
}

impl PartialEq for Cond {
    fn eq(&self, o: &Self) -> bool {
        self.branches.len() == o.branches.len() && self.branches.iter().zip(&o.branches).all(|(a, b)| Arc::ptr_eq(a, b))
    }
}

impl fmt::Debug for Cond {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Cond({})", self.params())
    }
}

impl Op for Cond {
    fn name(&self) -> &'static str {
        "cond"
    }

    fn params(&self) -> String {
        let names: Vec<String> = self.branches.iter().map(|f| format!("@{}", f.name)).collect();
        format!("branches=({})", names.join(","))
    }

    fn infer(&self, ins: &[TensorType]) -> Result<Vec<TensorType>, TypeError> {
        let Some(first) = self.branches.first() else {
            return Err(check::err(self, ins, "expected at least one branch"));
        };
        if ins.first() != Some(&TensorType::scalar(DType::I32)) {
            return Err(check::err(self, ins, "expected operand 0 (the branch index) to be an i32 scalar"));
        }
        for f in &self.branches {
            let typed = f.params.iter().chain(&f.outputs).all(|v| v.index() < f.types.len());
            if !typed {
                return Err(check::err(
                    self,
                    ins,
                    format!("expected well-formed branches, but @{} has untyped values", f.name),
                ));
            }
            if f.param_types() != ins[1..] {
                return Err(check::err(
                    self,
                    ins,
                    format!("expected operands 1.. to be the parameter types of branch @{}", f.name),
                ));
            }
            if f.output_types() != first.output_types() {
                return Err(check::err(
                    self,
                    ins,
                    format!("branches @{} and @{} return different types", first.name, f.name),
                ));
            }
        }
        Ok(first.output_types())
    }

    fn kernel(&self, ins: &[&Tensor], outs: &mut [Tensor]) -> Result<(), ExecError> {
        let idx = ins[0].as_slice::<i32>().map_err(|e| ExecError::kernel("cond", e.to_string()))?[0];
        let k = (idx.max(0) as usize).min(self.branches.len() - 1);
        let results = crate::exec::plan_cached(&self.branches[k])?.run(&ins[1..])?;
        if results.len() != outs.len() {
            return Err(ExecError::kernel("cond", "internal error: branch result count differs from the cond's"));
        }
        for (o, r) in outs.iter_mut().zip(results) {
            *o = r;
        }
        Ok(())
    }

    fn subfuncs(&self) -> Vec<Arc<Func>> {
        self.branches.clone()
    }
}

impl Builder {
    /// Runs `branches[clamp(index)]` on `operands` (`index`: i32 scalar).
    pub fn switch(&mut self, index: Value, branches: &[Arc<Func>], operands: &[Value]) -> Result<Vec<Value>, IrError> {
        let mut args = vec![index];
        args.extend_from_slice(operands);
        self.emit(Cond { branches: branches.to_vec() }, &args)
    }

    /// Runs `on_true` if the bool scalar `pred` holds, else `on_false`.
    pub fn cond(
        &mut self,
        pred: Value,
        on_true: Arc<Func>,
        on_false: Arc<Func>,
        operands: &[Value],
    ) -> Result<Vec<Value>, IrError> {
        if self.ty(pred)? != &TensorType::scalar(DType::Bool) {
            return Err(IrError::invalid(
                "cond",
                format!("the predicate must be a bool scalar, got {}", self.ty(pred)?),
            ));
        }
        let index = self.convert(pred, DType::I32)?;
        self.switch(index, &[on_false, on_true], operands)
    }
}

impl Diff for Cond {
    fn jvp(&self, b: &mut Builder, cx: &JvpCx<'_>) -> Result<Vec<Option<Value>>, IrError> {
        let (idx, ops) = (cx.primals[0], &cx.primals[1..]);
        let nz: Vec<bool> = cx.tangents[1..].iter().map(Option::is_some).collect();
        let out_types = self.branches[0].output_types();
        let out_t: Vec<bool> = out_types.iter().map(|t| t.dtype.is_float()).collect();
        if !out_t.iter().any(|&t| t) {
            return Ok(vec![None; out_types.len()]);
        }
        let n_out = out_types.len();
        let splits = self
            .branches
            .iter()
            .map(|f| {
                let jf = rewrite::jvp(f, format!("{}_jvp", f.name), &nz, true, TangentOuts::Marked(&out_t))?;
                split_loop(&jf, ops.len(), 0, n_out)
            })
            .collect::<Result<Vec<_>, _>>()?;
        // Residuals of all branches, in branch order: invariant ones computed
        // here, per-branch ones returned by the primal cond.
        let mut inv = Vec::new();
        for s in &splits {
            inv.extend(b.inline(&s.hoist, &[])?);
        }
        let step_types: Vec<Vec<TensorType>> = splits.iter().map(|s| s.fwd.output_types()[n_out..].to_vec()).collect();
        // The primal cond returns only residuals (the primal results exist
        // already) and takes only the operands some branch reads for them.
        let op_types: Vec<TensorType> = ops.iter().map(|&o| b.ty(o).cloned()).collect::<Result<_, _>>()?;
        let mut pruned = Vec::with_capacity(splits.len());
        for (k, s) in splits.iter().enumerate() {
            let mut fb = Builder::new(format!("{}_res", self.branches[k].name));
            let ps: Vec<Value> = op_types.iter().map(|t| fb.param(t.clone())).collect();
            // The primal cond printed already (see `ops::debug`).
            let r = fb.inline(&crate::ops::debug::strip_effects(&s.fwd), &ps)?;
            let mut outs = Vec::new();
            for (j, tys) in step_types.iter().enumerate() {
                if j == k {
                    outs.extend_from_slice(&r[n_out..]);
                } else {
                    for t in tys {
                        outs.push(fb.zeros(t)?);
                    }
                }
            }
            let f = fb.finish(&outs)?;
            pruned.push(prune(&f, &vec![true; outs.len()]));
        }
        let used: Vec<bool> = (0..ops.len()).map(|i| pruned.iter().any(|(_, kept)| kept[i])).collect();
        let mut fwd_branches = Vec::with_capacity(splits.len());
        for (f, kept) in &pruned {
            let mut fb = Builder::new(f.name.clone());
            let mut args = Vec::new();
            for i in (0..ops.len()).filter(|&i| used[i]) {
                let p = fb.param(op_types[i].clone());
                if kept[i] {
                    args.push(p);
                }
            }
            let outs = fb.inline(f, &args)?;
            fwd_branches.push(Arc::new(fb.finish(&outs)?));
        }
        let used_ops: Vec<Value> = (0..ops.len()).filter(|&i| used[i]).map(|i| ops[i]).collect();
        let steps = b.switch(idx, &fwd_branches, &used_ops)?;
        let tangents: Vec<Value> = cx.tangents[1..].iter().flatten().copied().collect();
        let t_types: Vec<TensorType> = tangents.iter().map(|&t| b.ty(t).cloned()).collect::<Result<_, _>>()?;
        let inv_types: Vec<TensorType> = inv.iter().map(|&v| b.ty(v).cloned()).collect::<Result<_, _>>()?;
        let all_steps: Vec<TensorType> = step_types.concat();
        let (mut inv_at, mut step_at) = (0, 0);
        let mut lin_branches = Vec::with_capacity(splits.len());
        for (k, s) in splits.iter().enumerate() {
            let mut lb = Builder::new(format!("{}_lin", self.branches[k].name));
            let pi: Vec<Value> = inv_types.iter().map(|t| lb.param(t.clone())).collect();
            let ps: Vec<Value> = all_steps.iter().map(|t| lb.param(t.clone())).collect();
            let pt: Vec<Value> = t_types.iter().map(|t| lb.param(t.clone())).collect();
            let (ni, ns) = (s.n_inv(), s.n_step());
            let args: Vec<Value> =
                pi[inv_at..inv_at + ni].iter().chain(&ps[step_at..step_at + ns]).chain(&pt).copied().collect();
            let outs = lb.inline(&s.lin, &args)?;
            lin_branches.push(Arc::new(lb.finish(&outs)?));
            inv_at += ni;
            step_at += ns;
        }
        let args: Vec<Value> = inv.iter().chain(&steps).chain(&tangents).copied().collect();
        let mut touts = b.switch(idx, &lin_branches, &args)?.into_iter();
        Ok(out_t.iter().map(|&t| if t { touts.next() } else { None }).collect())
    }

    fn transpose(&self, b: &mut Builder, cx: &TransposeCx<'_>) -> Result<Vec<Option<Value>>, IrError> {
        let idx = cx.primal("cond", 0)?;
        let linear: Vec<bool> = (1..cx.inputs.len()).map(|i| cx.is_linear(i)).collect();
        let ct_present: Vec<bool> = cx.cts.iter().map(Option::is_some).collect();
        let branches = self
            .branches
            .iter()
            .map(|f| transpose_linear(f, &linear, &ct_present).map(Arc::new))
            .collect::<Result<Vec<_>, _>>()?;
        let args: Vec<Value> = cx.inputs[1..].iter().flatten().chain(cx.cts.iter().flatten()).copied().collect();
        let mut cts = b.switch(idx, &branches, &args)?.into_iter();
        let mut res = vec![None];
        res.extend(linear.iter().map(|&l| if l { cts.next() } else { None }));
        Ok(res)
    }
}

impl Batch for Cond {
    fn batch(&self, b: &mut Builder, cx: &BatchCx<'_>) -> Result<Batched, IrError> {
        let in_axes = &cx.bdims[1..];
        let n_out = self.branches[0].outputs.len();
        let out_axes = vec![Some(0); n_out];
        let vbranches = self
            .branches
            .iter()
            .map(|f| vmap_func_named(f, in_axes, &out_axes, cx.size, cx.axis).map(Arc::new))
            .collect::<Result<Vec<_>, _>>()?;
        let ops = &cx.args[1..];
        let Some(d) = cx.bdims[0] else {
            let outs = b.switch(cx.args[0], &vbranches, ops)?;
            return Ok(outs.into_iter().map(|o| (o, Some(0))).collect());
        };
        // Batched index: every branch on the whole batch, then per-example select.
        let idx = crate::batch::helpers::move_bdim(b, cx.args[0], d, 0)?;
        let mut acc = b.inline(&vbranches[0], ops)?;
        for (k, f) in vbranches.iter().enumerate().skip(1) {
            let outs = b.inline(f, ops)?;
            let kv = b.full(k as f64, &TensorType::new(DType::I32, vec![cx.size]))?;
            let pick = b.ge(idx, kv)?;
            for (a, o) in acc.iter_mut().zip(outs) {
                let shape = b.ty(o)?.shape.clone();
                let p = b.broadcast_in_dim(pick, &shape, &[0])?;
                *a = b.select(p, o, *a)?;
            }
        }
        Ok(acc.into_iter().map(|o| (o, Some(0))).collect())
    }
}
