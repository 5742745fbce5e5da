//! Control primitives: `call`, the application of a sub-function.
//!
//! A `call` equation holds its callee as an `Arc<Func>`; its operands must
//! have exactly the callee's parameter types and its results are the
//! callee's output types. The printer prints each callee once, before its
//! first caller; the verifier checks callees recursively. Two calls are equal
//! only if they hold the *same* callee (`Arc::ptr_eq`): structurally equal
//! functions built separately are different callees, which keeps equality
//! O(1) and matches how the printer deduplicates.
//!
//! `call` is the hook later used for rematerialisation (checkpoint) and
//! user-defined differentiation rules, which attach behaviour to a callee.

use super::{check, Op};
use crate::error::{ExecError, IrError, TypeError};
use crate::ir::{Builder, Func, Value};
use crate::tensor::Tensor;
use crate::transform::rewrite::{self, TangentOuts};
use crate::types::TensorType;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

/// Applies a sub-function to operands.
#[derive(Clone)]
pub struct Call {
    /// The callee.
    pub func: Arc<Func>,
}

impl PartialEq for Call {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.func, &other.func)
    }
}

impl Eq for Call {}

impl Hash for Call {
    fn hash<H: Hasher>(&self, state: &mut H) {
        Arc::as_ptr(&self.func).hash(state);
    }
}

impl fmt::Debug for Call {
    /// Names the callee instead of dumping its body (printed separately).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Call(@{})", self.func.name)
    }
}

/// Types of `values` in `func`, or `None` if a handle is foreign to it
/// (a malformed callee must be a type error, not a panic).
fn types_of(func: &Func, values: &[Value]) -> Option<Vec<TensorType>> {
    values.iter().map(|v| func.types.get(v.index()).cloned()).collect()
}

impl Op for Call {
    fn name(&self) -> &'static str {
        "call"
    }

    fn params(&self) -> String {
        format!("func=@{}", self.func.name)
    }

    fn infer(&self, ins: &[TensorType]) -> Result<Vec<TensorType>, TypeError> {
        let name = &self.func.name;
        let (Some(params), Some(results)) =
            (types_of(&self.func, &self.func.params), types_of(&self.func, &self.func.outputs))
        else {
            return Err(check::err(
                self,
                ins,
                format!("expected a well-formed callee, but @{name} has untyped values"),
            ));
        };
        if ins.len() != params.len() {
            return Err(check::err(
                self,
                ins,
                format!("expected {} operands (the parameters of @{name})", params.len()),
            ));
        }
        if let Some(i) = (0..ins.len()).find(|&i| ins[i] != params[i]) {
            return Err(check::err(
                self,
                ins,
                format!("expected operand {i} to be {} (parameter {i} of @{name})", params[i]),
            ));
        }
        Ok(results)
    }

    fn kernel(&self, ins: &[&Tensor], outs: &mut [Tensor]) -> Result<(), ExecError> {
        let results = crate::exec::run_func(self.func.clone(), ins)?;
        if results.len() != outs.len() {
            return Err(ExecError::kernel(
                "call",
                format!(
                    "internal error: @{} returned {} results for {} outputs",
                    self.func.name,
                    results.len(),
                    outs.len()
                ),
            ));
        }
        for (o, r) in outs.iter_mut().zip(results) {
            *o = r;
        }
        Ok(())
    }

    fn subfuncs(&self) -> Vec<Arc<Func>> {
        vec![self.func.clone()]
    }
}

impl Builder {
    /// Calls `func` on `args`; returns one value per callee output.
    pub fn call(&mut self, func: Arc<Func>, args: &[Value]) -> Result<Vec<Value>, IrError> {
        self.emit(Call { func }, args)
    }
}

impl crate::ad::Diff for Call {
    // The tangent of a call is the callee's JVP, inlined: the tangent
    // equations then sit in the caller, where reverse mode can split and
    // transpose them like any other equations.
    fn jvp(&self, b: &mut Builder, cx: &crate::ad::JvpCx<'_>) -> Result<Vec<Option<Value>>, IrError> {
        let (outs, tangents) = crate::ad::jvp_inline(b, &self.func, cx.primals, cx.tangents)?;
        // The inlined primal results replace the call, which then is dead
        // (and a callee that prints prints once).
        cx.replace_outputs(outs);
        Ok(tangents)
    }

