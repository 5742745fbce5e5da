//! While loops (seed 001's `iterate_until`) and `fori` with a run-time trip
//! count, with forward mode, reverse mode (which JAX refuses for while
//! loops), higher orders and vmap.
//!
//! A loop [`Loop`] is a pair of closed sub-functions over `x = (consts...,
//! carry...)`: `cond(x) -> bool[]` and `body(x) -> carry'`. Loop-invariant
//! values are explicit `consts` operands (closure conversion), so bodies
//! never capture values of the enclosing function.
//!
//! Four primitives share a loop `L`; write `F(x)` for the final carry, `J`
//! for its Jacobian in the float entries of `x` and `H_u(x) = D[J(x)^T u]`
//! (the Hessian of `u . F`, symmetric). The trip count is found at run time
//! by every kernel from the primal carries, never stored in the IR:
//!
//! | primitive   | operands        | result                  | linear in |
//! |-------------|-----------------|-------------------------|-----------|
//! | `while`     | `x`             | `F(x)`                  | -         |
//! | `while_jvp` | `x, v`          | `J(x) v`                | `v`       |
//! | `while_vjp` | `x, u`          | `J(x)^T u`              | `u`       |
//! | `while_hvp` | `x, u, w`       | `H_u(x) w`              | `u`, `w` (one at a time) |
//!
//! `v`, `w` have one entry per float entry of `x`, `u` one per float carry.
//! Rules (`rules.rs`) stay inside this family, on `L` or on its *augmented
//! loop* `L' = aug(L)` (consts `(k, dk)`, carry `(c, dc)`, body = JVP of
//! `L`'s body, cond = `L`'s cond): `J_{L'}(x, v)(x', v') = (J x', D^2F[v, x']
//! + J v')` and `J_{L'}(x, w)^T (0, u) = (H_u(x) w, J(x)^T u)`. Hence
//! - jvp(`while`) = `while_jvp`; the primal loop stays a separate
//!   (non-linear) equation, as reverse mode requires;
//! - jvp(`while_jvp`) = the tangent half of `while_jvp` on `L'`;
//!   transpose = `while_vjp`;
//! - jvp(`while_vjp`) = `while_vjp(x, u') + while_hvp(x, u, x')`;
//!   transpose = `while_jvp`;
//! - jvp(`while_hvp`) = the `x` half of `while_hvp` and `while_vjp` on `L'`;
//!   transpose in `w` = `while_hvp` (symmetry), in `u` = half of `while_jvp` on `L'`.
//!
//! Every rule emits these primitives again, so `grad(grad(f))`,
//! `vmap(grad(f))` and deeper compositions work through loops.
//!
//! Reverse mode records the carries `c_0 .. c_{n-1}` on a stack held by the
//! `while_vjp` kernel and sized at run time, then sweeps backwards through
//! the body's VJP. [`Remat`] stores only every k-th carry (or every
//! ceil(sqrt(n))-th, after a counting pass) and recomputes the rest segment
//! by segment; results are bitwise the same. The stack counts towards the
//! run's peak bytes.
//!
//! Batching (`batching.rs`): when the predicate does not depend on batched
//! values, the loop runs its vmapped body; otherwise it runs until every
//! example is done and finished examples are frozen with `select`, so each
//! example keeps its own trip count (also for the derivative primitives,
//! whose batched loops freeze tangents and cotangents the same way).
//! Frozen examples still evaluate the body: a body that produces inf/NaN
//! past an example's stopping point can leak NaN into its cotangents (0 * inf).

mod batching;
mod kernel;
mod rules;

use super::{check, Op};
use crate::error::{ExecError, IrError, TypeError};
use crate::ir::{Builder, Func, Value};
use crate::tensor::Tensor;
use crate::types::TensorType;
use crate::DType;
use std::fmt;
use std::sync::Arc;

use super::remat::Remat;

