//! User-defined differentiation rules (seed 001's "registry of how to
//! differentiate this kernel"): `custom_jvp` and `custom_vjp` attach a rule
//! to a function. At run time both simply run the function.
//!
//! - `custom_jvp[func, rule]`: `rule(primals..., tangents of float params...)
//!   -> (outputs..., tangents of float outputs...)`. Its JVP inlines `rule`,
//!   so reverse mode transposes the user's tangent computation (which must be
//!   linear in the tangents, as in JAX) and higher orders differentiate it.
//! - `custom_vjp[func, fwd, bwd]`: `fwd(primals...) -> (outputs...,
//!   residuals...)`, `bwd(residuals..., cotangents of float outputs...) ->
//!   (cotangents of float params...)`. Its JVP emits the residuals and a
//!   `custom_vjp_tangent` equation, linear in the tangents, whose transpose is
//!   `bwd`. Forward mode through a custom_vjp function evaluates that tangent
//!   with the function's own derivative (JAX refuses forward mode here; graft
//!   answers it), and derivatives of order two and up also use the function's
//!   own rules, since `bwd` says nothing about its own derivative.

use super::{check, control::Call, Op};
use crate::ad::{Diff, JvpCx, TransposeCx};
use crate::error::{ExecError, IrError, TypeError};
use crate::ir::{Builder, Func, Value};
use crate::tensor::Tensor;
use crate::transform::rewrite::{self, TangentOuts};
use crate::types::TensorType;
use std::fmt;
use std::sync::Arc;

fn float_positions(types: &[TensorType]) -> Vec<usize> {
    (0..types.len()).filter(|&i| types[i].dtype.is_float()).collect()
}

/// A function with a user-supplied JVP rule.
#[derive(Clone)]
pub struct CustomJvp {
    /// The primal function.
    pub func: Arc<Func>,
    /// The rule: primals and float tangents to outputs and float output tangents.
    pub rule: Arc<Func>,
}

/// A function with user-supplied forward and backward functions.
#[derive(Clone)]
pub struct CustomVjp {
    /// The primal function.
    pub func: Arc<Func>,
    /// Primals to outputs and residuals.
    pub fwd: Arc<Func>,
    /// Residuals and float output cotangents to float parameter cotangents.
    pub bwd: Arc<Func>,
}

/// The tangent map of a `custom_vjp` function: operands are (primals...,
/// residuals..., tangents of float params...), results the tangents of the
/// float outputs. Linear in the tangents; its transpose is `bwd`.
#[derive(Clone)]
pub struct CustomVjpTangent {
    /// `jvp(func)` restricted to tangent outputs: (primals..., float tangents...) -> float output tangents.
    pub jvp: Arc<Func>,
    /// The user's backward function.
    pub bwd: Arc<Func>,
    /// Number of primal operands.
    pub n_primals: usize,
    /// Number of residual operands.
    pub n_residuals: usize,
}

macro_rules! by_identity {
    ($t:ty, $name:literal, $($f:ident),+) => {
        impl PartialEq for $t {
            fn eq(&self, other: &Self) -> bool {
                $(Arc::ptr_eq(&self.$f, &other.$f))&&+
            }
        }
        impl fmt::Debug for $t {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!($name, "("))?;
                $(write!(f, "@{} ", self.$f.name)?;)+
                write!(f, ")")
            }
        }
    };
}
by_identity!(CustomJvp, "CustomJvp", func, rule);
by_identity!(CustomVjp, "CustomVjp", func, fwd, bwd);
by_identity!(CustomVjpTangent, "CustomVjpTangent", jvp, bwd);

fn rename(mut e: TypeError, op: &impl Op) -> TypeError {
    e.prim = super::display_prim(op);
    e
}