    fn transpose(&self, _b: &mut Builder, _cx: &crate::ad::TransposeCx<'_>) -> Result<Vec<Option<Value>>, IrError> {
        // Never reached: the JVP rule inlines the callee, so no call is linear.
        Err(crate::ad::not_linear(self.name()))
    }
}

/// `checkpoint(f)`: calls `f`, but reverse mode recomputes `f`'s
/// intermediates in the backward pass instead of keeping them alive, so only
/// `f`'s inputs are saved (rematerialisation, JAX's `remat`).
///
/// How: the JVP of a checkpoint is another checkpoint, of the function that
/// maps (primals, tangents) to the output tangents; the transpose of such a
/// checkpoint is a checkpoint of its VJP, which recomputes the forward values
/// it needs from the saved primals when the backward pass runs. Both rules
/// emit checkpoints again, so remat survives higher-order differentiation.
///
/// With [`Policy::Dots`] the forward pass also keeps the results of the
/// matrix products and convolutions inside (JAX's `dots_saveable`): the JVP
/// runs `func` extended with those results as outputs, and the tangent map
/// takes them as operands, so the backward pass recomputes only the cheap
/// work between them.
#[derive(Clone)]
pub struct Checkpoint {
    /// The function whose intermediates are recomputed.
    pub func: Arc<Func>,
    /// What reverse mode keeps besides the inputs.
    pub policy: Policy,
}

/// What reverse mode saves inside a checkpointed function (JAX's
/// checkpoint policies).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Policy {
    /// Only the inputs; every intermediate is recomputed (`nothing_saveable`).
    #[default]
    Nothing,
    /// The inputs and the results of `dot_general` and `conv_general`
    /// (`dots_saveable`): the costly work runs once, the elementwise work
    /// between it is recomputed.
    Dots,
}

impl Policy {
    /// The policy by name: `nothing` or `dots`.
    pub fn parse(s: &str) -> Option<Policy> {
        match s {
            "nothing" => Some(Policy::Nothing),
            "dots" => Some(Policy::Dots),
            _ => None,
        }
    }

    /// Whether the policy keeps the results of this equation.
    fn saves(self, prim: &crate::ops::Prim) -> bool {
        self == Policy::Dots && matches!(prim.name(), "dot_general" | "conv_general")
    }
}

impl fmt::Display for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Policy::Nothing => "nothing",
            Policy::Dots => "dots",
        })
    }
}

impl PartialEq for Checkpoint {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.func, &other.func) && self.policy == other.policy
    }
}

impl Eq for Checkpoint {}

impl Hash for Checkpoint {
    fn hash<H: Hasher>(&self, state: &mut H) {
        Arc::as_ptr(&self.func).hash(state);
        self.policy.hash(state);
    }
}

impl fmt::Debug for Checkpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Checkpoint(@{}, {})", self.func.name, self.policy)
    }
}

impl Op for Checkpoint {
    fn name(&self) -> &'static str {
        "checkpoint"
    }

    fn params(&self) -> String {
        match self.policy {
            Policy::Nothing => format!("func=@{}", self.func.name),
            p => format!("func=@{}, policy={p}", self.func.name),
        }
    }

    fn infer(&self, ins: &[TensorType]) -> Result<Vec<TensorType>, TypeError> {
        Call { func: self.func.clone() }.infer(ins).map_err(|mut e| {
            e.prim = crate::ops::display_prim(self);
            e
        })
    }

    fn kernel(&self, ins: &[&Tensor], outs: &mut [Tensor]) -> Result<(), ExecError> {
        Call { func: self.func.clone() }.kernel(ins, outs)
    }

    fn subfuncs(&self) -> Vec<Arc<Func>> {
        vec![self.func.clone()]
    }
}