/// A loop: `cond` and `body` over `(consts..., carry...)`.
#[derive(Clone)]
pub struct Loop {
    /// `(consts..., carry...) -> bool[]`: keep going while true.
    pub cond: Arc<Func>,
    /// `(consts..., carry...) -> carry...`.
    pub body: Arc<Func>,
    /// Number of leading loop-invariant operands.
    pub n_consts: usize,
    /// Carry storage policy of reverse mode.
    pub remat: Remat,
}

impl PartialEq for Loop {
    fn eq(&self, o: &Self) -> bool {
        Arc::ptr_eq(&self.cond, &o.cond)
            && Arc::ptr_eq(&self.body, &o.body)
            && self.n_consts == o.n_consts
            && self.remat == o.remat
    }
}

impl fmt::Debug for Loop {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Loop(@{}, @{}, {}, {:?})", self.cond.name, self.body.name, self.n_consts, self.remat)
    }
}

fn float_positions(types: &[TensorType]) -> Vec<usize> {
    (0..types.len()).filter(|&i| types[i].dtype.is_float()).collect()
}

impl Loop {
    /// Checks the signatures of `cond` and `body`; the error says what is wrong.
    pub fn new(cond: Arc<Func>, body: Arc<Func>, n_consts: usize, remat: Remat) -> Result<Loop, IrError> {
        let lp = Loop { cond, body, n_consts, remat };
        lp.check().map_err(|m| IrError::invalid("while", m))?;
        Ok(lp)
    }

    fn check(&self) -> Result<(), String> {
        let (b, c) = (&self.body, &self.cond);
        if let Remat::Every(0) = self.remat {
            return Err("Remat::Every(k) needs k >= 1".into());
        }
        let typed = |f: &Func| f.params.iter().chain(&f.outputs).all(|v| v.index() < f.types.len());
        if !typed(b) || !typed(c) {
            return Err(format!("@{} or @{} has untyped values", b.name, c.name));
        }
        if b.params.len() < self.n_consts {
            return Err(format!("body @{} has fewer parameters than the {} consts", b.name, self.n_consts));
        }
        let x = b.param_types();
        if b.output_types()[..] != x[self.n_consts..] {
            return Err(format!(
                "body @{} must return its carry parameters' types ({}), returns ({})",
                b.name,
                join(&x[self.n_consts..]),
                join(&b.output_types())
            ));
        }
        if c.param_types() != x {
            return Err(format!(
                "cond @{} must take the body's parameters ({}), takes ({})",
                c.name,
                join(&x),
                join(&c.param_types())
            ));
        }
        if c.output_types() != [TensorType::new(DType::Bool, vec![])] {
            return Err(format!("cond @{} must return one bool scalar, returns ({})", c.name, join(&c.output_types())));
        }
        Ok(())
    }

    /// Types of `x = (consts..., carry...)`.
    pub fn x_types(&self) -> Vec<TensorType> {
        self.body.param_types()
    }

    /// Carry types.
    pub fn carry_types(&self) -> Vec<TensorType> {
        self.body.output_types()
    }

    pub(crate) fn n_x(&self) -> usize {
        self.body.params.len()
    }

    /// Positions of the float entries of `x` (those with tangents).
    fn float_x(&self) -> Vec<usize> {
        float_positions(&self.x_types())
    }

    /// Number of float consts and float carries.
    fn n_float(&self) -> (usize, usize) {
        let fx = self.float_x();
        let nfk = fx.iter().filter(|&&i| i < self.n_consts).count();
        (nfk, fx.len() - nfk)
    }

    fn float_x_types(&self) -> Vec<TensorType> {
        let x = self.x_types();
        self.float_x().into_iter().map(|i| x[i].clone()).collect()
    }

    fn float_carry_types(&self) -> Vec<TensorType> {
        let c = self.carry_types();
        float_positions(&c).into_iter().map(|i| c[i].clone()).collect()
    }