impl Op for CustomJvp {
    fn name(&self) -> &'static str {
        "custom_jvp"
    }
    fn params(&self) -> String {
        format!("func=@{}, rule=@{}", self.func.name, self.rule.name)
    }
    fn infer(&self, ins: &[TensorType]) -> Result<Vec<TensorType>, TypeError> {
        let outs = Call { func: self.func.clone() }.infer(ins).map_err(|e| rename(e, self))?;
        let mut rule_ins = ins.to_vec();
        rule_ins.extend(float_positions(ins).into_iter().map(|i| ins[i].clone()));
        let rule_outs = Call { func: self.rule.clone() }.infer(&rule_ins).map_err(|e| rename(e, self))?;
        let mut expected = outs.clone();
        expected.extend(float_positions(&outs).into_iter().map(|i| outs[i].clone()));
        if rule_outs != expected {
            return Err(check::err(
                self,
                ins,
                format!("expected the rule @{} to return the outputs and their tangents", self.rule.name),
            ));
        }
        Ok(outs)
    }
    fn kernel(&self, ins: &[&Tensor], outs: &mut [Tensor]) -> Result<(), ExecError> {
        Call { func: self.func.clone() }.kernel(ins, outs)
    }
    fn subfuncs(&self) -> Vec<Arc<Func>> {
        vec![self.func.clone(), self.rule.clone()]
    }
}

impl Op for CustomVjp {
    fn name(&self) -> &'static str {
        "custom_vjp"
    }
    fn params(&self) -> String {
        format!("func=@{}, fwd=@{}, bwd=@{}", self.func.name, self.fwd.name, self.bwd.name)
    }
    fn infer(&self, ins: &[TensorType]) -> Result<Vec<TensorType>, TypeError> {
        let outs = Call { func: self.func.clone() }.infer(ins).map_err(|e| rename(e, self))?;
        let fwd_outs = Call { func: self.fwd.clone() }.infer(ins).map_err(|e| rename(e, self))?;
        if fwd_outs.len() < outs.len() || fwd_outs[..outs.len()] != outs[..] {
            return Err(check::err(self, ins, format!("expected fwd @{} to return the outputs first", self.fwd.name)));
        }
        let mut bwd_ins = fwd_outs[outs.len()..].to_vec();
        bwd_ins.extend(float_positions(&outs).into_iter().map(|i| outs[i].clone()));
        let bwd_outs = Call { func: self.bwd.clone() }.infer(&bwd_ins).map_err(|e| rename(e, self))?;
        let expected: Vec<TensorType> = float_positions(ins).into_iter().map(|i| ins[i].clone()).collect();
        if bwd_outs != expected {
            return Err(check::err(
                self,
                ins,
                format!("expected bwd @{} to return one cotangent per float parameter", self.bwd.name),
            ));
        }
        Ok(outs)
    }
    fn kernel(&self, ins: &[&Tensor], outs: &mut [Tensor]) -> Result<(), ExecError> {
        Call { func: self.func.clone() }.kernel(ins, outs)
    }
    fn subfuncs(&self) -> Vec<Arc<Func>> {
        vec![self.func.clone(), self.fwd.clone(), self.bwd.clone()]
    }
}

impl Op for CustomVjpTangent {
    fn name(&self) -> &'static str {
        "custom_vjp_tangent"
    }
    fn params(&self) -> String {
        format!(
            "jvp=@{}, bwd=@{}, n_primals={}, n_residuals={}",
            self.jvp.name, self.bwd.name, self.n_primals, self.n_residuals
        )
    }
    fn infer(&self, ins: &[TensorType]) -> Result<Vec<TensorType>, TypeError> {
        if ins.len() < self.n_primals + self.n_residuals {
            return Err(check::err(self, ins, "expected primals, residuals and tangents"));
        }
        let mut jvp_ins = ins[..self.n_primals].to_vec();
        jvp_ins.extend_from_slice(&ins[self.n_primals + self.n_residuals..]);
        Call { func: self.jvp.clone() }.infer(&jvp_ins).map_err(|e| rename(e, self))
    }
    fn kernel(&self, ins: &[&Tensor], outs: &mut [Tensor]) -> Result<(), ExecError> {
        let mut jvp_ins = ins[..self.n_primals].to_vec();
        jvp_ins.extend_from_slice(&ins[self.n_primals + self.n_residuals..]);
        Call { func: self.jvp.clone() }.kernel(&jvp_ins, outs)
    }
    fn subfuncs(&self) -> Vec<Arc<Func>> {
        vec![self.jvp.clone(), self.bwd.clone()]
    }
}