impl Builder {
    /// Applies `func` under rematerialisation, saving only its inputs (see [`Checkpoint`]).
    pub fn checkpoint(&mut self, func: Arc<Func>, args: &[Value]) -> Result<Vec<Value>, IrError> {
        self.checkpoint_with(func, args, Policy::Nothing)
    }

    /// Applies `func` under rematerialisation with a saving policy.
    pub fn checkpoint_with(&mut self, func: Arc<Func>, args: &[Value], policy: Policy) -> Result<Vec<Value>, IrError> {
        self.emit(Checkpoint { func, policy }, args)
    }
}

impl crate::ad::Diff for Checkpoint {
    fn jvp(&self, b: &mut Builder, cx: &crate::ad::JvpCx<'_>) -> Result<Vec<Option<Value>>, IrError> {
        let f = &self.func;
        let saved: Vec<Value> = f
            .eqns
            .iter()
            .filter(|e| self.policy.saves(&e.prim))
            .flat_map(|e| e.outputs.iter().copied())
            .filter(|&v| f.ty(v).dtype.is_float())
            .collect();
        if !saved.is_empty() {
            return self.jvp_saving(b, cx, &saved);
        }
        // tan_f(primals..., present tangents...) -> tangents of float outputs.
        let present: Vec<bool> = cx.tangents.iter().map(Option::is_some).collect();
        let tan_f = rewrite::jvp(f, format!("{}_jvp", f.name), &present, false, TangentOuts::Float)?;
        emit_tangent_map(b, f, tan_f, cx.primals, &[], cx.tangents)
    }

    fn transpose(&self, b: &mut Builder, cx: &crate::ad::TransposeCx<'_>) -> Result<Vec<Option<Value>>, IrError> {
        // Only a tangent map (emitted by `jvp`, policy `Nothing`) is linear.
        let g = &self.func;
        let linear: Vec<usize> = (0..cx.inputs.len()).filter(|&i| cx.is_linear(i)).collect();
        // vjp of g in its linear operands, only the cotangent outputs.
        let mask: Vec<bool> = (0..cx.inputs.len()).map(|i| cx.is_linear(i)).collect();
        let ct_in: Vec<bool> = g.outputs.iter().map(|&o| g.ty(o).dtype.is_float()).collect();
        let v = rewrite::vjp(g, format!("vjp_{}", g.name), &mask, &ct_in, false)?;
        // The linear operands' values are not needed by a transpose: drop them
        // from the parameters (an error if g was not linear in them after all).
        let drop: Vec<Value> = linear.iter().map(|&i| v.params[i]).collect();
        if v.eqns.iter().any(|e| e.inputs.iter().any(|x| drop.contains(x)))
            || v.outputs.iter().any(|x| drop.contains(x))
        {
            return Err(IrError::NoRule {
                prim: "checkpoint".into(),
                rule: "transpose",
                msg: format!("internal error: @{} is not linear in its tangent operands", g.name),
            });
        }
        let mut t_f = v;
        t_f.params.retain(|p| !drop.contains(p));
        t_f.name = format!("{}_transpose", g.name);
        let t_f = crate::opt::dce(&t_f);
        let mut args: Vec<Value> = cx.inputs.iter().flatten().copied().collect();
        for (i, ty) in cx.out_types.iter().enumerate() {
            if ty.dtype.is_float() {
                args.push(match cx.cts[i] {
                    Some(c) => c,
                    None => b.zeros(ty)?,
                });
            }
        }
        let cts = b.checkpoint(Arc::new(t_f), &args)?;
        let mut res = vec![None; cx.inputs.len()];
        for (&i, c) in linear.iter().zip(cts) {
            res[i] = Some(c);
        }
        Ok(res)
    }
}