    /// The augmented loop `L'`: consts `(k, dk)`, carry `(c, dc)` (tangents
    /// of the float entries), body = JVP of the body, cond = the cond
    /// ignoring tangents. Its trip count is `L`'s.
    pub fn aug(&self) -> Result<Loop, IrError> {
        let (x, nk) = (self.x_types(), self.n_consts);
        let fx = self.float_x();
        let mk = |name: String| {
            let mut b = Builder::new(name);
            let k: Vec<Value> = x[..nk].iter().map(|t| b.param(t.clone())).collect();
            let dk: Vec<Value> = fx.iter().filter(|&&i| i < nk).map(|&i| b.param(x[i].clone())).collect();
            let c: Vec<Value> = x[nk..].iter().map(|t| b.param(t.clone())).collect();
            let dc: Vec<Value> = fx.iter().filter(|&&i| i >= nk).map(|&i| b.param(x[i].clone())).collect();
            let mut primals = k;
            primals.extend(c);
            let mut tangents = vec![None; x.len()];
            for (&i, &t) in fx.iter().zip(dk.iter().chain(&dc)) {
                tangents[i] = Some(t);
            }
            (b, primals, tangents)
        };
        let (mut bb, primals, tangents) = mk(format!("{}_jvp", self.body.name));
        let (outs, touts) = crate::ad::jvp_inline(&mut bb, &self.body, &primals, &tangents)?;
        let mut results = outs.clone();
        for j in float_positions(&self.carry_types()) {
            results.push(crate::ad::helpers::or_zeros(&mut bb, touts[j], outs[j])?);
        }
        let body = crate::opt::simplify(&bb.finish(&results)?);
        let (mut cb, primals, _) = mk(format!("{}_jvp", self.cond.name));
        let p = cb.inline(&self.cond, &primals)?;
        let cond = cb.finish(&p)?;
        let (nfk, _) = self.n_float();
        Ok(Loop { cond: Arc::new(cond), body: Arc::new(body), n_consts: nk + nfk, remat: self.remat })
    }

    /// The backward step `(consts..., carry..., acc..., u...) -> (acc +
    /// ct_consts..., ct_carry...)`: the body's VJP for the float entries,
    /// accumulating the consts' cotangents over the trips.
    pub fn back(&self) -> Result<Arc<Func>, IrError> {
        let f = &self.body;
        let mut b = Builder::new(format!("{}_vjp", f.name));
        let x: Vec<Value> = self.x_types().into_iter().map(|t| b.param(t)).collect();
        let (nfk, _) = self.n_float();
        let fx = self.float_x();
        let acc: Vec<Value> = fx[..nfk].iter().map(|&i| b.param(self.x_types()[i].clone())).collect();
        let ctypes = self.carry_types();
        let mut cts = vec![None; ctypes.len()];
        for j in float_positions(&ctypes) {
            cts[j] = Some(b.param(ctypes[j].clone()));
        }
        let wrt: Vec<bool> = self.x_types().iter().map(|t| t.dtype.is_float()).collect();
        let (_, grads) = crate::ad::linearize_transpose(&mut b, f, &x, &wrt, &cts)?;
        let mut outs = Vec::with_capacity(fx.len());
        for (a, &i) in acc.iter().zip(&fx[..nfk]) {
            outs.push(match grads[i] {
                Some(g) => b.add(*a, g)?,
                None => *a,
            });
        }
        for &i in &fx[nfk..] {
            outs.push(crate::ad::helpers::or_zeros(&mut b, grads[i], x[i])?);
        }
        Ok(Arc::new(crate::opt::simplify(&b.finish(&outs)?)))
    }

    fn params(&self) -> String {
        let remat = match self.remat {
            Remat::Off => String::new(),
            r => format!(", remat={r}"),
        };
        format!("cond=@{}, body=@{}, n_consts={}{remat}", self.cond.name, self.body.name, self.n_consts)
    }