impl Diff for CustomJvp {
    fn jvp(&self, b: &mut Builder, cx: &JvpCx<'_>) -> Result<Vec<Option<Value>>, IrError> {
        let mut args = cx.primals.to_vec();
        for (i, &p) in cx.primals.iter().enumerate() {
            if b.ty(p)?.dtype.is_float() {
                let t = crate::ad::helpers::or_zeros(b, cx.tangents[i], p)?;
                args.push(t);
            }
        }
        let outs = b.inline(&self.rule, &args)?;
        let n = cx.outputs.len();
        let mut res = vec![None; n];
        let float_outs: Vec<usize> = (0..n).filter(|&i| self.func.ty(self.func.outputs[i]).dtype.is_float()).collect();
        for (&i, &t) in float_outs.iter().zip(&outs[n..]) {
            res[i] = Some(t);
        }
        Ok(res)
    }
    fn transpose(&self, _b: &mut Builder, _cx: &TransposeCx<'_>) -> Result<Vec<Option<Value>>, IrError> {
        // Never linear: the JVP inlines the rule.
        Err(crate::ad::not_linear(self.name()))
    }
}

impl Diff for CustomVjp {
    fn jvp(&self, b: &mut Builder, cx: &JvpCx<'_>) -> Result<Vec<Option<Value>>, IrError> {
        let f = &self.func;
        let n_out = f.outputs.len();
        let fwd_outs = b.call(self.fwd.clone(), cx.primals)?;
        let residuals = &fwd_outs[n_out..];
        // jvp(func) restricted to the float-output tangents.
        let all_float: Vec<bool> = f.params.iter().map(|&p| f.ty(p).dtype.is_float()).collect();
        // The tangent map re-runs `func`'s forward work: without its prints.
        let jvp = Arc::new(crate::ops::debug::strip_effects(&rewrite::jvp(
            f,
            format!("{}_tangent", f.name),
            &all_float,
            false,
            TangentOuts::Float,
        )?));
        let float_outs: Vec<usize> = (0..n_out).filter(|&i| f.ty(f.outputs[i]).dtype.is_float()).collect();
        let mut args = cx.primals.to_vec();
        args.extend_from_slice(residuals);
        for (i, &p) in cx.primals.iter().enumerate() {
            if b.ty(p)?.dtype.is_float() {
                let t = crate::ad::helpers::or_zeros(b, cx.tangents[i], p)?;
                args.push(t);
            }
        }
        let op =
            CustomVjpTangent { jvp, bwd: self.bwd.clone(), n_primals: cx.primals.len(), n_residuals: residuals.len() };
        let outs = b.emit(op, &args)?;
        let mut res = vec![None; n_out];
        for (&i, t) in float_outs.iter().zip(outs) {
            res[i] = Some(t);
        }
        Ok(res)
    }
    fn transpose(&self, _b: &mut Builder, _cx: &TransposeCx<'_>) -> Result<Vec<Option<Value>>, IrError> {
        Err(crate::ad::not_linear(self.name()))
    }
}