impl Checkpoint {
    /// The JVP under a saving policy: the forward pass runs `func` extended
    /// with the `saved` values as outputs (and stands for the equation's
    /// results), and the tangent map reads them as operands instead of
    /// recomputing them: `tan(primals..., saved..., tangents...)`.
    fn jvp_saving(
        &self,
        b: &mut Builder,
        cx: &crate::ad::JvpCx<'_>,
        saved: &[Value],
    ) -> Result<Vec<Option<Value>>, IrError> {
        let f = &self.func;
        let n_out = f.outputs.len();
        let mut aug = (**f).clone();
        aug.name = format!("{}_saving", f.name);
        aug.outputs.extend_from_slice(saved);
        let fwd = b.checkpoint_with(Arc::new(aug), cx.primals, Policy::Nothing)?;
        cx.replace_outputs(fwd[..n_out].to_vec());

        let mut tb = Builder::new(format!("{}_jvp", f.name));
        let ps: Vec<Value> = f.params.iter().map(|&p| tb.param_like(f, p)).collect();
        let mut given: Vec<Option<Value>> = vec![None; f.n_values()];
        for &v in saved {
            let sv = tb.param(f.ty(v).clone());
            tb.set_name(sv, format!("{}_saved", f.name_of(v).unwrap_or("dot")));
            given[v.index()] = Some(sv);
        }
        let ts: Vec<Option<Value>> =
            cx.tangents.iter().zip(&f.params).map(|(t, &p)| t.map(|_| tb.param(f.ty(p).clone()))).collect();
        let (_, touts) = crate::ad::jvp_inline_given(&mut tb, f, &ps, &ts, &given)?;
        let float_outs: Vec<usize> = (0..n_out).filter(|&i| f.ty(f.outputs[i]).dtype.is_float()).collect();
        let mut results = Vec::with_capacity(float_outs.len());
        for &i in &float_outs {
            results.push(match touts[i] {
                Some(t) => t,
                None => tb.zeros(f.ty(f.outputs[i]))?,
            });
        }
        let tan_f = crate::opt::simplify(&tb.finish(&results)?);
        emit_tangent_map(b, f, tan_f, cx.primals, &fwd[n_out..], cx.tangents)
    }
}

/// Emits `checkpoint(tan_f)(primals..., saved..., present tangents...)`,
/// the tangent map of a checkpoint of `f` (one result per float output of
/// `f`), and spreads its results over `f`'s outputs (`None` for the others).
fn emit_tangent_map(
    b: &mut Builder,
    f: &Func,
    tan_f: Func,
    primals: &[Value],
    saved: &[Value],
    tangents: &[Option<Value>],
) -> Result<Vec<Option<Value>>, IrError> {
    let mut args = primals.to_vec();
    args.extend_from_slice(saved);
    args.extend(tangents.iter().flatten());
    // The tangent map recomputes forward values: its prints ran with the
    // primal checkpoint already (see `ops::debug`).
    let tan_f = crate::ops::debug::strip_effects(&tan_f);
    let tan_outs = b.checkpoint(Arc::new(tan_f), &args)?;
    let float_outs = (0..f.outputs.len()).filter(|&i| f.ty(f.outputs[i]).dtype.is_float());
    let mut res = vec![None; f.outputs.len()];
    for (i, v) in float_outs.zip(tan_outs) {
        res[i] = Some(v);
    }
    Ok(res)
}

// Batching rules: vmap the callee with the operands' batch dims as in_axes
// (every result batched at 0) and call it; a checkpoint stays a checkpoint.
mod batching {
    use super::*;
    use crate::batch::{vmap_func_named, Batch, BatchCx, Batched};

    fn batched_callee(func: &Func, cx: &BatchCx<'_>) -> Result<Arc<Func>, IrError> {
        let out_axes = vec![Some(0); func.outputs.len()];
        Ok(Arc::new(vmap_func_named(func, cx.bdims, &out_axes, cx.size, cx.axis)?))
    }

    impl Batch for Call {
        fn batch(&self, b: &mut Builder, cx: &BatchCx<'_>) -> Result<Batched, IrError> {
            let f = batched_callee(&self.func, cx)?;
            Ok(b.call(f, cx.args)?.into_iter().map(|o| (o, Some(0))).collect())
        }
    }

    impl Batch for Checkpoint {
        fn batch(&self, b: &mut Builder, cx: &BatchCx<'_>) -> Result<Batched, IrError> {
            let f = batched_callee(&self.func, cx)?;
            Ok(b.checkpoint_with(f, cx.args, self.policy)?.into_iter().map(|o| (o, Some(0))).collect())
        }
    }
}