    fn subfuncs(&self) -> Vec<Arc<Func>> {
        vec![self.cond.clone(), self.body.clone()]
    }
}

fn join(ts: &[TensorType]) -> String {
    ts.iter().map(|t| t.to_string()).collect::<Vec<_>>().join(", ")
}

/// `while cond(x): carry = body(x)`; the result is the final carry.
#[derive(Clone, PartialEq)]
pub struct While {
    /// The loop.
    pub lp: Loop,
}

/// `J(x) v`, linear in `v` (one entry per float entry of `x`); runs `L`'s
/// augmented loop. Results: one tangent per float carry.
#[derive(Clone, PartialEq)]
pub struct WhileJvp {
    /// The loop.
    pub lp: Loop,
    /// `lp.aug()`, kept so the kernel plans it once.
    pub aug: Loop,
    /// Also returns the primal carries, first: the augmented loop computes
    /// them anyway. Only the executor's `opt::merge_while_jvp` sets it,
    /// after every transform, when the graph runs the same `while` on the
    /// same operands for its primal results; this form has no rules.
    pub primal: bool,
}

/// `J(x)^T u`, linear in `u` (one entry per float carry); results: one
/// cotangent per float entry of `x`.
#[derive(Clone, PartialEq)]
pub struct WhileVjp {
    /// The loop.
    pub lp: Loop,
    /// `lp.back()`.
    pub back: Arc<Func>,
}

/// `H_u(x) w` (see the module docs), linear in `w` and in `u`; computed as
/// the `x` half of `J_{L'}(x, w)^T (0, u)`.
#[derive(Clone, PartialEq)]
pub struct WhileHvp {
    /// The loop.
    pub lp: Loop,
    /// `lp.aug()`.
    pub aug: Loop,
    /// `lp.aug().back()`.
    pub aug_back: Arc<Func>,
}

impl WhileJvp {
    /// Derives the augmented loop.
    pub fn new(lp: Loop) -> Result<Self, IrError> {
        Ok(WhileJvp { aug: lp.aug()?, lp, primal: false })
    }
}

impl WhileVjp {
    /// Derives the backward step.
    pub fn new(lp: Loop) -> Result<Self, IrError> {
        Ok(WhileVjp { back: lp.back()?, lp })
    }
}

impl WhileHvp {
    /// Derives the augmented loop and its backward step.
    pub fn new(lp: Loop) -> Result<Self, IrError> {
        let aug = lp.aug()?;
        Ok(WhileHvp { aug_back: aug.back()?, aug, lp })
    }
}

macro_rules! debug_by_name {
    ($($t:ident),*) => {$(
        impl fmt::Debug for $t {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}({:?})", stringify!($t), self.lp)
            }
        }
    )*};
}
debug_by_name!(While, WhileJvp, WhileVjp, WhileHvp);

/// Checks operand types against `expected` (the loop's `x` then the extra groups).
fn check_ins(op: &impl Op, lp: &Loop, ins: &[TensorType], extra: &[Vec<TensorType>]) -> Result<(), TypeError> {
    lp.check().map_err(|m| check::err(op, ins, m))?;
    let mut expected = lp.x_types();
    for e in extra {
        expected.extend(e.iter().cloned());
    }
    if ins != expected.as_slice() {
        return Err(check::err(op, ins, format!("expected operands ({})", join(&expected))));
    }
    Ok(())
}

impl Op for While {
    fn name(&self) -> &'static str {
        "while"
    }
    fn params(&self) -> String {
        self.lp.params()
    }
    fn infer(&self, ins: &[TensorType]) -> Result<Vec<TensorType>, TypeError> {
        check_ins(self, &self.lp, ins, &[])?;
        Ok(self.lp.carry_types())
    }
    fn kernel(&self, ins: &[&Tensor], outs: &mut [Tensor]) -> Result<(), ExecError> {
        let (k, c) = ins.split_at(self.lp.n_consts);
        let fin = kernel::run_loop(&self.lp, k, c.iter().map(|t| (*t).clone()).collect())?;
        kernel::write_outs(self.name(), outs, fin)
    }
    fn subfuncs(&self) -> Vec<Arc<Func>> {
        self.lp.subfuncs()
    }
}