impl Diff for CustomVjpTangent {
    // For higher orders, differentiate the tangent map through the function's
    // own JVP (the user's bwd does not describe its own derivative).
    fn jvp(&self, b: &mut Builder, cx: &JvpCx<'_>) -> Result<Vec<Option<Value>>, IrError> {
        let (np, nr) = (self.n_primals, self.n_residuals);
        let mut prim = cx.primals[..np].to_vec();
        prim.extend_from_slice(&cx.primals[np + nr..]);
        let mut tans = cx.tangents[..np].to_vec();
        tans.extend_from_slice(&cx.tangents[np + nr..]);
        let (_, t) = crate::ad::jvp_inline(b, &self.jvp, &prim, &tans)?;
        Ok(t)
    }
    // Linear in the tangent operands: the transpose is the user's bwd.
    fn transpose(&self, b: &mut Builder, cx: &TransposeCx<'_>) -> Result<Vec<Option<Value>>, IrError> {
        let (np, nr) = (self.n_primals, self.n_residuals);
        if (0..np + nr).any(|i| cx.is_linear(i)) {
            return Err(crate::ad::not_linear(self.name()));
        }
        let mut args: Vec<Value> = (np..np + nr).map(|i| cx.primal(self.name(), i)).collect::<Result<_, _>>()?;
        for (i, ty) in cx.out_types.iter().enumerate() {
            args.push(match cx.cts[i] {
                Some(c) => c,
                None => b.zeros(ty)?,
            });
        }
        let cts = b.call(self.bwd.clone(), &args)?;
        let mut res = vec![None; cx.inputs.len()];
        for (k, c) in cts.into_iter().enumerate() {
            if cx.is_linear(np + nr + k) {
                res[np + nr + k] = Some(c);
            }
        }
        Ok(res)
    }
}

impl Builder {
    /// Applies `func` with a custom JVP rule (see the module docs for the rule's signature).
    pub fn custom_jvp(&mut self, func: Arc<Func>, rule: Arc<Func>, args: &[Value]) -> Result<Vec<Value>, IrError> {
        self.emit(CustomJvp { func, rule }, args)
    }

    /// Applies `func` with custom forward/backward functions (see the module docs).
    pub fn custom_vjp(
        &mut self,
        func: Arc<Func>,
        fwd: Arc<Func>,
        bwd: Arc<Func>,
        args: &[Value],
    ) -> Result<Vec<Value>, IrError> {
        self.emit(CustomVjp { func, fwd, bwd }, args)
    }
}

// Batching rules: every operand is brought to batch dim 0 and every
// sub-function (the function and its user rules) is vmapped with all axes 0,
// so the custom rule survives vmap: the batched rule is the user's rule,
// vectorized, and it still applies when the batched function is differentiated.
mod batching {
    use super::*;
    use crate::batch::helpers::all_to_front;
    use crate::batch::{vmap_func_named, Batch, BatchCx, Batched};

    fn all0(f: &Func, size: usize, axis: Option<&str>) -> Result<Arc<Func>, IrError> {
        let ins = vec![Some(0); f.params.len()];
        let outs = vec![Some(0); f.outputs.len()];
        Ok(Arc::new(vmap_func_named(f, &ins, &outs, size, axis)?))
    }

    fn at0(outs: Vec<Value>) -> Batched {
        outs.into_iter().map(|o| (o, Some(0))).collect()
    }

    impl Batch for CustomJvp {
        fn batch(&self, b: &mut Builder, cx: &BatchCx<'_>) -> Result<Batched, IrError> {
            let args = all_to_front(b, cx)?;
            let op = CustomJvp { func: all0(&self.func, cx.size, cx.axis)?, rule: all0(&self.rule, cx.size, cx.axis)? };
            Ok(at0(b.emit(op, &args)?))
        }
    }

    impl Batch for CustomVjp {
        fn batch(&self, b: &mut Builder, cx: &BatchCx<'_>) -> Result<Batched, IrError> {
            let args = all_to_front(b, cx)?;
            let op = CustomVjp {
                func: all0(&self.func, cx.size, cx.axis)?,
                fwd: all0(&self.fwd, cx.size, cx.axis)?,
                bwd: all0(&self.bwd, cx.size, cx.axis)?,
            };
            Ok(at0(b.emit(op, &args)?))
        }
    }

    impl Batch for CustomVjpTangent {
        fn batch(&self, b: &mut Builder, cx: &BatchCx<'_>) -> Result<Batched, IrError> {
            let args = all_to_front(b, cx)?;
            let op = CustomVjpTangent {
                jvp: all0(&self.jvp, cx.size, cx.axis)?,
                bwd: all0(&self.bwd, cx.size, cx.axis)?,
                n_primals: self.n_primals,
                n_residuals: self.n_residuals,
            };
            Ok(at0(b.emit(op, &args)?))
        }
    }
}