impl Op for WhileJvp {
    fn name(&self) -> &'static str {
        "while_jvp"
    }
    fn params(&self) -> String {
        let primal = if self.primal { ", with_primal" } else { "" };
        format!("{}, jvp=@{}{primal}", self.lp.params(), self.aug.body.name)
    }
    fn infer(&self, ins: &[TensorType]) -> Result<Vec<TensorType>, TypeError> {
        check_ins(self, &self.lp, ins, &[self.lp.float_x_types()])?;
        let mut outs = if self.primal { self.lp.carry_types() } else { Vec::new() };
        outs.extend(self.lp.float_carry_types());
        Ok(outs)
    }
    fn kernel(&self, ins: &[&Tensor], outs: &mut [Tensor]) -> Result<(), ExecError> {
        // The primal `while` printed already (see `ops::debug`); merged with
        // it, this is the only run (and merged only without prints).
        let fin = if self.primal {
            kernel::jvp(&self.lp, &self.aug, ins, true)?
        } else {
            crate::ops::debug::muted(|| kernel::jvp(&self.lp, &self.aug, ins, false))?
        };
        kernel::write_outs(self.name(), outs, fin)
    }
    fn subfuncs(&self) -> Vec<Arc<Func>> {
        let mut v = self.lp.subfuncs();
        v.extend(self.aug.subfuncs());
        v
    }
}

impl Op for WhileVjp {
    fn name(&self) -> &'static str {
        "while_vjp"
    }
    fn params(&self) -> String {
        format!("{}, vjp=@{}", self.lp.params(), self.back.name)
    }
    fn infer(&self, ins: &[TensorType]) -> Result<Vec<TensorType>, TypeError> {
        check_ins(self, &self.lp, ins, &[self.lp.float_carry_types()])?;
        Ok(self.lp.float_x_types())
    }
    fn kernel(&self, ins: &[&Tensor], outs: &mut [Tensor]) -> Result<(), ExecError> {
        let (x, u) = ins.split_at(self.lp.n_x());
        let u = u.iter().map(|t| (*t).clone()).collect();
        let fin = crate::ops::debug::muted(|| kernel::vjp(&self.lp, &self.back, x, u))?;
        kernel::write_outs(self.name(), outs, fin)
    }
    fn subfuncs(&self) -> Vec<Arc<Func>> {
        let mut v = self.lp.subfuncs();
        v.push(self.back.clone());
        v
    }
}

impl Op for WhileHvp {
    fn name(&self) -> &'static str {
        "while_hvp"
    }
    fn params(&self) -> String {
        format!("{}, jvp=@{}, vjp=@{}", self.lp.params(), self.aug.body.name, self.aug_back.name)
    }
    fn infer(&self, ins: &[TensorType]) -> Result<Vec<TensorType>, TypeError> {
        check_ins(self, &self.lp, ins, &[self.lp.float_carry_types(), self.lp.float_x_types()])?;
        Ok(self.lp.float_x_types())
    }
    fn kernel(&self, ins: &[&Tensor], outs: &mut [Tensor]) -> Result<(), ExecError> {
        let fin = crate::ops::debug::muted(|| kernel::hvp(&self.lp, &self.aug, &self.aug_back, ins))?;
        kernel::write_outs(self.name(), outs, fin)
    }
    fn subfuncs(&self) -> Vec<Arc<Func>> {
        let mut v = self.lp.subfuncs();
        v.extend(self.aug.subfuncs());
        v.push(self.aug_back.clone());
        v
    }
}

impl Builder {
    /// `while cond(consts, carry): carry = body(consts, carry)`, starting
    /// from `init`; returns the final carry. `cond` and `body` take
    /// `(consts..., carry...)`; `cond` returns a bool scalar, `body` the next
    /// carry (same types as `init`).
    pub fn while_loop(
        &mut self,
        cond: Arc<Func>,
        body: Arc<Func>,
        consts: &[Value],
        init: &[Value],
    ) -> Result<Vec<Value>, IrError> {
        self.while_loop_remat(cond, body, consts, init, Remat::Off)
    }

    /// [`Builder::while_loop`] with a carry storage policy for reverse mode.
    pub fn while_loop_remat(
        &mut self,
        cond: Arc<Func>,
        body: Arc<Func>,
        consts: &[Value],
        init: &[Value],
        remat: Remat,
    ) -> Result<Vec<Value>, IrError> {
        let lp = Loop::new(cond, body, consts.len(), remat)?;
        let mut args = consts.to_vec();
        args.extend_from_slice(init);
        self.emit(While { lp }, &args)
    }

    /// `for i in 0..n: carry = body(consts, i, carry)` with the trip count
    /// `n` (an i32 scalar) known only at run time (`n <= 0` runs no trip).
    /// `body` takes `(consts..., i: i32[], carry...)` and returns the carry.
    /// Built on `while` with the carry `(i, carry...)`.
    pub fn fori_dynamic(
        &mut self,
        n: Value,
        body: &Func,
        consts: &[Value],
        init: &[Value],
        remat: Remat,
    ) -> Result<Vec<Value>, IrError> {
        let i32s = TensorType::new(DType::I32, vec![]);
        if self.ty(n)? != &i32s {
            return Err(IrError::invalid("fori_dynamic", format!("the trip count must be i32[], got {}", self.ty(n)?)));
        }
        let kt: Vec<TensorType> = consts.iter().map(|&v| self.ty(v).cloned()).collect::<Result<_, _>>()?;
        let ct: Vec<TensorType> = init.iter().map(|&v| self.ty(v).cloned()).collect::<Result<_, _>>()?;
        let mut want = kt.clone();
        want.push(i32s.clone());
        want.extend(ct.iter().cloned());
        if body.param_types() != want || body.output_types() != ct {
            return Err(IrError::invalid(
                "fori_dynamic",
                format!(
                    "body @{} must map ({}) to ({}), but maps ({}) to ({})",
                    body.name,
                    join(&want),
                    join(&ct),
                    join(&body.param_types()),
                    join(&body.output_types())
                ),
            ));
        }
        // Loop x = (consts..., n, i, carry...).
        let mk = |name: String| {
            let mut b = Builder::new(name);
            let k: Vec<Value> = kt.iter().map(|t| b.param(t.clone())).collect();
            let n = b.param(i32s.clone());
            let i = b.param(i32s.clone());
            let c: Vec<Value> = ct.iter().map(|t| b.param(t.clone())).collect();
            (b, k, n, i, c)
        };
        let (mut cb, _, cn, ci, _) = mk(format!("{}_cond", body.name));
        let p = cb.lt(ci, cn)?;
        let cond = cb.finish(&[p])?;
        let (mut bb, k, _, i, c) = mk(format!("{}_step", body.name));
        let one = bb.scalar(1.0, DType::I32)?;
        let mut outs = vec![bb.add(i, one)?];
        let mut args = k;
        args.push(i);
        args.extend(c);
        outs.extend(bb.inline(body, &args)?);
        let step = bb.finish(&outs)?;
        let mut ks = consts.to_vec();
        ks.push(n);
        let zero = self.scalar(0.0, DType::I32)?;
        let mut carry = vec![zero];
        carry.extend_from_slice(init);
        let res = self.while_loop_remat(Arc::new(cond), Arc::new(step), &ks, &carry, remat)?;
        Ok(res[1..].to_vec())
    }
}
